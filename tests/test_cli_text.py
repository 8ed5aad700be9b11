"""Stored text in the command's views is shown as it is, never read as Rich markup; and what a new
user missed: a role column, tool calls named, one item whole (``get``), events by kind, a piped
``show`` as wide as its rows, and ``export`` that does not overwrite. Piped views run the command
in this process; the terminal's run the installed console script in a pty."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from functools import partial
from pathlib import Path

import pytest
import redis

import contextstore as cs

from support import run_cli

MARKUP = ["close tag first [/x] oops", "[chat-03 turn 9] visible?", "[bold]not bold[/bold] and [link=x]y[/link]"]
CALL = {"id": "call_7", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}


@pytest.fixture
def command(capsys):
    """``command(url, prefix, *argv)``: the command run in this process, piped (``run_cli``); the
    terminal's views run the installed script in a pty."""
    return partial(run_cli, capsys)


@pytest.fixture
def marked(redis_url, prefix):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("mk", max_tokens=4000)
        for text in MARKUP:
            w.add(text, type="user_message", role="user")
        w.add("", type="assistant_message", role="assistant", metadata={"tool_calls": [CALL]})
        w.add("18C and sunny " * 30, type="tool_result", role="tool", metadata={"tool_call_id": "call_7"})
        w.compact("clear_tool_results", target_percent=0.1)
        w.add("[note] a [group]", type="text", group="g[1]", id="id[2]")
        yield w


def test_show_get_and_stats_print_stored_text_as_it_is(command, redis_url, prefix, marked):
    shown = command(redis_url, prefix, "show", "mk", "--order", "arrival")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    for text in MARKUP:
        assert text in shown.stdout
    assert "[tool result cleared to save context]" in shown.stdout  # the library's own placeholder
    assert "id[2]" in shown.stdout and "g[1]" in shown.stdout and "[note] a [group]" in shown.stdout
    header = next(line for line in shown.stdout.splitlines() if line.startswith("id "))
    assert "role" in header.split()
    assert "calls weather(" in shown.stdout and "city" in shown.stdout  # a tool call names its tool
    one = command(redis_url, prefix, "get", "mk", "ctx-1")
    assert one.returncode == 0 and MARKUP[0] in one.stdout and "user_message" in one.stdout
    long = command(redis_url, prefix, "get", "mk", "ctx-5")
    assert long.stdout.count("[tool result cleared to save context]") == 1
    as_json = command(redis_url, prefix, "get", "mk", "id[2]", "--json")
    assert json.loads(as_json.stdout)["content"] == "[note] a [group]"
    missing = command(redis_url, prefix, "get", "mk", "ctx-99")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "ctx-99" in missing.stderr
    stats = command(redis_url, prefix, "stats", "mk")
    assert stats.returncode == 0 and "Traceback" not in stats.stderr


def test_a_piped_show_is_as_wide_as_its_rows(command, redis_url, prefix, marked):
    shown = command(redis_url, prefix, "show", "mk", "--order", "arrival")
    # not squeezed into 80 columns: the whole first line of each message is there
    assert any(line.rstrip().endswith(MARKUP[2]) for line in shown.stdout.splitlines())


def test_events_choose_their_kinds(command, redis_url, prefix, marked):
    marked.build()
    marked.build()
    every = command(redis_url, prefix, "events", "mk").stdout.splitlines()
    assert any(" built " in line for line in every)
    skipped = command(redis_url, prefix, "events", "mk", "--skip", "built").stdout.splitlines()
    assert skipped and not any(" built " in line for line in skipped)
    assert len(skipped) == len(every) - 2
    only = command(redis_url, prefix, "events", "mk", "--kind", "item_added", "--json").stdout.splitlines()
    assert len(only) == 6 and all(json.loads(line)["kind"] == "item_added" for line in only)
    bad = command(redis_url, prefix, "events", "mk", "--kind", "nope")
    assert bad.returncode == 2


def test_export_refuses_to_overwrite_unless_forced(command, redis_url, prefix, marked, tmp_path: Path):
    first = command(redis_url, prefix, "export", str(tmp_path), "mk")
    assert first.returncode == 0, first.stderr
    (written,) = tmp_path.glob("*.json")
    before = written.read_bytes()
    marked.add("one more", type="text")
    again = command(redis_url, prefix, "export", str(tmp_path), "mk")
    assert again.returncode == 1 and "--force" in again.stderr and written.read_bytes() == before
    forced = command(redis_url, prefix, "export", str(tmp_path), "mk", "--force")
    assert forced.returncode == 0 and written.read_bytes() != before


