"""Several OS processes add to one window at once: no race, because each add is one script."""

from __future__ import annotations

from collections import Counter

import pytest

import contextstore as cs

from _workers import add_async, add_sync
from support import PROCESSES, check_invariants, events

WORKERS = 4
PER_WORKER = 150


@pytest.mark.slow
@pytest.mark.parametrize(
    "limits",
    [
        {"max_items": 40},  # FIFO eviction all the time
        {"max_tokens": 1500, "max_items": 200},  # threshold compaction all the time
    ],
)
def test_processes_adding_at_once(redis_url, r, prefix, limits):
    wid = "conc"
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        store.window(wid, **limits)
        ctx = PROCESSES
        jobs = [
            (add_sync if w % 2 == 0 else add_async, (redis_url, prefix, wid, w, PER_WORKER)) for w in range(WORKERS)
        ]  # half the workers use the sync API, half asyncio
        with ctx.Pool(WORKERS) as pool:
            results = [pool.apply_async(fn, args) for fn, args in jobs]
            acked = [res.get(timeout=120) for res in results]
        win = store.window(wid)
        items = win.items()
        stats = win.stats()

    check_invariants(r, prefix, wid)  # capacity, ids agree across keys, seq order, all counters
    single = [(i, s) for worker in acked for (i, s) in worker if s > 0]
    assert len({i for i, _ in single}) == len(single), "two acknowledged adds got the same id"
    assert len({s for _, s in single}) == len(single), "two acknowledged adds got the same seq"
    seqs = [i.seq for i in items]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert stats.current_tokens == sum(i.token_count for i in items)
    assert sum(stats.tokens_by_type.values()) == stats.current_tokens
    assert sum(stats.items_by_type.values()) == stats.total_items == len(items)
    if "max_tokens" in limits:
        assert stats.current_tokens <= limits["max_tokens"] and stats.compaction_count > 0
    assert stats.total_items <= limits["max_items"]
    # the audit trail: every add has an event; everything not in the window left with a reason
    ev = events(r, prefix, wid)
    added = [e["item_id"] for e in ev if e["event"] == "item_added"]
    removed = Counter(e["reason"] for e in ev if e["event"] == "item_removed")
    assert len(added) == WORKERS * PER_WORKER == len(set(added))
    assert len(added) - sum(removed.values()) == len(items)
    assert set(removed) <= {"eviction", "compaction"}
    present = {i.id for i in items}
    gone = {e["item_id"] for e in ev if e["event"] == "item_removed"}
    assert present | gone == set(added) and not present & gone
