"""A window whose keys were changed by hand or by a foreign program: every public read raises
``CorruptWindowError`` (or succeeds, where it reads nothing corrupt), every write raises it with
nothing written (or succeeds without reading the corrupt part), ``verify()`` reports each kind,
and no other exception type escapes.

Each corruption kind is written into the same window; every operation then runs on a byte-exact
copy of the corrupt keys (``DUMP`` / ``RESTORE``), so each starts from the same state."""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import Callable
from typing import Any

import pytest

import contextstore as cs
from contextstore.core.keys import window_keys
from contextstore.core.layout import Meta

from support import SyncProxy, dump_window

W = "crp"
CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}


def _deep_json(depth: int) -> bytes:
    return b'{"added_at_us":1,"content":"deep","metadata":' + b'{"a":' * depth + b"1" + b"}" * depth + b"}"


def _body(r: Any, key: str, item_id: str) -> bytes:
    return bytes(r.hget(key, item_id))


#: name -> (what it does to the window's keys: f(r, key(name) -> full key name), the item it touches)
CORRUPTIONS: dict[str, Callable[[Any, Callable[[str], str]], Any]] = {
    "assistant body not JSON": lambda r, k: r.hset(k("items"), "ctx-3", "not json"),
    "body not JSON": lambda r, k: r.hset(k("items"), "ctx-5", "not json"),
    "body not UTF-8": lambda r, k: r.hset(k("items"), "ctx-5", b'{"added_at_us":1,"content":"\xff\xfe"}'),
    "body nested 3000 deep": lambda r, k: r.hset(k("items"), "ctx-5", _deep_json(3000)),
    "body missing": lambda r, k: r.hdel(k("items"), "ctx-5"),
    "body time past year 9999": lambda r, k: r.hset(
        k("items"),
        "ctx-5",
        re.sub(rb'"added_at_us":\d+', b'"added_at_us":9223372036854775807', _body(r, k("items"), "ctx-5")),
    ),
    "body time a float": lambda r, k: r.hset(
        k("items"), "ctx-5", re.sub(rb'"added_at_us":(\d+)', rb'"added_at_us":\1.0', _body(r, k("items"), "ctx-5"))
    ),
    "tool_calls not a list": lambda r, k: r.hset(
        k("items"), "ctx-3", _body(r, k("items"), "ctx-3").replace(b'"tool_calls":[', b'"tool_calls":"zz","x":[')
    ),
    "tool call id not a str": lambda r, k: r.hset(
        k("items"), "ctx-3", _body(r, k("items"), "ctx-3").replace(b'"id":"call_1"', b'"id":5')
    ),
    "attrs not UTF-8": lambda r, k: r.hset(k("attrs"), "ctx-5", b"5|3|50|\xff\xfe"),
    "attrs garbage": lambda r, k: r.hset(k("attrs"), "ctx-5", "x|y"),
    "attrs missing": lambda r, k: r.hdel(k("attrs"), "ctx-5"),
    "attrs unknown type": lambda r, k: r.hset(k("attrs"), "ctx-5", "5|3|50|bogus"),
    "meta seq not a number": lambda r, k: r.hset(k("meta"), "seq", "abc"),
    "meta strategy unknown": lambda r, k: r.hset(k("meta"), "strategy", "bogus"),
    "meta threshold not a number": lambda r, k: r.hset(k("meta"), "threshold", "high"),
    "meta tokens nan": lambda r, k: r.hset(k("meta"), "tokens", "nan"),
    "meta max_tokens negative": lambda r, k: r.hset(k("meta"), "max_tokens", "-5"),
    "meta items not a number": lambda r, k: r.hset(k("meta"), "items", "many"),
    "meta clear_at_least negative": lambda r, k: r.hset(k("meta"), "clear_at_least", "-5"),
    "meta calibration not a ratio": lambda r, k: r.hset(k("meta"), "calibration", "9e9"),
    "meta usage ratios garbage": lambda r, k: r.hset(k("meta"), "ratios", "1.2 x"),
    "meta used_input not a count": lambda r, k: r.hset(k("meta"), "used_input", "-1"),
    "meta compactions not a count": lambda r, k: r.hset(k("meta"), "compactions", "some"),
    "meta epoch not a count": lambda r, k: r.hset(k("meta"), "epoch", "x"),
    "fifo of another type": lambda r, k: (r.delete(k("fifo")), r.set(k("fifo"), "x")),
    "pending inputs not JSON": lambda r, k: r.hset(k("turn"), "pending", "not json"),
    "request record not JSON": lambda r, k: r.hset(
        k("replies"), "add:rq-1", bytes(r.hget(k("replies"), "add:rq-1")).split(b"\n")[0] + b"\nnot json"
    ),
}


