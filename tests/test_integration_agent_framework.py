"""ContextStoreChatMessageStore: Agent Framework's HistoryProvider on windows."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agent_framework")

from agent_framework import Agent, BaseChatClient, ChatResponse, Content, HistoryProvider, Message

import contextstore as cs
from contextstore.integrations.agent_framework import ContextStoreChatMessageStore

from support import key, run_processes

MESSAGES = [
    Message(role="system", contents=["Be brief."]),
    Message(role="user", contents=["Weather in Paris and Lyon?"], additional_properties={"lang": "en"}),
    Message(
        role="assistant",
        contents=[
            Content.from_text_reasoning(text="two cities"),
            Content.from_function_call(call_id="c1", name="weather", arguments={"city": "Paris"}),
            Content.from_function_call(call_id="c2", name="weather", arguments='{"city": "Lyon"}'),
        ],
    ),
    Message(
        role="tool",
        contents=[
            Content.from_function_result(call_id="c1", result="18C"),
            Content.from_function_result(call_id="c2", result="16C"),
        ],
    ),
    Message(role="assistant", contents=["Paris 18C, Lyon 16C."]),
]


def dicts(messages):
    return [m.to_dict() for m in messages]


def test_messages_round_trip_and_tool_calls_pair(any_store, r, prefix, redis_url):
    history = ContextStoreChatMessageStore(any_store)
    assert isinstance(history, HistoryProvider) and history.source_id == "contextstore"

    async def go():
        assert await history.get_messages("s1") == []
        await history.save_messages("s1", MESSAGES[:2])
        await history.save_messages("s1", MESSAGES[2:])
        got = await history.get_messages("s1")
        await history.clear("s1")
        return got, await history.get_messages("s1")

    got, after_clear = asyncio.run(go())
    assert dicts(got) == dicts(MESSAGES) and after_clear == []
    assert r.exists(key(prefix, "s1", "meta"))
    # no session id: the framework's file and Redis providers use "default"
    asyncio.run(history.save_messages(None, MESSAGES[:1]))
    assert dicts(asyncio.run(history.get_messages(None))) == dicts(MESSAGES[:1]) and r.exists(
        key(prefix, "default", "meta")
    )


def test_the_tool_call_and_its_results_form_one_group(redis_url, prefix):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        history = ContextStoreChatMessageStore(store)
        asyncio.run(history.save_messages("g", MESSAGES))
        items = store.window("g").items()
        assert items[2].metadata["tool_calls"][1]["function"] == {"name": "weather", "arguments": '{"city": "Lyon"}'}
        assert items[2].group == items[3].group == "c1" and items[3].content == "18C\n16C"


def test_the_budget_never_splits_a_call_from_its_results(redis_url, prefix):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        history = ContextStoreChatMessageStore(store, max_tokens=300, keep_recent=1)

        async def go():
            for n in range(25):
                await history.save_messages(
                    "b",
                    [
                        Message(role="user", contents=[f"question {n} " + "words " * 10]),
                        Message(
                            role="assistant",
                            contents=[Content.from_function_call(call_id=f"c{n}", name="f", arguments={})],
                        ),
                        Message(
                            role="tool", contents=[Content.from_function_result(call_id=f"c{n}", result="result " * 15)]
                        ),
                        Message(role="assistant", contents=[f"answer {n}"]),
                    ],
                )
            return await history.get_messages("b")

        got = asyncio.run(go())
        assert store.window("b").stats().current_tokens <= 300
        calls = {c.call_id for m in got for c in m.contents if c.type == "function_call"}
        results = {c.call_id for m in got for c in m.contents if c.type == "function_result"}
        assert calls == results and got[-1].text == "answer 24"


def _append(url: str, prefix: str, worker: int, n: int) -> None:
    kind = cs.AsyncContextStore if worker % 2 else cs.ContextStore
    history = ContextStoreChatMessageStore(kind.from_url(url, prefix=prefix))

    async def go():
        for i in range(n):
            await history.save_messages("shared", [Message(role="user", contents=[f"w{worker} {i}"])])

    asyncio.run(go())


def test_four_processes_append_to_one_session(redis_url, prefix, one_server):
    run_processes(_append, [(redis_url, prefix, w, 50) for w in range(4)])
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        got = [m.text for m in asyncio.run(ContextStoreChatMessageStore(store).get_messages("shared"))]
    assert sorted(got) == sorted(f"w{w} {i}" for w in range(4) for i in range(50))
    for w in range(4):
        assert [t for t in got if t.startswith(f"w{w} ")] == [f"w{w} {i}" for i in range(50)]


def test_data_contents_are_content_parts_stored_once(any_store, r, prefix, redis_url):
    from test_blobs import screenshot

    png, pdf = screenshot(9), b"%PDF-1.4 " + bytes(20_000)
    question = Message(role="user", contents=[
        Content.from_text("What is on this screen, and in this file?"),
        Content.from_data(data=png, media_type="image/png"),
        Content.from_data(data=pdf, media_type="application/pdf"),
        Content.from_uri(uri="https://example.com/a.png", media_type="image/png"),
    ])  # fmt: skip
    again = Message(role="user", contents=[Content.from_data(data=png, media_type="image/png")])
    look = Message(role="assistant", contents=[Content.from_function_call(call_id="s1", name="look", arguments={})])
    seen = Message(role="tool", contents=[  # a tool result that holds the screenshot it took
        Content.from_function_result(call_id="s1", result=[Content.from_text("the form"),
                                                           Content.from_data(data=png, media_type="image/png")]),
    ])  # fmt: skip
    messages = [question, Message(role="assistant", contents=["A form."]), again, look, seen]
    history = ContextStoreChatMessageStore(any_store, max_tokens=100_000)
    asyncio.run(history.save_messages("vision", messages))
    got = asyncio.run(history.get_messages("vision"))
    assert dicts(got) == dicts(messages)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        stored = plain.window("vision").items()
    assert [p["type"] for p in stored[0].content] == ["text", "image_url", "file"]
    assert stored[2].token_count < 1_000 < len(png) // 3  # the image counted by its size
    assert stored[4].type is cs.ItemType.TOOL_RESULT and [p["type"] for p in stored[4].content] == ["text", "image_url"]
    assert stored[4].content[0]["text"] == "the form" and stored[4].token_count < 1_000
    blobs = [k for k in r.scan_iter(f"{prefix}:{{*#blobs:*}}:*") if not k.endswith(b":index")]
    assert len(blobs) == 2  # the screenshot (three times) and the PDF, once each


def test_the_frameworks_history_options_are_taken_not_refused(any_store):
    history = ContextStoreChatMessageStore(
        any_store, store_context_messages=True, store_context_from={"rag"}, skip_excluded=True, max_tokens=10_000
    )
    assert history.store_context_messages and history.store_context_from == {"rag"} and history.skip_excluded
    kept = Message(role="user", contents=["keep me"])
    excluded = Message(role="assistant", contents=["compacted away"], additional_properties={"_excluded": True})
    asyncio.run(history.save_messages("opts", [kept, excluded]))
    assert dicts(asyncio.run(history.get_messages("opts"))) == dicts([kept])
    everything = ContextStoreChatMessageStore(any_store)
    assert len(asyncio.run(everything.get_messages("opts"))) == 2


def test_a_re_sent_conversation_is_stored_once(any_store):
    history = ContextStoreChatMessageStore(any_store, max_tokens=10_000)
    hi, hello = Message(role="user", contents=["hi"]), Message(role="assistant", contents=["hello"])
    again, yes = Message(role="user", contents=["again"]), Message(role="assistant", contents=["yes"])

    async def go():
        await history.save_messages("resent", [hi, hello])
        await history.save_messages("resent", [hi, hello, again, yes])  # the whole conversation again
        await history.save_messages("resent", [again, yes])  # an overlap at the end
        return await history.get_messages("resent")

    assert [m.text for m in asyncio.run(go())] == ["hi", "hello", "again", "yes"]
    repeated = ContextStoreChatMessageStore(any_store)
    asyncio.run(repeated.save_messages("twice", [hi]))
    asyncio.run(repeated.save_messages("twice", [hi]))  # a user who says it twice, without an id
    assert [m.text for m in asyncio.run(repeated.get_messages("twice"))] == ["hi", "hi"]
    with_ids = [Message(role="user", contents=["same words"], message_id="m1")]
    asyncio.run(repeated.save_messages("ids", with_ids))
    asyncio.run(repeated.save_messages("ids", with_ids))  # the same message, re-sent
    assert len(asyncio.run(repeated.get_messages("ids"))) == 1


def test_nan_and_infinity_in_additional_properties_come_back(any_store):
    import math

    history = ContextStoreChatMessageStore(any_store)
    odd = Message(role="assistant", contents=["scored"], additional_properties={"score": math.nan, "to": [math.inf]})
    asyncio.run(history.save_messages("floats", [odd]))
    (back,) = asyncio.run(history.get_messages("floats"))
    assert math.isnan(back.additional_properties["score"]) and back.additional_properties["to"] == [math.inf]


class ScriptedClient(BaseChatClient):
    """A chat client that answers every request with the same text, no network."""

    def _inner_get_response(self, *, messages, stream, options, **kwargs):
        async def answer() -> ChatResponse:
            return ChatResponse(messages=[Message(role="assistant", contents=["noted"])])

        return answer()


def test_a_run_without_a_session_leaves_a_window_that_expires(redis_url, prefix, r, one_server):
    async def main() -> None:
        store = cs.AsyncContextStore.from_url(redis_url, prefix=prefix)
        history = ContextStoreChatMessageStore(store)
        agent = Agent(client=ScriptedClient(), context_providers=[history])
        await agent.run("no session")  # the framework makes a session with a random id
        await agent.run("mine", session=agent.create_session(session_id="user-42"))
        kept = ContextStoreChatMessageStore(store, generated_session_ttl_seconds=None)
        await Agent(client=ScriptedClient(), context_providers=[kept]).run("keep this one")
        await store.close()

    asyncio.run(main())
    metas = {k.decode().split("{")[1].split("}")[0]: k for k in r.scan_iter(f"{prefix}:*:meta")}
    generated = [w for w in metas if w != "user-42"]
    assert "user-42" in metas and len(generated) == 2
    assert r.ttl(metas["user-42"]) == -1  # the caller's own session is kept
    ttls = sorted(r.ttl(metas[w]) for w in generated)
    assert ttls[0] == -1 and 86_000 < ttls[1] <= 86_400  # kept when asked, else a day


class BilledClient(BaseChatClient):
    """A chat client whose answer reports what it cost, as a provider's does (no network)."""

    def _inner_get_response(self, *, messages, stream, options, **kwargs):
        usage = {"input_token_count": 130, "output_token_count": 9, "cache_read_input_token_count": 100}

        async def answer() -> ChatResponse:
            return ChatResponse(
                messages=[Message(role="assistant", contents=["paid"])], response_id="resp_7", usage_details=usage
            )

        return answer()


