"""A failed call leaves the window byte for byte as it was, and raises a typed error."""

from __future__ import annotations

import pytest

import contextstore as cs

from support import check_invariants, dump_window


@pytest.fixture
def full_window(store, r, prefix):
    w = store.window("fail", max_tokens=100, max_items=5, ttl_seconds=600)
    w.add("pinned one", token_count=20, pinned=True)
    w.add("low", token_count=20, priority=5)
    w.add("high", token_count=30, priority=95, pinned=True)
    return w


def _unchanged(r, prefix, call, exc):
    before = dump_window(r, prefix, "fail")
    with pytest.raises(exc):
        call()
    assert dump_window(r, prefix, "fail") == before
    check_invariants(r, prefix, "fail")


def test_too_big_for_the_window(full_window, r, prefix):
    # would need compaction AND eviction... and still cannot fit: nothing of it may happen
    with pytest.raises(cs.ContextWindowFullError) as info:
        full_window.add("huge", token_count=101)
    assert (info.value.unit, info.value.current, info.value.max, info.value.requested) == ("tokens", 70, 100, 101)
    _unchanged(r, prefix, lambda: full_window.add("big", token_count=60), cs.ContextWindowFullError)


def test_fits_only_after_compaction_that_cannot_free_enough(full_window, r, prefix):
    # 70 used, 50 pinned: compaction could free 20 (the unpinned one), 50 + 45 > 100? no: 95 fits.
    # 56 does not: 50 + 56 > 100, so the compaction that would have run must not happen either.
    _unchanged(r, prefix, lambda: full_window.add("x", token_count=56), cs.ContextWindowFullError)


def test_all_pinned_item_cap(store, r, prefix):
    w = store.window("fail", max_items=2)
    w.add("a", pinned=True)
    w.add("b", pinned=True)
    before = dump_window(r, prefix, "fail")
    with pytest.raises(cs.ContextWindowFullError) as info:
        w.add("c")
    assert (info.value.unit, info.value.current, info.value.max, info.value.requested) == ("items", 2, 2, 1)
    assert dump_window(r, prefix, "fail") == before


def test_add_many_is_all_or_nothing(full_window, r, prefix):
    _unchanged(
        r,
        prefix,
        lambda: full_window.add_many(["ok 1", "ok 2", {"content": "too big", "token_count": 99}]),
        cs.ContextWindowFullError,
    )
    _unchanged(r, prefix, lambda: full_window.add_many(["ok", {"content": "   "}]), cs.InvalidItemError)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"content": ""},
        {"content": "   \n\t"},
        {"content": 42},
        {"content": b"bytes"},
        {"content": "x", "priority": 101},
        {"content": "x", "priority": -1},
        {"content": "x", "priority": True},
        {"content": "x", "priority": 5.0},
        {"content": "x", "type": "nonsense"},
        {"content": "x", "metadata": {"f": object()}},
        {"content": "x", "metadata": {"f": float("nan")}},
        {"content": "x", "metadata": ["not", "a", "dict"]},
        {"content": "x", "token_count": 0},
        {"content": "x", "token_count": -3},
        {"content": "x", "token_count": True},
        {"content": "x", "id": "ctx-99"},
        {"content": "x", "id": "has space"},
        {"content": "x", "id": ""},
        {"content": "x", "id": "x" * 129},
        {"content": "x", "pinned": "yes"},
        {"content": "x", "role": 5},
        {"content": "\ud800 lone surrogate"},
    ],
)
def test_invalid_items_are_rejected_before_any_write(full_window, r, prefix, kwargs):
    kwargs = dict(kwargs)
    content = kwargs.pop("content")
    _unchanged(r, prefix, lambda: full_window.add(content, **kwargs), cs.InvalidItemError)


def test_content_byte_limit(make_store, r, prefix):
    store = make_store(max_content_bytes=10)
    w = store.window("fail")
    w.add("0123456789")
    _unchanged(r, prefix, lambda: w.add("é" * 6), cs.InvalidItemError)  # 12 bytes in UTF-8


def test_duplicate_caller_id(full_window, r, prefix):
    first = full_window.add("same text", id="msg-1")
    again = full_window.add("same text", id="msg-1")  # a safe retry
    assert again == first
    _unchanged(r, prefix, lambda: full_window.add("other text", id="msg-1"), cs.DuplicateItemError)
    _unchanged(
        r,
        prefix,
        lambda: full_window.add_many([{"content": "a", "id": "d"}, {"content": "a", "id": "d"}]),
        cs.InvalidItemError,
    )


def test_invalid_priority_update_and_ids(full_window, r, prefix):
    _unchanged(r, prefix, lambda: full_window.update_priority("ctx-2", 500), cs.InvalidItemError)
    _unchanged(r, prefix, lambda: full_window.update_priority("missing", 500), cs.InvalidItemError)
    _unchanged(r, prefix, lambda: full_window.remove(None), cs.InvalidItemError)
    assert full_window.update_priority("missing", 50) is False
    assert full_window.remove("missing") is False
    assert full_window.pin("missing") is False and full_window.unpin("missing") is False


