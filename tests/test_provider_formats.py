"""The providers' own formats (contract §21): a recorded tool loop per provider, stored as the API
returned it (``add_many(format=...)``), evicted around, compacted around, forked, rewound and
built again; the opaque fields (signatures, encrypted reasoning, compaction items) come back
byte-identical and in order in that provider's build, never in another's, and every build
validates against the provider's own SDK types (``openai``, ``anthropic``, ``google-genai``).
Tokens: a build counts the reasoning its provider counts (docs/guide.md, "What a build counts")."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import msgspec
import pytest
from test_reasoning import CLAUDE_LOOP, _as_blocks, _valid_anthropic

import contextstore as cs
from contextstore.core import parts
from contextstore.errors import InvalidItemError

from support import key

#: an OpenAI Responses loop with a reasoning model and store=false (the shapes of OpenAI's reasoning
#: and function-calling guides): reasoning with encrypted content before each call and the answer
RS1 = {"type": "reasoning", "id": "rs_6820f383d7c08191846711c5df8233bc", "summary": [],
       "encrypted_content": "gAAAAABoIPOEXAMPLE1mZ2lhbnQtZW5jcnlwdGVkLXJlYXNvbmluZy0x=="}  # fmt: skip
RS2 = {"type": "reasoning", "id": "rs_6820f3a1b2c3", "summary": [{"type": "summary_text", "text": "**Answering**"}],
       "encrypted_content": "gAAAAABoIPOEXAMPLE2cmVhc29uaW5nLWFmdGVyLXRoZS1yZXN1bHQ="}  # fmt: skip
COMPACTED = {"type": "compaction", "id": "cmp_68a1", "encrypted_content": "gAAAAABoCOMPACTEDc3VtbWFyeS1vZi1lYXJsaWVy"}
RESPONSES_LOOP: list[dict[str, Any]] = [
    {"role": "user", "content": "What's the weather like in Paris today?"},
    RS1,
    {"type": "function_call", "id": "fc_6820f3859b48", "call_id": "call_a8HnR5LGCBpjzb5ISNDhAqzp",
     "name": "get_weather", "arguments": "{\"location\":\"Paris, France\"}", "status": "completed"},
    {"type": "function_call_output", "call_id": "call_a8HnR5LGCBpjzb5ISNDhAqzp", "output": "{\"temperature\": 15}"},
    RS2,
    {"type": "message", "id": "msg_6820f3c4", "status": "completed", "role": "assistant",
     "content": [{"type": "output_text", "text": "It is 15°C in Paris.", "annotations": []}]},
]  # fmt: skip

#: a Gemini 3 loop (the shapes of Google's thought-signatures guide): a signature on each step's
#: first function call (parallel calls: only the first has one), a thought summary, a signed answer
SIG_A, SIG_B, SIG_C = "Q2lZQ0FkUEVYQU1QTEUtc2lnbmF0dXJlLUE=", "Q2lZQ0FkUEVYQU1QTEUtc2lnLUI=", "Q2lZQ0FkUEVYLUM="
GEMINI_LOOP: list[dict[str, Any]] = [
    {"role": "user", "parts": [{"text": "Check flight AA100 and, if it is late, the weather at both ends."}]},
    {"role": "model", "parts": [{"function_call": {"name": "check_flight", "args": {"flight": "AA100"}},
                                 "thought_signature": SIG_A}]},
    {"role": "user", "parts": [{"function_response": {"name": "check_flight",
                                                      "response": {"status": "delayed", "departure": "12 PM"}}}]},
    {"role": "model", "parts": [
        {"text": "**Both airports** the flight touches.", "thought": True},
        {"function_call": {"name": "weather", "args": {"city": "Dallas"}}, "thought_signature": SIG_B},
        {"function_call": {"name": "weather", "args": {"city": "Paris"}}},
    ]},
    {"role": "user", "parts": [
        {"function_response": {"name": "weather", "response": {"output": "storm"}}},
        {"function_response": {"name": "weather", "response": {"output": "clear"}}},
    ]},
    {"role": "model", "parts": [{"text": "AA100 is delayed by a storm in Dallas.", "thought_signature": SIG_C}]},
]  # fmt: skip

SECRETS = {
    "anthropic": ["EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds", "EmwKAhgBEgy3va3pzix"],
    "responses": ["gAAAAABoIPOEXAMPLE1", "gAAAAABoIPOEXAMPLE2", "gAAAAABoCOMPACTED"],
    "gemini": [SIG_A, SIG_B, SIG_C, "**Both airports**", base64.b64encode(SIG_A.encode()).decode()[:24]],
}
OPTS = cs.BuildOptions(reserve_for_response=0, max_history_items=1000)


def valid(fmt: str, built: Any) -> None:
    """``built`` validates against the provider's own SDK types (strict where the SDK's are)."""
    pydantic = pytest.importorskip("pydantic")
    if fmt == "anthropic":
        _valid_anthropic(built)
    elif fmt == "openai":
        chat = pytest.importorskip("openai.types.chat")
        pydantic.TypeAdapter(list[chat.ChatCompletionMessageParam]).validate_python(built, strict=True)
    elif fmt == "responses":
        responses = pytest.importorskip("openai.types.responses")
        pydantic.TypeAdapter(responses.ResponseInputParam).validate_python(built, strict=True)
    else:
        genai = pytest.importorskip("google.genai.types")
        for content in built["contents"]:
            assert genai.Content.model_validate(content, strict=False).model_dump(mode="json", exclude_none=True) == (
                content
            )  # nothing the SDK does not know, nothing it spells otherwise
        if "system_instruction" in built:
            genai.Content.model_validate(built["system_instruction"])


def _secrets_in(text: str) -> set[str]:
    return {fmt for fmt, marks in SECRETS.items() if any(m in text for m in marks)}


def test_a_responses_loop_stored_as_it_came_builds_back_the_same_items(store):
    w = store.window("responses")
    assert w.add_many(RESPONSES_LOOP, format="responses", model="gpt-5.6") == 4  # user, answer, result, answer
    built = w.build_messages(OPTS, format="responses")
    assert msgspec.json.encode(built) == msgspec.json.encode(RESPONSES_LOOP)  # byte for byte, in order
    valid("responses", built)
    function = {"name": "get_weather", "arguments": '{"location":"Paris, France"}'}
    assert w.items()[1].metadata["tool_calls"] == [{"id": RESPONSES_LOOP[2]["call_id"], "type": "function",
                                                    "function": function}]  # fmt: skip
    for fmt in ("openai", "anthropic", "gemini"):  # the others: the conversation, none of OpenAI's own
        other = w.build_messages(OPTS, format=fmt)
        valid(fmt, other)
        assert not _secrets_in(json.dumps(other)) and "It is 15°C in Paris." in json.dumps(other, ensure_ascii=False)


def test_a_gemini_loop_stored_as_it_came_builds_back_the_same_contents(store):
    w = store.window("gemini")
    assert w.add_many(GEMINI_LOOP, format="gemini", model="gemini-3-pro") == 7
    built = w.build_messages(OPTS, format="gemini")
    assert msgspec.json.encode(built["contents"]) == msgspec.json.encode(GEMINI_LOOP)
    valid("gemini", built)
    answered = [i.metadata["tool_call_id"] for i in w.items() if i.role == "tool"]
    called = [c["id"] for i in w.items() if i.role == "assistant" for c in (i.metadata or {}).get("tool_calls", [])]
    assert answered == called and len(set(called)) == 3  # responses paired in order, each call an id of its own
    shown = parts.text_of(w.items()[3].content, sha=True)  # what the CLI shows of the second model turn
    assert shown == "[gemini thought]\n[gemini function_call]\n[gemini function_call]" and SIG_B not in shown
    for fmt in ("openai", "anthropic", "responses"):
        other = w.build_messages(OPTS, format=fmt)
        valid(fmt, other)
        assert not _secrets_in(json.dumps(other)) and "delayed by a storm" in json.dumps(other)


def test_the_sdks_own_objects_are_taken_as_they_came(store):
    genai = pytest.importorskip("google.genai.types")
    responses = pytest.importorskip("openai.types.responses")
    w = store.window("sdk")
    contents = [genai.Content.model_validate(c) for c in GEMINI_LOOP[:3]]  # thought_signature: bytes there
    w.add_many(contents, format="gemini")
    assert w.build_messages(OPTS, format="gemini")["contents"] == GEMINI_LOOP[:3]
    output = [responses.ResponseReasoningItem.model_validate(RS1),
              responses.ResponseFunctionToolCall.model_validate(RESPONSES_LOOP[2])]  # fmt: skip
    w2 = store.window("sdk-responses")
    w2.add_many([RESPONSES_LOOP[0], *output, RESPONSES_LOOP[3]], format="responses")
    assert w2.build_messages(OPTS, format="responses") == RESPONSES_LOOP[:4]


def test_gemini_s_rest_spelling_is_taken_and_built_as_the_sdk_spells_it(store):
    w = store.window("rest")
    call = {"functionCall": {"name": "check_flight", "args": {"flight": "AA100"}}, "thoughtSignature": SIG_A}
    reply = {"functionResponse": {"name": "check_flight", "response": {"status": "delayed", "departure": "12 PM"}}}
    rest = [GEMINI_LOOP[0], {"role": "model", "parts": [call]}, {"role": "user", "parts": [reply]}]
    w.add_many(rest, format="gemini")
    assert w.build_messages(OPTS, format="gemini")["contents"] == GEMINI_LOOP[:3]


def test_a_function_response_finds_its_call_by_id_across_calls_and_says_so_without_one(store):
    w = store.window("pairs")
    w.add_many(GEMINI_LOOP[:2], format="gemini")
    call_id = w.items()[1].metadata["tool_calls"][0]["id"]
    late = {"role": "user", "parts": [{"function_response": {"name": "check_flight", "response": {"status": "late"}}}]}
    with pytest.raises(InvalidItemError, match="has no id"):
        w.add_many([late], format="gemini")
    late["parts"][0]["function_response"]["id"] = call_id
    w.add_many([late], format="gemini")
    assert w.items()[-1].metadata["tool_call_id"] == call_id


def test_one_window_holds_three_providers_and_each_build_sends_only_its_own(store):
    """A conversation that moved between providers: each build takes its own opaque parts back
    and leaves the others' out, and the tool groups stay whole in every one."""
    w = store.window("mixed")
    w.add_many(CLAUDE_LOOP, format="anthropic")
    w.add_many(RESPONSES_LOOP, format="responses")
    w.add_many(GEMINI_LOOP, format="gemini")
    for fmt in ("openai", "anthropic", "responses", "gemini"):
        built = w.build_messages(OPTS, format=fmt)
        valid(fmt, built)
        assert _secrets_in(json.dumps(built)) == ({fmt} if fmt != "openai" else set()), fmt
    anthropic = w.build_messages(OPTS, format="anthropic")["messages"]
    assert anthropic[: len(CLAUDE_LOOP)] == _as_blocks(CLAUDE_LOOP)