def _fill(store: Any) -> Any:
    w = store.window(W, max_tokens=4000, max_items=50)
    w.add("You are terse.", type="system_prompt", pinned=True)  # ctx-1
    w.add("Weather in Paris?", role="user", request_id="rq-1")  # ctx-2
    w.add_many(
        [
            {"content": "", "role": "assistant", "metadata": {"tool_calls": [CALL]}},  # ctx-3
            {"content": '{"temp": 21}', "role": "tool", "metadata": {"tool_call_id": "call_1"}},  # ctx-4
        ]
    )
    w.add("notes on Paris", type="working_memory", metadata={"filename": "p.md"})  # ctx-5
    w.add("It is 21C.", role="assistant")  # ctx-6
    return w


def _reads(w: Any) -> dict[str, Callable[[], Any]]:
    return {
        "items": w.items,
        "ordered_items": w.ordered_items,
        "pinned_items": w.pinned_items,
        "get ctx-5": lambda: w.get("ctx-5"),
        "get ctx-3": lambda: w.get("ctx-3"),
        "stats": w.stats,
        "build": w.build,
        "build arrival": lambda: w.build(cs.BuildOptions(order="arrival")),
        "build_messages openai": w.build_messages,
        "build_messages anthropic": lambda: w.build_messages(format="anthropic"),
        "build_messages budget": lambda: w.build_messages(cs.BuildOptions(max_tokens=1500)),
        "snapshot": w.snapshot,
        "to_markdown": w.to_markdown,
        "plan_compaction": lambda: w.plan_compaction("remove_oldest", 0),
        "turn_status": w.turn_status,
        "iter_items": lambda: list(w.iter_items()),
        "lineage": w.lineage,
        "write_snapshot": lambda: w.write_snapshot(io.BytesIO()),
    }


def _writes(w: Any, version: str) -> dict[str, Callable[[], Any]]:
    return {
        "add": lambda: w.add("one more"),
        "add_many": lambda: w.add_many(["a", "b"]),
        "add retried": lambda: w.add("Weather in Paris?", role="user", request_id="rq-1"),
        "add over the threshold": lambda: w.add("big " * 3000),
        "remove ctx-3": lambda: w.remove("ctx-3"),
        "remove ctx-5": lambda: w.remove("ctx-5"),
        "pin": lambda: w.pin("ctx-5"),
        "unpin": lambda: w.unpin("ctx-1"),
        "update_priority": lambda: w.update_priority("ctx-5", 90),
        "clear": w.clear,
        "compact remove_oldest": lambda: w.compact("remove_oldest", 0),
        "compact remove_low_priority": lambda: w.compact("remove_low_priority", 0),
        "compact clear_tool_results": lambda: w.compact("clear_tool_results", 0),
        "pop": lambda: w.pop(4),
        "replace": lambda: w.replace(["fresh"], last=2),
        "configure": lambda: w.configure(max_tokens=5000),
        "turn": lambda: _turn(w),
        "record_usage": lambda: w.record_usage(version, input_tokens=900, request_id="usage-1"),
        "rewind": lambda: w.rewind("ctx-2"),
        "fork": lambda: w.fork("crp-fork"),
    }


def _turn(w: Any) -> None:
    if isinstance(w, SyncProxy):  # the asyncio window: async with
        w._loop.run_until_complete(_aturn(w._obj))
        return
    with w.turn(policy="reject", input="next question") as turn:
        turn.add("answer", role="assistant")


async def _aturn(w: Any) -> None:
    async with w.turn(policy="reject", input="next question") as turn:
        await turn.add("answer", role="assistant")


#: kinds whose corrupt part a write may meet after it wrote: a key of another type than the scripts
#: write is found by the command that writes it (asking each key's type would cost every call);
#: the error is still CorruptWindowError, and verify() names the key
TYPE_CHANGES = {"fifo of another type"}
#: kinds in keys beside the items and :meta (the turn, the request log)
SIDE_KEYS = {"pending inputs not JSON", "request record not JSON"}
#: (corruption, write) pairs the issue names: they must raise, never succeed
MUST_REFUSE = {
    ("assistant body not JSON", name) for name in ("remove ctx-3", "clear", "compact remove_oldest", "pop")
} | {("meta seq not a number", "add"), ("meta tokens nan", "add"), ("request record not JSON", "add retried")}


class _Keys:
    """Every key of the window, copied byte for byte (DUMP) and put back (RESTORE)."""

    def __init__(self, r: Any, prefix: str) -> None:
        self.r, self.names = r, list(window_keys(prefix, W))
        self.saved = {k: (r.dump(k), r.pttl(k)) for k in self.names if r.exists(k)}

    def put_back(self) -> None:
        pipe = self.r.pipeline(transaction=False)
        pipe.delete(*self.names)
        for k, (data, ttl) in self.saved.items():
            pipe.restore(k, max(ttl, 0), data, replace=True)
        pipe.execute()


