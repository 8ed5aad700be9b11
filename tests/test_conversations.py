"""Conversations: tool calls stored as OpenAI spells them, groups kept or dropped whole by
eviction, every compaction strategy and every build, chat messages for OpenAI and Anthropic,
clearing old tool results, keep_recent, and plan_compaction as an exact dry run."""

from __future__ import annotations

import itertools
import json
import re

import pytest

import contextstore as cs

from chat_rules import check_anthropic, check_openai, groups_whole
from support import dump_window, events, key


def call(call_id: str, name: str = "lookup", **arguments: object) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def turn(w, n: int, results: int = 1, size: int = 30, name: str = "lookup") -> None:
    """One tool-using turn: a question, a call with ``results`` parallel calls, their results,
    an answer."""
    calls = [call(f"call_{n}_{k}", name, q=n) for k in range(results)]
    w.add_many(
        [
            {"content": f"question {n}?", "type": "user_message", "role": "user"},
            {"content": "", "type": "assistant_message", "role": "assistant", "metadata": {"tool_calls": calls}},
            *(
                {
                    "content": f"result {n}.{k} " + "data " * size,
                    "type": "tool_result",
                    "role": "tool",
                    "metadata": {"tool_call_id": c["id"]},
                }
                for k, c in enumerate(calls)
            ),
            {"content": f"answer {n}.", "type": "assistant_message", "role": "assistant"},
        ]
    )


# -- tool calls ------------------------------------------------------------------------------


def test_a_tool_call_and_its_results_share_the_call_ids_group(store):
    w = store.window("tc-group")
    turn(w, 1, results=2)
    items = w.items()
    assert [i.group for i in items] == [None, "call_1_0", "call_1_0", "call_1_0", None]
    assert items[1].content == "" and items[1].metadata["tool_calls"][1]["id"] == "call_1_1"
    assert items[1].token_count > 1  # the calls themselves are counted
    # a result added later, alone, joins its call's group through the window's call index
    w.add_many(
        [{"content": "", "type": "assistant_message", "role": "assistant", "metadata": {"tool_calls": [call("late")]}}]
    )
    r = w.add("later result", type="tool_result", role="tool", metadata={"tool_call_id": "late"})
    assert r.group == "late" and w.verify().ok


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (
            [{"content": "x", "type": "tool_result", "role": "tool", "metadata": {"tool_call_id": "nope"}}],
            "not in the window",
        ),
        ([{"content": "x", "type": "tool_result", "role": "tool"}], "needs metadata['tool_call_id']"),
        ([{"content": "", "type": "user_message"}], "empty or blank"),
        ([{"content": "", "type": "assistant_message", "metadata": {"tool_calls": []}}], "non-empty list"),
        (
            [{"content": "", "type": "assistant_message", "metadata": {"tool_calls": [{"id": "a"}]}}],
            '"type": "function"',
        ),
        (
            [{"content": "", "type": "assistant_message", "metadata": {"tool_calls": [call("c1"), call("c1")]}}],
            "repeat",
        ),
        (
            [
                {"content": "", "type": "assistant_message", "metadata": {"tool_calls": [call("c9")]}},
                {
                    "content": "r",
                    "type": "tool_result",
                    "role": "tool",
                    "group": "other",
                    "metadata": {"tool_call_id": "c9"},
                },
            ],
            "group",
        ),
        (
            [{"content": "", "type": "assistant_message", "metadata": {"tool_calls": [call("seen")]}}],
            "already in the window",
        ),
        ([{"content": "x", "metadata": {"context_cleared": {"tokens": 3}}}], "set by the store"),
        ([{"content": "x", "group": "has space"}], "without whitespace"),
    ],
)
def test_bad_tool_calls_are_refused_and_change_nothing(store, r, prefix, items, message):
    w = store.window("tc-bad")
    w.add_many(
        [
            {"content": "", "type": "assistant_message", "metadata": {"tool_calls": [call("seen")]}},
            {"content": "ok", "type": "tool_result", "role": "tool", "metadata": {"tool_call_id": "seen"}},
        ]
    )
    before = dump_window(r, prefix, "tc-bad")
    with pytest.raises(cs.InvalidItemError, match=re.escape(message)):
        w.add_many(items)
    assert dump_window(r, prefix, "tc-bad") == before


# -- groups under eviction and compaction ------------------------------------------------------------


