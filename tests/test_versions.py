"""Conditional writes (§17): every build and ``stats()`` report the window's ``version``; an add,
add_many or replace given ``expect_version`` writes only while the window is still at it, else
raises ``VersionConflictError`` with nothing changed. What moves the version: another writer's
items (adds), removals by hand (remove, pop, clear, restore) and a new lifetime (delete); not
what rewrites old context in the background (compaction, pins, priorities)."""

from __future__ import annotations

import pytest

import contextstore as cs

from support import dump_window, key

OPTS = cs.BuildOptions(reserve_for_response=0)


def test_a_build_version_lets_one_writer_through_and_refuses_the_one_that_read_before_it(store, r, prefix):
    w = store.window("v", max_tokens=10_000)
    w.add("question?", role="user")
    seen = w.build_messages_structured(OPTS).version
    assert seen and seen == w.build_structured(OPTS).version == w.stats().version
    w.add("answer one", role="assistant", expect_version=seen)  # the first turn to answer wins
    before = dump_window(r, prefix, "v")
    with pytest.raises(cs.VersionConflictError) as info:
        w.add_many([{"content": "answer two", "role": "assistant"}], expect_version=seen)
    assert info.value.current_version == w.stats().version != seen
    assert dump_window(r, prefix, "v") == before  # nothing written, not even an event
    with pytest.raises(cs.VersionConflictError):
        w.replace([{"content": "all new", "role": "user"}], expect_version=seen)
    assert dump_window(r, prefix, "v") == before
    assert w.replace([{"content": "all new", "role": "user"}], expect_version=w.stats().version) == 1


@pytest.mark.parametrize(
    "change, moves",
    [
        (lambda w: w.add("more"), True),
        (lambda w: w.remove("ctx-1"), True),
        (lambda w: w.pop(), True),
        (lambda w: w.clear(), True),
        (lambda w: w.restore(w.snapshot()), True),
        (lambda w: w.pin("ctx-1"), False),
        (lambda w: w.update_priority("ctx-1", 90), False),
        (lambda w: w.compact(target_percent=0), False),
        (lambda w: w.build(OPTS), False),
    ],
)
def test_what_moves_the_version(store, change, moves):
    w = store.window("moves", max_tokens=10_000)
    w.add_many(["one", "two", "three"])
    version = w.stats().version
    change(w)
    assert (w.stats().version != version) is moves


def test_a_lifetime_begun_in_the_same_millisecond_has_a_new_version(store, r, prefix):
    """The version names a lifetime by when it began in µs: a window deleted and made again with
    as many adds within one millisecond (``created_ms`` the same) is at another version, so a
    turn that read the old one cannot write into the new one."""
    w = store.window("again")
    w.add("x")
    meta = key(prefix, "again", "meta")
    old, began = w.stats().version, r.hget(meta, "created_ms")
    w.delete()
    w = store.window("again")
    w.add("x")
    r.hset(meta, "created_ms", began)  # as if both lifetimes began in the same millisecond
    assert w.stats().version != old
    with pytest.raises(cs.VersionConflictError):
        w.add("a late answer", expect_version=old)


def test_a_new_lifetime_has_a_new_version_and_a_missing_window_has_none(store):
    w = store.window("life")
    w.add("x")
    old = w.stats().version
    w.delete()
    assert w.stats().version == "" and store.handle("missing").stats().version == ""
    w = store.window("life")
    w.add("x")
    assert w.stats().version != old
    fresh = store.handle("never")
    fresh.add("first", expect_version="")  # "": only while the window does not exist
    with pytest.raises(cs.VersionConflictError):
        fresh.add("again", expect_version="")


@pytest.mark.parametrize("bad", ["v1", "1..2", 12, "1 2", "x" * 3])
def test_a_malformed_expected_version_is_refused_before_anything(store, r, prefix, bad):
    w = store.window("bad")
    w.add("x")
    before = dump_window(r, prefix, "bad")
    with pytest.raises(cs.InvalidOptionsError):
        w.add("y", expect_version=bad)
    assert dump_window(r, prefix, "bad") == before
