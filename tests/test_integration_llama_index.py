"""ContextStoreChatStore: llama-index's BaseChatStore on windows."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.storage.chat_store.base import BaseChatStore

import contextstore as cs
from contextstore.integrations.llama_index import ContextStoreChatStore

from support import key, run_processes

MESSAGES = [
    ChatMessage(role=MessageRole.SYSTEM, content="Be brief."),
    ChatMessage(role=MessageRole.USER, content="Weather in Paris?", additional_kwargs={"lang": "en"}),
    ChatMessage(
        role=MessageRole.ASSISTANT,
        content="",
        additional_kwargs={
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
            ]
        },
    ),
    ChatMessage(role=MessageRole.TOOL, content="18C", additional_kwargs={"tool_call_id": "c1", "name": "weather"}),
    ChatMessage(role=MessageRole.ASSISTANT, content="18C in Paris."),
]


def test_the_protocol_round_trips_and_replaces_atomically(any_store, r, prefix, redis_url):
    chat = ContextStoreChatStore(any_store)
    assert isinstance(chat, BaseChatStore) and ContextStoreChatStore.class_name() == "ContextStoreChatStore"
    assert chat.get_messages("k1") == [] and not r.exists(key(prefix, "k1", "meta"))
    for m in MESSAGES:
        chat.add_message("k1", m)
    assert chat.get_messages("k1") == MESSAGES
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        stored = plain.window("k1").items()
    assert stored[2].group == stored[3].group == "c1"
    chat.set_messages("k1", MESSAGES[:2])  # the same tool call ids would be free again
    assert chat.get_messages("k1") == MESSAGES[:2]
    chat.set_messages("k1", MESSAGES)
    assert chat.get_messages("k1") == MESSAGES
    assert chat.delete_message("k1", 1) == MESSAGES[1] and chat.delete_message("k1", 99) is None
    assert chat.delete_last_message("k1") == MESSAGES[-1]
    chat.add_message("k2", MESSAGES[1])
    assert {"k1", "k2"} <= set(chat.get_keys())
    assert chat.delete_messages("k1") == [MESSAGES[0], *MESSAGES[2:4]]
    assert chat.get_messages("k1") == [] and chat.delete_messages("k1") is None
    assert asyncio.run(chat.aget_messages("k2")) == [MESSAGES[1]]


def test_set_messages_is_one_step(redis_url, prefix, r):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        chat = ContextStoreChatStore(store)
        chat.set_messages("k", MESSAGES)
        stream = key(prefix, "k", "events")
        before = r.xlen(stream)
        chat.set_messages("k", MESSAGES[:1])
        assert [e["reason"] for e in _events_after(r, stream, before) if e.get("reason")] == ["replace"] * 5
        assert chat.get_messages("k") == MESSAGES[:1]


def _events_after(r, stream, n):
    return [{k.decode(): v.decode() for k, v in f.items()} for _, f in r.xrange(stream)[n:]]


def _append(url: str, prefix: str, worker: int, n: int, key: str = "shared") -> None:
    with cs.ContextStore.from_url(url, prefix=prefix) as store:
        chat = ContextStoreChatStore(store)
        for i in range(n):
            chat.add_message(key, ChatMessage(role=MessageRole.USER, content=f"w{worker} {i}"))


def test_four_processes_append_to_one_key(redis_url, prefix, one_server):
    run_processes(_append, [(redis_url, prefix, w, 50) for w in range(4)])
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        got = [m.content for m in ContextStoreChatStore(store).get_messages("shared")]
    assert sorted(got) == sorted(f"w{w} {i}" for w in range(4) for i in range(50))
    for w in range(4):
        assert [t for t in got if t.startswith(f"w{w} ")] == [f"w{w} {i}" for i in range(50)]


def _user(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.USER, content=text)


def test_add_message_inserts_at_an_index_like_a_list(any_store):
    chat = ContextStoreChatStore(any_store)
    want: list[ChatMessage] = []
    for n, idx in enumerate([None, 0, 1, -1, 99, -99, 2]):
        message = _user(f"m{n}")
        chat.add_message("ins", message, idx=idx)
        if idx is None:
            want.append(message)
        else:
            want.insert(idx, message)
        assert chat.get_messages("ins") == want
    asyncio.run(chat.async_add_message("ins", _user("async"), idx=1))
    want.insert(1, _user("async"))
    assert chat.get_messages("ins") == want


def test_an_insertion_never_splits_a_tool_call_from_its_results(any_store, redis_url, prefix):
    chat = ContextStoreChatStore(any_store)
    chat.set_messages("grp", MESSAGES)
    chat.add_message("grp", _user("between?"), idx=3)  # between the call (2) and its result (3)
    got = chat.get_messages("grp")
    assert got == [*MESSAGES[:2], _user("between?"), *MESSAGES[2:]]  # placed before the call
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        w = plain.window("grp")
        stored = w.items()
        assert stored[3].group == stored[4].group == "c1" and w.verify().ok


def test_a_pinned_item_of_another_writer_stays_pinned_after_an_insertion(any_store, redis_url, prefix):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        w = plain.window("pin", max_tokens=10_000)
        w.add("rules", type="system_prompt", pinned=True, priority=90, id="rules")
        w.add("later", type="user_message", role="user")
    chat = ContextStoreChatStore(any_store)
    chat.add_message("pin", _user("first"), idx=0)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        items = plain.window("pin").items()
    assert [i.content for i in items] == ["first", "rules", "later"]
    assert items[1].id == "rules" and items[1].pinned and items[1].priority == 90
    assert items[1].type is cs.ItemType.SYSTEM_PROMPT


def _insert(url: str, prefix: str, worker: int, n: int) -> None:
    with cs.ContextStore.from_url(url, prefix=prefix) as store:
        chat = ContextStoreChatStore(store)
        for i in range(n):
            chat.add_message("race", _user(f"i{worker} {i}"), idx=0)


def _insert_or_append(url: str, prefix: str, worker: int, n: int) -> None:
    if worker < 2:
        _insert(url, prefix, worker, n)
    else:
        _append(url, prefix, worker, n, "race")


def test_an_insertion_that_never_wins_the_race_gives_up_with_a_typed_error(redis_url, prefix, monkeypatch):
    """Another writer appends between every read and replace of the insertion: it reads again,
    backing off, until the policy's attempts are spent, then raises VersionConflictError having
    stored nothing of its own (a real conflict each time, on a real server)."""
    from contextstore.core.retry import RetryPolicy
    from contextstore.integrations import _session

    reads = []
    with (
        cs.ContextStore.from_url(redis_url, prefix=prefix) as store,
        cs.ContextStore.from_url(redis_url, prefix=prefix) as other,
    ):
        chat = ContextStoreChatStore(store)
        chat.add_message("busy", _user("first"))
        original = _session.SessionWindow.items

        def items_then_another_append(self, limit=None):
            got = original(self, limit)
            reads.append(len(got))
            ContextStoreChatStore(other).add_message("busy", _user(f"other {len(reads)}"))
            return got

        monkeypatch.setattr(_session.SessionWindow, "items", items_then_another_append)
        monkeypatch.setattr(_session, "REPLACE_BACKOFF", RetryPolicy(attempts=4, base=0.001, cap=0.002))
        with pytest.raises(cs.VersionConflictError, match="kept moving on"):
            chat.add_message("busy", _user("inserted"), idx=0)
        monkeypatch.undo()
        assert len(reads) == 4
        assert [m.content for m in chat.get_messages("busy")] == ["first"] + [f"other {n}" for n in range(1, 5)]


def test_inserting_and_appending_at_once_loses_nothing(redis_url, prefix, one_server):
    """Two processes insert at the front while two append: every message is there once, each
    writer's in its order (inserts at the front come out newest first)."""
    run_processes(_insert_or_append, [(redis_url, prefix, w, 30) for w in range(4)], timeout=120)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        got = [m.content for m in ContextStoreChatStore(store).get_messages("race")]
        assert store.window("race").verify().ok
    want = [f"i{w} {i}" for w in range(2) for i in range(30)] + [f"w{w} {i}" for w in range(2, 4) for i in range(30)]
    assert sorted(got) == sorted(want)
    for w in range(2):
        assert [t for t in got if t.startswith(f"i{w} ")] == [f"i{w} {i}" for i in reversed(range(30))]
    for w in range(2, 4):
        assert [t for t in got if t.startswith(f"w{w} ")] == [f"w{w} {i}" for i in range(30)]