def test_a_runs_reported_usage_is_recorded_for_its_session(redis_url, prefix):
    async def main() -> None:
        async with cs.AsyncContextStore.from_url(redis_url, prefix=prefix) as store:
            agent = Agent(client=BilledClient(), context_providers=[ContextStoreChatMessageStore(store)])
            await agent.run("what does it cost?", session=agent.create_session(session_id="billed"))
            await agent.run("and again?", session=agent.create_session(session_id="billed"))  # the same response id

    asyncio.run(main())
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        win = plain.window("billed")
        assert [i.content for i in win.items()] == ["what does it cost?", "paid", "and again?", "paid"]
        assert win.stats().usage == cs.UsageTotals(input_tokens=30, output_tokens=9, cache_read_tokens=100, records=1)


def test_reasoning_contents_come_back_as_they_came_and_nowhere_else(any_store, redis_url, prefix):
    """An assistant message with the model's reasoning (``text_reasoning``, its protected data
    as the provider sealed it) before its function call: the message comes back exactly, and the
    reasoning is in no build of the session's window."""
    history = ContextStoreChatMessageStore(any_store)
    messages = [
        Message(role="user", contents=[Content.from_text(text="Weather in Paris?")]),
        Message(
            role="assistant",
            contents=[
                Content.from_text_reasoning(text="Call the weather tool.", protected_data="gAAAA-sealed-reasoning"),
                Content.from_function_call(call_id="c1", name="weather", arguments={"city": "Paris"}),
            ],
        ),
        Message(role="tool", contents=[Content.from_function_result(call_id="c1", result="18C")]),
        Message(role="assistant", contents=[Content.from_text(text="18C in Paris.")]),
    ]
    asyncio.run(history.save_messages("thinks", messages))
    assert dicts(asyncio.run(history.get_messages("thinks"))) == dicts(messages)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        w = plain.window("thinks")
        seen = str([i.content for i in w.items()]) + str(w.build_messages(cs.BuildOptions(reserve_for_response=0)))
    assert "gAAAA-sealed-reasoning" not in seen and "Call the weather tool." not in seen and "18C in Paris." in seen