LOOPS = {
    "anthropic": (CLAUDE_LOOP, lambda built: built["messages"]),
    "responses": (RESPONSES_LOOP, lambda built: built),
    "gemini": (GEMINI_LOOP, lambda built: built["contents"]),
}


@pytest.mark.parametrize("fmt", list(LOOPS))
def test_fork_rewind_snapshot_and_eviction_keep_each_loop_whole(store, fmt):
    loop, messages = LOOPS[fmt]
    w = store.window(f"kept-{fmt}")
    w.add("Earlier talk. " * 50, role="user")
    w.add_many(loop, format=fmt)
    whole = messages(w.build_messages(OPTS, format=fmt))
    child = w.fork(f"kept-{fmt}-child")
    copy = store.window(f"kept-{fmt}-copy")
    copy.restore(w.snapshot())
    for other in (child, copy):
        assert messages(other.build_messages(OPTS, format=fmt)) == whole
        assert other.verify().ok
    rewound = child.rewind(child.items()[1].id or "")  # back to the loop's question: the loop goes whole
    assert len(child.items()) == 2
    child.undo_rewind(rewound)
    assert messages(child.build_messages(OPTS, format=fmt)) == whole
    w.compact("remove_oldest", target_percent=1)  # every unpinned item it can remove, groups whole
    assert messages(w.build_messages(OPTS, format=fmt))[-1] == whole[-1]  # the loop's answer stays...
    groups = {i.group for i in w.items() if i.group}
    assert all({i.role for i in w.items() if i.group == g} == {"assistant", "tool"} for g in groups)  # ...whole


