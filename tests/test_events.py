"""Events: every mutation's typed event with its fields, following a window (a blocked reader in
another process wakes on an add), consumer groups (a killed consumer's events go to another,
none handled twice after acknowledgement), usage warnings, and the stream's bound."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest

import contextstore as cs
from contextstore import events as ev

from support import PROCESSES, key


def kinds(events: list) -> list[str]:
    return [e.kind for e in events]


def test_every_mutation_has_its_typed_event(store):
    w = store.window("ev-all", max_tokens=2000, max_items=3, warn_percent=50)
    start = list(w.events(since="0"))
    assert start == []
    a = w.add("alpha", token_count=10, priority=20)
    w.add("beta", token_count=10)
    w.add("gamma", token_count=10)
    w.add("delta", token_count=10)  # evicts alpha
    w.update_priority("ctx-2", 70)
    w.pin("ctx-2")
    w.unpin("ctx-2")
    w.remove("ctx-3")
    w.configure(max_items=5, compaction_threshold=90.0)
    w.add("big", token_count=1200, pinned=True)  # crosses warn_percent: usage_warning
    w.compact("remove_oldest", 20)  # removes the two others; the pinned one stays
    snap = w.snapshot()
    w.clear(include_pinned=True)  # below warn_percent: the warning can come again
    w.restore(snap)  # above it again: a second usage_warning
    w.build(cs.BuildOptions(reserve_for_response=0))
    got = list(w.events(since="0"))
    assert kinds(got) == [
        "item_added", "item_added", "item_added", "item_removed", "item_added", "priority_changed", "pinned",
        "unpinned", "item_removed", "configured", "item_added", "usage_warning", "item_removed", "item_removed",
        "compacted", "item_removed", "cleared", "restored", "usage_warning", "built",
    ]  # fmt: skip
    added, evicted = got[0], got[3]
    assert isinstance(added, ev.ItemAdded) and added.item_id == a.id == "ctx-1" and added.token_count == 10
    assert added.type is cs.ItemType.CODE and added.total_tokens_after == 10 and added.window_id == "ev-all"
    assert abs(added.at.timestamp() - a.added_at.timestamp()) < 1 and added.id.count("-") == 1
    assert isinstance(evicted, ev.ItemRemoved) and (evicted.item_id, evicted.reason) == ("ctx-1", "eviction")
    assert (got[5].priority, got[5].previous_priority) == (70, 50) and got[6].pinned and not got[7].pinned
    assert got[8].reason == "manual" and got[9].threshold == 90.0
    assert got[9].max_items == 5 and got[9].max_tokens is None
    warning = got[11]
    assert isinstance(warning, ev.UsageWarning) and warning.warn_percent == 50.0 and warning.usage_percent > 50
    compacted = got[14]
    assert isinstance(compacted, ev.Compacted) and compacted.strategy is cs.CompactionStrategy.REMOVE_OLDEST
    assert compacted.items_removed == 2 and compacted.tokens_freed == 20
    cleared = got[16]
    assert isinstance(cleared, ev.Cleared) and cleared.items_cleared == 1 and cleared.included_pinned
    assert isinstance(got[17], ev.Restored) and got[17].items == 1
    assert isinstance(got[18], ev.UsageWarning)
    assert isinstance(got[19], ev.Built) and got[19].items_included == 1 and not got[19].was_compacted
    assert [e.id for e in w.events(since=got[15].id)] == [e.id for e in got[16:]]  # after an id, in order


def test_events_of_a_cleared_tool_result_and_of_chat_builds(store):
    w = store.window("ev-clear", max_tokens=400, compaction_threshold=100)
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    w.add_many(
        [
            {"content": "", "type": "assistant_message", "metadata": {"tool_calls": [call]}},
            {"content": "out " * 200, "type": "tool_result", "role": "tool", "metadata": {"tool_call_id": "c1"}},
        ]
    )
    w.compact("clear_tool_results", 10)
    w.build_messages(cs.BuildOptions(reserve_for_response=0))
    got = list(w.events(since="0"))
    cleared = [e for e in got if isinstance(e, ev.ItemCleared)]
    assert len(cleared) == 1 and cleared[0].item_id == "ctx-2" and cleared[0].tokens_freed > 100
    compacted = next(e for e in got if isinstance(e, ev.Compacted))
    assert (compacted.items_removed, compacted.items_cleared) == (0, 1)
    built = got[-1]
    assert isinstance(built, ev.Built) and built.format == "openai" and built.build_time_ms is None


def test_usage_warning_once_per_crossing(store):
    w = store.window("ev-warn", max_tokens=100, compaction_threshold=100, warn_percent=50)
    w.add("a", token_count=40)
    big = w.add("b", token_count=20)  # 60%: warns
    w.add("c", token_count=5)  # still above: no second warning
    w.remove(big.id)  # 45%: below again
    w.add("d", token_count=10)  # 55%: crosses again
    warnings = [e for e in w.events(since="0") if isinstance(e, ev.UsageWarning)]
    assert [round(e.usage_percent) for e in warnings] == [60, 55]


def test_following_with_and_without_blocking(store):
    w = store.window("ev-follow")
    assert list(w.events()) == []  # only new events, and nothing waits without block_ms
    w.add("one")
    assert list(w.events(block_ms=50)) == []  # waited 50 ms: nothing new came
    assert [e.item_id for e in w.events(since="0")] == ["ctx-1"]
    with pytest.raises(cs.InvalidOptionsError):
        list(w.events(since="yesterday"))
    with pytest.raises(cs.InvalidOptionsError):
        list(w.events(block_ms=-1))


def _reader(url: str, prefix: str, since: str, out: mp.Queue) -> None:
    with cs.ContextStore.from_url(url, prefix=prefix) as store:
        win = store.window("ev-wake", create=False)
        out.put("ready")
        event = next(iter(win.events(since=since, block_ms=20_000)), None)
        out.put((type(event).__name__, getattr(event, "item_id", None), time.monotonic()))


@pytest.mark.slow
def test_a_reader_blocked_in_another_process_wakes_on_an_add(redis_url, prefix):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("ev-wake")
        w.add("before")
        last = list(w.events(since="0"))[-1].id
        ctx = PROCESSES
        out = ctx.Queue()
        reader = ctx.Process(target=_reader, args=(redis_url, prefix, last, out))
        reader.start()
        assert out.get(timeout=60) == "ready"
        time.sleep(0.5)  # the reader is blocked in XREAD by now
        added_at = time.monotonic()
        w.add("wake up")
        kind, item_id, woke_at = out.get(timeout=15)  # long before its own 20 s block ends
        reader.join(15)
    assert (kind, item_id) == ("ItemAdded", "ctx-2") and woke_at >= added_at


def _consume_and_die(url: str, prefix: str, out: mp.Queue) -> None:
    with cs.ContextStore.from_url(url, prefix=prefix) as store:
        batch = next(iter(store.consume("ev-group", "workers", "doomed", count=5)))
        out.put([e.id for e in batch])
    out.close()
    out.join_thread()  # the queue's feeder thread has written it: os._exit would lose it otherwise
    os._exit(0)  # killed before acknowledging


@pytest.mark.slow
def test_a_killed_consumers_events_go_to_another_and_none_twice_after_ack(redis_url, r, prefix):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("ev-group")
        w.add_many([f"item {n}" for n in range(20)])
        all_ids = [e.id for e in w.events(since="0")]
        ctx = PROCESSES
        out = ctx.Queue()
        doomed = ctx.Process(target=_consume_and_die, args=(redis_url, prefix, out))
        doomed.start()
        lost = out.get(timeout=60)
        doomed.join(30)
        assert len(lost) == 5
        time.sleep(0.3)  # its events have now been pending longer than claim_after_ms
        handled: list[str] = []
        for batch in store.consume("ev-group", "workers", "survivor", claim_after_ms=200, count=7):
            handled += [e.id for e in batch]
            batch.ack()
        assert sorted(handled) == sorted(all_ids) and len(handled) == len(set(handled))
        assert set(lost) <= set(handled)
        again = [e.id for b in store.consume("ev-group", "workers", "late", claim_after_ms=0) for e in b]
        assert again == []  # acknowledged: never handed out again
        pending = r.xpending(key(prefix, "ev-group", "events"), "workers")
        assert pending["pending"] == 0


def test_consumers_of_a_group_share_the_events(store):
    w = store.window("ev-share")
    w.add_many([f"n{n}" for n in range(10)])
    first = store.consume(["ev-share"], "g", "one", count=4)
    seen_one = [e.id for b in first for e in b]
    seen_two = [e.id for b in store.consume(["ev-share"], "g", "two", count=4) for e in b]
    assert seen_one and not set(seen_one) & set(seen_two)  # "one" took them all (not acked: pending)
    w.add("eleventh")
    assert len([e for b in store.consume("ev-share", "g", "two") for e in b]) == 1
    with pytest.raises(cs.InvalidOptionsError):
        store.consume("ev-share", "bad group", "c")
    with pytest.raises(cs.InvalidWindowIdError):
        store.consume(["x{y}"], "g", "c")


def test_the_stream_stays_near_its_bound(store, r, prefix):
    w = store.window("ev-bound", events_maxlen=200)
    for n in range(30):
        w.add_many([f"item {n}.{k}" for k in range(50)])  # 1500 events and more (evictions)
    assert r.xlen(key(prefix, "ev-bound", "events")) <= 200 + 100  # MAXLEN ~ trims whole nodes of 100
    w.configure(events_maxlen=1000)
    assert w.stats().max_items == 50
