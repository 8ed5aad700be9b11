"""A message with a chat role takes its type from the role when no type is given (a chat dict
passed to ``add_many`` is never stored as ``code``); an explicit type wins."""

from __future__ import annotations

import contextstore as cs

T = cs.ItemType


def test_chat_dicts_take_their_type_from_the_role(store):
    w = store.window("roles", max_tokens=10_000)
    w.add_many(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "bonjour"},
            {"role": "user", "content": "code please", "type": "code"},  # an explicit type wins
            {"role": "narrator", "content": "meanwhile"},  # not a chat role: code (seed 002)
            "plain string",
        ]
    )
    assert [i.type for i in w.items()] == [
        T.SYSTEM_PROMPT, T.SYSTEM_PROMPT, T.USER_MESSAGE, T.ASSISTANT_MESSAGE, T.CODE, T.CODE, T.CODE,
    ]  # fmt: skip
    assert w.add("hello", role="user").type is T.USER_MESSAGE
    assert w.add(cs.ContextItem(content="sure", role="assistant")).type is T.ASSISTANT_MESSAGE
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    w.add_many(
        [
            {"role": "assistant", "content": "", "metadata": {"tool_calls": [call]}},
            {"role": "tool", "content": "42", "metadata": {"tool_call_id": "c1"}},
        ]
    )
    stored = w.items()[-2:]
    assert [i.type for i in stored] == [T.ASSISTANT_MESSAGE, T.TOOL_RESULT] and stored[0].group == stored[1].group
    messages = w.build_messages(cs.BuildOptions(reserve_for_response=0))
    assert [m["role"] for m in messages][-2:] == ["assistant", "tool"]


def test_a_restored_item_keeps_its_stored_type(store):
    w = store.window("roles-restore")
    w.add("x = 1", role="user", type="code")
    copy = store.window("roles-restore-copy")
    copy.restore(w.snapshot())
    assert copy.items()[0].type is T.CODE and copy.items()[0].role == "user"