def _outcome(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except cs.CorruptWindowError:
        return "corrupt"
    except cs.ContextStoreError as exc:  # a typed refusal that is not about the corruption
        return f"refused: {type(exc).__name__}"
    return "ok"


#: every kind through the sync store; the asyncio store (the same plans and scripts) on a few
CASES = [("sync", kind) for kind in CORRUPTIONS] + [
    ("async", kind) for kind in ("assistant body not JSON", "meta seq not a number", "attrs garbage")
]


@pytest.fixture
def make_store(redis_url, prefix, case):
    """``make_store(**options)`` of the case's API (the asyncio one behind SyncProxy)."""
    api = case[0]
    loop = asyncio.new_event_loop() if api == "async" else None
    made: list[Any] = []

    def factory(**options: Any) -> Any:
        if api == "sync":
            store: Any = cs.ContextStore.from_url(redis_url, prefix=prefix, **options)
        else:
            store = SyncProxy(cs.AsyncContextStore.from_url(redis_url, prefix=prefix, **options), loop)
        made.append(store)
        return store

    yield factory
    for s in made:
        s.close()
    if loop is not None:
        loop.close()


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_a_corrupt_window_raises_corrupt_window_error_and_writes_nothing(make_store, r, prefix, case):
    kind = case[1]
    store = make_store()
    w = _fill(store)
    snap, version = w.snapshot(), w.build_structured().version
    assert w.verify().ok
    CORRUPTIONS[kind](r, lambda name: f"{prefix}:{{{W}}}:{name}")
    corrupt = _Keys(r, prefix)
    report = w.verify()
    assert not report.ok and report.problems, f"verify() does not report {kind!r}"
    outcomes: dict[str, str] = {}
    fresh = make_store(item_cache_bytes=0).handle(W)  # a stateless worker: each call reads the window itself
    for name in _reads(w):
        before = dump_window(r, prefix, W)
        outcomes[f"read {name}"] = _outcome(_reads(fresh)[name])
        assert dump_window(r, prefix, W) == before or name.startswith("build"), f"read {name} wrote"
        corrupt.put_back()
    for name in _writes(w, version):
        before = dump_window(r, prefix, W)
        got = outcomes[f"write {name}"] = _outcome(_writes(fresh, version)[name])
        if got != "ok" and kind not in TYPE_CHANGES:
            assert dump_window(r, prefix, W) == before, f"{name} raised ({got}) after writing"
        if (kind, name) in MUST_REFUSE:
            assert got == "corrupt", f"{name} on {kind!r}: {got}"
        corrupt.put_back()
    # restore() rewrites the items and :meta whole (the turn and the request log it leaves); delete() all
    for name, fn in {"restore": lambda s: s.restore(snap), "delete": lambda s: s.delete()}.items():
        assert _outcome(lambda fn=fn: fn(fresh)) == "ok", f"{name} must repair a corrupt window"
        assert fresh.verify().ok or (name == "restore" and kind in SIDE_KEYS), fresh.verify()
        corrupt.put_back()
    untyped = {k: v for k, v in outcomes.items() if v in ("refused: ContextStoreError", "refused: ScriptError")}
    assert not untyped, f"untyped errors on {kind!r}: {untyped}"


@pytest.mark.parametrize("case", [("sync", "every counter")], ids=["sync"])
def test_restore_repairs_every_counter_and_the_usage_it_keeps(make_store, r, prefix, case):
    """Each counter of :meta (and the usage ratios and calibration), holding what no script
    writes: verify() names it, and restore() of a snapshot repairs it. A restore keeps a window's
    counters: one that no read of the config checks is dropped alone, the others kept (one that
    every call checks makes the restore write :meta anew, as for any corrupt config)."""
    w = _fill(make_store())
    built = w.build_structured()
    w.record_usage(built.version, input_tokens=built.total_tokens * 2, output_tokens=7)
    snap, used, whole = w.snapshot(), w.stats(), _Keys(r, prefix)
    meta = f"{prefix}:{{{W}}}:meta"
    for field in (*Meta.COUNTERS, Meta.RATIOS, Meta.CALIBRATION):
        r.hset(meta, field, "-1" if field in (Meta.RATIOS, Meta.CALIBRATION) else "not a count")
        assert [p for p in w.verify().problems if field in p], field
        w.restore(snap)
        assert w.verify().ok, (field, w.verify())
        if field in (Meta.COMPACTIONS, Meta.FREED, Meta.CREATED_MS, Meta.SUMMARIES, Meta.USED_OUTPUT):
            now = w.stats().usage  # the readable ones stay
            assert (now.input_tokens, now.records) == (used.usage.input_tokens, used.usage.records), field
        whole.put_back()
