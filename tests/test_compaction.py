"""Compaction: the strategies that need helpers outside Redis (SUMMARIZE, SELECTIVE), the
target, and what a compaction leaves of the built prompt."""

from __future__ import annotations

import asyncio

import pytest

import contextstore as cs

from support import check_invariants, events


def summarize(items):
    return "summary: " + "; ".join(i.content[:10] for i in items)


class Scorer:
    def __init__(self):
        self.queries = []

    def score(self, query, items):
        self.queries.append(query)
        return [1.0 if "keep" in i.content else 0.0 for i in items]


def _fill(w):
    for i in range(10):
        w.add(f"note {i} " + "lorem ipsum dolor sit amet " * 8, token_count=100, priority=i * 10)


def test_summarize_replaces_low_priority_items(make_store, r, prefix):
    store = make_store(summarizer=summarize)
    w = store.window("c-sum", max_tokens=2000, compaction_threshold=100)
    _fill(w)
    w.add("pinned", token_count=100, pinned=True, priority=0)
    freed = w.compact("summarize", target_percent=40)
    items = w.items()
    summary = [i for i in items if i.metadata and "summary_of" in i.metadata]
    assert len(summary) == 1
    s = summary[0]
    assert s.type is cs.ItemType.WORKING_MEMORY and s.content.startswith("summary: note 0")
    # 1100 tokens, target 40% of 2000 = 800: the three lowest-priority unpinned items go
    assert s.metadata["summary_of"] == ["ctx-1", "ctx-2", "ctx-3"]
    assert freed == 300 - s.token_count
    assert "pinned" in [i.content for i in items]
    st = w.stats()
    assert st.compaction_count == 1 and st.total_tokens_freed == freed
    ev = [e for e in events(r, prefix, "c-sum") if e["event"] in ("compacted", "item_removed")]
    assert [e["reason"] for e in ev if e["event"] == "item_removed"] == ["compaction"] * 3
    assert ev[-1]["strategy"] == "summarize"
    check_invariants(r, prefix, "c-sum")


class Budgeted:
    """A summarizer that says how long its summary of the items may be (60 tokens)."""

    def summarize(self, items):
        return "in short: " + "word " * 40

    def budget(self, items):
        return 60


@pytest.mark.parametrize("strategy", ["summarize", "selective", "summarize with a budget"])
@pytest.mark.parametrize("least", [0, 450])
def test_a_compaction_outside_redis_frees_at_least_clear_at_least(make_store, strategy, least):
    """Ten notes of 100 tokens, 1,000 of 2,000 held and the target 50 tokens below: one note would
    do, clear_at_least=450 makes it five (with a summary of up to 60 tokens counted against
    what goes: two, and six)."""
    helper = Budgeted() if strategy.endswith("budget") else summarize
    store = make_store(summarizer=helper, relevance_scorer=Scorer())
    w = store.window("c-least", max_tokens=2000, compaction_threshold=100, clear_at_least=least)
    _fill(w)
    before = {i.id: i.token_count for i in w.items()}
    freed = w.compact(strategy.split()[0], target_percent=47.5)
    gone = sum(tokens for i, tokens in before.items() if i not in {it.id for it in w.items()})
    summaries = [i for i in w.items() if i.id not in before]
    assert len(summaries) == (strategy != "selective")
    assert freed == gone - sum(s.token_count for s in summaries)
    expected = {0: 100, 450: 500}[least] + (100 if strategy.endswith("budget") else 0)
    assert gone == expected


def test_summarize_object_with_method_and_async_helper(make_store, api):
    class Summarizer:
        def summarize(self, items):
            return "short"

    async def async_summarize(items):
        await asyncio.sleep(0)
        return "async short"

    helper = async_summarize if api == "async" else Summarizer()
    w = make_store(summarizer=helper).window("c-sum2", max_tokens=1000, compaction_threshold=100)
    _fill(w)
    assert w.compact("summarize", target_percent=50) > 0
    assert any(i.content in ("short", "async short") for i in w.items())


