"""``watch``: a live full-screen view of one window (usage bar, items in build order, the last
events), redrawn as it changes; the item list scrolls (``j``/``k`` or the arrow keys by a line,
space / ``b`` or Page Down / Page Up by a screen); ``q`` quits (Ctrl-C too)."""

from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

from .. import ContextWindow, Prices
from .app import Env, cli, pass_env, prices_option, window_argument
from .reading import kind_filter, kind_options
from .views import event_line, items_table, plain, stats_lines, stats_view

#: how many of the latest events the view shows
EVENT_LINES = 8
#: the view's lines besides the item rows, the per-type rows, the events and ``stats_lines``:
#: the usage bar and the type table's frame (2), the item table's title, header and rule (3),
#: the events' frame (2) and the footer (1)
FIXED_LINES = 11


class Keys:
    """Single key presses from the terminal, without waiting for Enter."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def wait(self, seconds: float) -> str | None:
        """The key pressed within ``seconds`` (None if none was, or stdin is not a terminal); an
        escape sequence (an arrow, Page Up / Down) comes whole, as ``"\x1b[A"``."""
        if self.fd is None:
            time.sleep(seconds)
            return None
        ready, _, _ = select.select([self.fd], [], [], seconds)
        if not ready:
            return None
        key = os.read(self.fd, 1)
        if key == b"\x1b":  # the rest of the sequence is already there (the terminal sends it whole)
            while select.select([self.fd], [], [], 0.02)[0] and len(key) < 8:
                key += os.read(self.fd, 1)
                if key[-1:].isalpha() or key[-1:] == b"~":
                    break
        return key.decode(errors="replace")


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


#: what each scrolling key does: lines to move (a screen is ``PAGE``)
PAGE = 10**6
SCROLL_KEYS = {
    "j": 1, "\x1b[B": 1, "k": -1, "\x1b[A": -1,
    " ": PAGE, "\x1b[6~": PAGE, "b": -PAGE, "\x1b[5~": -PAGE,
}  # fmt: skip


class WatchView:
    """What the screen shows of one window; ``refresh()`` reads the window again, ``scroll()``
    moves the item list (``shows`` says which events it keeps)."""

    def __init__(
        self, win: ContextWindow, shows: Callable[[object], bool] = lambda event: True, prices: Prices | None = None
    ) -> None:
        self.win = win
        self.shows = shows
        self.prices = prices
        self.events: deque[str] = deque(maxlen=EVENT_LINES)
        self.last_event = "0"
        self.top = 0  # the first item row shown
        self.page = 1  # item rows the last screen had room for

    def scroll(self, key: str | None) -> None:
        """Move the item list for a scrolling key (others do nothing)."""
        step = SCROLL_KEYS.get(key or "")
        if step is not None:
            self.top = max(0, self.top + (self.page if step == PAGE else -self.page if step == -PAGE else step))

    def refresh(self, rows: int, columns: int) -> RenderableType:
        """The view for a terminal of ``rows`` lines and ``columns`` columns."""
        for event in self.win.events(since=self.last_event):
            self.last_event = event.id
            if self.shows(event):
                self.events.append(event_line(event))
        stats = self.win.stats()
        held = stats.total_items
        fixed = FIXED_LINES + len(stats_lines(stats, self.prices))
        self.page = max(1, rows - fixed - len(stats.items_by_type) - EVENT_LINES)
        self.top = min(self.top, max(0, held - self.page))
        shown = self.win.ordered_items(offset=self.top, limit=self.page)  # a screen's worth, not the window
        where = f" ({self.top + 1}-{self.top + len(shown)} of {held})" if len(shown) < held else ""
        events = Text("\n".join(self.events) or "(no events yet)", no_wrap=True, overflow="ellipsis")
        keys = " · j/k ↑/↓ space/b scroll" if where else ""
        return Group(
            stats_view(stats, self.prices),
            items_table(shown, title=f"items in build order{where}", width=columns),
            Panel(events, title="last events", title_align="left"),
            plain(f"{self.win.window_id} · refreshed {time.strftime('%H:%M:%S')}{keys} · q quits", style="dim"),
        )


@cli.command("watch")
@window_argument
@click.option(
    "--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True, help="seconds between redraws"
)
@kind_options
@prices_option
@pass_env
def watch(
    env: Env, window: str, interval: float, kinds: tuple[str, ...], skip: tuple[str, ...], prices: Prices | None
) -> None:
    """Watch a window live, full screen (q quits).

    Shows the usage bar, the items in build order (j/k or the arrows scroll, space/b by a
    screen) and the last events (--kind / --skip choose which), redrawn every --interval
    seconds and after a key; with --prices, what the reported usage cost."""
    view = WatchView(env.window(window), kind_filter(kinds, skip), prices)
    console = Console()
    with terminal_keys() as keys, Live(console=console, screen=True, auto_refresh=False) as live:
        while True:
            console.size = screen_size(console)
            live.update(view.refresh(console.size.height, console.size.width), refresh=True)
            key = keys.wait(interval)
            if key in ("q", "Q"):
                return
            view.scroll(key)
