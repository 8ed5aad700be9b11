"""Seed 004: sliding-window overflow — FIFO eviction at capacity, custom capacity, rapid adds."""

from __future__ import annotations

from support import check_invariants, events


def test_51st_item_evicts_ctx_1(store, r, prefix):
    w = store.window("s004-main")
    for i in range(1, 51):
        w.add(f"item {i}")
    assert [i.id for i in w.items()] == [f"ctx-{n}" for n in range(1, 51)]
    w.add("new content", type="code")
    ids = [i.id for i in w.items()]
    assert len(ids) == 50 and ids[0] == "ctx-2" and ids[-1] == "ctx-51"
    assert "ctx-1" not in ids and w.get("ctx-1") is None
    removed = [e for e in events(r, prefix, "s004-main") if e["event"] == "item_removed"]
    assert removed == [
        {
            "event": "item_removed",
            "item_id": "ctx-1",
            "type": "code",
            "token_count": removed[0]["token_count"],
            "reason": "eviction",
            "total_tokens_after": removed[0]["total_tokens_after"],
        }
    ]
    s = w.stats()
    assert s.compaction_count == 0 and s.total_tokens_freed == 0  # evictions are not compactions
    check_invariants(r, prefix, "s004-main")


def test_custom_capacity_evicts_at_101(store):
    w = store.window("s004-custom", max_items=100)
    for i in range(1, 101):
        w.add(f"item {i}")
    assert len(w.items()) == 100 and w.items()[0].id == "ctx-1"
    w.add("item 101")
    items = w.items()
    assert len(items) == 100 and items[0].id == "ctx-2"


def test_rapid_additions_each_evict_one(store):
    w = store.window("s004-rapid")
    for i in range(1, 51):
        w.add(f"item {i}")
    for n in range(51, 56):
        w.add(f"item {n}")
        ids = [i.id for i in w.items()]
        assert ids[0] == f"ctx-{n - 49}" and ids[-1] == f"ctx-{n}" and len(ids) == 50


def test_manual_test_block_capacity_3(store):
    w = store.window("s004-manual", max_items=3)
    for i in range(1, 4):
        w.add(f"item-{i}", type="code")
    assert len(w.items()) == 3
    w.add("item-4", type="code")
    assert [i.id for i in w.items()] == ["ctx-2", "ctx-3", "ctx-4"]


def test_pinned_items_are_skipped_by_eviction(store, r, prefix):
    w = store.window("s004-pinned", max_items=3)
    w.add("root cause analysis", pinned=True)
    w.add("b")
    w.add("c")
    w.add("d")
    assert [i.content for i in w.items()] == ["root cause analysis", "c", "d"]
    check_invariants(r, prefix, "s004-pinned")


def test_add_many_batch_evicts_its_own_items_and_counts_them(store, r, prefix):
    w = store.window("s004-batch", max_items=3)
    w.add("old")
    assert w.add_many([f"new{i}" for i in range(5)]) == 5
    assert [i.content for i in w.items()] == ["new2", "new3", "new4"]
    check_invariants(r, prefix, "s004-batch")


def test_window_restored_over_capacity_is_brought_back_by_the_next_add(store, r, prefix):
    w = store.window("s004-over", max_items=10)
    for i in range(10):
        w.add(f"x{i}")
    snap = w.snapshot()
    over = store.window("s004-over2", max_items=3)
    over.restore(snap)  # restore does not re-apply limits: 10 items, max_items 10
    over.configure(max_items=4)  # evicts down to the new cap at once
    assert len(over.items()) == 4
    w.restore(type(snap)(window_id="x", created_at=snap.created_at, max_items=3, items=snap.items))
    assert len(w.items()) == 10  # over capacity, as restored
    w.add("next")
    assert [i.content for i in w.items()] == ["x8", "x9", "next"]
    check_invariants(r, prefix, "s004-over")
