"""``watch``: a live full-screen view of one window (usage bar, items in build order, the last
events), redrawn as it changes; ``q`` quits (Ctrl-C too)."""

from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

from ..sync import ContextWindow
from .app import Env, cli, pass_env, window_argument
from .views import event_line, items_table, stats_view

#: how many of the latest events the view shows
EVENT_LINES = 8
#: the view's lines besides the item rows, the per-type rows and the events: the stats' three
#: lines and the type table's frame (4), the item table's title, header and rule (3), the events'
#: frame (2) and the footer (1)
FIXED_LINES = 13


class Keys:
    """Single key presses from the terminal, without waiting for Enter."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def wait(self, seconds: float) -> str | None:
        """The key pressed within ``seconds`` (None if none was, or stdin is not a terminal)."""
        if self.fd is None:
            time.sleep(seconds)
            return None
        ready, _, _ = select.select([self.fd], [], [], seconds)
        return os.read(self.fd, 1).decode(errors="replace") if ready else None


@contextmanager
def terminal_keys() -> Iterator[Keys]:
    """Keys read one by one while the block runs (the terminal's mode is restored after)."""
    if not sys.stdin.isatty():
        yield Keys(None)
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield Keys(fd)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def screen_size(console: Console) -> tuple[int, int]:
    """The terminal's (columns, rows) as the terminal says now: a full-screen view must not trust
    ``COLUMNS`` / ``LINES`` from the environment (tmux and some shells export stale ones)."""
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
    except (OSError, ValueError):
        return console.size.width, console.size.height
    return size.columns, size.lines


class WatchView:
    """What the screen shows of one window; ``refresh()`` reads the window again."""

    def __init__(self, win: ContextWindow) -> None:
        self.win = win
        self.events: deque[str] = deque(maxlen=EVENT_LINES)
        self.last_event = "0"

    def refresh(self, rows: int, columns: int) -> RenderableType:
        """The view for a terminal of ``rows`` lines and ``columns`` columns."""
        for event in self.win.events(since=self.last_event):
            self.last_event = event.id
            self.events.append(event_line(event))
        stats = self.win.stats()
        items = self.win.ordered_items()
        room = max(1, rows - FIXED_LINES - len(stats.items_by_type) - EVENT_LINES)
        shown = items[:room]
        more = f" (first {len(shown)} of {len(items)})" if len(shown) < len(items) else ""
        events = Text("\n".join(self.events) or "(no events yet)", no_wrap=True, overflow="ellipsis")
        return Group(
            stats_view(stats),
            items_table(shown, title=f"items in build order{more}", width=columns),
            Panel(events, title="last events", title_align="left"),
            Text(f"{self.win.window_id} · refreshed {time.strftime('%H:%M:%S')} · q quits", style="dim"),
        )


@cli.command("watch")
@window_argument
@click.option(
    "--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True, help="seconds between redraws"
)
@pass_env
def watch(env: Env, window: str, interval: float) -> None:
    """Watch a window live, full screen (q quits).

    Shows the usage bar, the items in build order and the last events, redrawn every
    --interval seconds."""
    view = WatchView(env.window(window))
    console = Console()
    with terminal_keys() as keys, Live(console=console, screen=True, auto_refresh=False) as live:
        while True:
            console.size = screen_size(console)
            live.update(view.refresh(console.size.height, console.size.width), refresh=True)
            if keys.wait(interval) in ("q", "Q"):
                return
