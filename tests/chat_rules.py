"""Validators of the rules OpenAI's and Anthropic's chat APIs enforce on a conversation, so tests
can check every output the store builds (they raise AssertionError naming the broken rule)."""

from __future__ import annotations

from typing import Any

OPENAI_ROLES = {"system", "developer", "user", "assistant", "tool"}


def check_openai(messages: list[dict[str, Any]]) -> None:
    """Every tool message answers a call of the assistant message right before the tool messages;
    every call is answered before the next non-tool message; no other roles."""
    pending: set[str] = set()
    for n, m in enumerate(messages):
        assert m["role"] in OPENAI_ROLES, f"message {n}: role {m['role']!r}"
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending, f"message {n}: tool message answers no pending call"
            pending.discard(m["tool_call_id"])
            assert isinstance(m["content"], str) and m["content"], f"message {n}: empty tool content"
            continue
        assert not pending, f"message {n}: calls {sorted(pending)} have no result before it"
        if m["role"] == "assistant" and m.get("tool_calls"):
            pending = {c["id"] for c in m["tool_calls"]}
            assert len(pending) == len(m["tool_calls"]), f"message {n}: repeated call ids"
        else:
            assert isinstance(m["content"], str) and m["content"], f"message {n}: empty content"
    assert not pending, f"calls {sorted(pending)} have no result"


def _blocks(turn: dict[str, Any]) -> list[dict[str, Any]]:
    content = turn["content"]
    assert isinstance(content, list) and content, "a turn needs a non-empty list of content blocks"
    for b in content:
        assert b["type"] in ("text", "tool_use", "tool_result"), b
        if b["type"] == "text":
            assert b["text"], "empty text block"
    return content


def check_anthropic(built: dict[str, Any]) -> None:
    """User/assistant alternation starting with a user turn; each tool_use answered by a
    tool_result in the next user turn (results first in it); each result answers a tool_use of
    the turn before; no trailing whitespace at the end of a final assistant turn."""
    for block in built.get("system", []):
        assert block["type"] == "text" and block["text"], block
    marks = [
        b
        for b in [*built.get("system", []), *(b for t in built["messages"] for b in _blocks(t))]
        if "cache_control" in b
    ]
    assert len(marks) <= 4, f"{len(marks)} cache breakpoints: the API takes 4"
    turns = built["messages"]
    if not turns:
        return  # nothing but system text yet: the caller adds the user's message
    asked: set[str] = set()
    for n, turn in enumerate(turns):
        assert turn["role"] == ("user" if n % 2 == 0 else "assistant"), f"turn {n}: roles must alternate"
        blocks = _blocks(turn)
        if turn["role"] == "user":
            results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
            kinds = [b["type"] for b in blocks]
            assert kinds == sorted(kinds, key=lambda k: k != "tool_result"), f"turn {n}: results not first"
            assert set(results) == asked, f"turn {n}: answers {sorted(results)}, was asked {sorted(asked)}"
            asked = set()
        else:
            asked = {b["id"] for b in blocks if b["type"] == "tool_use"}
    assert not asked or turns[-1]["role"] == "assistant", "tool_use left unanswered"
    assert not asked, "the conversation ends with an unanswered tool_use"
    last = turns[-1]
    if last["role"] == "assistant" and last["content"][-1]["type"] == "text":
        assert last["content"][-1]["text"] == last["content"][-1]["text"].rstrip(), "trailing whitespace"


def groups_whole(items: list[Any], complete: bool = True) -> None:
    """No group is split: every result has its call and (``complete``: when every call was added
    together with its results) every call has all its results."""
    calls: dict[str, set[str]] = {}
    answers: dict[str, set[str]] = {}
    for it in items:
        for c in (it.metadata or {}).get("tool_calls") or ():
            calls.setdefault(it.group, set()).add(c["id"])
        if it.type.value == "tool_result" and "tool_call_id" in (it.metadata or {}):
            answers.setdefault(it.group, set()).add(it.metadata["tool_call_id"])
    for group in set(calls) | set(answers):
        assert calls.get(group, set()) >= answers.get(group, set()), f"group {group}: a result without its call"
        if complete:
            assert calls.get(group, set()) == answers.get(group, set()), f"group {group}: a call without its result"
