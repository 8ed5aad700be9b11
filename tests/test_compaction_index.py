"""The server-side compaction planner walks the indexes (:fifo, :order by priority bucket)
instead of reading every item. These tests compare what it removes or clears with a plain
reference written from the documented rules (whole units, pins, keep_recent, the strategies' orders) on
random windows large enough to cross every page boundary of the walks."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

import contextstore as cs
from contextstore.core.layout import CLEARED_KEY, MESSAGE_OVERHEAD, REPLY_PRIMING
from contextstore.plans import compaction as compaction_plans
from contextstore.plans import items as item_plans
from contextstore.types import HISTORY_TYPES

PLAIN = ["user_message", "assistant_message", "retrieved_document", "code", "instruction", "tool_result", "custom"]


@dataclass
class Unit:
    ids: list[str]
    tokens: int
    seq: int  # oldest member
    newest: int
    priority: int  # highest member
    pinned: bool
    conversation: bool


def units_of(items: list[cs.ContextItem], cleared: dict[str, int]) -> dict[str, Unit]:
    """Units keyed by group or id, from the window's items (arrival order)."""
    out: dict[str, Unit] = {}
    for it in items:
        key = f"g{it.group}" if it.group else f"i{it.id}"
        tokens = cleared.get(it.id, it.token_count)
        u = out.get(key)
        if u is None:
            conv = bool(it.group) or it.type in HISTORY_TYPES
            out[key] = Unit([it.id], tokens, it.seq, it.seq, it.priority, it.pinned, conv)
        else:
            u.ids.append(it.id)
            u.tokens += tokens
            u.seq, u.newest = min(u.seq, it.seq), max(u.newest, it.seq)
            u.priority, u.pinned = max(u.priority, it.priority), u.pinned or it.pinned
    return out


def kept_keys(units: dict[str, Unit], keep_recent: int) -> set[str]:
    talk = sorted((k for k, u in units.items() if u.conversation), key=lambda k: -units[k].newest)
    return set(talk[:keep_recent])


def reference(
    items: list[cs.ContextItem],
    strategy: str,
    target: int,
    keep_recent: int,
    placeholder: int,
    clear_at_least: int,
    fallback: bool,
) -> tuple[set[str], set[str]]:
    """(ids removed, ids cleared) by the contract's rules, planned from scratch: down to
    ``target``, freeing at least ``clear_at_least``."""
    tokens = sum(it.token_count for it in items)
    units = units_of(items, {})
    kept = kept_keys(units, keep_recent)
    cleared: dict[str, int] = {}
    got = 0
    if strategy == "clear_tool_results":
        in_kept = {i for k in kept for i in units[k].ids}
        for it in sorted(items, key=lambda it: it.seq):
            if tokens - got <= target and got >= clear_at_least:
                break
            fresh = CLEARED_KEY not in (it.metadata or {})
            clearable = it.type == "tool_result" and fresh and not it.pinned and it.id not in in_kept
            if clearable and it.token_count > placeholder:
                cleared[it.id], got = placeholder, got + it.token_count - placeholder
        if got < clear_at_least:
            cleared, got = {}, 0
        if not fallback:
            return set(), set(cleared)
        strategy = "remove_low_priority"
        units = units_of(items, cleared)
    order = sorted(
        (u for k, u in units.items() if not u.pinned and k not in kept),
        key=(lambda u: u.seq) if strategy == "remove_oldest" else (lambda u: (u.priority, u.seq)),
    )
    removed: set[str] = set()
    for u in order:
        if tokens - got <= target and got >= clear_at_least:
            break
        removed |= set(u.ids)
        got += u.tokens
    return removed, set(cleared) - removed


def fill(w: cs.ContextWindow, rng: random.Random, n: int, priorities: list[int]) -> None:
    """About n items: plain ones of every kind, pinned ones, and tool-call turns (a call and
    1-3 results, a group) with priorities from ``priorities``."""
    batch: list[dict[str, object]] = []
    calls = 0
    while len(batch) < n:
        if rng.random() < 0.15:
            ids = [f"call{calls + k}" for k in range(rng.randint(1, 3))]
            calls += len(ids)
            tool_calls = [{"id": c, "type": "function", "function": {"name": "t", "arguments": "{}"}} for c in ids]
            batch.append(
                {
                    "content": "",
                    "type": "assistant_message",
                    "role": "assistant",
                    "priority": rng.choice(priorities),
                    "metadata": {"tool_calls": tool_calls},
                    "token_count": rng.randint(1, 30),
                }
            )
            for c in ids:
                batch.append(
                    {
                        "content": "out",
                        "type": "tool_result",
                        "role": "tool",
                        "priority": rng.choice(priorities),
                        "metadata": {"tool_call_id": c},
                        "token_count": rng.randint(1, 60),
                    }
                )
        else:
            kind = rng.choice(PLAIN)
            batch.append(
                {
                    "content": f"item {len(batch)}",
                    "type": kind,
                    "role": {"user_message": "user", "assistant_message": "assistant"}.get(kind),
                    "priority": rng.choice(priorities),
                    "pinned": rng.random() < 0.08,
                    "token_count": rng.randint(1, 60),
                }
            )
    for start in range(0, len(batch), 500):
        w.add_many(batch[start : start + 500])