def test_image_and_document_blocks_are_content_parts_stored_once(any_store, r, prefix, redis_url):
    from llama_index.core.llms import DocumentBlock, ImageBlock, TextBlock
    from test_blobs import screenshot

    png = screenshot(8)
    pdf = b"%PDF-1.4 " + bytes(20_000)
    question = ChatMessage(role="user", blocks=[
        TextBlock(text="What is on this screen, and in this file?"),
        ImageBlock(image=png, image_mimetype="image/png"),
        DocumentBlock(data=pdf, document_mimetype="application/pdf"),
    ])  # fmt: skip
    again = ChatMessage(role="user", blocks=[ImageBlock(image=png, image_mimetype="image/png")])
    chat = ContextStoreChatStore(any_store, max_tokens=100_000)
    for m in (question, ChatMessage(role="assistant", content="A login form."), again):
        chat.add_message("vision", m)
    assert chat.get_messages("vision") == [question, ChatMessage(role="assistant", content="A login form."), again]
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as plain:
        stored = plain.window("vision").items()
    assert [p["type"] for p in stored[0].content] == ["text", "image", "document"]
    assert stored[2].token_count < 1_000 < len(png) // 3  # the image counted by its size
    blobs = [k for k in r.scan_iter(f"{prefix}:{{*#blobs:*}}:*") if not k.endswith(b":index")]
    assert len(blobs) == 2  # the screenshot (twice) and the PDF, once each
