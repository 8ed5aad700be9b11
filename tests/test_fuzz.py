"""Fuzzing the public API with hypothesis: arbitrary strings, numbers, nesting and window ids
(braces, unicode, glob characters). Only ContextStoreError subclasses may escape, and a call
that raised changes nothing in Redis."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextstore as cs

from support import dump_window

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-5, 200),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.binary(max_size=20),
    # with a lone surrogate (no UTF-8 encoder takes it) and an ESC
    st.sampled_from(
        ["code", "user_message", "summarize", "remove_oldest", "", " ", "ctx-1", "{x}", "ℵ", "a\x00b", "\ud800"]
    ),
    st.just("a\x1bb"),
    st.just(object()),
    st.just(math.nan),
    st.just(10**30),
)
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
        st.frozensets(st.integers(), max_size=3),
        st.tuples(inner, inner),
    ),
    max_leaves=8,
)
window_ids = st.one_of(
    st.text(max_size=210),
    st.sampled_from(["a{b}", "x}", "{", "tenant-a*", "ü", "a b", "ok-id", "a" * 201]),
    anything,
)
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _call_changes_nothing_or_succeeds(r, prefix: str, wid: str, fn: Any) -> None:
    before = dump_window(r, prefix, wid)
    try:
        fn()
    except cs.ContextStoreError:
        after = dump_window(r, prefix, wid)
        assert after == before, "a rejected call changed the window"
    # any other exception type propagates and fails the test


@FUZZ
@given(
    content=anything,
    kw=st.dictionaries(
        st.sampled_from(
            ["type", "priority", "pinned", "role", "source_ref", "metadata", "token_count", "id", "request_id"]
        ),
        anything,
        max_size=5,
    ),
)
def test_add_with_arbitrary_arguments(store, r, prefix, content, kw):
    w = store.window("fz-add", max_tokens=2000, max_items=20)
    _call_changes_nothing_or_succeeds(r, prefix, "fz-add", lambda: w.add(content, **kw))
    assert w.verify().ok


@FUZZ
@given(items=anything)
def test_add_many_with_arbitrary_arguments(store, r, prefix, items):
    w = store.window("fz-many", max_items=20)
    _call_changes_nothing_or_succeeds(r, prefix, "fz-many", lambda: w.add_many(items))
    assert w.verify().ok


@FUZZ
@given(
    op=st.sampled_from(
        [
            "remove",
            "pin",
            "unpin",
            "priority",
            "items",
            "ordered",
            "compact",
            "clear",
            "markdown",
            "build",
            "configure",
            "restore",
            "get",
        ]
    ),
    a=anything,
    b=anything,
    c=anything,
)
def test_every_operation_with_arbitrary_arguments(store, r, prefix, op, a, b, c):
    w = store.window("fz-ops", max_tokens=3000, max_items=20)
    if not w.items():
        w.add_many(["one", {"content": "two", "type": "user_message", "role": "user"}, "three"])
    calls = {
        "remove": lambda: w.remove(a),
        "pin": lambda: w.pin(a, request_id=b) if isinstance(b, str) else w.pin(a),
        "unpin": lambda: w.unpin(a),
        "priority": lambda: w.update_priority(a, b),
        "items": lambda: w.items(types=a, limit=b),
        "ordered": lambda: w.ordered_items(types=a),
        "compact": lambda: w.compact(a, b),
        "clear": lambda: w.clear(a),
        "markdown": lambda: w.to_markdown(a, b, c),
        "build": lambda: w.build(cs.BuildOptions(max_tokens=a, reserve_for_response=b, message_format=c)),
        "configure": lambda: w.configure(
            **{
                k: v
                for k, v in (("max_tokens", a), ("compaction_threshold", b), ("default_strategy", c))
                if v is not None
            }
        ),
        "restore": lambda: w.restore(a),
        "get": lambda: w.get(a),
    }
    _call_changes_nothing_or_succeeds(r, prefix, "fz-ops", calls[op])
    assert w.verify().ok


@FUZZ
@given(
    wid=window_ids,
    config=st.dictionaries(
        st.sampled_from(["max_tokens", "max_items", "compaction_threshold", "default_strategy", "ttl_seconds"]),
        anything,
        max_size=3,
    ),
)
def test_window_with_arbitrary_ids_and_config(store, r, prefix, wid, config):
    keys_before = set(r.scan_iter(match=f"{prefix}:*", count=10_000))
    try:
        w = store.window(wid, **config)
    except cs.ContextStoreError:
        assert set(r.scan_iter(match=f"{prefix}:*", count=10_000)) == keys_before
        return
    assert w.verify().ok
    assert all(
        b"{" + wid.encode() + b"}" in k for k in set(r.scan_iter(match=f"{prefix}:*", count=10_000)) - keys_before
    )
    w.delete()


@pytest.mark.parametrize("bad", ["a{b}", "}", "{", "ü", "x*", "a b", "", "a" * 201])
def test_window_ids_that_would_break_hash_tags_are_refused(store, bad):
    with pytest.raises(cs.InvalidWindowIdError):
        store.window(bad)
