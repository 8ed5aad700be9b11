"""Every verb of the ``contextstore`` command against a real redis-server: what ``--json`` prints
is parsed back and compared with the library's own answer, edits do what the library call does,
bad input is one line and exit 2, an absent item or window one line and exit 1 (and no window is
created), and ``export --all`` / ``import`` move windows to a fresh server unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

import contextstore as cs
from contextstore import cli
from contextstore.types import CHAT_FORMATS

from support import RedisProcess, on_cluster


def run(capsys, url: str, prefix: str, *argv: str) -> tuple[int, str, str]:
    """The command in this process against ``url`` / ``prefix``: (exit status, stdout, stderr)."""
    code = cli.main(["--url", url, "--prefix", prefix, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1 and "Traceback" not in err, err
    return err.rstrip("\n")


@pytest.fixture
def filled(redis_url, prefix):
    """A window with a pinned system prompt, a conversation, a tool call and its result."""
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        win = store.window("w", max_tokens=4000)
        win.add("You review code.", type="system_prompt", pinned=True, priority=90)
        for n in range(6):
            win.add(f"question {n} about the parser", type="user_message", role="user")
            win.add(f"answer {n}: the parser is fine", type="assistant_message", role="assistant")
        call = {"id": "call_1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
        win.add("", type="assistant_message", role="assistant", metadata={"tool_calls": [call]})
        win.add("3 matches", type="tool_result", role="tool", metadata={"tool_call_id": "call_1"}, priority=20)
        yield store, win


def test_reading_verbs_print_json_equal_to_the_librarys_answers(capsys, redis_url, prefix, filled):
    _, win = filled
    items = lambda *a: msgspec.json.decode(run(capsys, redis_url, prefix, *a)[1], type=list[cs.ContextItem])  # noqa: E731
    assert items("show", "w", "--json") == win.items()  # arrival order unless asked
    assert items("show", "w", "--order", "build", "--json") == win.ordered_items()
    assert win.items() != win.ordered_items()
    assert items("show", "w", "--order", "arrival", "--json") == win.items()
    assert items("show", "w", "--order", "arrival", "--type", "tool_result", "--json") == win.items(
        types=["tool_result"]
    )
    assert items("show", "w", "--order", "arrival", "--limit", "3", "--json") == win.items(limit=3)
    code, out, _ = run(capsys, redis_url, prefix, "stats", "w", "--json")
    assert code == 0 and msgspec.json.decode(out, type=cs.ContextWindowStats) == win.stats()
    rows = json.loads(run(capsys, redis_url, prefix, "ls", "--json")[1])
    assert rows == [{"window_id": "w", "items": 15, "tokens": win.stats().current_tokens, "max_tokens": 4000,
                     "usage_percent": win.stats().usage_percent}]  # fmt: skip
    events = [json.loads(line) for line in run(capsys, redis_url, prefix, "events", "w", "--json")[1].splitlines()]
    assert events == [msgspec.to_builtins(e) for e in win.events(since="0")]
    assert [e["kind"] for e in events] == ["item_added"] * 15
    plan = run(
        capsys,
        redis_url,
        prefix,
        "compact",
        "w",
        "--dry-run",
        "--strategy",
        "remove_oldest",
        "--target",
        "10",
        "--json",
    )
    assert msgspec.json.decode(plan[1], type=cs.CompactionPlan) == win.plan_compaction("remove_oldest", 10)
    report = msgspec.json.decode(run(capsys, redis_url, prefix, "verify", "w", "--json")[1], type=cs.VerifyReport)
    assert report == win.verify() and report.ok and report.items == 15


def test_build_prints_what_the_library_builds_in_every_format(capsys, redis_url, prefix, filled):
    _, win = filled
    opts = cs.BuildOptions(reserve_for_response=500, max_history_items=4)
    base = ("build", "w", "--reserve", "500", "--max-history", "4")
    built = msgspec.json.decode(run(capsys, redis_url, prefix, *base, "--json")[1], type=cs.BuiltContext)
    assert built == win.build_structured(opts)
    assert run(capsys, redis_url, prefix, *base)[1] == built.content + "\n"
    for fmt in CHAT_FORMATS:  # every format the library builds
        got = msgspec.json.decode(
            run(capsys, redis_url, prefix, *base, "--format", fmt, "--json")[1], type=cs.BuiltMessages
        )
        assert got == win.build_messages_structured(opts, format=fmt)
        assert json.loads(run(capsys, redis_url, prefix, *base, "--format", fmt)[1]) == got.messages
    assert run(capsys, redis_url, prefix, "build", "w", "--format", "markdown")[1] == win.to_markdown()


def test_tables_show_the_items_stats_and_windows(capsys, redis_url, prefix, filled):
    code, out, _ = run(capsys, redis_url, prefix, "show", "w")
    lines = out.splitlines()
    rows = [ln for ln in lines if "ctx-" in ln]
    assert code == 0 and len(rows) == 15
    assert rows[0].split()[0] == "ctx-1" and "yes" in rows[0].split()  # the pinned prompt came first
    assert [r.split()[0] for r in rows] == [f"ctx-{n}" for n in range(1, 16)]  # arrival order
    assert "You review code." in rows[0] and "question 5 abo" in out
    code, out, _ = run(capsys, redis_url, prefix, "stats", "w")
    assert code == 0 and "/4000 tokens" in out and "user_message" in out and "tool_result" in out
    assert "w" in run(capsys, redis_url, prefix, "ls")[1] and "reported usage" not in out
    win = filled[1]
    built = win.build_structured(cs.BuildOptions(reserve_for_response=0))
    win.record_usage(built.version, input_tokens=built.total_tokens * 2 - 5, output_tokens=7, cache_read_tokens=5)
    out = run(capsys, redis_url, prefix, "stats", "w")[1]
    assert "x2.00 calibrated" in out and f"({win.stats().usage_percent:.1f}%" in out
    assert f"reported usage (1 reports): input {built.total_tokens * 2 - 5}, output 7, cache read 5" in out
    assert json.loads(run(capsys, redis_url, prefix, "stats", "w", "--json")[1])["token_calibration"] == 2.0


def test_edits_do_what_the_library_calls_do(capsys, redis_url, prefix, filled):
    store, win = filled
    code, out, _ = run(capsys, redis_url, prefix, "add", "w", "a note", "--type", "working_memory", "--priority", "70",
                       "--group", "notes", "--metadata", '{"k": 1}', "--json")  # fmt: skip
    added = msgspec.json.decode(out, type=cs.ContextItem)
    assert code == 0 and added == win.get(added.id) and added.group == "notes" and added.metadata == {"k": 1}
    assert run(capsys, redis_url, prefix, "pin", "w", added.id)[:2] == (0, f"pinned {added.id}\n")
    assert win.get(added.id).pinned
    assert run(capsys, redis_url, prefix, "unpin", "w", added.id)[0] == 0 and not win.get(added.id).pinned
    assert run(capsys, redis_url, prefix, "priority", "w", added.id, "5")[0] == 0 and win.get(added.id).priority == 5
    assert run(capsys, redis_url, prefix, "rm", "w", added.id, "ctx-2")[:2] == (
        0,
        f"removed {added.id}\nremoved ctx-2\n",
    )
    assert win.get(added.id) is None and win.get("ctx-2") is None
    before = win.stats().current_tokens
    code, out, _ = run(capsys, redis_url, prefix, "compact", "w", "--strategy", "remove_oldest", "--target", "1")
    left = win.stats()
    assert code == 0 and out == f"freed {before - left.current_tokens} tokens\n" and left.current_tokens <= 40
    assert left.compaction_count == 1 and win.get("ctx-1") is not None  # the pinned prompt stays
    code, out, _ = run(capsys, redis_url, prefix, "clear", "w", "--include-pinned")
    assert (code, out) == (0, f"removed {left.total_items} items\n")
    assert win.stats().total_items == 0
    assert run(capsys, redis_url, prefix, "delete", "w")[:2] == (0, "deleted w\n") and store.windows() == []


def test_snapshot_and_restore_copy_a_window(capsys, redis_url, prefix, filled, tmp_path):
    store, win = filled
    path = tmp_path / "w.json"
    assert run(capsys, redis_url, prefix, "snapshot", "w", "-o", str(path))[0] == 0
    assert msgspec.json.decode(path.read_bytes(), type=cs.ContextSnapshot).items == win.snapshot().items
    assert run(capsys, redis_url, prefix, "restore", "copy", str(path))[:2] == (0, "restored 15 items into copy\n")
    assert store.window("copy", create=False).items() == win.items()


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["add", "w", "   "], 2, "contextstore: content must not be empty or blank"),
        (["add", "w", "x", "--metadata", "{nope"], 2, "contextstore: --metadata is not JSON"),
        (["add", "w", "x", "--metadata", "[1]"], 2, "contextstore: --metadata must be a JSON object"),
        (["add", "w", "x", "--priority", "101"], 2, "contextstore: error: Invalid value for '--priority'"),
        (["add", "w", "x", "--type", "nope"], 2, "contextstore: error: Invalid value for '--type'"),
        (["add", "bad{id}", "x"], 2, "contextstore: window id 'bad{id}' must be"),
        (["pin", "w", "ctx-99"], 1, "contextstore: no item 'ctx-99' in window 'w'"),
        (["rm", "w", "ctx-99"], 1, "contextstore: no item 'ctx-99' in window 'w'"),
        (["priority", "w", "ctx-1", "101"], 2, "contextstore: error: Invalid value for 'PRIORITY'"),
        (["compact", "w", "--strategy", "nope"], 2, "contextstore: error: Invalid value for '--strategy'"),
        (["compact", "w", "--target", "150"], 2, "contextstore: error: Invalid value for '--target'"),
        (["restore", "w", "/no/such/file.json"], 2, "contextstore: cannot read /no/such/file.json"),
        (["export", "/tmp/x"], 2, "contextstore: name the windows to export, or pass --all"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_bad_input_is_one_line_and_changes_nothing(capsys, redis_url, prefix, filled, argv, code, message):
    _, win = filled
    before = win.snapshot()
    got, out, err = run(capsys, redis_url, prefix, *argv)
    assert (got, out) == (code, "") and one_line(err).startswith(message), err
    after = win.snapshot()
    assert (after.items, after.max_tokens) == (before.items, before.max_tokens)


@pytest.mark.parametrize(
    "argv",
    [["rm", "gone", "ctx-1"], ["pin", "gone", "ctx-1"], ["unpin", "gone", "ctx-1"], ["priority", "gone", "ctx-1", "5"],
     ["compact", "gone"], ["clear", "gone"], ["delete", "gone"], ["events", "gone"], ["show", "gone"],
     ["watch", "gone"], ["export", "/tmp/cs-export-unused", "gone"]],
    ids=" ".join,
)  # fmt: skip
def test_verbs_on_a_missing_window_say_so_and_create_nothing(capsys, redis_url, prefix, argv):
    code, out, err = run(capsys, redis_url, prefix, *argv)
    assert (code, out) == (1, "") and one_line(err) == "contextstore: window 'gone' does not exist"
    assert run(capsys, redis_url, prefix, "ls", "--json")[1] == "[]\n"


def test_export_all_then_import_into_a_fresh_server_shows_the_same(capsys, redis_url, prefix, tmp_path):
    if on_cluster(redis_url):
        pytest.skip("the fresh server here is a plain one")
    ids = ["team/a:1", "b", "c@x"]
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        for n, wid in enumerate(ids):
            win = store.window(wid, max_tokens=1000 + n)
            win.add(f"system {n}", type="system_prompt", pinned=True)
            win.add_many([{"content": f"{wid} message {k}", "type": "user_message", "role": "user"} for k in range(5)])
            win.remove("ctx-3")
    code, _, err = run(capsys, redis_url, prefix, "export", str(tmp_path), "--all")
    assert code == 0 and "exported 3 windows" in err and len(list(Path(tmp_path).glob("*.json"))) == 3
    fresh = RedisProcess().start()
    try:
        code, _, err = run(capsys, fresh.url, prefix, "import", str(tmp_path))
        assert code == 0 and "imported 3 windows" in err
        for wid in ids:
            assert run(capsys, fresh.url, prefix, "show", wid, "--json") == run(
                capsys, redis_url, prefix, "show", wid, "--json"
            )
            imported, original = (
                json.loads(run(capsys, url, prefix, "stats", wid, "--json")[1]) for url in (fresh.url, redis_url)
            )
            assert imported.pop("version") != original.pop("version")  # an import is a new lifetime
            assert imported == original
        code, _, err = run(capsys, fresh.url, prefix, "import", str(tmp_path))  # again: they exist now
        assert code == 1 and "windows already exist: b, c@x, team/a:1 (pass --force" in one_line(err)
        (tmp_path / "broken.json").write_text('{"window_id": 1}')
        with cs.ContextStore.from_url(fresh.url, prefix=prefix) as store:
            store.window("b").delete()
            code, _, err = run(capsys, fresh.url, prefix, "import", str(tmp_path), "--force")
            assert code == 2 and "broken.json is not a contextstore snapshot" in one_line(err)
            assert store.windows() == ["c@x", "team/a:1"]  # every file is checked before any write
    finally:
        fresh.stop()