# -- stored control characters never reach the terminal raw ---------------------------------------

HOSTILE = (
    "hello \x1b]52;c;ZXZpbA==\x07 world \x1b[2J end \x1b]52;c;ZXZpbA==\x1b\\ c1 \x9b31m bidi \u202e iso \u2066 del \x7f"
)
EVIL_ID = "evil\x1b[2Jid"
#: what a terminal would act on: OSC 52 (writes the clipboard), BEL, clear screen, CSI as C1, an override
RAW = ("\x1b]52", "\x07", "\x1b[2J", "\x9b", "\u202e", "\u2066", "\x7f")


def _rename(r, prefix: str, window: str, old: str, new: str) -> None:
    """Give a stored item another id in every key (as a foreign writer could), bypassing the
    store's check on caller ids."""
    base = f"{prefix}:{{{window}}}:"
    for key in ("items", "attrs"):
        r.hset(base + key, new, r.hget(base + key, old))
        r.hdel(base + key, old)
    r.zadd(base + "order", {new: r.zscore(base + "order", old)})
    r.zrem(base + "order", old)
    fifo = [x.decode() for x in r.lrange(base + "fifo", 0, -1)]
    r.lset(base + "fifo", fifo.index(old), new)


@pytest.fixture
def hostile(redis_url, prefix, r):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("hx", max_tokens=4000)
        w.add(HOSTILE, type="user_message", role="user")
        w.add("second " + HOSTILE, type="text", id="evil", metadata={"note": HOSTILE})
        _rename(r, prefix, "hx", "evil", EVIL_ID)
        assert w.verify().ok
        assert w.pin(EVIL_ID)  # its event names the id
        w.build()
        yield w


def _assert_shown_escaped(text: str) -> None:
    for raw in RAW:
        assert raw not in text, f"{raw!r} reached the output raw"


VERBS = [
    ["show", "hx"], ["items", "hx"], ["get", "hx", "ctx-1"], ["get", "hx", EVIL_ID], ["build", "hx"],
    ["build", "hx", "--format", "markdown"], ["build", "hx", "--format", "openai"], ["events", "hx", "--since", "0"],
    ["show", "hx", "--json"], ["get", "hx", EVIL_ID, "--json"], ["build", "hx", "--json"],
    ["events", "hx", "--since", "0", "--json"], ["snapshot", "hx"], ["verify", "hx"], ["rm", "hx", "no\x1b[2Jsuch"],
]  # fmt: skip


@pytest.mark.parametrize("argv", VERBS, ids=lambda a: " ".join(a).encode("unicode_escape").decode())
def test_stored_control_characters_are_shown_escaped(command, redis_url, prefix, hostile, argv):
    done = command(redis_url, prefix, *argv)
    assert "Traceback" not in done.stderr
    _assert_shown_escaped(done.stdout + done.stderr)
    if "--json" in argv or argv[0] == "snapshot" or "openai" in argv:
        for line in done.stdout.splitlines():
            json.loads(line)  # still JSON, with the characters escaped
    elif argv[0] in ("show", "get", "build", "items"):
        assert "\\x1b]52;c;ZXZpbA==\\x07" in done.stdout  # shown, escaped, not dropped


def test_snapshot_json_keeps_the_exact_text(command, redis_url, prefix, hostile):
    snap = json.loads(command(redis_url, prefix, "snapshot", "hx").stdout)
    assert {i["content"] for i in snap["items"]} == {HOSTILE, "second " + HOSTILE}
    assert EVIL_ID in {i["id"] for i in snap["items"]}


def test_export_files_follow_the_one_escaping_rule_and_import_gives_the_exact_text(
    command, redis_url, prefix, hostile, tmp_path, r
):
    """``export`` writes its files as every JSON the project writes (``core/jsontext``): no stored
    C1, bidi override or isolate reaches the file raw, ``write_snapshot`` the same, and
    ``import`` gives back the exact text."""
    assert hostile.remove(EVIL_ID)  # a caller's id with a control character: import refuses it
    hostile.add("third " + HOSTILE, type="text", metadata={"note": HOSTILE})
    done = command(redis_url, prefix, "export", str(tmp_path), "hx")
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "hx.json").read_bytes()
    _assert_shown_escaped(written.decode())
    assert written.count(b"\\u009b") >= 3 and b"\\u2066" in written
    buffer = io.BytesIO()
    hostile.write_snapshot(buffer)
    _assert_shown_escaped(buffer.getvalue().decode())
    assert json.loads(buffer.getvalue())["items"] == json.loads(written)["items"]
    r.delete(*r.scan_iter(f"{prefix}:{{hx}}:*"))
    assert command(redis_url, prefix, "import", str(tmp_path)).returncode == 0
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        assert {i.content for i in store.window("hx").items()} == {HOSTILE, "third " + HOSTILE}


