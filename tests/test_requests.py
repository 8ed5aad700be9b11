"""Exactly-once: a request id used twice applies once and answers the first call's result."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

import contextstore as cs
from contextstore.core.layout import RECORD_FORMAT

from support import check_invariants, dump_window, events, key


def _log_keys(prefix: str, wid: str) -> tuple[str, str]:
    return key(prefix, wid, "requests"), key(prefix, wid, "replies")


def _without_log(dump: dict) -> dict:
    return {k: v for k, v in dump.items() if not k.endswith((b":requests", b":replies"))}


def test_replayed_add_returns_the_first_result_and_adds_once(store, r, prefix):
    w = store.window("rq-add", max_items=100)
    first = w.add("hello", type="user_message", role="user", metadata={"a": [1, {}]}, request_id="req-1")
    again = w.add("hello", type="user_message", role="user", metadata={"a": [1, {}]}, request_id="req-1")
    assert again == first
    assert [i.content for i in w.items()] == ["hello"]
    assert [e["event"] for e in events(r, prefix, "rq-add")].count("item_added") == 1
    assert w.add_many(["a", "b"], request_id="req-2") == 2
    assert w.add_many(["a", "b"], request_id="req-2") == 2  # the first call's count
    assert len(w.items()) == 3
    check_invariants(r, prefix, "rq-add")


def test_replay_of_an_evicted_item_returns_it_without_bringing_it_back(store, r, prefix):
    """The window's own rules took the item (eviction): the add was applied, once; a retry
    answers what it answered and applies nothing again."""
    w = store.window("rq-evict", max_items=2)
    first = w.add("old one", priority=70, request_id="req-old")
    w.add("b")
    w.add("c")  # evicts "old one"
    assert w.get(first.id) is None
    assert w.add("old one", priority=70, request_id="req-old") == first
    assert [i.content for i in w.items()] == ["b", "c"]
    check_invariants(r, prefix, "rq-evict")


def _reset_and_replay(w, reset) -> None:
    """An add, a reset of the window, the same add again: it must be stored again."""
    first = w.add("hello", type="user_message", role="user", request_id="t1")
    assert w.add("hello", type="user_message", role="user", request_id="t1") == first  # a plain retry
    reset()
    replayed = w.add("hello", type="user_message", role="user", request_id="t1")
    assert [i.content for i in w.items()] == ["hello"], "an acknowledged add stored nothing"
    assert replayed.id == w.items()[0].id and w.stats().total_items == 1


@pytest.mark.parametrize("reset", ["delete", "clear", "clear_pinned", "restore", "pop", "remove"])
def test_a_reset_window_takes_a_replayed_request_as_new(store, r, prefix, reset):
    w = store.window(f"rq-{reset}", max_tokens=1000)
    resets = {
        "delete": lambda: w.delete(),
        "clear": lambda: w.clear(),
        "clear_pinned": lambda: w.clear(include_pinned=True),
        "restore": lambda: w.restore(
            cs.ContextSnapshot(window_id="x", created_at=w.snapshot().created_at, max_tokens=1000, max_items=1000)
        ),
        "pop": lambda: w.pop(10),
        "remove": lambda: w.remove(w.items()[0].id),
    }
    _reset_and_replay(w, resets[reset])
    added = [e for e in events(r, prefix, f"rq-{reset}") if e["event"] == "item_added"]
    assert len(added) == (1 if reset == "delete" else 2)  # delete drops the stream with the window
    check_invariants(r, prefix, f"rq-{reset}")


def test_delete_ends_the_request_log_and_records_itself_first(store, r, prefix):
    w = store.window("rq-end", max_tokens=1000)
    w.add("a", request_id="keep-1")
    assert w.clear(request_id="clear-1") == 1
    assert w.clear(request_id="clear-1") == 1  # a retry of the clear answers as the first did
    assert r.hexists(key(prefix, "rq-end", "replies"), "add:keep-1")  # a clear keeps the log
    assert w.delete(request_id="del-1") is True
    assert w.delete(request_id="del-1") is True  # recorded in the log the delete began
    assert r.hkeys(key(prefix, "rq-end", "replies")) == [b"delete:del-1"]


def test_what_a_clear_or_a_restore_leaves_in_place_still_replays(store, r, prefix):
    w = store.window("rq-kept", max_tokens=1000)
    rules = w.add("rules", type="system_prompt", pinned=True, request_id="rules")
    w.add("hello", role="user", request_id="hello")
    w.clear()  # the pinned rules stay
    assert w.add("rules", type="system_prompt", pinned=True, request_id="rules") == rules  # not twice
    snap = w.snapshot()
    w.restore(snap)  # brings the rules back as they were
    assert w.add("rules", type="system_prompt", pinned=True, request_id="rules") == rules
    assert [i.content for i in w.items()] == ["rules"]
    w.add("hello", role="user", request_id="hello")  # cleared: stored again
    assert [i.content for i in w.items()] == ["rules", "hello"]


def test_a_partly_removed_add_replays_without_duplicating(store, r, prefix):
    w = store.window("rq-part", max_tokens=1000)
    assert w.add_many(["one", "two"], request_id="both") == 2
    w.remove("ctx-1")
    assert w.add_many(["one", "two"], request_id="both") == 2  # "two" is still there: a retry
    assert [i.content for i in w.items()] == ["two"]


def test_a_replace_always_replays(store):
    w = store.window("rq-replace", max_tokens=1000)
    w.add_many(["a", "b"])
    assert w.replace(["c"], last=1, request_id="rep") == 1
    w.remove(w.items()[-1].id)  # what the replace added is gone
    assert w.replace(["c"], last=1, request_id="rep") == 1  # running it again would replace "a"
    assert [i.content for i in w.items()] == ["a"]


def test_replay_of_every_mutation_changes_nothing_more(store, r, prefix):
    w = store.window("rq-all", max_tokens=1000, max_items=20)
    a = w.add("alpha " * 20)
    b = w.add("beta " * 20)
    calls = [
        lambda rid: w.update_priority(a.id, 90, request_id=rid),
        lambda rid: w.pin(a.id, request_id=rid),
        lambda rid: w.unpin(a.id, request_id=rid),
        lambda rid: w.remove(b.id, request_id=rid),
        lambda rid: w.configure(max_items=15, request_id=rid),
        lambda rid: w.compact("remove_oldest", 0, request_id=rid),
    ]
    for n, call in enumerate(calls):
        w.add(f"filler {n} " * 20)
        first = call(f"rq-{n}")
        before = _without_log(dump_window(r, prefix, "rq-all"))
        assert call(f"rq-{n}") == first, n
        assert _without_log(dump_window(r, prefix, "rq-all")) == before, n
    check_invariants(r, prefix, "rq-all")


def test_replayed_clear_does_not_clear_what_came_later(store, r, prefix):
    w = store.window("rq-clear")
    w.add_many(["a", "b", "c"])
    assert w.clear(request_id="clear-1") == 3
    later = w.add("added after the clear")
    assert w.clear(request_id="clear-1") == 3  # the first result, and nothing removed
    assert [i.id for i in w.items()] == [later.id]


def test_replayed_restore_and_delete(store, r, prefix):
    w = store.window("rq-restore", max_items=10)
    w.add("x")
    snap = w.snapshot()
    w.add("y")
    w.restore(snap, request_id="rs-1")
    z = w.add("z")
    w.restore(snap, request_id="rs-1")  # replay: z stays
    assert [i.id for i in w.items()] == ["ctx-1", z.id]
    assert w.delete(request_id="del-1") is True
    assert w.delete(request_id="del-1") is True  # the first answer, not "did not exist"
    assert w.delete(request_id="del-2") is False


def test_a_request_that_failed_is_not_recorded(store, r, prefix):
    w = store.window("rq-fail", max_items=1)
    p = w.add("pinned", pinned=True)
    with pytest.raises(cs.ContextWindowFullError):
        w.add("late", request_id="late-1")
    w.unpin(p.id)
    got = w.add("late", request_id="late-1")  # the failed attempt wrote nothing: this one runs
    assert [i.content for i in w.items()] == ["late"] and got.content == "late"


def test_reusing_a_request_id_for_another_call_is_refused(store, r, prefix):
    w = store.window("rq-reuse")
    w.add("one", request_id="same")
    before = dump_window(r, prefix, "rq-reuse")
    with pytest.raises(cs.InvalidOptionsError, match="already used"):
        w.add("two", request_id="same")
    assert dump_window(r, prefix, "rq-reuse") == before
    w.remove("ctx-1", request_id="same")  # another operation: its own namespace
    assert w.items() == []


@pytest.mark.parametrize("recorded_as", ["format 1 (no format)", "format 3", "format 5"])
def test_a_record_of_another_format_is_neither_replayed_nor_applied_again(store, r, prefix, recorded_as):
    """Another version's record (before this one, or after it: a rollback) cannot be rebuilt
    by this version's scripts: a typed error, and nothing written, whatever the operation."""
    w = store.window("rq-format", max_items=10)
    w.add_many(["a", "b", "c"])
    w.add("d", request_id="r1")
    w.pop(1, request_id="r1")
    w.pin("ctx-1", request_id="r1")
    replies = key(prefix, "rq-format", "replies")
    for field, value in r.hgetall(replies).items():
        head, record = value.split(b"\n", 1)
        fp = head.split(b"|")[0]
        other = b"|" + recorded_as.split()[1].encode()
        r.hset(replies, field, (fp if recorded_as.startswith("format 1") else fp + other) + b"\n" + record)
    before = _without_log(dump_window(r, prefix, "rq-format"))
    calls = {
        "add:r1": lambda: w.add("d", request_id="r1"),
        "pop:r1": lambda: w.pop(1, request_id="r1"),
        "pin:r1": lambda: w.pin("ctx-1", request_id="r1"),
    }
    for rid, call in calls.items():
        with pytest.raises(cs.ReplayUnavailableError, match="applied once already") as err:
            call()
        assert err.value.request_id == rid
    assert _without_log(dump_window(r, prefix, "rq-format")) == before
    assert w.pin("ctx-2", request_id="r2") is True and w.pin("ctx-2", request_id="r2") is True  # this format's


