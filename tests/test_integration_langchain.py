"""ContextStoreChatMessageHistory: LangChain's BaseChatMessageHistory on a window."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain_core")

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage

import contextstore as cs
from contextstore.integrations.langchain import ContextStoreChatMessageHistory

from support import key, run_processes

MESSAGES = [
    SystemMessage(content="Be brief."),
    HumanMessage(content="Weather in Paris and Lyon?", id="h1", additional_kwargs={"source": "web"}),
    AIMessage(
        content="",
        id="a1",
        tool_calls=[
            {"name": "weather", "args": {"city": "Paris"}, "id": "call_1", "type": "tool_call"},
            {"name": "weather", "args": {"city": "Lyon"}, "id": "call_2", "type": "tool_call"},
        ],
        usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        response_metadata={"model_name": "m"},
    ),
    ToolMessage(content="18C", tool_call_id="call_1", artifact={"raw": [18]}),
    ToolMessage(content=[{"type": "text", "text": "16C"}], tool_call_id="call_2", status="success"),
    AIMessage(content=[{"type": "text", "text": "Paris 18C, Lyon 16C."}]),
    ChatMessage(role="critic", content="Good answer."),
]


def test_every_message_kind_round_trips_sync_and_async(any_store, r, prefix, redis_url):
    history = ContextStoreChatMessageHistory("rt", any_store)
    assert isinstance(history, BaseChatMessageHistory) and not r.exists(key(prefix, "rt", "meta"))
    history.add_messages(MESSAGES[:3])
    asyncio.run(history.aadd_messages(MESSAGES[3:]))
    assert history.messages == MESSAGES
    assert asyncio.run(history.aget_messages()) == MESSAGES
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        stored = plain.window("rt").items()
    assert [i.group for i in stored[2:5]] == ["call_1"] * 3  # the call and both results: one group
    assert stored[2].metadata["tool_calls"][1]["function"] == {"name": "weather", "arguments": '{"city": "Lyon"}'}
    history.clear()
    assert history.messages == []
    history.add_user_message("again")
    asyncio.run(history.aclear())
    assert asyncio.run(history.aget_messages()) == []


def test_unpaired_tool_messages_are_kept_as_plain_messages(any_store):
    history = ContextStoreChatMessageHistory("plain", any_store)
    lone = ToolMessage(content="orphan", tool_call_id="nowhere")
    history.add_messages([lone])
    call = AIMessage(content="", tool_calls=[{"name": "f", "args": {}, "id": "c1", "type": "tool_call"}])
    history.add_messages([call])
    history.add_messages([call])  # the same call id again
    assert history.messages == [lone, call, call]


def test_the_budget_never_splits_a_tool_call_from_its_results(redis_url, prefix):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        history = ContextStoreChatMessageHistory("budget", store, max_tokens=300, keep_recent=1)
        for n in range(30):
            calls = [{"name": "f", "args": {"n": n}, "id": f"c{n}", "type": "tool_call"}]
            history.add_messages(
                [
                    HumanMessage(content=f"question {n} " + "words " * 10),
                    AIMessage(content="", tool_calls=calls),
                    ToolMessage(content="result " * 15, tool_call_id=f"c{n}"),
                    AIMessage(content=f"answer {n}"),
                ]
            )
        got = history.messages
        assert store.window("budget").stats().current_tokens <= 300
        calls = {c["id"] for m in got if isinstance(m, AIMessage) for c in m.tool_calls}
        results = {m.tool_call_id for m in got if isinstance(m, ToolMessage)}
        assert calls == results and got[-1].content == "answer 29"


def _append(url: str, prefix: str, worker: int, n: int) -> None:
    store = cs.ContextStore.from_url(url, prefix=prefix)
    history = ContextStoreChatMessageHistory("shared", store)
    for i in range(n):
        if worker % 2:
            asyncio.run(history.aadd_messages([HumanMessage(content=f"w{worker} {i}")]))
        else:
            history.add_messages([HumanMessage(content=f"w{worker} {i}")])
    store.close()


def test_four_processes_append_to_one_history(redis_url, prefix, one_server):
    run_processes(_append, [(redis_url, prefix, w, 50) for w in range(4)])
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        got = [m.content for m in ContextStoreChatMessageHistory("shared", store).messages]
    assert sorted(got) == sorted(f"w{w} {i}" for w in range(4) for i in range(50))
    for w in range(4):
        assert [c for c in got if c.startswith(f"w{w} ")] == [f"w{w} {i}" for i in range(50)]


def test_importing_contextstore_imports_no_framework():
    import subprocess
    import sys

    frameworks = "('agents', 'langchain_core', 'llama_index', 'agent_framework')"
    code = f"import sys, contextstore; print(sorted(m for m in {frameworks} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.filterwarnings("ignore::langchain_core._api.deprecation.LangChainDeprecationWarning")
def test_a_runnable_with_message_history_keeps_its_conversation_here(redis_url, prefix):
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.runnables.history import RunnableWithMessageHistory

    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        chain = RunnableWithMessageHistory(
            FakeListChatModel(responses=["Hello Ada.", "You are Ada."]),
            lambda session_id: ContextStoreChatMessageHistory(session_id, store, max_tokens=2000),
        )
        config = {"configurable": {"session_id": "user-42"}}
        chain.invoke([HumanMessage(content="Hi, I am Ada.")], config=config)
        asyncio.run(chain.ainvoke([HumanMessage(content="Who am I?")], config=config))
        got = [(type(m).__name__, m.content) for m in ContextStoreChatMessageHistory("user-42", store).messages]
        assert got == [
            ("HumanMessage", "Hi, I am Ada."),
            ("AIMessage", "Hello Ada."),
            ("HumanMessage", "Who am I?"),
            ("AIMessage", "You are Ada."),
        ]


def test_image_and_file_blocks_are_content_parts_stored_once(any_store, r, prefix, redis_url):
    import base64

    from test_blobs import image_url, screenshot

    url = image_url(6)["image_url"]["url"]
    png = base64.b64encode(screenshot(6)).decode()
    pdf = base64.b64encode(b"%PDF-1.4 " + bytes(20_000)).decode()
    messages = [
        HumanMessage(content=[
            {"type": "text", "text": "Compare these."},
            {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
            {"type": "image", "source_type": "base64", "data": png, "mime_type": "image/png"},
            {"type": "file", "base64": pdf, "mime_type": "application/pdf"},
        ]),
        AIMessage(content="They are the same screen."),
        HumanMessage(content=[{"type": "image_url", "image_url": url}]),
    ]  # fmt: skip
    history = ContextStoreChatMessageHistory("lc-vision", any_store, max_tokens=100_000)
    history.add_messages(messages)
    assert history.messages == messages
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        stored = plain.window("lc-vision").items()
    assert [p["type"] for p in stored[0].content] == ["text", "image_url", "image", "document"]
    # the PDF counts a token per 4 bytes, each 320x200 image a few hundred (not its base64)
    assert stored[0].token_count < 20_009 // 4 + 1_000 < (len(url) + len(png)) // 4
    blobs = [k for k in r.scan_iter(f"{prefix}:{{*#blobs:*}}:*") if not k.endswith(b":index")]
    assert len(blobs) == 2  # the PNG (as a data URL and as base64: one blob) and the PDF, each once


def test_an_image_block_the_store_would_refuse_is_kept_verbatim(any_store, redis_url, prefix):
    """A block whose data is no image (or a PNG cut short) is stored all the same and comes back
    exactly; the window item says it was left out, so no build sends it."""
    import base64

    from test_blobs import screenshot

    cut = base64.b64encode(screenshot(8)[:2000]).decode()
    messages = [
        HumanMessage(content=[
            {"type": "text", "text": "What is this?"},
            {"type": "image", "source_type": "base64", "data": cut, "mime_type": "image/png"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,completed"}},
        ]),
    ]  # fmt: skip
    history = ContextStoreChatMessageHistory("lc-strict", any_store, max_tokens=100_000)
    history.add_messages(messages)
    assert history.messages == messages
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        [item] = plain.window("lc-strict").items()
        sent = str(plain.window("lc-strict").build_messages(cs.BuildOptions(reserve_for_response=0)))
    assert [p["type"] for p in item.content] == ["text", "text", "text"]
    assert sent.count("[image data left out:") == 2 and cut not in sent and "base64,completed" not in sent


def _reply(text: str, prompt: int, msg_id: str | None, model: str = "claude-x") -> AIMessage:
    """An AI message as a chat model returns it: LangChain's ``input_tokens`` counts every
    prompt token, of which 20 were read from the cache and 10 written to it."""
    details = {"cache_read": 20, "cache_creation": 10}
    usage = {"input_tokens": prompt, "output_tokens": 7, "total_tokens": prompt + 7, "input_token_details": details}
    return AIMessage(text, id=msg_id, usage_metadata=usage, response_metadata={"model_name": model})


def test_the_usage_an_ai_message_reports_is_recorded_once_for_the_window_the_model_was_given(
    any_store, redis_url, prefix
):
    history = ContextStoreChatMessageHistory("paid", any_store)
    history.add_messages([SystemMessage("Be brief."), HumanMessage("Weather in Paris?", id="h1")])
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        win = plain.window("paid")
        estimated = win.build_messages_structured().total_tokens  # what the model is given
        reply = _reply("18C", 2 * estimated, "msg_01")
        history.add_messages([reply])
        asyncio.run(history.aadd_messages([reply]))  # the step again (a retry): stored again, its usage not
        stats = win.stats()
        assert stats.usage == cs.UsageTotals(
            input_tokens=2 * estimated - 30, output_tokens=7, cache_read_tokens=20, cache_write_tokens=10, records=1
        )
        assert stats.token_calibration == pytest.approx(2.0, abs=1e-3)  # the provider counted 2x the estimate
        # a name and an id record_usage would refuse are left out: the reply is stored, its usage too
        history.add_messages([_reply("sunny", 100, "not an id", model="not a model"), AIMessage("no usage")])
        assert win.stats().usage.records == 2
    assert [m.content for m in history.messages][2:] == ["18C", "18C", "sunny", "no usage"]


def test_an_ai_message_s_reasoning_blocks_come_back_as_they_came_and_nowhere_else(any_store, redis_url, prefix):
    """A reasoning model's AI message (Anthropic's thinking blocks with their signatures, or
    LangChain's standard reasoning block) and its tool call: the message comes back exactly, and
    its reasoning is in no build of the window (nor in the item's text)."""
    thinking = {"type": "thinking", "thinking": "Paris first.", "signature": "EqQBCgIYAhIM-langchain-sig"}
    standard = {"type": "reasoning", "reasoning": "Then Lyon.", "extras": {"signature": "std-sig-42"}}
    call = {"name": "weather", "args": {"city": "Paris"}, "id": "toolu_1", "type": "tool_call"}
    messages = [
        HumanMessage("Weather in Paris and Lyon?"),
        AIMessage(content=[thinking, {**call, "type": "tool_use", "input": call["args"]}], tool_calls=[call]),
        ToolMessage("18C", tool_call_id="toolu_1"),
        AIMessage(content=[standard, {"type": "text", "text": "Paris 18C."}]),
    ]
    history = ContextStoreChatMessageHistory("thinks", any_store)
    history.add_messages(messages)
    assert history.messages == messages
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        w = plain.window("thinks")
        texts = [str(i.content) for i in w.items()]
        built = str(w.build_messages(cs.BuildOptions(reserve_for_response=0))) + w.build()
    for secret in ("EqQBCgIYAhIM-langchain-sig", "std-sig-42", "Paris first.", "Then Lyon."):
        assert not any(secret in t for t in texts) and secret not in built
    assert "Paris 18C." in built