@pytest.mark.parametrize("fmt", list(LOOPS))
def test_a_loop_of_30_tool_calls_on_a_window_that_compacts_keeps_every_group_whole(store, fmt):
    """30 steps of one provider's loop on a window that evicts and compacts: every build in that
    format sends each call with its own opaque parts as they came, every call with its result;
    no build sends another provider's."""
    w = store.window(f"thirty-{fmt}", max_tokens=1500, max_items=40, default_strategy="remove_oldest")
    w.add("You check the weather.", role="system", pinned=True)
    w.add("What is the weather, every minute?", role="user")
    for n in range(30):
        w.add_many(_loop_step(fmt, n), format=fmt)
        if n % 10 == 9:
            w.compact("remove_oldest", target_percent=50)
        built = w.build_messages(cs.BuildOptions(max_tokens=1200, reserve_for_response=0), format=fmt)
        valid(fmt, built)
        _check_steps(fmt, built)
        for other in set(LOOPS) - {fmt}:
            assert fmt not in _secrets_in(json.dumps(w.build_messages(OPTS, format=other)))
    assert w.stats().total_items < 2 + 2 * 30


def _loop_step(fmt: str, n: int) -> list[dict[str, Any]]:
    """Step ``n`` of a provider's loop: its opaque part (marked with ``n``), a call, the result."""
    if fmt == "anthropic":
        signature = f"{SECRETS['anthropic'][0]}{n:03d}"
        thinking = {"type": "thinking", "thinking": f"step {n}", "signature": signature}
        use = {"type": "tool_use", "id": f"toolu_{n:02d}", "name": "w", "input": {"n": n}}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{n:02d}", "content": f"{n}"}
        return [{"role": "assistant", "content": [thinking, use]}, {"role": "user", "content": [result]}]
    if fmt == "responses":
        reasoning = {**RS1, "id": f"rs_{n:03d}", "encrypted_content": f"gAAAAABoIPOEXAMPLE1-{n:03d}"}
        call = {"type": "function_call", "call_id": f"call_{n:03d}", "name": "w", "arguments": json.dumps({"n": n})}
        return [reasoning, call, {"type": "function_call_output", "call_id": f"call_{n:03d}", "output": f"{n}"}]
    part = {"function_call": {"id": f"g{n:03d}", "name": "w", "args": {"n": n}}, "thought_signature": _sig(n)}
    reply = {"function_response": {"id": f"g{n:03d}", "name": "w", "response": {"n": n}}}
    return [{"role": "model", "parts": [part]}, {"role": "user", "parts": [reply]}]


