"""A conditional add (``expect_version``, a turn's write) that must compact more than one part's
worth of items compacts inside its own script: it applies all of its compaction and itself, or
nothing. Before, it asked the client to compact first in parts, so another writer's add between
the parts made it fail with ``VersionConflictError`` after hundreds of items were gone."""

from __future__ import annotations

from typing import Any

import pytest

import contextstore as cs
from contextstore.plans import items as item_plans
from contextstore.plans.compaction import COMPACT_CHUNK

from support import command_calls, dump_window

# 19,543 of 23,000 tokens counted (each item 6 and the 4 a build adds): an add of 2,000 compacts ~345 items
FILL, EACH, BIG = 1954, 6, 2000


def _filled(store: Any) -> Any:
    w = store.window("cond", max_tokens=23_000, max_items=5000)
    for i in range(0, FILL, 500):
        w.add_many([{"content": f"m{j}", "token_count": EACH} for j in range(i, min(i + 500, FILL))])
    return w


@pytest.fixture
def big_store(redis_url, prefix):
    with cs.ContextStore.from_url(redis_url, prefix=prefix, item_limit=5000) as store:
        yield store


def _step_with_a_writer_between(store: Any, w: Any, other: Any, version: str) -> Any:
    """Drive the add's plan call by call, as the store does, letting ``other`` add between its
    first call and the next (where the parts of a deferred compaction would run)."""
    plan = item_plans.add(store._settings, w._state, [("big", {"token_count": BIG})], expect_version=version)
    request, first = next(plan), True
    try:
        while True:
            reply = store._execute(request)
            if first:
                other.add("another worker's message", token_count=EACH)
                first = False
            request = plan.send(reply)
    except StopIteration as done:
        return done.value


def test_a_conditional_add_compacts_in_its_own_script_or_writes_nothing(big_store, redis_url, prefix, r):
    w = _filled(big_store)
    version = w.stats().version
    with cs.ContextStore.from_url(redis_url, prefix=prefix, item_limit=5000) as other_store:
        other = other_store.handle("cond")
        got = _step_with_a_writer_between(big_store, w, other, version)
    # the add ran whole before the other worker's: compacted and added in its one script
    assert got.items[0].content == "big"
    kinds = [(e.kind, getattr(e, "item_id", "")) for e in w.events(since="0")][-400:]
    first_removal = next(i for i, (k, _) in enumerate(kinds) if k == "item_removed")
    big_added = kinds.index(("item_added", got.items[0].id))
    other_added = max(i for i, (k, _) in enumerate(kinds) if k == "item_added")
    assert first_removal < big_added < other_added  # compaction, the add, then the other worker's
    assert all(k != "item_removed" for k, _ in kinds[big_added:])
    stats = w.stats()
    assert stats.compaction_count == 1 and stats.current_tokens <= 23_000 * 0.70 + BIG + EACH
    assert w.verify().ok


def test_a_conditional_add_that_fails_changes_nothing(big_store, r, prefix):
    w = _filled(big_store)
    stale = w.stats().version
    w.add("moves the version on", token_count=EACH)
    before = dump_window(r, prefix, "cond")
    with pytest.raises(cs.VersionConflictError):
        w.add("big", token_count=BIG, expect_version=stale)
    assert dump_window(r, prefix, "cond") == before


def test_an_unconditional_add_still_compacts_first_in_parts(big_store, r):
    """Without a condition an add that would act on more than COMPACT_CHUNK items compacts
    first, in parts, so no single script runs long (docs/reliability.md, 'Script time')."""
    w = _filled(big_store)
    r.config_resetstat()
    w.add("big", token_count=BIG)
    scripts = command_calls(r, "fcall") + command_calls(r, "evalsha")
    assert scripts >= 3  # a refused add, at least one compact.lua part, the add
    assert w.stats().compaction_count >= 1 and w.verify().ok
    assert COMPACT_CHUNK < 345
