"""Seed 002: the context-manager contract — 50-item FIFO window, types, ctx-N ids, invariants."""

from __future__ import annotations

import pytest

import contextstore as cs

from support import check_invariants


def test_default_window_is_50_item_sliding_window(store):
    w = store.window("s002-default")
    assert w.stats().max_items == 50
    assert w.stats().max_tokens is None
    for i in range(60):
        w.add(f"item-{i}")
    items = w.items()
    assert len(items) == 50  # INV-001
    assert items[0].id == "ctx-11" and items[-1].id == "ctx-60"  # INV-003: oldest at index 0


def test_inv001_capacity_never_exceeded(store, r, prefix):
    w = store.window("s002-inv1", max_items=7)
    for i in range(25):
        w.add(f"x{i}")
        assert w.stats().total_items <= 7
    check_invariants(r, prefix, "s002-inv1")


def test_inv002_chronological_order(store):
    w = store.window("s002-inv2", max_items=5)
    for i in range(12):
        w.add(f"x{i}", type="text" if i % 2 else "code", priority=(i * 37) % 101)
    items = w.items()
    stamps = [i.added_at for i in items]
    seqs = [i.seq for i in items]
    assert stamps == sorted(stamps)
    assert seqs == sorted(seqs) and seqs == list(range(8, 13))


def test_inv003_oldest_evicted_first(store):
    w = store.window("s002-inv3", max_items=3)
    for i in range(1, 5):
        w.add(f"item-{i}")
    assert [i.id for i in w.items()] == ["ctx-2", "ctx-3", "ctx-4"]


def test_inv004_empty_after_clear_and_reusable(store, r, prefix):
    w = store.window("s002-inv4")
    for i in range(5):
        w.add(f"x{i}")
    assert w.clear() == 5
    assert w.items() == []
    w.add("after clear")
    assert len(w.items()) == 1
    check_invariants(r, prefix, "s002-inv4")


def test_ids_monotonic_across_eviction_and_clear(store):
    w = store.window("s002-ids", max_items=2)
    seen = [w.add(f"a{i}").id for i in range(4)]
    w.clear()
    seen += [w.add(f"b{i}").id for i in range(2)]
    assert seen == [f"ctx-{n}" for n in range(1, 7)]
    assert [w.get(i) is not None for i in seen] == [False] * 4 + [True, True]


def test_add_defaults_to_code_and_returns_item(store):
    w = store.window("s002-defaults")
    it = w.add("(+ 1 2)")
    assert it.type is cs.ItemType.CODE and it.id == "ctx-1" and it.seq == 1 and it.token_count > 0
    assert it.added_at is not None and it.added_at.tzinfo is not None
    assert w.get("ctx-1") == it


def test_add_existing_item_object_keeps_its_fields(store):
    w = store.window("s002-item")
    item = cs.ContextItem(
        content="(defun foo () 42)", type=cs.ItemType.CODE, metadata={"filename": "example.lisp", "start_line": 10}
    )
    stored = w.add(item, type="error")  # keywords are ignored for an item (seed 002 method 1)
    assert stored.type is cs.ItemType.CODE and stored.metadata == {"filename": "example.lisp", "start_line": 10}


@pytest.mark.parametrize("value", ["code", "text", "file", "repl-history", "repl_history", "error", "custom"])
def test_seed_002_types_accepted(store, value):
    w = store.window("s002-types")
    it = w.add("content", type=value)
    assert it.type.value == value.replace("-", "_")


def test_custom_capacity_bounds(store):
    with pytest.raises(cs.InvalidOptionsError):
        store.window("s002-cap0", max_items=0)
    with pytest.raises(cs.InvalidOptionsError):
        store.window("s002-cap-big", max_items=1001)  # above item_limit
    assert store.window("s002-cap1000", max_items=1000).stats().max_items == 1000