def _sig(n: int) -> str:
    """Step ``n``'s thought signature: base64, as Gemini's are (its SDK checks)."""
    return base64.b64encode(f"{SIG_A}-{n:03d}".encode()).decode()


def _check_steps(fmt: str, built: Any) -> None:
    """Every call in ``built`` comes with its own step's opaque part right before it (or on it)
    and its result."""
    text = json.dumps(built)
    if fmt == "anthropic":
        for m in built["messages"]:
            uses = [b for b in m["content"] if isinstance(b, dict) and b["type"] == "tool_use"]
            for use in uses:
                n = use["input"]["n"]
                assert m["content"][0]["type"] == "thinking" and m["content"][0]["signature"].endswith(f"{n:03d}")
                assert f'"tool_use_id": "toolu_{n:02d}"' in text
    elif fmt == "responses":
        for k, item in enumerate(built):
            if item.get("type") == "function_call":
                n = json.loads(item["arguments"])["n"]
                assert built[k - 1]["type"] == "reasoning" and built[k - 1]["id"] == f"rs_{n:03d}"
                assert any(o.get("type") == "function_call_output" and o["call_id"] == item["call_id"] for o in built)
    else:
        for content in built["contents"]:
            for part in content["parts"]:
                if "function_call" in part:
                    n = part["function_call"]["args"]["n"]
                    assert part["thought_signature"] == _sig(n) and f'"id": "g{n:03d}"' in text


