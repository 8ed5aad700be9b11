"""Make the docs' terminal screenshots (docs/img/cli-show.png, cli-stats.png, cli-watch.png)
from real runs: a throwaway embedded server holds an agent's window, tmux runs the
``contextstore`` command in a terminal of a fixed size, ``capture-pane -e`` takes the screen with
its colours, Rich parses the escape codes and Pillow draws the cells.

    pip install -e '.[bench]' && python docs/screenshots.py [--out docs/img]

Needs tmux and the DejaVu Sans Mono font (``apt-get install tmux fonts-dejavu-core``).
"""

from __future__ import annotations

import argparse
import io
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont
from rich.console import Console
from rich.terminal_theme import MONOKAI
from rich.text import Text

import contextstore as cs

FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
FONT_SIZE, PADDING = 15, 14
BACKGROUND, FOREGROUND = tuple(MONOKAI.background_color), tuple(MONOKAI.foreground_color)


def fill_window(store: cs.ContextStore) -> None:
    """An agent's window as a run would leave it: prompt, instructions, code, a tool call, chat."""
    win = store.window("agent-7", max_tokens=8192)
    win.add("You are a careful code reviewer for the payments team.", type="system_prompt", pinned=True)
    win.add("Flag anything that touches card data; cite the line.", type="instruction", priority=80)
    win.add("Card numbers are tokenised at the edge; services never see a PAN.", type="retrieved_document",
            source_ref="wiki/payments/pci.md", priority=70)  # fmt: skip
    runbook = "\n".join(
        f"Step {n}: check that service {n % 9} writes no card data to its logs, then "
        f"rotate its credentials and record the change in ticket PAY-{1000 + n}."
        for n in range(120)
    )
    win.add(runbook, type="retrieved_document", source_ref="wiki/payments/runbook.md", priority=40)
    win.add("def charge(card, amount):\n    log.info('charging %s', card)\n    return gateway.pay(card, amount)",
            type="code", source_ref="billing/charge.py")  # fmt: skip
    win.add("Is this diff safe to merge?", type="user_message", role="user")
    call = {"id": "call_7", "type": "function", "function": {"name": "grep", "arguments": '{"q": "log.info"}'}}
    win.add("", type="assistant_message", role="assistant", metadata={"tool_calls": [call]})
    win.add("billing/charge.py:2: log.info('charging %s', card)", type="tool_result", role="tool",
            metadata={"tool_call_id": "call_7"})  # fmt: skip
    win.add("No: line 2 logs the card token; log the charge id instead.", type="assistant_message", role="assistant")
    win.add("Reviewer notes: logging of card data found in billing/charge.py.", type="working_memory", priority=60)


def tmux(*args: str) -> str:
    """Run one tmux command; its stdout."""
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True, timeout=30).stdout


def capture(command: str, size: tuple[int, int], wanted: str, then: list[str] | None = None) -> str:
    """Run ``command`` in a detached tmux session of ``size`` (columns, rows) until the screen
    shows ``wanted``; run the ``then`` commands (as shell lines) and capture the screen with its
    escape codes once it has changed, or after a second."""
    session = f"cs-shot-{uuid.uuid4().hex[:8]}"
    tmux("new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]), f"{command}; sleep 60")
    try:
        screen = wait_for(session, wanted)
        for line in then or []:
            subprocess.run(line, shell=True, check=True, capture_output=True, timeout=60)
        if then:
            time.sleep(1.5)
            screen = tmux("capture-pane", "-p", "-e", "-t", session)
        return screen
    finally:
        tmux("kill-session", "-t", session)


def wait_for(session: str, wanted: str, timeout: float = 20.0) -> str:
    """The pane (with escape codes) once its text shows ``wanted``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-e", "-t", session)
        if wanted in Text.from_ansi(screen).plain:
            return screen
        time.sleep(0.2)
    raise SystemExit(f"the screen never showed {wanted!r}")


def render(screen: str, path: Path, columns: int, keep_blank: bool = False) -> None:
    """Draw captured terminal text, colours and bold included, as a PNG of its character cells."""
    lines = Text.from_ansi(screen.rstrip("\n")).split("\n", allow_blank=True)
    if not keep_blank:
        while lines and not lines[-1].plain.strip():
            lines.pop()
    regular = ImageFont.truetype(str(FONT_DIR / "DejaVuSansMono.ttf"), FONT_SIZE)
    bold = ImageFont.truetype(str(FONT_DIR / "DejaVuSansMono-Bold.ttf"), FONT_SIZE)
    ascent, descent = regular.getmetrics()
    cell_w, cell_h = round(regular.getlength("M")), ascent + descent  # box-drawing lines join up
    image = Image.new("RGB", (columns * cell_w + 2 * PADDING, len(lines) * cell_h + 2 * PADDING), BACKGROUND)
    draw = ImageDraw.Draw(image)
    console = Console(width=columns + 20, color_system="truecolor", file=io.StringIO())
    for row, line in enumerate(lines):
        column = 0
        for segment in line.render(console):
            style = segment.style
            fg = tuple(style.color.get_truecolor(MONOKAI)) if style and style.color else FOREGROUND
            bg = tuple(style.bgcolor.get_truecolor(MONOKAI, foreground=False)) if style and style.bgcolor else None
            if style and style.dim:
                fg = tuple((c + b) // 2 for c, b in zip(fg, BACKGROUND, strict=True))
            font = bold if style and style.bold else regular
            for char in segment.text:
                x, y = PADDING + column * cell_w, PADDING + row * cell_h
                if bg and bg != BACKGROUND:
                    draw.rectangle([x, y, x + cell_w - 1, y + cell_h - 1], fill=bg)
                draw.text((x, y), char, font=font, fill=fg)
                column += 1
    image.save(path)


def main() -> None:
    """Start a throwaway server, fill a window, and capture show, stats and watch."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "img")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed (apt-get install tmux)")
    home = tempfile.mkdtemp(prefix="cs-shots-")
    server = cs.EmbeddedServer(home)
    server.start()
    try:
        with cs.ContextStore.from_url(server.url) as store:
            fill_window(store)
        command = f"{shlex.quote(sys.executable)} -m contextstore --url {shlex.quote(server.url)}"
        show = capture(f"{command} show agent-7", (118, 20), "ctx-10")
        render(show, out / "cli-show.png", 118)
        stats = capture(f"{command} stats agent-7", (100, 24), "working_memory")
        render(stats, out / "cli-stats.png", 100)
        agent = [f"{command} add agent-7 'Suggested fix: log charge.id, never the card.' --type assistant_message "
                 "--role assistant", f"{command} pin agent-7 ctx-4"]  # fmt: skip
        watch = capture(f"{command} watch agent-7 --interval 0.2", (118, 40), "q quits", then=agent)
        render(watch, out / "cli-watch.png", 118, keep_blank=True)
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
    print(f"wrote cli-show.png, cli-stats.png and cli-watch.png in {out}")


if __name__ == "__main__":
    main()