@pytest.mark.parametrize("bad", ["", "has space", "x" * 129, "br{ace}", 7, "naïve", "a|b"])
def test_invalid_request_ids_are_refused(store, r, prefix, bad):
    w = store.window("rq-bad")
    with pytest.raises(cs.InvalidOptionsError):
        w.add("x", request_id=bad)
    with pytest.raises(cs.InvalidOptionsError):
        w.clear(request_id=bad)
    assert w.items() == []


def test_request_log_is_bounded_and_expires(store, r, prefix):
    w = store.window("rq-bound", max_items=5)
    zkey, hkey = _log_keys(prefix, "rq-bound")
    for i in range(30):
        w.add(f"m{i}")
    assert r.llen(zkey) == r.hlen(hkey) == 30
    assert 0 < r.pttl(zkey) <= 900_000 and 0 < r.pttl(hkey) <= 900_000
    # a busy window: 2100 more records than fit; the next call trims to the newest 2000
    now_ms = int(r.time()[0]) * 1000
    r.lpush(zkey, *(f"{now_ms}|busy-{i}" for i in range(2100)))
    r.hset(hkey, mapping={f"busy-{i}": "\n{}" for i in range(2100)})
    kept = w.add("newest", request_id="newest")
    assert r.llen(zkey) == r.hlen(hkey) == 2000
    assert w.add("newest", request_id="newest") == kept  # the newest record is among them
    # records older than the retention go, a few per call
    r.lpush(zkey, "2|ancient-2", "1|ancient-1")
    r.hset(hkey, mapping={"ancient-1": "\n{}", "ancient-2": "\n{}"})
    w.add("after")
    log = r.lrange(zkey, 0, -1)
    assert not any(b"ancient" in x for x in log) and not r.hexists(hkey, "ancient-2")
    assert len(log) == 2000 and log[-1].split(b"|", 1)[1].startswith(b"add:")
    check_invariants(r, prefix, "rq-bound")


