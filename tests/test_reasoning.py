"""Reasoning models' tool loops (contract §21), Anthropic's first: an assistant message's
``thinking`` and ``redacted_thinking`` blocks are stored byte for byte, in their order, as parts of
the message that called the tools; an Anthropic build sends them back unchanged and in place,
every other build leaves them out; eviction, compaction, fork, rewind and restore keep or drop
them with the message, and so with its tool-call group."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

import contextstore as cs
from contextstore.errors import InvalidItemError

#: shaped as Anthropic's documented examples return them (a signature is opaque base64)
THINKING = {
    "type": "thinking",
    "thinking": "The user wants Paris' weather: call get_weather.\nUnits: celsius. \x1b[31m‮",
    "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds/Bp+nA7WX1kZ5hZ0vEXAMPLEg==",
}
REDACTED = {
    "type": "redacted_thinking",
    "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPEXAMPLEAAAAA",
}


def _step(n: int, thinking: dict[str, Any] = THINKING) -> list[dict[str, Any]]:
    """One step of a Claude tool loop: the assistant's thinking, a word and a tool call; the result."""
    own = {**thinking, "thinking": f"step {n}: {thinking['thinking']}"} if thinking["type"] == "thinking" else thinking
    call = {
        "id": f"toolu_{n:02d}",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    return [
        {"content": [own, {"type": "text", "text": f"Looking it up ({n})."}], "role": "assistant",
         "metadata": {"tool_calls": [call]}},
        {"content": f"{n}: 18 degrees, clear", "role": "tool", "metadata": {"tool_call_id": call["id"]}},
    ]  # fmt: skip


def _assistant_blocks(built: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [m["content"] for m in built["messages"] if m["role"] == "assistant" and isinstance(m["content"], list)]


def _valid_anthropic(built: dict[str, Any]) -> None:
    pydantic = pytest.importorskip("pydantic")
    anthropic_types = pytest.importorskip("anthropic.types")
    adapter = pydantic.TypeAdapter(list[anthropic_types.MessageParam])
    checked = adapter.validate_python(built["messages"], strict=True)
    assert len(checked) == len(built["messages"])


def test_thinking_comes_back_byte_for_byte_first_in_an_anthropic_build(store):
    w = store.window("loop")
    w.add("What is the weather in Paris?", role="user")
    w.add_many(_step(1))
    w.add_many(_step(2, REDACTED))
    built = w.build_messages(cs.BuildOptions(reserve_for_response=0), format="anthropic")
    first, second = _assistant_blocks(built)
    assert [b["type"] for b in first] == ["thinking", "text", "tool_use"]
    assert msgspec.json.encode(first[0]) == msgspec.json.encode(_step(1)[0]["content"][0])  # keys, order, bytes
    assert [b["type"] for b in second] == ["redacted_thinking", "text", "tool_use"] and second[0] == REDACTED
    _valid_anthropic(built)
    stored = w.get(w.items()[1].id or "")
    kept = stored.content[0]  # a native part (core/native.py): the block as it came, what it costs Anthropic
    assert kept["type"] == "native" and kept["format"] == "anthropic" and kept["value"] == _step(1)[0]["content"][0]
    plain = store.window("plain")
    plain.add_many([{**_step(1)[0], "content": _step(1)[0]["content"][1:]}])
    assert kept["tokens"] > 20 and stored.token_count == plain.items()[0].token_count  # in Anthropic's builds only


def test_other_builds_leave_the_reasoning_out(store):
    chat = pytest.importorskip("openai.types.chat")
    pydantic = pytest.importorskip("pydantic")
    w = store.window("loop")
    w.add("What is the weather in Paris?", role="user")
    w.add_many(_step(1))
    w.add_many(_step(2, REDACTED))
    w.add([REDACTED, {"type": "text", "text": "It is 18 degrees."}], role="assistant")
    messages = w.build_messages(cs.BuildOptions(reserve_for_response=0))
    dumped = json.dumps(messages)
    assert "thinking" not in dumped and THINKING["signature"] not in dumped and REDACTED["data"] not in dumped
    assert [m.get("content") for m in messages if m["role"] == "assistant"] == [
        [{"type": "text", "text": "Looking it up (1)."}],
        [{"type": "text", "text": "Looking it up (2)."}],
        [{"type": "text", "text": "It is 18 degrees."}],
    ]
    pydantic.TypeAdapter(list[chat.ChatCompletionMessageParam]).validate_python(messages, strict=True)
    prompt = w.build(cs.BuildOptions(reserve_for_response=0))
    assert "Paris' weather" not in prompt and "Looking it up (1)." in prompt


@pytest.mark.parametrize(
    "content, fields",
    [
        ([THINKING, {"type": "text", "text": "hi"}], {"role": "user"}),
        ([REDACTED], {"role": "tool", "metadata": {"tool_call_id": "toolu_01"}}),
        ([THINKING], {"role": "system"}),
        ([THINKING], {"type": "retrieved_document"}),
        ([{"type": "thinking", "thinking": "no signature"}], {"role": "assistant"}),
        ([{"type": "redacted_thinking", "data": 7}], {"role": "assistant"}),
    ],
    ids=["in a user message", "in a tool result", "in a system prompt", "in a document", "unsigned", "bad data"],
)
def test_reasoning_elsewhere_or_malformed_is_refused_and_nothing_is_written(store, content, fields):
    w = store.window("refused")
    w.add("before", role="user")
    with pytest.raises(InvalidItemError, match="content part 0"):
        w.add(content, **fields)
    assert [i.content for i in w.items()] == ["before"]


def test_a_claude_loop_of_30_tool_calls_on_a_window_that_compacts(store):
    """30 steps on a window whose budget holds a few: it evicts and compacts as it goes, and no
    build sends a tool-use message without its own thinking (first, unchanged), a tool use
    without its result, or (another format) any thinking at all."""
    w = store.window("claude", max_tokens=1500, max_items=40, default_strategy="remove_oldest")
    w.add("You check the weather.", role="system", pinned=True)
    w.add("What is the weather in Paris, every minute?", role="user")
    sent: dict[str, dict[str, Any]] = {}
    for n in range(30):
        step = _step(n, REDACTED if n % 7 == 3 else THINKING)
        sent[f"toolu_{n:02d}"] = step[0]["content"][0]
        w.add_many(step)
        if n % 10 == 9:
            w.compact("remove_oldest", target_percent=50)
        built = w.build_messages(cs.BuildOptions(max_tokens=1200, reserve_for_response=0), format="anthropic")
        for blocks in _assistant_blocks(built):
            uses = [b for b in blocks if b["type"] == "tool_use"]
            assert len(uses) == 1 and blocks[0] == sent[uses[0]["id"]], (n, blocks)
        results = {b["tool_use_id"] for m in built["messages"] if m["role"] == "user" for b in m["content"]
                   if isinstance(b, dict) and b["type"] == "tool_result"}  # fmt: skip
        assert results == {b["id"] for blocks in _assistant_blocks(built) for b in blocks if b["type"] == "tool_use"}
        _valid_anthropic(built)
        assert "thinking" not in json.dumps(w.build_messages(cs.BuildOptions(max_tokens=1200, reserve_for_response=0)))
    stats = w.stats()
    assert stats.total_items < 2 + 2 * 30  # it evicted and compacted
    assert stats.current_tokens <= 1500


def test_fork_rewind_and_restore_keep_the_blocks_with_their_message(store):
    w = store.window("kept")
    w.add("weather?", role="user")
    w.add_many(_step(1))
    w.add_many(_step(2, REDACTED))
    child = w.fork("kept-child")
    assert [i.content for i in child.items()] == [i.content for i in w.items()]
    snap = w.snapshot()
    copy = store.window("kept-copy")
    copy.restore(snap)
    assert [i.content for i in copy.items()] == [i.content for i in w.items()]
    rewound = w.rewind(w.items()[2].id or "")  # back to the first result: the second step goes whole
    assert [i.content[0]["value"]["type"] for i in w.items() if i.role == "assistant"] == ["thinking"]
    w.undo_rewind(rewound)
    assert w.items()[3].content[0]["value"] == REDACTED
    assert child.verify().ok and copy.verify().ok


def test_no_cache_breakpoint_lands_on_a_thinking_block(store):
    """Anthropic takes no ``cache_control`` on a thinking block: a breakpoint that would fall on
    one (a message of reasoning alone, last) goes on the block before it."""
    w = store.window("marks")
    w.add("weather?", role="user")
    w.add_many(_step(1))
    w.add([REDACTED], role="assistant")
    built = w.build_messages(cs.BuildOptions(reserve_for_response=0, cache_control=True), format="anthropic")
    flat = [b for m in built["messages"] for b in m["content"] if isinstance(m["content"], list)]
    marked = [b["type"] for b in flat if "cache_control" in b]
    assert marked and not {"thinking", "redacted_thinking"} & set(marked), marked
    assert flat[-1] == REDACTED
    _valid_anthropic(built)


#: a Claude tool loop as the Messages API takes and returns it (the shapes of Anthropic's
#: documented examples): thinking before each tool use, results in the next user turn
CLAUDE_LOOP: list[dict[str, Any]] = [
    {"role": "user", "content": "What's the weather in Paris, and the time there?"},
    {"role": "assistant", "content": [
        THINKING,
        {"type": "text", "text": "I'll check the weather first."},
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
         "input": {"location": "Paris, France", "unit": "celsius"}},
    ]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "15 degrees, clear"},
    ]},
    {"role": "assistant", "content": [
        REDACTED,
        {"type": "tool_use", "id": "toolu_01B", "name": "get_time", "input": {"tz": "Europe/Paris"}},
    ]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01B", "content": [{"type": "text", "text": "no clock"}],
         "is_error": True},
        {"type": "text", "text": "Never mind the time."},
    ]},
    {"role": "assistant", "content": [{"type": "text", "text": "It is 15 degrees and clear in Paris."}]},
]  # fmt: skip


