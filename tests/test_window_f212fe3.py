"""A window written by f212fe3 (the layout before the shard-lean reads: its ``:attrs`` values
carry no chat letters, its ``:meta`` no turn fields) reads the same with this version, builds the
same prompts and messages from a cache and from the facts, replays the requests it recorded, and
stays true under every kind of write. ``tests/data/window_f212fe3.json`` is that version's own
output (``tests/data/write_window_fixture.py`` run with f212fe3 on the path)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

import contextstore as cs
from contextstore.core.facts import stored_letters

from support import (
    as_plain,
    check_invariants,
    compact_and_copy_a_fixture_window,
    edit_a_fixture_window,
    key,
    load_window_keys,
    window_fixture,
)

FIXTURE = window_fixture("window_f212fe3")
BUDGET = cs.BuildOptions(max_tokens=100, reserve_for_response=0)


def _loaded(store: Any, r: redis.Redis, prefix: str, wid: str = "w") -> Any:
    load_window_keys(r, FIXTURE, prefix, wid)
    return store.window(wid)


def test_the_fixture_is_a_window_without_letters(r, prefix):
    """What makes this fixture worth keeping: its items have no letters (a build cannot choose
    from its facts alone) and the version that wrote it recorded a caller's request."""
    attrs = FIXTURE["keys"]["attrs"]["value"]
    assert all(stored_letters(v) == "" for v in attrs.values()), attrs
    assert "add:fixture-add" in FIXTURE["keys"]["replies"]["value"]
    assert FIXTURE["written_by"] == "f212fe3" and FIXTURE["summaries"] == ["ctx-3.1"]


def test_a_window_written_by_f212fe3_reads_the_same(store, r, prefix):
    w = _loaded(store, r, prefix)
    assert as_plain(w.items()) == FIXTURE["items"]
    assert [i.id for i in w.ordered_items()] == FIXTURE["ordered_ids"]
    assert w.build(cs.BuildOptions(max_tokens=600, reserve_for_response=0)) == FIXTURE["build"]
    assert w.build(BUDGET) == FIXTURE["build_budget"]
    for fmt, messages in FIXTURE["messages"].items():
        assert as_plain(w.build_messages(BUDGET, format=fmt)) == messages, fmt
    stats = as_plain(w.stats())
    assert {k: stats[k] for k in FIXTURE["stats"]} == FIXTURE["stats"]
    (summary,) = FIXTURE["summaries"]
    assert as_plain(w.archived(summary)) == FIXTURE["archived"][summary]
    check_invariants(r, prefix, "w")


def test_a_stateless_worker_builds_it_as_f212fe3_did(make_store, r, prefix):
    """No letters: a build with a budget of its own cannot choose from the facts; it reads the
    bodies too and gives what f212fe3 gave."""
    w = _loaded(make_store(item_cache_bytes=0), r, prefix)
    for fmt, messages in FIXTURE["messages"].items():
        assert as_plain(w.build_messages(BUDGET, format=fmt)) == messages, fmt
    assert w.build(BUDGET) == FIXTURE["build_budget"]


def test_a_request_f212fe3_recorded_is_not_applied_twice(store, r, prefix):
    """Its record is in f212fe3's format (its arguments laid out otherwise, its reply another
    shape): a retry that crossed the upgrade gets a typed error and stores nothing."""
    w = _loaded(store, r, prefix)
    with pytest.raises(cs.ReplayUnavailableError, match="applied once already") as err:
        w.add("Thanks!", type="user_message", role="user", request_id="fixture-add")
    assert err.value.request_id == "add:fixture-add"
    assert w.stats().total_items == FIXTURE["stats"]["total_items"]
    assert r.hlen(key(prefix, "w", "items")) == len(FIXTURE["items"])
    assert w.add("Thanks!", type="user_message", role="user", request_id="fixture-add-2").id == "ctx-18"
    assert w.add("Thanks!", type="user_message", role="user", request_id="fixture-add-2").id == "ctx-18"


def test_every_write_keeps_an_f212fe3_window_true(store, r, prefix):
    w = _loaded(store, r, prefix)
    edit_a_fixture_window(w, FIXTURE, pin="ctx-8", unpin="ctx-1", reprioritise="ctx-6")
    check_invariants(r, prefix, "w")
    w.compact("clear_tool_results", target_percent=1.0)
    cleared = {i.id: i.metadata["context_cleared"] for i in w.items() if "context_cleared" in (i.metadata or {})}
    number = w.stats().compaction_count  # this version's marks say which compaction cleared them
    assert cleared == {
        "ctx-10": {"tokens": 72},
        "ctx-19": {"tokens": 61, "compaction": number},
    }  # f212fe3's, and one now
    w.remove("answer-1")
    w.replace([{"content": "Thanks a lot!", "role": "user"}], last=1)
    popped = w.pop(1)
    assert popped[0].content == "Thanks a lot!"
    compact_and_copy_a_fixture_window(store, w, r, prefix, "w")


def test_written_to_by_this_version_it_builds_the_same_from_the_facts(redis_url, r, prefix):
    """Items this version adds carry their letters, the old ones still none: a stateless build
    and a cached one agree, and a turn runs on the old window."""
    with (
        cs.ContextStore.from_url(redis_url, prefix=prefix) as cached,
        cs.ContextStore.from_url(redis_url, prefix=prefix, item_cache_bytes=0) as stateless,
    ):
        w = _loaded(cached, r, prefix)
        with w.turn(input="And split on commas?") as turn:
            turn.add("Use s.split(',').", type="assistant_message", role="assistant")
        attrs = r.hgetall(key(prefix, "w", "attrs"))
        assert sum(stored_letters(v.decode()) != "" for v in attrs.values()) == 2  # the turn's two items
        for fmt in ("openai", "anthropic"):
            want = cached.window("w").build_messages(BUDGET, format=fmt)
            assert stateless.window("w").build_messages(BUDGET, format=fmt) == want
        check_invariants(r, prefix, "w")
