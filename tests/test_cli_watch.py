"""``contextstore watch`` in a real terminal: tmux runs it, another process adds items, the
screen (``capture-pane``) shows them, and ``q`` (``send-keys``) ends it with exit status 0."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from rich.console import Console

import contextstore as cs
from contextstore.cli.watch import WatchView

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True, timeout=30).stdout


def _screen_until(session: str, *wanted: str, absent: str = "\0", timeout: float = 20.0) -> str:
    """The pane's text once it shows every string of ``wanted`` (a capture can catch a redraw half
    done: the new position line over the old rows), and not ``absent``; fails with the last screen
    if it never does."""
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = _tmux("capture-pane", "-p", "-t", session)
        if all(w in screen for w in wanted) and absent not in screen:
            return screen
        time.sleep(0.2)
    pytest.fail(f"the screen never showed {wanted!r}:\n{screen}")


def test_watch_redraws_as_another_process_adds_and_quits_on_q(redis_url, prefix, tmp_path):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        win = store.window("live", max_tokens=2000)
        win.add("Be brief.", type="system_prompt", pinned=True)
    session = f"cs-watch-{uuid.uuid4().hex[:8]}"
    status = tmp_path / "status"
    command = (
        f"{sys.executable} -m contextstore --url '{redis_url}' --prefix {prefix} watch live --interval 0.2; "
        f"echo $? > {status}; sleep 60"
    )
    _tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "45", command)
    try:
        first = _screen_until(session, "Be brief.")
        assert "live" in first and "q quits" in first and "/2000 tokens" in first
        # drawn for the pane's 120 columns, not the COLUMNS=80 tmux puts in the environment
        assert max(len(line) for line in first.splitlines()) == 120
        added = subprocess.run(
            [sys.executable, "-m", "contextstore", "--url", redis_url, "--prefix", prefix, "add", "live",
             "tmux note 42", "--type", "working_memory"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        # the item and its event (a capture can catch a redraw half written: wait for both)
        later = _screen_until(session, "tmux note 42", f"item_added item_id={added.stdout.strip()}")
        assert later != first
        _tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 15
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status.read_text().strip() == "0"
        assert "Traceback" not in _tmux("capture-pane", "-p", "-t", session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, timeout=30)


@pytest.mark.parametrize("rows", [30, 34, 40])
def test_the_view_fits_the_terminal_and_keeps_its_footer(redis_url, prefix, rows):
    """Items that do not fit are cut (the title says how many show), never the footer."""
    kinds = ["system_prompt", "instruction", "code", "retrieved_document", "working_memory", "user_message"]
    console = Console(width=118, height=rows, record=True, file=io.StringIO())
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        win = store.window("tight", max_tokens=8000)
        win.add_many([{"content": f"item {n}", "type": kinds[n % len(kinds)]} for n in range(25)])
        console.print(WatchView(win).refresh(rows, 118))
    screen = console.export_text().rstrip("\n").split("\n")
    assert len(screen) == rows, "\n".join(screen)
    assert "q quits" in screen[-1] and "of 25)" in "\n".join(screen)


def test_watch_scrolls_the_items_and_filters_events_in_a_real_terminal(redis_url, prefix, tmp_path):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        win = store.window("scroll", max_tokens=20_000)
        win.add_many([{"content": f"row {n:02d} [b]markup[/b]", "type": "user_message"} for n in range(40)])
        win.build()  # a built event, which --skip built leaves out
    session = f"cs-watch-{uuid.uuid4().hex[:8]}"
    command = (
        f"{sys.executable} -m contextstore --url '{redis_url}' --prefix {prefix} watch scroll --interval 5 "
        f"--skip built; sleep 60"
    )
    _tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "30", command)
    try:
        first = _screen_until(session, "q quits")
        shown = re.search(r"\(1-(\d+) of 40\)", first)
        assert shown and "row 00 [b]markup[/b]" in first, first
        page = int(shown.group(1))
        assert "built" not in first.split("last events", 1)[1]
        _tmux("send-keys", "-t", session, "j")  # a line down
        _screen_until(session, f"(2-{page + 1} of 40)", absent="row 00 ")
        _tmux("send-keys", "-t", session, "Space")  # a screen down
        _screen_until(session, f"({page + 2}-{2 * page + 1} of 40)", f"row {page + 1:02d} ")
        _tmux("send-keys", "-t", session, "Up")  # an arrow: a line up
        _screen_until(session, f"({page + 1}-{2 * page} of 40)")
        _tmux("send-keys", "-t", session, "b")  # a screen up, twice: back at the top
        _tmux("send-keys", "-t", session, "b")
        _screen_until(session, f"(1-{page} of 40)", "row 00 ")
        _tmux("send-keys", "-t", session, "q")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, timeout=30)


def test_the_view_with_reported_usage_and_prices_still_fits(redis_url, prefix):
    console = Console(width=118, height=30, record=True, file=io.StringIO())
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        win = store.window("priced", max_tokens=8000)
        win.add_many([{"content": f"item {n}", "type": "user_message", "role": "user"} for n in range(25)])
        win.record_usage(win.build_structured().version, input_tokens=100, output_tokens=10, cache_read_tokens=900)
        console.print(WatchView(win, prices=cs.Prices(input=3.0, output=15.0, cache_read=0.3)).refresh(30, 118))
    screen = console.export_text().rstrip("\n").split("\n")
    assert len(screen) == 30 and "q quits" in screen[-1], "\n".join(screen)
    assert "cost of the reported usage: 0.000720" in "\n".join(screen)