def test_async_helper_on_sync_store_is_a_clear_error(redis_url, prefix):
    async def helper(items):
        return "x"

    with cs.ContextStore.from_url(redis_url, prefix=prefix, summarizer=helper) as s:
        w = s.window("c-async-on-sync", max_tokens=1100, compaction_threshold=100)  # 1000 and a build's overhead
        _fill(w)
        with pytest.raises(cs.InvalidOptionsError):
            w.compact("summarize", target_percent=50)
        assert w.stats().total_items == 10


def test_summary_not_smaller_changes_nothing(make_store, r, prefix):
    w = make_store(summarizer=lambda items: "word " * 2000).window("c-sum3", max_tokens=2000, compaction_threshold=100)
    _fill(w)
    assert w.compact("summarize", target_percent=40) == 0
    assert w.stats().total_items == 10 and w.stats().compaction_count == 0


def test_summarizer_error_is_wrapped_and_changes_nothing(make_store):
    def broken(items):
        raise RuntimeError("LLM down")

    w = make_store(summarizer=broken).window("c-sum4", max_tokens=2000, compaction_threshold=100)
    _fill(w)
    with pytest.raises(cs.ContextStoreError, match="LLM down"):
        w.compact("summarize", target_percent=40)
    assert w.stats().total_items == 10


def test_selective_removes_least_relevant(make_store, r, prefix):
    scorer = Scorer()
    w = make_store(relevance_scorer=scorer).window("c-sel", max_tokens=1000, compaction_threshold=100)
    w.add("keep: the deploy plan", token_count=300, priority=0)
    w.add("irrelevant chatter", token_count=300, priority=100)
    w.add("what about the deploy?", type="user_message", role="user", token_count=300, priority=100)
    assert w.compact("selective", target_percent=70) == 300
    assert [i.content for i in w.items()] == ["keep: the deploy plan", "what about the deploy?"]
    assert scorer.queries == ["what about the deploy?"]  # default query: the latest user message
    w.add("more chatter", token_count=300)
    w.compact("selective", target_percent=70, query="deploy")
    assert scorer.queries[-1] == "deploy"
    check_invariants(r, prefix, "c-sel")


def test_default_strategy_summarize_used_by_compact_but_not_by_add(make_store, r, prefix):
    w = make_store(summarizer=summarize).window("c-default", max_tokens=1000, default_strategy="summarize")
    for i in range(8):
        w.add(f"n{i}", token_count=100, priority=i)
    w.add("trigger", token_count=100)  # auto-compaction inside add runs server-side
    ev = [e for e in events(r, prefix, "c-default") if e["event"] == "compacted"]
    assert ev and ev[0]["strategy"] == "remove_low_priority"
    w.add("more", token_count=100)
    assert w.compact(target_percent=20) > 0  # None: the window's default, summarize
    ev = [e for e in events(r, prefix, "c-default") if e["event"] == "compacted"]
    assert ev[-1]["strategy"] == "summarize"
    check_invariants(r, prefix, "c-default")


def test_commit_refuses_items_changed_meanwhile(make_store, redis_url, r, prefix):
    """The summarizer runs while another worker changes the window: the commit must notice."""
    other_store = cs.ContextStore.from_url(redis_url, prefix=prefix)  # another worker's store
    other = other_store.window("c-race", max_tokens=2000, compaction_threshold=100)
    calls = []

    def racing_summarizer(items):
        calls.append(len(items))
        if len(calls) == 1:
            other.pin(items[0].id)  # meanwhile, another worker pins one of the chosen items
        return "tiny"

    w = make_store(summarizer=racing_summarizer).window("c-race")
    _fill(other)
    freed = w.compact("summarize", target_percent=40)
    assert len(calls) == 2  # the first attempt was refused and decided again
    assert w.get("ctx-1").pinned  # the pinned item survived
    assert freed > 0
    check_invariants(r, prefix, "c-race")
    other_store.close()