def test_reads_and_no_ops_write_no_record(store, r, prefix):
    w = store.window("rq-noop")
    w.add("x")
    zkey, _ = _log_keys(prefix, "rq-noop")
    n = r.llen(zkey)
    w.items(), w.stats(), w.build(), w.get("ctx-1")
    assert w.remove("missing") is False and w.pin("missing") is False
    assert r.llen(zkey) == n


def _recorded(r, prefix: str, wid: str) -> dict[str, Any]:
    """The window's request log, times aside: {request: [fingerprint|format, record]}."""
    out = {}
    for rid, value in r.hgetall(key(prefix, wid, "replies")).items():
        head, record = value.decode().split("\n", 1)
        out[rid.decode()] = [head, json.loads(re.sub(r"\b\d{13,16}\b", "T", record))]
    return out


def test_the_records_are_in_the_format_their_number_names(store, r, prefix):
    """Every script's record, for one fixed run of calls, against the file of its format: a
    change to what a script records (its reply, its record, the arguments an add's record points
    into or that its fingerprint covers) that keeps ``RECORD_FORMAT`` fails here, since another
    version would then replay it wrongly (or refuse it as a reused id). Raise the format and
    write the new file with CONTEXTSTORE_WRITE_RECORDS=1."""
    w = store.window("rq-format-file", max_items=10, max_tokens=1000)
    w.add("one", request_id="a")
    w.add_many([{"content": "two", "id": "x2", "role": "user"}, "three"], request_id="b")
    w.pop(1, request_id="c")
    w.remove("ctx-1", request_id="d")
    w.pin("x2", request_id="e")
    w.update_priority("x2", 70, request_id="f")
    w.replace(["four"], last=1, request_id="g")
    w.configure(max_items=9, request_id="h")
    w.compact("remove_oldest", 0, request_id="i")
    w.clear(include_pinned=True, request_id="j")
    got = _recorded(r, prefix, "rq-format-file")
    path = Path(__file__).parent / "data" / f"records_format_{RECORD_FORMAT}.json"
    if os.environ.get("CONTEXTSTORE_WRITE_RECORDS"):
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert path.exists(), f"no {path.name}: write it with CONTEXTSTORE_WRITE_RECORDS=1"
    want = json.loads(path.read_text())
    assert got == want, f"the scripts record another shape than format {RECORD_FORMAT}: raise layout.RECORD_FORMAT"