def outcome(before: list[cs.ContextItem], after: list[cs.ContextItem]) -> tuple[set[str], set[str]]:
    """(ids removed, ids cleared) between two listings of a window."""
    now = {it.id: it for it in after}
    cleared = {it.id for it in before if it.id in now and now[it.id].content != it.content}
    return {it.id for it in before} - set(now), cleared


CASES = [
    # (seed (odd: parts of 37 items), items, priorities, keep_recent, strategy, target percent,
    # clear_at_least in percent of the tokens)
    (1, 40, [50], 0, "remove_oldest", 50, 0),
    (2, 60, [0, 50, 100], 2, "remove_low_priority", 30, 0),
    (3, 400, [50], 3, "remove_low_priority", 20, 0),
    (4, 400, [10, 50], 1, "remove_oldest", 10, 0),
    (5, 700, list(range(0, 101, 25)), 4, "remove_low_priority", 5, 0),
    (6, 300, [40, 60], 2, "clear_tool_results", 30, 0),
    (7, 500, list(range(101)), 0, "remove_low_priority", 0, 0),
    (8, 900, [50, 51], 5, "remove_oldest", 0, 0),
    (20, 900, [50], 2, "remove_low_priority", 0, 0),  # buckets of more than one page (128 ids)
    (10, 1500, [50], 1, "clear_tool_results", 0, 0),
    # a minimum gain larger than the way down to the target (in parts: earlier parts count)
    (11, 600, [40, 60], 2, "clear_tool_results", 95, 10),
    (12, 300, [40, 60], 2, "clear_tool_results", 95, 10),
    (13, 400, [10, 50], 1, "remove_oldest", 90, 25),
    (14, 400, [0, 50, 100], 2, "remove_low_priority", 80, 30),
]


