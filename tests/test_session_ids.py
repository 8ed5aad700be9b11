"""Session ids are opaque to frameworks: every integration maps any string to a window of its
own, reversibly (``integrations._session.window_for`` / ``session_for``), and each framework
finds its session again under the id it used."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agents")
pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")
pytest.importorskip("agent_framework")

from agent_framework import Message
from langchain_core.messages import HumanMessage
from llama_index.core.llms import ChatMessage

import contextstore as cs
from contextstore.integrations._session import ENCODED, HASHED, SESSION_KEY, session_for, window_for
from contextstore.integrations.agent_framework import ContextStoreChatMessageStore
from contextstore.integrations.langchain import ContextStoreChatMessageHistory
from contextstore.integrations.llama_index import ContextStoreChatStore
from contextstore.integrations.openai_agents import ContextStoreSession

LONG_IDS = ["u" * 250, "é" * 120, "x" * 140 + "é" + "y" * 60]  # their base64 passes 200 characters
ODD_IDS = ["two words", "café", "ana+test@exämple.com", "x" * 140 + "é", "sid64.looks-encoded", "sidh.too", "a{b}c*",
           *LONG_IDS]  # fmt: skip


def test_every_string_has_a_window_of_its_own_and_comes_back():
    windows = {window_for(s) for s in [*ODD_IDS, "plain-id", "user:42/chat"]}
    assert len(windows) == len(ODD_IDS) + 2
    for s in [*ODD_IDS, "plain-id"]:
        if s not in LONG_IDS:
            assert session_for(window_for(s)) == s
    assert window_for("plain-id") == "plain-id" and window_for("two words").startswith(ENCODED)
    for s in LONG_IDS:  # named by a hash; the id comes back from the window's newest item
        assert window_for(s).startswith(HASHED) and len(window_for(s)) <= 200
        kept = cs.ContextItem(id="m", content="hi", type="user_message", metadata={SESSION_KEY: s})
        assert session_for(window_for(s), lambda kept=kept: [kept]) == s
        assert session_for(window_for(s)) is None  # an empty window keeps none
    for bad in ("", None, 7, "\ud800"):  # the last is no UTF-8 text
        with pytest.raises(cs.InvalidOptionsError):
            window_for(bad)


@pytest.mark.parametrize("session_id", ODD_IDS)
def test_each_integration_takes_an_opaque_session_id(store, session_id):
    asyncio.run(ContextStoreSession(session_id, store).add_items([{"role": "user", "content": "hi"}]))
    assert asyncio.run(ContextStoreSession(session_id, store).get_items()) == [{"role": "user", "content": "hi"}]
    ContextStoreChatMessageHistory(session_id + "-lc", store).add_messages([HumanMessage(content="hi")])
    assert ContextStoreChatMessageHistory(session_id + "-lc", store).messages == [HumanMessage(content="hi")]
    chat = ContextStoreChatStore(store)
    chat.add_message(session_id + "-li", ChatMessage(role="user", content="hi"))
    assert chat.get_messages(session_id + "-li") == [ChatMessage(role="user", content="hi")]
    assert session_id + "-li" in chat.get_keys()
    provider = ContextStoreChatMessageStore(store)
    asyncio.run(provider.save_messages(session_id + "-af", [Message(role="user", contents=["hi"])]))
    assert [m.text for m in asyncio.run(provider.get_messages(session_id + "-af"))] == ["hi"]