def _on_a_terminal(url: str, prefix: str, *argv: str, lines: int | None = None) -> str:
    """What the command writes to a terminal (a pty: Rich draws colours, click strips nothing),
    ``lines`` high if given."""
    import os
    import pty

    main, child = pty.openpty()
    exe = shutil.which("contextstore")
    env = {**os.environ, **({"LINES": str(lines), "COLUMNS": "120"} if lines else {})}
    proc = subprocess.Popen([exe, "--url", url, "--prefix", prefix, *argv], stdout=child, stderr=child, env=env)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(main)
    return out.decode("utf-8", "replace")


@pytest.mark.parametrize(
    "argv", [["show", "hx"], ["get", "hx", EVIL_ID], ["build", "hx"], ["events", "hx", "--since", "0"]], ids=str
)
def test_on_a_terminal_stored_control_characters_are_escaped(redis_url, prefix, hostile, argv, one_server):
    text = _on_a_terminal(redis_url, prefix, *argv)
    assert ("hello" in text or "evil" in text) and "Traceback" not in text
    _assert_shown_escaped(text)


def test_the_watch_view_escapes_stored_control_characters(hostile):
    import io

    from rich.console import Console

    from contextstore.cli.watch import WatchView

    screen_file = io.StringIO()
    Console(file=screen_file, force_terminal=True, width=160).print(WatchView(hostile).refresh(60, 160))
    screen = screen_file.getvalue()
    assert "hello" in screen and "evil" in screen
    _assert_shown_escaped(screen)


def test_show_on_a_terminal_reads_a_screens_worth_and_says_how_to_see_more(command, redis_url, prefix, one_server):
    """On a 20-line terminal, show lists the 11 most recent of 40 items and says so; --all, a
    pipe and --json list every one."""
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        store.window("many", max_items=100).add_many([f"message {n:02d}" for n in range(40)])
    shown = _on_a_terminal(redis_url, prefix, "show", "many", lines=20)
    assert re.findall(r"message (\d\d)", shown) == [f"{n:02d}" for n in range(29, 40)]
    assert "the last 11 of 40 items: --all lists every one" in shown
    every = _on_a_terminal(redis_url, prefix, "show", "many", "--all", lines=20)
    assert len(re.findall(r"message \d\d", every)) == 40 and "--all lists" not in every
    assert len(re.findall(r"message \d\d", command(redis_url, prefix, "show", "many").stdout)) == 40  # piped


def test_a_piped_show_streams_a_big_window_page_by_page(command, redis_url, prefix):
    """Piped, ``show`` writes every item of a window larger than a page, in arrival order, as it
    reads it (``iter_items``: one read per page, never the whole window at once); ``--json`` is
    the same items as one JSON document."""
    with cs.ContextStore.from_url(redis_url, prefix=prefix, item_limit=2000) as store:
        w = store.window("big", max_items=2000)
        w.add_many([{"content": f"message {n:04d}", "type": "user_message", "role": "user"} for n in range(1200)])
        ids = [i.id for i in w.items()]
    r = redis.Redis.from_url(redis_url)

    def script_calls(*argv: str) -> tuple[subprocess.CompletedProcess[str], int]:
        r.config_resetstat()
        done = command(redis_url, prefix, *argv)
        stats = r.info("commandstats")
        return done, sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_fcall_ro"))

    try:
        shown, paged = script_calls("show", "big")
        _, one_read = script_calls("show", "big", "--limit", "1")
    finally:
        r.close()
    assert shown.returncode == 0, shown.stderr
    rows = [line.split()[0] for line in shown.stdout.splitlines()[3:]]
    assert rows == ids
    assert paged >= one_read + 2, (paged, one_read)  # 1,200 items at 500 a page: three reads, not one
    as_json = json.loads(command(redis_url, prefix, "show", "big", "--json").stdout)
    assert [i["id"] for i in as_json] == ids and as_json[0]["content"] == "message 0000"
