"""A chat build always carries the newest user message (it is taken right after the pinned
items), or raises: never an empty or question-less request."""

from __future__ import annotations

import pytest

import contextstore as cs

from chat_rules import check_anthropic, check_openai

FORMATS = ["openai", "anthropic"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_question_larger_than_the_budget_raises(store, fmt):
    w = store.window(f"big-q-{fmt}", max_tokens=1200)
    w.add("Be brief.", type="system_prompt", pinned=True)
    w.add("earlier question", role="user")
    w.add("earlier answer", role="assistant")
    question = w.add("word " * 1070, role="user", token_count=1071)
    with pytest.raises(cs.BudgetTooSmallError) as info:
        w.build_messages(cs.BuildOptions(reserve_for_response=200), format=fmt)
    assert info.value.budget == 1000 and info.value.pinned_tokens > 1071
    assert question.id in str(info.value) and "newest user message" in str(info.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_question_is_taken_before_documents_that_would_crowd_it_out(store, fmt):
    w = store.window(f"crowd-{fmt}", max_tokens=1200)
    w.add("Answer from the documents.", type="system_prompt")
    for n in range(2):  # offered before the conversation (rank 2): together they leave no room for it
        w.add(f"document {n} " + "text " * 300, type="retrieved_document", priority=90, token_count=482)
    question = w.add("What do the documents say about pricing?", role="user")
    built = w.build_messages_structured(cs.BuildOptions(reserve_for_response=200), format=fmt)
    assert question.id in built.included_item_ids and built.total_tokens <= 1000
    assert len(built.excluded_item_ids) == 1  # one of the documents gave way
    if fmt == "openai":
        check_openai(built.messages)
        assert built.messages[-1] == {"role": "user", "content": question.content}
    else:
        check_anthropic(built.messages)
        assert built.messages["messages"][-1]["content"][-1]["text"] == question.content


def test_an_anthropic_build_without_a_conversation_raises(store):
    w = store.window("no-chat", max_tokens=2000)
    w.add("You are terse.", type="system_prompt")
    with pytest.raises(cs.NoConversationError):
        w.build_messages(format="anthropic")
    assert w.build_messages(format="openai") == [{"role": "system", "content": "You are terse."}]
    w.add("hi", role="user")
    assert w.build_messages(format="anthropic")["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    ]


def test_a_build_that_leaves_out_the_newest_items_says_so(store, caplog):
    """The window keeps up to its threshold of max_tokens; a build takes max_tokens minus the
    reserve. When that leaves out the newest items (a tool call and its result stored but not
    sent), the build lists them in dropped_newest and logs a WARNING."""
    w = store.window("dropped", max_tokens=1200)
    w.add("Be brief.", type="system_prompt", pinned=True)
    w.add("Weather in Paris?", role="user")
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    w.add_many(
        [
            {"content": "", "role": "assistant", "metadata": {"tool_calls": [call]}},
            {"content": "sunny " * 300, "role": "tool", "metadata": {"tool_call_id": "c1"}},
        ]
    )
    with caplog.at_level("WARNING", logger="contextstore"):
        built = w.build_messages_structured()  # reserve_for_response=1000: a budget of 200
        text = w.build_structured()
    ids = [i.id for i in w.items()]
    assert built.dropped_newest == ids[2:] and text.dropped_newest == ids[2:]
    assert ids[1] in built.included_item_ids  # the question went in (the newest user message)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and "left out its 2 newest items" in warnings[0]
    roomy = w.build_messages_structured(cs.BuildOptions(reserve_for_response=100))
    assert roomy.dropped_newest == [] and set(ids) <= set(roomy.included_item_ids)


def _tool_loop(w, turns: int, result_tokens: int = 125):
    """``turns`` turns of a question, a tool call, its result and an answer; after each, the
    arrival-order OpenAI build a worker sends (what stays cached is its prefix)."""
    import json

    for t in range(turns):
        call = {"id": f"call_{t}", "type": "function", "function": {"name": "look", "arguments": json.dumps({"t": t})}}
        w.add(f"step {t}", role="user")
        w.add("", role="assistant", metadata={"tool_calls": [call]})
        w.add(" ".join(f"row {t}.{k}" for k in range(40)), role="tool", metadata={"tool_call_id": f"call_{t}"},
              token_count=result_tokens)  # fmt: skip
        w.add(f"done {t}", role="assistant")
        yield (
            w.build_messages_structured(
                cs.BuildOptions(order="arrival", max_history_items=1000, reserve_for_response=900)
            ),
            w.stats(),
        )


def test_a_window_below_its_threshold_builds_whole_and_a_compaction_breaks_the_prefix_once(store, caplog):
    """32 turns of a tool loop in 6,000 tokens, remove_oldest, a build that keeps 15% for the
    answer (what the 85% threshold leaves): the usage the threshold looks at counts what a build
    adds to each message, so no build leaves an item out, and the cached prefix (the ids the
    previous build sent) breaks only at a compaction, once each."""
    w = store.window("loop", max_tokens=6000, default_strategy="remove_oldest")
    previous, breaks = None, 0
    with caplog.at_level("WARNING", logger="contextstore"):
        for built, stats in _tool_loop(w, 32, 180):
            assert built.excluded_item_ids == [] and built.dropped_newest == [], (stats.usage_percent, built)
            ids = built.included_item_ids
            breaks += previous is not None and ids[: len(previous)] != previous
            previous = ids
    assert stats.compaction_count >= 2 and breaks == stats.compaction_count
    assert not [r for r in caplog.records if "left out" in r.getMessage()]


def test_a_build_that_must_leave_items_out_says_so(store, caplog, r, prefix):
    """A budget below what the window keeps under its threshold (a reserve of 1,000 of 6,000
    tokens, more than the 15% the threshold leaves): the build that leaves the oldest tool call
    out says so in its result, a WARNING and its ``built`` event."""
    w = store.window("short", max_tokens=6000, default_strategy="remove_oldest")
    with caplog.at_level("WARNING", logger="contextstore"):
        for _ in _tool_loop(w, 40, 180):  # until the window holds more than 5,000 tokens' build
            built = w.build_messages_structured(cs.BuildOptions(order="arrival", max_history_items=1000))
            if built.excluded_item_ids:
                break
    assert built.excluded_item_ids and built.dropped_newest == []
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"left out {len(built.excluded_item_ids)} items that did not fit" in m for m in warned), warned
    [event] = [e for e in w.events(since="0") if e.kind == "built"][-1:]
    assert event.items_excluded == len(built.excluded_item_ids)