def test_a_build_counts_the_reasoning_its_provider_counts(store):
    """One conversation, each provider's loop: a build in a provider's format counts its
    reasoning (every turn's, or with ``reasoning_context="current_turn"`` only after the newest
    user message); a build in another format counts none of it; ``model`` leaves out another
    model's."""
    w = store.window("tokens")
    w.add_many(CLAUDE_LOOP[:3], format="anthropic", model="claude-opus-5-5")
    w.add_many(RESPONSES_LOOP[:4], format="responses", model="gpt-5.6")
    w.add_many(GEMINI_LOOP[:3], format="gemini", model="gemini-3-pro")
    w.add("And now?", role="user")
    w.add_many(CLAUDE_LOOP[3:4], format="anthropic", model="claude-opus-5-5")
    w.add_many([{"role": "user", "content": CLAUDE_LOOP[4]["content"][:1]}], format="anthropic")  # its result only
    own = {
        fmt: sum(p["tokens"] for i in w.items() if isinstance(i.content, list)
                 for p in i.content if p["type"] == "native" and p["format"] == fmt)
        for fmt in LOOPS
    }  # fmt: skip
    assert all(own.values())
    base = w.build_messages_structured(OPTS, format="openai").total_tokens
    for fmt in LOOPS:
        assert w.build_messages_structured(OPTS, format=fmt).total_tokens == base + own[fmt], fmt
    current = cs.BuildOptions(reserve_for_response=0, max_history_items=1000, reasoning_context="current_turn")
    late = w.items()[-2].content[0]["tokens"]  # the redacted thinking after "And now?"
    assert 0 < late < own["anthropic"]
    assert w.build_messages_structured(current, format="anthropic").total_tokens == base + late
    other_model = cs.BuildOptions(reserve_for_response=0, max_history_items=1000, model="claude-haiku-4-5")
    built = w.build_messages_structured(other_model, format="anthropic")
    assert built.total_tokens == base and "thinking" not in json.dumps(built.messages)


@pytest.mark.parametrize(
    "fmt, messages, match",
    [
        ("responses", [{"type": "item_reference", "id": "msg_1"}], "item_reference"),
        ("responses", [{"type": "function_call", "call_id": 7, "name": "f", "arguments": "{}"}], "call_id"),
        ("responses", [{"role": "tool", "content": "x"}], "role 'tool'"),
        ("responses", [{"role": "user", "content": [{"type": "input_video"}]}], "input content"),
        ("gemini", [{"role": "function", "parts": [{"text": "x"}]}], "role"),
        ("gemini", [{"role": "user", "parts": []}], "parts"),
        ("gemini", [{"role": "model", "parts": [{"function_call": {"args": {}}}]}], "name"),
        ("gemini", [{"role": "model", "parts": [{"text": "x", "thought_signature": 7}]}], "thought_signature"),
        ("gemini", [{"role": "user", "parts": [{"executable_code": {"code": "1"}}]}], "user part"),
    ],
    ids=[
        "a reference",
        "a call id that is no str",
        "a tool role",
        "unknown content",
        "a function role",
        "no parts",
        "a call without name",
        "a signature that is no str",
        "code in a user part",
    ],
)
def test_items_in_no_shape_of_the_format_are_refused_and_nothing_is_written(store, fmt, messages, match):
    w = store.window("refused")
    w.add("before", role="user")
    with pytest.raises(InvalidItemError, match=match):
        w.add_many(messages, format=fmt)
    with pytest.raises(cs.InvalidOptionsError, match="model"):
        w.add_many(RESPONSES_LOOP, format="responses", model="")
    assert [i.content for i in w.items()] == ["before"]