def test_invalid_build_and_compact_options(full_window, r, prefix):
    _unchanged(r, prefix, lambda: full_window.build(cs.BuildOptions(reserve_for_response=101)), cs.InvalidOptionsError)
    _unchanged(r, prefix, lambda: full_window.build(cs.BuildOptions(order="random")), cs.InvalidOptionsError)
    _unchanged(r, prefix, lambda: full_window.build(cs.BuildOptions(message_format="{role}")), cs.InvalidOptionsError)
    _unchanged(r, prefix, lambda: full_window.build({"reserve_for_response": 1}), cs.InvalidOptionsError)
    _unchanged(r, prefix, lambda: full_window.compact(target_percent=120), cs.InvalidOptionsError)
    _unchanged(r, prefix, lambda: full_window.compact("shred"), cs.InvalidOptionsError)
    _unchanged(r, prefix, lambda: full_window.compact("summarize"), cs.StrategyUnavailableError)
    _unchanged(r, prefix, lambda: full_window.compact("selective"), cs.StrategyUnavailableError)
    _unchanged(r, prefix, lambda: full_window.clear(include_pinned="yes"), cs.InvalidOptionsError)


def test_budget_too_small_for_pinned_items(full_window, r, prefix):
    _unchanged(
        r,
        prefix,
        lambda: full_window.build(cs.BuildOptions(reserve_for_response=60, compact=True)),
        cs.BudgetTooSmallError,
    )


def test_invalid_restore(full_window, r, prefix):
    good = full_window.snapshot()
    bad_items = [
        cs.ContextItem(content="a", id="x", seq=1, token_count=1),
        cs.ContextItem(content="b", id="x", seq=2, token_count=1),
    ]
    for snap in (
        "not a snapshot",
        cs.ContextSnapshot(window_id="fail", created_at=good.created_at, max_items=5, items=bad_items),
        cs.ContextSnapshot(window_id="fail", created_at=good.created_at, max_items=5000),
        cs.ContextSnapshot(window_id="fail", created_at=good.created_at, max_items=5, format_version=9),
        cs.ContextSnapshot(
            window_id="fail",
            created_at=good.created_at,
            max_items=5,
            items=[cs.ContextItem(content="a", id="x", seq=0, token_count=1)],
        ),
        cs.ContextSnapshot(
            window_id="fail",
            created_at=good.created_at,
            max_items=5,
            items=[cs.ContextItem(content="a", id="x", seq=1, token_count=0)],
        ),
    ):
        _unchanged(
            r, prefix, lambda snap=snap: full_window.restore(snap), (cs.InvalidOptionsError, cs.InvalidItemError)
        )


def test_invalid_configure(full_window, r, prefix):
    for changes in (
        {"max_items": 0},
        {"max_items": None},
        {"max_tokens": 0},
        {"compaction_threshold": 0},
        {"compaction_threshold": 101},
        {"default_strategy": "x"},
        {"ttl_seconds": -1},
        {"colour": "red"},
        {"max_items": 1001},
    ):
        _unchanged(r, prefix, lambda changes=changes: full_window.configure(**changes), cs.InvalidOptionsError)
    # pinned items alone exceed the new cap: refused, nothing evicted
    _unchanged(r, prefix, lambda: full_window.configure(max_items=1), cs.ContextWindowFullError)


def test_error_hierarchy():
    for e in (cs.InvalidItemError, cs.InvalidWindowIdError, cs.InvalidOptionsError, cs.DuplicateItemError):
        assert issubclass(e, cs.ContextStoreError) and issubclass(e, ValueError)
    for e in (
        cs.ContextWindowFullError,
        cs.BudgetTooSmallError,
        cs.ConfigConflictError,
        cs.StrategyUnavailableError,
        cs.StoreUnavailableError,
    ):
        assert issubclass(e, cs.ContextStoreError) and not issubclass(e, ValueError)


@pytest.mark.parametrize("api_kind", ["sync", "async"])
def test_unreachable_redis_names_url_without_password(api_kind):
    import asyncio
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"redis://alice:s3cret-pw@127.0.0.1:{port}/0"
    quick = cs.RetryPolicy(deadline_s=0.2)  # the default retries for 20 s
    if api_kind == "sync":
        store = cs.ContextStore.from_url(url, retry=quick)  # no I/O yet
        with pytest.raises(cs.StoreUnavailableError) as info:
            store.window("w")
        store.close()
    else:

        async def go():
            astore = cs.AsyncContextStore.from_url(url, retry=quick)
            try:
                await astore.window("w")
            finally:
                await astore.close()

        with pytest.raises(cs.StoreUnavailableError) as info:
            asyncio.run(go())
    assert "s3cret-pw" not in str(info.value) and "alice:***@127.0.0.1" in str(info.value)
    assert "s3cret-pw" not in repr(info.value)