def test_eviction_takes_the_oldest_whole_unit(store, r, prefix):
    w = store.window("tc-evict", max_items=8)
    for n in range(6):
        turn(w, n, results=2)  # 5 items per turn
    items = w.items()
    groups_whole(items)
    assert len(items) <= 8 and items[-1].content == "answer 5."
    evicted = [e for e in events(r, prefix, "tc-evict") if e.get("reason") == "eviction"]
    assert evicted and all(e["event"] == "item_removed" for e in evicted)


def test_a_pinned_member_keeps_its_whole_group(store):
    w = store.window("tc-pin", max_tokens=600, compaction_threshold=100)
    turn(w, 0, size=60)
    w.pin("ctx-3")  # the tool result of turn 0
    for n in range(1, 8):
        turn(w, n, size=60)
    items = w.items()
    groups_whole(items)
    assert {"ctx-2", "ctx-3"} <= {i.id for i in items}  # the call stays with its pinned result


@pytest.mark.parametrize("strategy", ["remove_oldest", "remove_low_priority"])
def test_server_side_strategies_remove_whole_groups(store, strategy):
    w = store.window(f"tc-{strategy}", max_tokens=1500, compaction_threshold=100)
    for n in range(8):
        turn(w, n, results=1 + n % 3)
    assert w.stats().usage_percent > 50
    assert w.compact(strategy, 30) > 0
    items = w.items()
    groups_whole(items)
    assert w.verify().ok and w.stats().current_tokens <= 450


def test_clear_tool_results_replaces_old_results_and_keeps_the_pairs(store):
    w = store.window("tc-clear", max_tokens=720, compaction_threshold=100, keep_recent=2)  # 600 and the overhead
    for n in range(6):
        turn(w, n, size=40)
    before = {i.id: i for i in w.items()}
    freed = w.compact("clear_tool_results", 40)
    after = w.items()
    cleared = [i for i in after if (i.metadata or {}).get("context_cleared")]
    assert freed > 0 and cleared and len(after) == len(before)
    for it in cleared:
        assert it.content == "[tool result cleared to save context]"
        assert it.metadata["context_cleared"] == {"tokens": before[it.id].token_count, "compaction": 1}
        assert it.metadata["tool_call_id"] == before[it.id].metadata["tool_call_id"] and it.group == before[it.id].group
    kept_groups = {"call_5_0"}  # keep_recent=2: the newest units are "answer 5." and this group
    assert not [i for i in cleared if i.group in kept_groups]
    groups_whole(after)
    assert w.verify().ok
    assert w.compact("clear_tool_results", 0) >= 0 and w.verify().ok  # cleared ones are not cleared again
    check_openai(w.build_messages(cs.BuildOptions(reserve_for_response=0)))


def test_clear_options_exclude_tools_and_require_a_minimum(store):
    w = store.window("tc-clear-opts", max_tokens=3000, clear_exclude_tools=["search"], clear_at_least=10_000)
    turn(w, 0, name="search", size=60)
    turn(w, 1, name="lookup", size=60)
    assert w.compact("clear_tool_results", 0) == 0  # would free less than clear_at_least
    w.configure(clear_at_least=0)
    assert w.compact("clear_tool_results", 0) > 0
    cleared = {i.metadata["tool_call_id"] for i in w.items() if (i.metadata or {}).get("context_cleared")}
    assert cleared == {"call_1_0"}  # search results are never cleared


def test_clear_as_default_strategy_falls_back_to_removal_when_adds_need_room(store, r, prefix):
    w = store.window("tc-auto", max_tokens=800, default_strategy="clear_tool_results", keep_recent=1)
    for n in range(15):
        turn(w, n, size=50)
    items = w.items()
    groups_whole(items)
    s = w.stats()
    assert s.current_tokens <= 800 and s.compaction_count > 0 and w.verify().ok
    kinds = {e["event"] for e in events(r, prefix, "tc-auto")}
    assert {"item_cleared", "item_removed", "compacted"} <= kinds


def test_summarize_and_selective_choose_whole_groups(make_store):
    store = make_store(summarizer=lambda items: "a summary", relevance_scorer=lambda q, items: [1.0] * len(items))
    for strategy in ("summarize", "selective"):
        w = store.window(f"tc-outside-{strategy}", max_tokens=1000, compaction_threshold=100)
        for n in range(6):
            turn(w, n, results=2, size=40)
        assert w.compact(strategy, 40) > 0
        groups_whole([i for i in w.items() if not (i.metadata or {}).get("summary_of")])
        assert w.verify().ok


