"""verify(): a healthy window passes; each kind of broken key is reported, and verify never writes."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import redis

import contextstore as cs
from contextstore.plans import window as window_plans
from contextstore.plans.base import ScriptCall

from support import dump_window


def _healthy(store, wid: str):
    w = store.window(wid, max_tokens=5000, max_items=10)
    w.add("system", type="system_prompt", pinned=True, priority=100)
    w.add("hello", type="user_message", role="user")
    w.add("a tool said this", type="tool_result", priority=20, id="tool-1")
    w.add("def f(): pass", type="code")
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    w.add_many(
        [
            {"content": "", "type": "assistant_message", "role": "assistant", "metadata": {"tool_calls": [call]}},
            {"content": "found it", "type": "tool_result", "role": "tool", "metadata": {"tool_call_id": "call_1"}},
        ]
    )
    return w


def _set_item(r: redis.Redis, base: str, iid: str, **changes: object) -> None:
    it = json.loads(r.hget(base + "items", iid))
    it.update(changes)
    r.hset(base + "items", iid, json.dumps(it))


def _set_attrs(r: redis.Redis, base: str, iid: str, at: int, value: str) -> None:
    parts = r.hget(base + "attrs", iid).decode().split("|")
    parts[at] = value
    r.hset(base + "attrs", iid, "|".join(parts))


Corruption = Callable[[redis.Redis, str], object]
CASES: list[tuple[str, Corruption, str]] = [
    ("tokens counter", lambda r, b: r.hincrby(b + "meta", "tokens", 5), ":meta tokens is"),
    ("items counter", lambda r, b: r.hincrby(b + "meta", "items", 1), ":meta items is"),
    ("per-type counter", lambda r, b: r.hincrby(b + "meta", "tokens:code", 1), ":meta tokens:code is"),
    ("missing per-type counter", lambda r, b: r.hdel(b + "meta", "items:code"), "lacks the counter items:code"),
    ("seq counter behind", lambda r, b: r.hset(b + "meta", "seq", "2"), "seq counter (2) is behind"),
    ("meta field gone", lambda r, b: r.hdel(b + "meta", "strategy"), "lacks the field 'strategy'"),
    ("id only in items", lambda r, b: r.hset(b + "items", "ghost", r.hget(b + "items", "ctx-2")), ":fifo lacks ids"),
    ("id only in fifo", lambda r, b: r.rpush(b + "fifo", "ghost"), ":fifo has ids that are not in :items"),
    ("id missing from fifo", lambda r, b: r.lrem(b + "fifo", 1, "ctx-2"), ":fifo lacks ids"),
    ("id twice in fifo", lambda r, b: r.rpush(b + "fifo", "ctx-2"), "lists an id twice"),
    (
        "fifo out of order",
        lambda r, b: (r.lrem(b + "fifo", 1, "ctx-1"), r.rpush(b + "fifo", "ctx-1")),
        "not in strictly increasing seq",
    ),
    ("id missing from order", lambda r, b: r.zrem(b + "order", "tool-1"), ":order lacks ids"),
    ("wrong order score", lambda r, b: r.zincrby(b + "order", 5, "ctx-2"), ":order score of 'ctx-2'"),
    ("attrs tokens off", lambda r, b: _set_attrs(r, b, "ctx-2", 1, "999"), ":meta tokens is 35, the items sum to 1033"),
    ("attrs do not parse", lambda r, b: r.hset(b + "attrs", "ctx-2", "2|x|50"), "('2|x|50') does not parse"),
    ("attrs missing", lambda r, b: r.hdel(b + "attrs", "ctx-4"), ":attrs lacks ids"),
    ("pinned id not stored", lambda r, b: r.sadd(b + "pinned", "ghost"), ":pinned has ids that are not in :items"),
    ("group members wrong", lambda r, b: r.hset(b + "groups", "call_1", "ctx-5"), ":groups of 'call_1'"),
    ("stray group", lambda r, b: r.hset(b + "groups", "ghost", "ctx-2"), ":groups of 'ghost'"),
    ("tool call missing", lambda r, b: r.hdel(b + "calls", "call_1"), ":calls of 'call_1'"),
    ("attrs lose the group", lambda r, b: r.hset(b + "attrs", "ctx-6", "6|2|50|tool_result"), ":groups of 'call_1'"),
    ("cleared flag without mark", lambda r, b: _set_attrs(r, b, "ctx-6", 4, "c"), "disagree on whether it was cleared"),
    ("letters disagree", lambda r, b: _set_attrs(r, b, "ctx-2", 4, "A"), "letters 'A' where its body says 'U'"),
    ("unparseable JSON", lambda r, b: r.hset(b + "items", "ctx-2", "{not json"), "does not parse"),
    ("bad priority", lambda r, b: _set_attrs(r, b, "ctx-2", 2, "500"), "bad field(s) priority"),
    ("bad type", lambda r, b: _set_attrs(r, b, "ctx-2", 3, "gossip"), "bad field(s) type"),
    ("no time", lambda r, b: _set_item(r, b, "ctx-2", added_at_us=None), "bad field(s) added_at_us"),
    ("time past 9999", lambda r, b: _set_item(r, b, "ctx-2", added_at_us=10**18), "bad field(s) added_at_us"),
    ("time before 1970", lambda r, b: _set_item(r, b, "ctx-2", added_at_us=-1), "bad field(s) added_at_us"),
    ("time a bool", lambda r, b: _set_item(r, b, "ctx-2", added_at_us=True), "bad field(s) added_at_us"),
    ("a field twice", lambda r, b: _set_item(r, b, "ctx-6", group="call_1"), "its stored JSON repeats group"),
    ("empty content", lambda r, b: _set_item(r, b, "ctx-2", content=" "), "bad field(s) content"),
    ("0.1 item: id not its key", lambda r, b: _set_item(r, b, "ctx-2", priority=5, id="ctx-9"), "bad field(s) id"),
    ("generated id vs seq", lambda r, b: _set_attrs(r, b, "ctx-2", 0, "9"), "does not match its seq 9"),
    ("two items share a seq", lambda r, b: _set_attrs(r, b, "tool-1", 0, "2"), "share a seq"),
    ("over capacity", lambda r, b: r.hset(b + "meta", "max_items", "2"), "max_items is 2"),
    ("half-deleted", lambda r, b: r.delete(b + "meta"), "without a :meta hash"),
]


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """verify() reads the large keys two entries a call: every case goes through the pages."""
    monkeypatch.setattr(window_plans, "VERIFY_PAGE", 2)


@pytest.mark.parametrize("what, corrupt, expect", CASES, ids=[c[0] for c in CASES])
def test_each_broken_invariant_is_reported(store, r, prefix, small_pages, what, corrupt, expect):
    wid = "v-" + what.replace(" ", "-")
    w = _healthy(store, wid)
    assert w.verify().ok
    corrupt(r, f"{prefix}:{{{wid}}}:")
    before = dump_window(r, prefix, wid)
    report = w.verify()
    assert not report.ok
    assert any(expect in p for p in report.problems), report.problems
    assert dump_window(r, prefix, wid) == before  # verify never writes


def test_healthy_windows_verify_clean(store, r, prefix):
    w = _healthy(store, "v-ok")
    report = w.verify()
    assert report.ok and report.exists and report.items == 6
    assert report.tokens == w.stats().current_tokens
    for _ in range(20):
        w.add("filler " * 30)  # evictions
    w.compact("remove_low_priority", 10)
    w.restore(w.snapshot())
    assert w.verify().ok
    missing = store.window("v-ok").verify()
    assert missing.ok
    w.delete()
    gone = w.verify()
    assert gone.ok and not gone.exists and gone.items == 0


def test_a_big_window_is_verified_in_pages_and_read_again_when_it_changes(redis_url, prefix):
    """No verify call reads more than a page of a large key; a window changed between two pages
    is read again from the start; one that keeps changing is read in one call at last."""
    with cs.ContextStore.from_url(redis_url, prefix=prefix, item_limit=5000) as store:
        w = store.window("v-big", max_items=5000)
        w.add_many([{"content": f"message {n}", "type": "user_message", "role": "user"} for n in range(2500)])
        sent: list[list[str]] = []
        real = store._execute

        def recording(request):
            if isinstance(request, ScriptCall) and request.name == "dump":
                sent.append(list(request.args))
            return real(request)

        store._execute = recording  # type: ignore[method-assign]
        report = w.verify()
        assert report.ok and report.items == 2500, report.problems
        pages = [a for a in sent if a and a[0] != "head"]
        assert all(len(a) == 3 and a[2] == str(window_plans.VERIFY_PAGE) for a in pages)
        assert sum(1 for a in pages if a[0] == "fifo") == 3  # 2,500 ids at 1,000 a call
        assert sent[0] == ["head"] and [] not in sent  # never the whole window at once

        sent.clear()
        changes = iter(range(100))

        def changing(request):
            if isinstance(request, ScriptCall) and request.name == "dump" and request.args[:1] == ["order"]:
                w.add(f"added while verifying {next(changes)}", type="user_message")
            return recording(request)

        store._execute = changing  # type: ignore[method-assign]
        report = w.verify()
        assert report.ok and report.items == w.stats().total_items, report.problems
        assert sent.count(["head"]) == window_plans.ATTEMPTS and sent[-1] == []  # then one call