def _as_blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as an Anthropic build spells them: a str content as one text block."""
    return [{**m, "content": [{"type": "text", "text": m["content"]}]} if isinstance(m["content"], str) else m
            for m in messages]  # fmt: skip


def test_a_claude_loop_stored_as_it_came_builds_back_the_same_messages(store):
    w = store.window("as-it-came")
    assert w.add_many(CLAUDE_LOOP, format="anthropic") == 7  # the second user turn: a result and a question
    built = w.build_messages(cs.BuildOptions(reserve_for_response=0), format="anthropic")
    assert built["messages"] == _as_blocks(CLAUDE_LOOP)
    assert msgspec.json.encode(built["messages"]) == msgspec.json.encode(_as_blocks(CLAUDE_LOOP))  # byte for byte
    _valid_anthropic(built)
    openai_messages = w.build_messages(cs.BuildOptions(reserve_for_response=0))
    assert [m["role"] for m in openai_messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]
    assert json.loads(openai_messages[1]["tool_calls"][0]["function"]["arguments"]) == {
        "location": "Paris, France", "unit": "celsius"}  # fmt: skip
    assert "thinking" not in json.dumps(openai_messages)


def test_the_sdk_s_own_objects_are_taken_as_they_came(store):
    anthropic_types = pytest.importorskip("anthropic.types")
    reply = anthropic_types.Message.model_validate({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": CLAUDE_LOOP[1]["content"], "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 20},
    })  # fmt: skip
    w = store.window("sdk")
    w.add_many([CLAUDE_LOOP[0], {"role": reply.role, "content": reply.content}, CLAUDE_LOOP[2]], format="anthropic")
    built = w.build_messages(cs.BuildOptions(reserve_for_response=0), format="anthropic")
    assert built["messages"] == _as_blocks(CLAUDE_LOOP[:3])


@pytest.mark.parametrize(
    "messages, error",
    [
        ("hello", InvalidItemError),
        ([{"role": "system", "content": "x"}], InvalidItemError),
        ([{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}], InvalidItemError),
        ([{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}], InvalidItemError),
        ([{"role": "assistant", "content": [{"type": "telepathy"}]}], InvalidItemError),
        ([{"role": "assistant", "content": []}], InvalidItemError),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}],
            InvalidItemError,
        ),
    ],
    ids=[
        "not a list",
        "a system role",
        "a tool use without id",
        "a result without its call id",
        "unknown",
        "empty",
        "an input that is no object",
    ],
)
def test_messages_in_no_shape_of_the_format_are_refused_and_nothing_is_written(store, messages, error):
    w = store.window("refused")
    w.add("before", role="user")
    with pytest.raises(error):
        w.add_many([CLAUDE_LOOP[0], *messages] if isinstance(messages, list) else messages, format="anthropic")
    with pytest.raises(cs.InvalidOptionsError, match="format"):
        w.add_many(CLAUDE_LOOP, format="gemini-1")
    assert [i.content for i in w.items()] == ["before"]
