"""ContextStoreSession: the openai-agents Session protocol on a window, against a real server."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

pytest.importorskip("agents")

from agents.memory.session import Session
from agents.memory.session_settings import SessionSettings

import contextstore as cs
from contextstore.integrations.openai_agents import ContextStoreSession

from support import key, run_processes

ITEMS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "user", "content": [{"type": "input_text", "text": "And in Lyon?"}]},
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Two cities: call the tool twice."}],
        "encrypted_content": "gAAAA-opaque",
    },
    {
        "id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "weather",
        "arguments": '{"city": "Paris"}', "status": "completed",
    },
    {"id": "fc_2", "type": "function_call", "call_id": "call_2", "name": "weather", "arguments": '{"city": "Lyon"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "18C, sunny"},
    {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "16C"}]},
    {"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "paris"}},
    {"type": "custom_tool_call", "call_id": "call_3", "name": "grep", "input": "TODO"},
    {"type": "custom_tool_call_output", "call_id": "call_3", "output": "3 matches"},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Paris 18C, Lyon 16C.", "annotations": []}],
    },
    {"type": "item_reference", "id": "msg_0"},
]  # fmt: skip


def _session(store, sid: str, **config) -> ContextStoreSession:
    return ContextStoreSession(sid, store, **config)


def run(coro):
    return asyncio.run(coro)


def test_it_is_a_session_and_every_item_kind_round_trips(any_store, r, prefix, redis_url):
    session = _session(any_store, "rt")
    assert isinstance(session, Session)
    assert not r.exists(key(prefix, "rt", "meta"))  # constructing did no I/O

    async def go():
        await session.add_items(ITEMS[:4])
        await session.add_items(ITEMS[4:])
        return await session.get_items(), await session.get_items(limit=3)

    everything, last3 = run(go())
    assert everything == ITEMS and last3 == ITEMS[-3:]
    # stored as the conversation API spells tool calls, so groups keep them together
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        stored = plain.window("rt").items()
    call = next(i for i in stored if (i.metadata or {}).get("tool_calls"))
    assert call.type is cs.ItemType.ASSISTANT_MESSAGE and call.group == "call_1"
    result = next(i for i in stored if i.type is cs.ItemType.TOOL_RESULT)
    assert result.group == "call_1" and result.content == "18C, sunny"
    assert stored[0].type is cs.ItemType.INSTRUCTION and stored[1].content == "What is the weather in Paris?"


def test_limits_pop_and_clear(any_store):
    session = _session(any_store, "ops", session_settings=SessionSettings(limit=2))

    async def go():
        assert await session.pop_item() is None
        await session.add_items(ITEMS[:3])
        assert await session.get_items() == ITEMS[1:3]  # the settings' limit
        assert await session.get_items(limit=0) == [] and await session.get_items(limit=-1) == []
        assert await session.get_items(limit=10) == ITEMS[:3]
        assert await session.pop_item() == ITEMS[2]
        assert await session.get_items(limit=10) == ITEMS[:2]
        await session.clear_session()
        assert await session.get_items() == [] and await session.pop_item() is None

    run(go())


def test_the_budget_never_splits_a_tool_call_from_its_output(redis_url, prefix):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        session = _session(store, "budget", max_tokens=400, keep_recent=1)

        async def go():
            for n in range(40):
                await session.add_items(
                    [
                        {"role": "user", "content": f"question {n}: " + "words " * 10},
                        {"type": "function_call", "call_id": f"c{n}", "name": "lookup", "arguments": "{}"},
                        {"type": "function_call_output", "call_id": f"c{n}", "output": "result " * 15},
                        {"role": "assistant", "content": f"answer {n}"},
                    ]
                )
            return await session.get_items()

        items = run(go())
        assert store.window("budget").stats().current_tokens <= 400
        calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
        outputs = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
        assert calls == outputs and items[-1] == {"role": "assistant", "content": "answer 39"}
        evicted = [e for e in store.window("budget").events(since="0") if isinstance(e, cs.events.ItemRemoved)]
        assert evicted  # what was dropped is in the window's events


def _append(url: str, prefix: str, worker: int, n: int) -> None:
    async def go():
        kind = cs.AsyncContextStore if worker % 2 else cs.ContextStore
        store = kind.from_url(url, prefix=prefix)
        session = ContextStoreSession("shared", store)
        for i in range(n):
            await session.add_items(
                [
                    {"type": "function_call", "call_id": f"w{worker}-{i}", "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": f"w{worker}-{i}", "output": f"w{worker} {i}"},
                ]
            )

    asyncio.run(go())


def test_four_processes_append_to_one_session(redis_url, prefix, one_server):
    run_processes(_append, [(redis_url, prefix, w, 50) for w in range(4)])
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        items = run(ContextStoreSession("shared", store).get_items())
        outputs = [i["output"] for i in items if i["type"] == "function_call_output"]
        assert sorted(outputs) == sorted(f"w{w} {i}" for w in range(4) for i in range(50))  # none lost or doubled
        for w in range(4):  # each worker's items in its order, each output right after its call
            mine = [i for i in items if i["call_id"].startswith(f"w{w}-")]
            assert [i["call_id"] for i in mine] == [f"w{w}-{i}" for i in range(50) for _ in (0, 1)]
        assert store.window("shared").verify().ok


def test_an_output_whose_call_is_gone_is_kept_unpaired(any_store):
    session = _session(any_store, "lone")
    lone = {"type": "function_call_output", "call_id": "gone", "output": "late"}
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}

    async def go():
        await session.add_items([lone])
        await session.add_items([call])
        await session.add_items([call])  # the same call id again
        return await session.get_items()

    assert run(go()) == [lone, call, call]


def test_session_settings_may_be_a_dict(any_store):
    session = ContextStoreSession("dict-settings", any_store, session_settings={"limit": 0})
    assert isinstance(session.session_settings, SessionSettings) and session.session_settings.limit == 0
    with pytest.raises(TypeError, match="limitt"):
        ContextStoreSession("bad", any_store, session_settings={"limitt": 1})


# -- the framework's compaction through the session's hooks ------------------------------------


def _compaction_session(underlying: ContextStoreSession, base_url: str, **kw):
    from agents.memory import OpenAIResponsesCompactionSession
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="local", base_url=base_url, max_retries=0)
    return OpenAIResponsesCompactionSession(
        session_id=underlying.session_id, underlying_session=underlying, client=client, model="gpt-5", **kw
    )


@pytest.fixture
def responses_server():
    from _openai_server import FakeChatServer

    server = FakeChatServer().start()
    yield server
    server.stop()


def _removal_events(r, prefix: str, sid: str) -> list[str]:
    return [
        f[b"reason"].decode() for _, f in r.xrange(key(prefix, sid, "events")) if f.get(b"event") == b"item_removed"
    ]


def test_a_manual_compaction_replaces_the_history_in_one_step(any_store, r, prefix, responses_server):
    from _openai_server import COMPACTED

    underlying = _session(any_store, "cmp-manual")
    session = _compaction_session(underlying, responses_server.base_url, compaction_mode="input")

    async def go():
        await session.add_items(ITEMS[:3])
        await session.run_compaction({"force": True})
        return await underlying.get_items()

    assert run(go()) == [COMPACTED]
    # one replace: the three items went with reason "replace", never a clear then an add
    assert _removal_events(r, prefix, "cmp-manual") == ["replace"] * 3
    assert [q["input"] for q in responses_server.requests][-1][0]["content"] == "Be brief."  # what it compacted


def test_an_automatic_compaction_after_a_run_replaces_the_exchange_atomically(any_store, r, prefix, responses_server):
    from agents import Agent, RunConfig, Runner
    from agents.models.openai_responses import OpenAIResponsesModel

    from _openai_server import COMPACTED

    underlying = _session(any_store, "cmp-auto")
    session = _compaction_session(
        underlying,
        responses_server.base_url,
        compaction_mode="input",
        should_trigger_compaction=lambda ctx: bool(ctx["compaction_candidate_items"]),
    )
    snapshots: list[int] = []
    real = underlying._get_compaction_snapshot

    async def spy(limit, **kw):
        snapshots.append(limit)
        return await real(limit, **kw)

    underlying._get_compaction_snapshot = spy  # type: ignore[method-assign]

    async def go():
        agent = Agent(name="t", model=OpenAIResponsesModel("gpt-5", openai_client=session.client))
        result = await Runner.run(agent, "How many?", session=session, run_config=RunConfig(tracing_disabled=True))
        return result.final_output, await underlying.get_items()

    answer, stored = run(go())
    assert answer == "seen 1 items"
    assert snapshots, "the framework did not take the session's snapshot hook"
    assert stored == [COMPACTED]
    assert _removal_events(r, prefix, "cmp-auto") == ["replace"] * 2  # the question and the answer, at once


def test_a_suffix_replacement_is_refused_when_another_writer_moved_on(any_store, redis_url, prefix):
    session = _session(any_store, "cmp-race")
    run(session.add_items(ITEMS[:3]))
    snap = run(session._get_compaction_snapshot(2))
    assert snap.items == ITEMS[1:3] and snap.complete is False
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:  # another worker appends
        run(ContextStoreSession("cmp-race", plain).add_items([{"role": "user", "content": "late"}]))
    assert run(snap.replace_suffix(0, [{"role": "assistant", "content": "summary"}])) is False
    assert run(session.get_items()) == [*ITEMS[:3], {"role": "user", "content": "late"}]  # nothing lost
    fresh = run(session._get_compaction_snapshot(10))
    assert fresh.complete is True
    assert run(fresh.replace_suffix(1, [{"role": "assistant", "content": "summary"}])) is True
    assert run(session.get_items()) == [ITEMS[0], {"role": "assistant", "content": "summary"}]


def test_hooks_stand_aside_for_a_subclass_that_stores_differently(any_store):
    class Transforming(ContextStoreSession):
        async def add_items(self, items):
            await super().add_items([{**i, "seen": True} for i in items])

    plain, custom = _session(any_store, "hook-plain"), Transforming("hook-custom", any_store)
    assert run(plain._get_compaction_snapshot(5)) is not None
    assert run(custom._get_compaction_snapshot(5)) is None
    assert run(custom._atomic_replace_items([])) is False


def test_branches_of_a_session_as_advanced_sqlite_session_makes_them(any_store):
    """create_branch_from_turn / switch_to_branch / list_branches over forks of the session's
    window: a branch holds what came before the turn, goes its own way, and main stays."""
    session = _session(any_store, "branchy")
    user = [{"role": "user", "content": f"question {n}"} for n in range(3)]
    answer = [{"role": "assistant", "content": f"answer {n}"} for n in range(3)]

    async def go():
        await session.add_items([user[0], answer[0], user[1], answer[1], user[2], answer[2]])
        branch = await session.create_branch_from_turn(2)
        assert branch == "turn_2_1" and await session.get_items() == [user[0], answer[0]]
        await session.add_items([{"role": "user", "content": "question 1, asked again"}])
        branches = await session.list_branches()
        assert [(b["branch_id"], b["message_count"], b["is_current"]) for b in branches] == [
            ("main", 6, False),
            ("turn_2_1", 3, True),
        ]
        await session.switch_to_branch("main")
        assert len(await session.get_items()) == 6
        assert await session.create_branch_from_turn(1, "fresh") == "fresh"
        assert await session.get_items() == []
        with pytest.raises(cs.InvalidOptionsError, match="no branch"):
            await session.switch_to_branch("nowhere")
        with pytest.raises(cs.InvalidOptionsError, match="turn_number must be from 1 to"):
            await session.create_branch_from_turn(9)

    run(go())


def test_images_and_files_are_content_parts_stored_once_and_come_back_exactly(any_store, r, prefix, redis_url):
    from test_blobs import image_url

    url = image_url(4)["image_url"]["url"]
    pdf = "data:application/pdf;base64," + base64.b64encode(b"%PDF-1.4 " + bytes(20_000)).decode()
    items = [
        {"role": "user", "content": [
            {"type": "input_text", "text": "What is on this screen?"},
            {"type": "input_image", "image_url": url, "detail": "high"},
            {"type": "input_file", "file_data": pdf, "filename": "spec.pdf"},
        ]},
        {"type": "computer_call", "call_id": "cu_1", "action": {"type": "screenshot"}, "status": "completed"},
        {"type": "computer_call_output", "call_id": "cu_1",
         "output": {"type": "computer_screenshot", "image_url": url}},
        {"role": "user", "content": [{"type": "input_image", "image_url": url, "detail": "high"}]},
        {"type": "function_call", "call_id": "fc_1", "name": "look", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "fc_1",  # a tool that returns an image and text
         "output": [{"type": "input_text", "text": "the login page"}, {"type": "input_image", "image_url": url}]},
    ]  # fmt: skip
    session = _session(any_store, "vision", max_tokens=100_000)
    run(session.add_items(items))
    assert run(session.get_items()) == items
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        stored = plain.window("vision").items()
    question, screenshot = stored[0], stored[2]
    assert question.content[1] == {"type": "image_url", "image_url": {"url": url, "detail": "high"}}
    assert screenshot.type is cs.ItemType.TOOL_RESULT and screenshot.content == [
        {"type": "image_url", "image_url": {"url": url}}
    ]
    assert screenshot.token_count < 2_000 < len(url) // 4  # counted from its size, not its base64
    assert stored[5].type is cs.ItemType.TOOL_RESULT and stored[5].content == [
        {"type": "text", "text": "the login page"}, {"type": "image_url", "image_url": {"url": url}}
    ]  # fmt: skip
    blobs = [k for k in r.scan_iter(f"{prefix}:{{*#blobs:*}}:*") if not k.endswith(b":index")]
    assert len(blobs) == 2  # the screenshot (three times) and the PDF, once each
    raw = r.hget(key(prefix, "vision", "items"), stored[3].id)
    assert len(raw) < 1_000  # the item refers to the screenshot; its metadata does not repeat it


def test_what_a_run_cost_is_recorded_from_its_usage_once_per_request_id(any_store, redis_url, prefix):
    from agents.usage import deserialize_usage

    session = ContextStoreSession("paid", any_store)
    details = {"cached_tokens": 100, "cache_write_tokens": 10}  # of the 130 input tokens
    usage = deserialize_usage({"requests": 1, "input_tokens": 130, "output_tokens": 9, "input_tokens_details": details})

    async def go():
        await session.add_items([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
        await session.record_usage(usage, model="gpt-x", request_id="resp_1")
        await session.add_items([{"role": "user", "content": "again"}])
        await session.record_usage(usage, model="gpt-x", request_id="resp_1")  # the same run's report: once
        with pytest.raises(cs.InvalidOptionsError, match="model"):
            await session.record_usage(usage, model="not a model")
        with pytest.raises(cs.InvalidOptionsError, match="Usage"):
            await session.record_usage({"input_tokens": 5})

    run(go())
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        assert plain.window("paid").stats().usage == cs.UsageTotals(
            input_tokens=20, output_tokens=9, cache_read_tokens=100, cache_write_tokens=10, records=1
        )


def test_a_part_the_store_would_refuse_is_kept_verbatim_never_dropped(any_store, redis_url, prefix):
    """openai-agents hands a session what its tools made: a computer tool's screenshot whose data
    is not a real PNG (``data:image/png;base64,completed``, as its own tests send), a cut PNG.
    The session stores every item and gives each back exactly (the framework's protocol wins);
    such data stays in the item's kept form, not a content part, and the built item says it was
    left out."""
    from test_blobs import screenshot

    cut = "data:image/png;base64," + base64.b64encode(screenshot(3)[:2000]).decode()
    items = [
        {"type": "computer_call", "call_id": "cu_1", "action": {"type": "screenshot"}, "status": "completed"},
        {"type": "computer_call_output", "call_id": "cu_1",
         "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,completed"}},
        {"role": "user", "content": [{"type": "input_text", "text": "and this?"},
                                     {"type": "input_image", "image_url": cut, "detail": "high"}]},
    ]  # fmt: skip
    session = _session(any_store, "strict", max_tokens=100_000)
    run(session.add_items(items))
    assert run(session.get_items()) == items
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        stored = plain.window("strict").items()
        messages = plain.window("strict").build_messages(cs.BuildOptions(reserve_for_response=0))
    assert [i.type for i in stored] == [
        cs.ItemType.ASSISTANT_MESSAGE,
        cs.ItemType.TOOL_RESULT,
        cs.ItemType.USER_MESSAGE,
    ]
    assert stored[1].content == [{"type": "text", "text": "[image data left out: holds data that is not valid base64]"}]
    assert (
        stored[2].content[1]["text"].startswith("[image data left out: is an image (image/png) that is not whole: its")
    )
    sent = json.dumps(messages)
    assert "completed" not in sent.replace('"status": "completed"', "") and cut not in sent
    assert "image data left out" in sent


def test_reasoning_and_compaction_items_stay_across_turns_each_reasoning_with_the_item_it_preceded(any_store):
    """A reasoning model's turns on a session whose budget evicts: every reasoning item is given
    back (byte for byte) only with the function call or message that followed it, never alone
    (the Responses API refuses a reasoning item without its following item); a compaction item
    comes back as it was stored, across turns."""
    session = _session(any_store, "reasoning", max_tokens=1100)
    compaction = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-summary-of-earlier"}

    def turn(n: int) -> list[dict]:
        return [
            {"role": "user", "content": f"Question {n}: " + "words " * (5 + 13 * n % 37)},  # sizes that vary:
            {"id": f"rs_{n}a", "type": "reasoning", "summary": [],  # eviction stops mid-turn
             "encrypted_content": f"gAAAA-{n}a" + "x" * (7 * n % 23)},
            {"id": f"fc_{n}", "type": "function_call", "call_id": f"call_{n}", "name": "look", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"call_{n}", "output": "seen " * (3 + 11 * n % 29)},
            {"id": f"rs_{n}b", "type": "reasoning", "summary": [], "encrypted_content": f"gAAAA-{n}b"},
            {"id": f"msg_{n}", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "An answer. " * (2 + 5 * n % 17), "annotations": []}]},
        ]  # fmt: skip

    async def go():
        await session.add_items([compaction])
        await session.add_items(turn(0))
        early = await session.get_items()
        for n in range(1, 12):
            await session.add_items(turn(n))
        return early, await session.get_items()

    early, items = run(go())
    assert early[0] == compaction and early[1:] == turn(0)  # as it came, the next turn beside it
    assert len(items) < 1 + 12 * 6  # the budget evicted
    for k, item in enumerate(items):
        if item.get("type") == "reasoning":
            n, which = item["id"][3:-1], item["id"][-1]
            following = items[k + 1] if k + 1 < len(items) else {}
            assert following.get("id") == (f"fc_{n}" if which == "a" else f"msg_{n}"), (k, item["id"])
        if item.get("type") == "function_call":
            assert items[k - 1]["id"] == f"rs_{item['id'][3:]}a"
    assert any(i.get("type") == "reasoning" for i in items) and items[-1]["id"] == "msg_11"
