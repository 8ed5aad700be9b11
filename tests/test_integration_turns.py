"""Turns in the framework integrations: an openai-agents ``Runner`` run inside
``session.turn()`` and a LangChain ``RunnableWithMessageHistory`` run inside ``history.turn()``
write through the window's turn lease, so another worker's turn rejects, enqueues, interrupts
or rolls back the run; outside a turn nothing changes (the other integration tests)."""

from __future__ import annotations

import asyncio
import threading

import pytest

import contextstore as cs

from support import key


def _turn_events(r, prefix: str, sid: str) -> list[str]:
    return [f[b"event"].decode() for _, f in r.xrange(key(prefix, sid, "events")) if f[b"event"].startswith(b"turn_")]


# -- openai-agents ---------------------------------------------------------------------------


@pytest.fixture
def responses_server():
    pytest.importorskip("agents")
    from _openai_server import FakeChatServer

    server = FakeChatServer().start()
    yield server
    server.stop()


def _agent(base_url: str):
    from agents import Agent
    from agents.models.openai_responses import OpenAIResponsesModel
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="local", base_url=base_url, max_retries=0)
    return Agent(name="t", model=OpenAIResponsesModel("gpt-5", openai_client=client))


async def _run(agent, question, session):
    from agents import RunConfig, Runner

    result = await Runner.run(agent, question, session=session, run_config=RunConfig(tracing_disabled=True))
    return result.final_output


def _contents(items) -> list[str]:
    out = []
    for i in items:
        content = i.get("content")
        out.append(content if isinstance(content, str) else content[0]["text"])
    return out


def test_a_runner_in_a_session_turn_writes_through_it_and_a_second_turn_is_rejected(
    any_store, r, prefix, responses_server
):
    from contextstore.integrations.openai_agents import ContextStoreSession

    agent = _agent(responses_server.base_url)
    session, other = ContextStoreSession("t-rej", any_store), ContextStoreSession("t-rej", any_store)

    async def go():
        async with session.turn(policy="reject") as turn:
            answer = await _run(agent, "Hi", session)
            with pytest.raises(cs.TurnBusyError):
                async with other.turn(policy="reject"):
                    pass  # never runs
            return answer, [i.content for i in turn.items], await other.get_items()

    answer, written, stored = asyncio.run(go())
    assert answer == "seen 1 items"
    assert written == ["Hi", "seen 1 items"]  # the Runner's saves went through the turn
    assert _contents(stored) == ["Hi", "seen 1 items"]
    assert _turn_events(r, prefix, "t-rej") == ["turn_started", "turn_conflict", "turn_ended"]


@pytest.mark.parametrize("policy", ["interrupt", "rollback"])
def test_a_run_whose_turn_was_taken_over_stores_nothing_more(any_store, r, prefix, responses_server, policy):
    from contextstore.integrations.openai_agents import ContextStoreSession

    agent = _agent(responses_server.base_url)
    slow, fast = ContextStoreSession(f"t-{policy}", any_store), ContextStoreSession(f"t-{policy}", any_store)

    async def take_over():  # another worker (its own task: its own context)
        async with fast.turn(policy=policy, input="Second question"):
            return await _run(agent, [], fast)

    async def go():
        async with slow.turn(policy="reject") as turn:
            await slow.add_items([{"role": "user", "content": "First question"}])
            second = await asyncio.create_task(take_over())
            with pytest.raises(cs.TurnLostError):
                await _run(agent, [], slow)  # its answer is refused: nothing stored
        return second, turn.lost, await slow.get_items()

    second, lost, stored = asyncio.run(go())
    assert lost
    kept = ["First question"] if policy == "interrupt" else []  # a rollback removed the first turn's write
    assert second == f"seen {len(kept) + 1} items"
    assert _contents(stored) == [*kept, "Second question", second]


def test_an_enqueued_input_is_answered_by_the_next_turn(any_store, r, prefix, responses_server):
    from contextstore.integrations.openai_agents import ContextStoreSession

    agent = _agent(responses_server.base_url)
    first, second = ContextStoreSession("t-enq", any_store), ContextStoreSession("t-enq", any_store)

    async def go():
        async with first.turn(input="One") as turn:
            with pytest.raises(cs.TurnQueuedError):
                async with second.turn(policy="enqueue", input="Two"):
                    pass  # never runs: the input waits for a turn
            await _run(agent, [], first)
        assert turn.pending_left == 1
        async with second.turn() as next_turn:  # takes the waiting input as it starts
            await _run(agent, [], second)
        return [i.content for i in next_turn.pending], await first.get_items()

    pending, stored = asyncio.run(go())
    assert pending == ["Two"]
    assert _contents(stored) == ["One", "seen 1 items", "Two", "seen 3 items"]


# -- LangChain --------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::langchain_core._api.deprecation.LangChainDeprecationWarning")
def test_a_runnable_with_message_history_in_a_turn_is_fenced(redis_url, prefix, r):
    pytest.importorskip("langchain_core")
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.messages import HumanMessage
    from langchain_core.runnables.history import RunnableWithMessageHistory

    from contextstore.integrations.langchain import ContextStoreChatMessageHistory

    config = {"configurable": {"session_id": "lc-turn"}}
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        chain = RunnableWithMessageHistory(
            FakeListChatModel(responses=["One.", "Two.", "Three."]),
            lambda session_id: ContextStoreChatMessageHistory(session_id, store),  # a new history per run
        )
        history = ContextStoreChatMessageHistory("lc-turn", store)
        with history.turn() as turn:
            chain.invoke([HumanMessage(content="first")], config=config)
            busy: list[BaseException] = []

            def other_worker() -> None:
                try:
                    with ContextStoreChatMessageHistory("lc-turn", store).turn():
                        pass
                except cs.TurnBusyError as exc:
                    busy.append(exc)

            t = threading.Thread(target=other_worker)
            t.start()
            t.join()
            assert len(busy) == 1
        assert [i.content for i in turn.items] == ["first", "One."]  # the chain's save went through the turn

        # LangChain logs an error of its history save and goes on: the turn raises it as it ends
        with pytest.raises(cs.TurnLostError), history.turn() as slow:
            with ContextStoreChatMessageHistory("lc-turn", store).turn(policy="interrupt", input=HumanMessage("x")):
                pass  # the interrupting turn's context: its own
            chain.invoke([HumanMessage(content="second")], config=config)  # its save is refused
        assert slow.lost

        async def later() -> None:
            async with history.aturn():
                await chain.ainvoke([HumanMessage(content="third")], config=config)

        asyncio.run(later())
        got = [m.content for m in history.messages]
        assert got == ["first", "One.", "x", "third", "Three."]
    assert _turn_events(r, prefix, "lc-turn").count("turn_started") == 4


def test_a_sync_turn_on_an_asyncio_store_is_refused_clearly(redis_url, prefix):
    pytest.importorskip("langchain_core")
    from contextstore.integrations.langchain import ContextStoreChatMessageHistory

    astore = cs.AsyncContextStore.from_url(redis_url, prefix=prefix)
    history = ContextStoreChatMessageHistory("lc-async", astore)
    with pytest.raises(cs.InvalidOptionsError, match="aturn"), history.turn():
        pass
    asyncio.run(astore.close())