@pytest.mark.parametrize(
    "part, match",
    [
        ({"type": "native", "format": "bedrock", "value": {}}, "format"),
        ({"type": "native", "format": "responses", "value": "x"}, "value"),
        ({"type": "native", "format": "responses", "value": RS1, "call": "c"}, "no tool call"),
        ({"type": "native", "format": "responses", "value": RESPONSES_LOOP[2]}, "tool call"),
        ({"type": "native", "format": "anthropic", "value": {"type": "tool_use"}}, "kept whole"),
        ({"type": "native", "format": "gemini", "value": {"thoughtSignature": "x"}}, "REST"),
        (
            {
                "type": "native",
                "format": "anthropic",
                "value": {"type": "redacted_thinking", "data": "x"},
                "tokens": -1,
            },
            "tokens",
        ),
        (
            {
                "type": "native",
                "format": "responses",
                "value": RESPONSES_LOOP[2],
                "call": "call_a8HnR5LGCBpjzb5ISNDhAqzp",
            },
            "not one of the item's tool calls",
        ),
    ],
    ids=[
        "unknown format",
        "value no object",
        "call on reasoning",
        "call without id",
        "a tool use",
        "camelCase",
        "negative tokens",
        "a call the item does not make",
    ],
)
def test_a_native_part_in_no_shape_is_refused(store, part, match):
    w = store.window("native")
    with pytest.raises(InvalidItemError, match=match):
        w.add([part], role="assistant")
    assert w.items() == []


@pytest.mark.parametrize("budget", [400, 900, 2000, 100_000])
def test_a_stateless_worker_builds_what_a_caching_one_does(make_store, budget):
    """Items holding reasoning cost what they cost in the build's format and turn, chosen from the
    window's facts (their bodies read with them: ``facts.REASONING``) as from a whole read."""
    caching = make_store().window("mixed")
    for n in range(6):
        caching.add(f"Question {n}: " + "more words " * (20 * n), role="user")
        caching.add_many(_loop_step(list(LOOPS)[n % 3], n), format=list(LOOPS)[n % 3])
    caching.add_many(CLAUDE_LOOP, format="anthropic")
    stateless = make_store(item_cache_bytes=0).window("mixed")
    for fmt in ("openai", *LOOPS):
        for context in ("all_turns", "current_turn"):
            opts = cs.BuildOptions(max_tokens=budget, reserve_for_response=0, max_history_items=1000,
                                   reasoning_context=context)  # fmt: skip
            a, b = (w.build_messages_structured(opts, format=fmt) for w in (caching, stateless))
            assert (a.messages, a.total_tokens, a.included_item_ids) == (
                b.messages, b.total_tokens, b.included_item_ids)  # fmt: skip
            assert a.total_tokens <= budget


def test_a_providers_compacted_history_replaces_what_it_summarizes_in_one_step(store):
    """OpenAI's ``/responses/compact`` returns the compacted window (what it kept and a compaction
    item): ``replace(..., format="responses")`` puts it in place of the history it was made from,
    atomically and only if no writer moved the window on meanwhile; Responses builds send it back
    as it came, the others leave the compaction item out."""
    w = store.window("compacted")
    w.add_many(RESPONSES_LOOP, format="responses")
    version = w.build_messages_structured(OPTS, format="responses").version
    compacted = [RESPONSES_LOOP[0], COMPACTED]  # the compact endpoint's output: kept user input, then the summary
    w.add("a writer's late message", role="user")
    with pytest.raises(cs.VersionConflictError):
        w.replace(compacted, format="responses", expect_version=version)
    w.remove(w.items()[-1].id or "")
    version = w.build_messages_structured(OPTS, format="responses").version
    assert w.replace(compacted, format="responses", model="gpt-5.6", expect_version=version) == 2
    built = w.build_messages_structured(OPTS, format="responses")
    assert msgspec.json.encode(built.messages) == msgspec.json.encode(compacted) and built.total_tokens > (
        w.build_messages_structured(OPTS).total_tokens
    )  # the compaction counts in Responses builds
    assert w.build_messages(OPTS) == [RESPONSES_LOOP[0]] and w.verify().ok  # no empty assistant message
    anthropic = w.build_messages(OPTS, format="anthropic")
    assert anthropic["messages"] == _as_blocks([RESPONSES_LOOP[0]])
    valid("anthropic", anthropic)