@pytest.mark.parametrize("strategy", ["remove_oldest", "remove_low_priority", "clear_tool_results"])
def test_plan_compaction_is_exactly_what_compact_does(store, r, prefix, strategy):
    w = store.window(f"tc-plan-{strategy}", max_tokens=800, compaction_threshold=100, keep_recent=1)
    for n in range(8):
        turn(w, n, results=1 + n % 2, size=30)
    w.add("pinned note", pinned=True)
    before = dump_window(r, prefix, f"tc-plan-{strategy}")
    plan = w.plan_compaction(strategy, 35)
    assert dump_window(r, prefix, f"tc-plan-{strategy}") == before  # a dry run writes nothing
    ids_before = {i.id: i for i in w.items()}
    freed = w.compact(strategy, 35)
    after = {i.id: i for i in w.items()}
    removed = set(ids_before) - set(after)
    cleared = {i for i in after if (after[i].metadata or {}).get("context_cleared")}
    assert plan.tokens_freed == freed > 0 and plan.strategy.value == strategy
    assert {p.id for p in plan.items if p.action == "remove"} == removed
    assert {p.id for p in plan.items if p.action == "clear"} == cleared
    assert plan.usage_percent_after == pytest.approx(w.stats().usage_percent)


# -- building ------------------------------------------------------------------------------------------