@pytest.mark.parametrize(("seed", "n", "priorities", "keep_recent", "strategy", "target", "least"), CASES)
def test_compact_removes_what_the_reference_removes(
    redis_url, prefix, monkeypatch, seed, n, priorities, keep_recent, strategy, target, least
):
    if seed % 2:  # many parts, units across parts
        monkeypatch.setattr(compaction_plans, "COMPACT_CHUNK", 37)
    rng = random.Random(seed)
    with cs.ContextStore.from_url(redis_url, prefix=prefix, item_limit=5000) as store:
        w = store.window(f"ix{seed}", max_tokens=10**7, max_items=5000, keep_recent=keep_recent)
        fill(w, rng, n, priorities)
        before = w.items()
        total = sum(it.token_count for it in before)
        w.configure(max_tokens=total, clear_at_least=total * least // 100)
        expected = reference(
            before,
            strategy,
            total * target // 100,
            keep_recent,
            store._settings.placeholder_tokens,
            total * least // 100,
            False,
        )
        assert expected[0] or expected[1], "the case must make the compaction do something"
        if least:
            gone = sum(it.token_count for it in before if it.id in expected[0] | expected[1])
            assert gone > total * (100 - target) // 100 * 1.5, "the case's minimum must be what stops it"
        w.compact(strategy, target)
        assert outcome(before, w.items()) == expected
        assert w.verify().problems == []
        marks = {it.metadata["context_cleared"]["compaction"] for it in w.items() if it.id in expected[1]}
        assert w.stats().compaction_count == 1 and marks == ({1} if expected[1] else set())  # parts are one


@pytest.mark.parametrize("first", [False, True], ids=["inside", "first"])
@pytest.mark.parametrize("strategy", ["remove_oldest", "remove_low_priority", "clear_tool_results"])
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_an_add_over_the_threshold_compacts_as_the_reference_says(
    redis_url, prefix, monkeypatch, seed, strategy, first
):
    """Inside the add's script, or (``first``: a compaction of more than COMPACT_CHUNK items)
    in parts before the add goes in: the same items go."""
    monkeypatch.setattr(item_plans, "COMPACT_CHUNK", 7 if first else 10**5)
    monkeypatch.setattr(compaction_plans, "COMPACT_CHUNK", 7)
    rng = random.Random(seed)
    with cs.ContextStore.from_url(redis_url, prefix=prefix, item_limit=5000) as store:
        w = store.window(f"ia{seed}", max_tokens=10**7, max_items=5000, keep_recent=seed % 4, default_strategy=strategy)
        fill(w, rng, 350, [20, 50, 80])
        before = w.items()
        total = sum(it.token_count for it in before)
        least = [0, total // 4, seed][seed % 3]  # 13: more than the way down to the target
        w.configure(max_tokens=total + 10, compaction_threshold=95, clear_at_least=least)
        expected = reference(
            before,
            strategy,
            (total + 10) * 80 // 100 - MESSAGE_OVERHEAD * len(before) - REPLY_PRIMING,  # a build's cost counted
            seed % 4,
            store._settings.placeholder_tokens,
            least,
            True,
        )
        since = list(w.events("0"))[-1].id
        new = w.add("one more", token_count=30)
        removed, cleared = outcome(before, [it for it in w.items() if it.id != new.id])
        assert (removed, cleared) == expected
        assert len(removed) + len(cleared) > 7, "the compaction must take more than one part"
        kinds = [e.kind for e in w.events(since) if e.kind != "usage_warning"]  # (13: back above 75%)
        assert kinds[-1] == "item_added"  # after the compaction, in both ways
        assert (kinds.count("compacted") > 1) == first  # parts, or one compaction inside the add
        assert w.verify().problems == []


def test_a_big_compaction_keeps_the_arrival_list_in_order(redis_url, prefix, monkeypatch):
    """Removing many scattered items (9000, in one script) blanks them in :fifo and drops the
    blanks: what stays keeps its arrival order."""
    monkeypatch.setattr(compaction_plans, "COMPACT_CHUNK", 10**5)
    with cs.ContextStore.from_url(redis_url, prefix=prefix, item_limit=20000) as store:
        w = store.window("scatter", max_tokens=10**6, max_items=20000)
        for start in range(0, 18000, 2000):
            w.add_many(
                [
                    {"content": f"n{i}", "priority": (i * 37) % 101, "token_count": 10}
                    for i in range(start, start + 2000)
                ]
            )
        w.configure(max_tokens=180000)
        w.compact("remove_low_priority", 50)
        seqs = [it.seq for it in w.items()]
        assert seqs == sorted(seqs) and len(seqs) == 9000
        assert all(it.priority >= 50 for it in w.items())
        assert w.verify().problems == []


def test_an_add_that_cannot_fit_after_compacting_fails_without_compacting(redis_url, prefix, monkeypatch):
    """The add asks to compact first only when it is sure to fit then; otherwise it fails as one
    script does: FULL, with the window unchanged."""
    monkeypatch.setattr(item_plans, "COMPACT_CHUNK", 3)
    monkeypatch.setattr(compaction_plans, "COMPACT_CHUNK", 3)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("nofit", max_tokens=1000, compaction_threshold=100, keep_recent=0)
        w.add("rules", token_count=700, pinned=True)
        for k in range(25):  # each counted with what a build adds to it (MESSAGE_OVERHEAD)
            w.add(f"note {k}", token_count=6)
        w.configure(compaction_threshold=90)
        before, events = w.items(), list(w.events("0"))
        with pytest.raises(cs.ContextWindowFullError):
            w.add("too big once the notes are gone", token_count=350)
        assert w.items() == before and list(w.events("0")) == events
        w.add("fits once the notes are gone", token_count=250)  # 700 + 250 <= 1000: compacts first
        after = w.items()
        assert after[-1].content == "fits once the notes are gone" and w.stats().current_tokens <= 1000
        assert len(before) - len(after) + 1 > 3  # more than one part of 3 items went
        assert [e.kind for e in w.events(events[-1].id)].count("compacted") > 1


def test_an_add_at_max_items_over_the_threshold_compacts_first(redis_url, prefix, monkeypatch):
    """At max_items too: the eviction the add planned goes with the rest of its plan; the parts
    free the room, and the add goes in."""
    monkeypatch.setattr(item_plans, "COMPACT_CHUNK", 3)
    monkeypatch.setattr(compaction_plans, "COMPACT_CHUNK", 3)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("full", max_tokens=420, max_items=40, compaction_threshold=100, keep_recent=0)
        for k in range(40):
            w.add(f"note {k}", token_count=10, priority=k % 3)
        w.configure(compaction_threshold=90)
        since = list(w.events("0"))[-1].id
        w.add("the newest", token_count=10)
        kinds = [e.kind for e in w.events(since)]
        last_part = len(kinds) - 1 - kinds[::-1].index("compacted")
        assert kinds.count("compacted") > 1 and "item_added" in kinds[last_part:]
        assert w.items()[-1].content == "the newest"
        counted = w.stats().current_tokens + MESSAGE_OVERHEAD * (w.stats().total_items - 1) + REPLY_PRIMING
        assert counted <= 420 * 75 // 100 + 10 + MESSAGE_OVERHEAD
        assert w.verify().problems == []