def test_an_anthropic_compaction_block_comes_back_as_it_came_and_stands_for_what_it_replaced(store):
    """Server-side compaction (Anthropic's context management) answers with a ``compaction``
    block: stored as it came, an Anthropic build sends it back byte for byte (it validates as the
    SDK's beta message param), counts its summary in every turn, and no other build sends it."""
    pydantic = pytest.importorskip("pydantic")
    beta = pytest.importorskip("anthropic.types.beta")
    summary = "Earlier: the user asked for Paris' weather; 15 degrees."
    sealed = {"encrypted_content": "EqKBCgYIAhgBKkBEXAMPLEcompacted", "signature": "EqQBCgIYAhIMcompaction-sig"}
    block = {"type": "compaction", "content": summary, **sealed}
    w = store.window("compacted-anthropic")
    loop = [CLAUDE_LOOP[0], {"role": "assistant", "content": [block, {"type": "text", "text": "Going on."}]},
            {"role": "user", "content": "And tomorrow?"}]  # fmt: skip
    w.add_many(loop, format="anthropic", model="claude-opus-5-5")
    opts = cs.BuildOptions(reserve_for_response=0, max_history_items=1000, reasoning_context="current_turn")
    built = w.build_messages_structured(opts, format="anthropic")
    assert built.messages["messages"][1]["content"][0] == block  # as it came, first
    assert msgspec.json.encode(built.messages["messages"][1]["content"][0]) == msgspec.json.encode(block)
    pydantic.TypeAdapter(list[beta.BetaMessageParam]).validate_python(built.messages["messages"], strict=True)
    own = w.items()[1].content[0]["tokens"]
    assert own > 10 and built.total_tokens == w.build_messages_structured(opts).total_tokens + own  # an earlier turn's
    for fmt in ("openai", "responses", "gemini"):
        assert "compaction-sig" not in json.dumps(w.build_messages(opts, format=fmt)), fmt


@pytest.mark.parametrize(
    "spoil",
    [
        lambda b: b.replace(b'"format":"anthropic"', b'"format":"bedrock"'),
        lambda b: re.sub(rb'"tokens":\d+', b'"tokens":-3', b),
        lambda b: b.replace(b'"type":"thinking"', b'"type":"telepathy"'),
        lambda b: b.replace(b'"signature":"', b'"signature":7,"x":"'),
    ],
    ids=["a format no provider has", "negative tokens", "an unknown block", "a signature that is no str"],
)
def test_a_native_part_read_back_in_no_shape_is_a_corrupt_window(make_store, r, prefix, spoil):
    """Stored data is hostile: a native part no add could have written, read back by a store
    without the item cached, raises ``CorruptWindowError`` for reads and builds (which write
    nothing, their ``built`` event neither), and ``verify()`` names the item."""
    make_store().window("hostile").add_many(CLAUDE_LOOP[:3], format="anthropic")
    items_key = key(prefix, "hostile", "items")
    body = bytes(r.hget(items_key, "ctx-2"))
    assert b'"type":"native"' in body
    r.hset(items_key, "ctx-2", spoil(body))
    before, events = r.hgetall(items_key), r.xlen(key(prefix, "hostile", "events"))
    w = make_store(item_cache_bytes=0).window("hostile")
    for read in (w.items, lambda: w.build_messages(OPTS, format="anthropic"), lambda: w.build_messages(OPTS)):
        with pytest.raises(cs.CorruptWindowError):
            read()
    report = w.verify()
    assert r.hgetall(items_key) == before and r.xlen(key(prefix, "hostile", "events")) == events
    assert not report.ok and "ctx-2" in str(report)