def test_build_messages_for_openai_and_anthropic(store):
    w = store.window("tc-build", max_tokens=20_000)
    w.add("You are a weather bot.", type="system_prompt", pinned=True)
    w.add("Answer in one line.", type="instruction")
    w.add("Rain is water.", type="retrieved_document", source_ref="wiki/rain.md")
    turn(w, 1, results=2)
    w.add("thanks", type="user_message", role="user")
    msgs = w.build_messages(cs.BuildOptions(reserve_for_response=100))
    check_openai(msgs)
    assert [m["role"] for m in msgs] == [
        "system",
        "system",
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
    ]
    assert msgs[2]["content"] == "[retrieved_document wiki/rain.md]\nRain is water."
    assert msgs[4]["content"] is None and [c["id"] for c in msgs[4]["tool_calls"]] == ["call_1_0", "call_1_1"]
    built = w.build_messages(cs.BuildOptions(reserve_for_response=100, cache_control=True), format="anthropic")
    check_anthropic(built)
    assert [b["text"][:10] for b in built["system"]] == ["You are a ", "Answer in ", "[retrieved"]
    assert built["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert built["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    uses = [b for t in built["messages"] for b in t["content"] if b["type"] == "tool_use"]
    assert [u["input"] for u in uses] == [{"q": 1}, {"q": 1}]


def _marked(built: dict) -> tuple[list[str], set[int]]:
    """An Anthropic build's blocks (system, then the messages'; as JSON without their cache marks)
    and the places of its cache breakpoints."""
    blocks = [*built.get("system", []), *(b for t in built["messages"] for b in t["content"])]
    plain = [json.dumps({k: v for k, v in b.items() if k != "cache_control"}, sort_keys=True) for b in blocks]
    return plain, {n for n, b in enumerate(blocks) if "cache_control" in b}


def test_anthropic_breakpoints_keep_the_prefix_a_compaction_leaves(store):
    """Anthropic reads a cached prefix only at a breakpoint (or within 20 blocks before one), and
    caches it at each: builds between compactions mark the same places, and the build after a
    clearing compaction marks the block before the first result it cleared, a place the builds
    before marked too, with the same prefix. Results it never clears (a tool the window excludes,
    results no larger than the placeholder) are passed over. The API's limit of four breakpoints
    holds."""
    w = store.window(
        "tc-breakpoints", max_tokens=6000, compaction_threshold=100, keep_recent=2, clear_exclude_tools=["keep"]
    )
    w.add("You are terse.", type="system_prompt", pinned=True)
    turn(w, 100, name="keep")  # never cleared: an excluded tool's result
    turn(w, 101, size=0)  # never cleared: no larger than the placeholder
    opts = cs.BuildOptions(order="arrival", reserve_for_response=0, cache_control=True, max_history_items=1000)
    builds, n = [], 0
    for _ in range(4):
        for _turn in range(8):
            turn(w, n, results=1 + n % 2)
            n += 1
            builds.append((False, _marked(w.build_messages(opts, format="anthropic"))))
        assert w.compact("clear_tool_results", 5) > 0
        builds.append((True, _marked(w.build_messages(opts, format="anthropic"))))
    assert w.stats().compaction_count == 4
    for (_, (old, old_marks)), (compacted, (new, new_marks)) in itertools.pairwise(builds):
        shared = next((k for k, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
        if not compacted:
            assert shared == len(old) and old_marks - {len(old) - 1} <= new_marks  # extends; same places
        else:
            assert shared < len(old) and shared - 1 in old_marks and shared - 1 in new_marks, (shared, old_marks)
    for _, (blocks, marks) in builds:
        assert 0 in marks and len(blocks) - 1 in marks and len(marks) <= 4


def test_an_incomplete_tool_call_is_left_out_of_messages_but_not_lost(store):
    w = store.window("tc-inflight")
    w.add("hi", type="user_message", role="user")
    w.add_many(
        [
            {
                "content": "",
                "type": "assistant_message",
                "role": "assistant",
                "metadata": {"tool_calls": [call("pending")]},
            }
        ]
    )
    built = w.build_messages_structured()
    check_openai(built.messages)
    assert built.omitted_item_ids == ["ctx-2"] and [m["role"] for m in built.messages] == ["user"]
    w.add("done", type="tool_result", role="tool", metadata={"tool_call_id": "pending"})
    check_openai(w.build_messages())
    assert len(w.build_messages()) == 3


def test_a_result_that_arrives_after_other_messages_still_follows_its_call(store):
    w = store.window("tc-late")
    w.add("look it up", type="user_message", role="user")
    w.add_many(
        [{"content": "", "type": "assistant_message", "role": "assistant", "metadata": {"tool_calls": [call("x")]}}]
    )
    w.add("another worker's message", type="user_message", role="user")
    w.add("the result", type="tool_result", role="tool", metadata={"tool_call_id": "x"})
    msgs = w.build_messages()
    check_openai(msgs)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "user"]
    anth = w.build_messages(format="anthropic")["messages"]
    check_anthropic({"messages": anth})
    assert [b["type"] for b in anth[2]["content"]] == ["tool_result", "text"]  # results first in the turn


def test_messages_fit_the_budget_and_drop_whole_groups(store):
    w = store.window("tc-budget", max_tokens=100_000)
    for n in range(20):
        turn(w, n, results=1 + n % 3, size=20)
    for budget in (60, 150, 400, 1200):
        for fmt in ("openai", "anthropic"):
            built = w.build_messages_structured(
                cs.BuildOptions(max_tokens=budget, reserve_for_response=0, max_history_items=1000), format=fmt
            )
            assert built.total_tokens <= budget
            (check_openai if fmt == "openai" else check_anthropic)(built.messages) if built.included_item_ids else None
            included = set(built.included_item_ids)
            groups_whole([i for i in w.items() if i.id in included])
            assert included | set(built.excluded_item_ids) | set(built.omitted_item_ids) == {i.id for i in w.items()}


def test_build_keeps_groups_whole_too(store):
    w = store.window("tc-build-str", max_tokens=100_000)
    for n in range(10):
        turn(w, n, results=2, size=20)
    for budget in (50, 200, 700):
        built = w.build_structured(cs.BuildOptions(max_tokens=budget, reserve_for_response=0, max_history_items=100))
        assert built.total_tokens <= budget
        groups_whole([i for i in w.items() if i.id in set(built.included_item_ids)])


def test_arrival_order_keeps_the_prefix_of_a_growing_window(store):
    """A window that only grows builds, turn after turn, a prompt that starts with the previous
    one: what prompt caches need."""
    w = store.window("tc-prefix", max_tokens=1_000_000)
    w.add("You are an agent.", type="system_prompt", pinned=True)
    opts = cs.BuildOptions(order="arrival", reserve_for_response=0, max_history_items=10_000)
    previous = {"openai": [], "anthropic": None, "text": ""}
    for n in range(40):
        turn(w, n, results=1 + n % 2, size=5)
        if n % 7 == 3:
            w.add(f"document {n}", type="retrieved_document")
        msgs, text = w.build_messages(opts), w.build(opts)
        assert msgs[: len(previous["openai"])] == previous["openai"]
        assert text.startswith(previous["text"])
        anth = w.build_messages(opts, format="anthropic")
        if previous["anthropic"] is not None:
            old = previous["anthropic"]["messages"]
            assert anth["messages"][: len(old) - 1] == old[:-1]  # the last turn may grow by a merge
        previous = {"openai": msgs, "anthropic": anth, "text": text}


def test_snapshot_and_restore_keep_groups_calls_and_clearing(store):
    w = store.window("tc-snap", max_tokens=5000)
    for n in range(4):
        turn(w, n, results=2, size=30)
    w.compact("clear_tool_results", 40)
    snap = w.snapshot()
    copy = store.window("tc-snap-copy")
    copy.restore(snap)
    assert copy.items() == w.items() and copy.verify().ok
    with pytest.raises(cs.InvalidItemError, match="already in the window"):
        copy.add_many([{"content": "", "type": "assistant_message", "metadata": {"tool_calls": [call("call_0_0")]}}])
    assert copy.add("late", type="tool_result", role="tool", metadata={"tool_call_id": "call_3_1"}).group == "call_3_0"


# -- pop ------------------------------------------------------------------------------------------


def test_pop_removes_and_returns_the_newest_items(store, r, prefix):
    w = store.window("pop")
    assert w.pop() == []
    first = w.add("one", type="user_message")
    w.add("two", type="assistant_message", pinned=True)
    w.add("three", type="user_message")
    popped = w.pop(2)
    assert [i.content for i in popped] == ["three", "two"]  # newest first, pinned or not
    assert [i.id for i in w.items()] == [first.id] and w.stats().current_tokens == first.token_count
    removed = [e for e in events(r, prefix, "pop") if e["event"] == "item_removed"]
    assert [e["reason"] for e in removed] == ["manual", "manual"]
    assert w.pop(5) == [first] and w.pop() == []
    with pytest.raises(cs.InvalidOptionsError):
        w.pop(0)
    assert w.verify().ok


def test_pop_is_exactly_once(store):
    w = store.window("pop-once")
    for n in range(3):
        w.add(f"m{n}", type="user_message")
    assert [i.content for i in w.pop(request_id="r1")] == ["m2"]
    assert [i.content for i in w.pop(request_id="r1")] == ["m2"]  # the same call again: same answer
    assert len(w.items()) == 2


def test_pop_keeps_the_group_index_true(store):
    w = store.window("pop-group")
    turn(w, 1, results=2)
    w.pop(2)  # the answer and one result: the call keeps its other result
    assert w.verify().ok
    check_openai(w.build_messages(cs.BuildOptions(reserve_for_response=0, max_tokens=4000)))


def test_a_handle_does_no_io_until_first_used(make_store, r, prefix):
    store = make_store()
    before = r.info("stats")["total_commands_processed"]
    w = store.handle("lazy", max_tokens=500)
    assert r.info("stats")["total_commands_processed"] == before + 1  # only this INFO
    assert not r.exists(key(prefix, "lazy", "meta"))
    w.add("hello", type="user_message")
    assert w.stats().max_tokens == 500  # created with the handle's config by its first mutation
    with pytest.raises(cs.InvalidWindowIdError):
        store.handle("bad id")


def test_keep_recent_never_locks_a_conversation(store):
    """keep_recent counts the units after the add: a new message makes room by compacting the
    oldest of the recent units, so a conversation whose newest units fill the window goes on."""
    w = store.window("tc-lock", max_tokens=1200, keep_recent=4, default_strategy="remove_oldest")
    w.add("Be brief.", type="system_prompt", pinned=True)
    for n in range(4):  # four big turns: 1180 tokens with the pin, no room for anything
        role = "user" if n % 2 == 0 else "assistant"
        w.add(f"turn {n} " + "words " * 200, role=role, token_count=293)
    for n in range(4, 12):
        added = w.add(f"turn {n}", role="user" if n % 2 == 0 else "assistant", token_count=293)
        assert w.get(added.id) is not None
    kept = w.items()
    assert [i.content.split()[1] for i in kept[1:]] == ["8", "9", "10", "11"]  # the newest four
    assert w.verify().ok


def test_a_full_window_says_what_holds_its_tokens(store, r, prefix):
    w = store.window("tc-held", max_tokens=1000, keep_recent=2)
    w.add("rules", type="system_prompt", pinned=True, token_count=600)
    w.add("q", role="user", token_count=150)
    w.add("a", role="assistant", token_count=150)
    before = dump_window(r, prefix, "tc-held")
    with pytest.raises(cs.ContextWindowFullError) as info:
        w.add("a document", type="retrieved_document", token_count=300)
    err = info.value
    assert (err.unit, err.current, err.max, err.requested) == ("tokens", 900, 1000, 300)
    assert (err.pinned_tokens, err.kept_tokens) == (600, 300)
    assert "keep_recent" in str(err) and "unpin" in str(err)
    assert dump_window(r, prefix, "tc-held") == before