@pytest.mark.parametrize("target", [None, 40.0])
def test_a_compaction_at_the_threshold_brings_usage_down_to_the_windows_target(store, target):
    w = store.window(f"target-{target}", max_tokens=2_000, compaction_threshold=85.0, compaction_target=target,
                     default_strategy="remove_oldest")  # fmt: skip
    assert w.snapshot().compaction_target == target
    lows = []
    for i in range(60):
        before = w.stats().compaction_count
        item = w.add(f"message {i} " + "word " * 60, role="user")
        if w.stats().compaction_count > before:
            lows.append((w.stats().current_tokens - item.token_count, w.stats().total_items - 1))
    # the usage a compaction looks at counts what a build adds to each item (MESSAGE_OVERHEAD)
    assert lows and all((low + 4 * items + 3) * 100 / 2_000 <= (target or 70.0) for low, items in lows)
    # not much below: the target is lowered by the overhead of the items before the compaction,
    # so it ends below by at most 4 tokens per item it removed (30 here: 6 points)
    assert max((low + 4 * items + 3) * 100 / 2_000 for low, items in lows) > (target or 70.0) - 8
    assert w.snapshot().compaction_target == target


def test_the_compaction_target_is_a_window_option_like_the_others(store):
    w = store.window("target-opt", max_tokens=2_000)
    assert w.configure(compaction_target=30).compaction_target == 30.0
    assert [e.target for e in w.events(since="0") if e.kind == "configured"] == [30.0]
    assert w.configure(compaction_target=None).compaction_target is None  # back to 15 below the threshold
    for bad in (0, -1, 101, "40", float("nan")):
        with pytest.raises(cs.InvalidOptionsError):
            w.configure(compaction_target=bad)
    assert w.snapshot().compaction_target is None


@pytest.mark.parametrize("strategy", ["remove_oldest", "clear_tool_results", "remove_low_priority", "summarize"])
def test_a_compaction_changes_the_built_messages_only_from_its_first_change_on(make_store, strategy):
    """What a provider's prompt cache keeps: after a compaction, an arrival-order build sends the
    messages before the first item it removed or cleared byte for byte as before, and every item
    it left alone exactly as before; only the removed items go, the cleared ones change and a
    summary comes in where what it replaced began."""
    w = make_store(summarizer=summarize).window(f"cache-{strategy}", max_tokens=50_000)
    w.add("You are terse.", type="system_prompt", pinned=True)
    for turn in range(12):
        call = {"id": f"c{turn}", "type": "function", "function": {"name": "look", "arguments": "{}"}}
        w.add(f"question {turn}: " + "what is there? " * 10, role="user", priority=20 + (turn * 37) % 60)
        w.add_many([
            {"content": "", "role": "assistant", "metadata": {"tool_calls": [call]}},
            {"content": f"result {turn}: " + "rows of data " * 40, "role": "tool",
             "metadata": {"tool_call_id": f"c{turn}"}},
        ])  # fmt: skip
        w.add(f"answer {turn}: " + "it is fine " * 10, role="assistant", priority=20 + (turn * 53) % 60)
    opts = cs.BuildOptions(order="arrival", reserve_for_response=0, max_history_items=1_000)
    before = w.build_messages_structured(opts)
    assert len(before.messages) == len(before.included_item_ids)  # one message an item (OpenAI's)
    usage = w.stats().usage_percent
    assert w.compact(strategy, target_percent=usage * 0.6) > 0
    after = w.build_messages_structured(opts)
    was = dict(zip(before.included_item_ids, before.messages, strict=True))
    now = dict(zip(after.included_item_ids, after.messages, strict=True))
    changed = [i for i in before.included_item_ids if i not in now or now[i] != was[i]]
    assert changed  # the compaction did something to what is sent
    first = before.included_item_ids.index(changed[0])
    assert after.messages[:first] == before.messages[:first]  # the cached prefix survives whole
    new = [i for i in after.included_item_ids if i not in was]  # a summary
    assert (strategy == "summarize") == bool(new) and all(after.included_item_ids.index(i) == first for i in new)
    assert [i for i in after.included_item_ids if now[i] != was.get(i) and i not in new] == [
        i for i in changed if i in now
    ]
    cleared = [i for i in changed if i in now]
    assert (strategy == "clear_tool_results") == bool(cleared)  # only clearing rewrites an item
