"""Chat messages from a window's items, for OpenAI- and Anthropic-style chat APIs.

Roles come from an item's ``role``, else from its type: ``system_prompt`` and ``instruction``
are system text; ``user_message`` and ``assistant_message`` are the conversation (an assistant
message with ``metadata["tool_calls"]`` calls tools); a ``tool_result`` with
``metadata["tool_call_id"]`` answers its call. Everything else is context, rendered as text
under a ``[<type> <source_ref>]`` header. Every tool result comes right after the message that
called it; a tool-call group missing a result (or a result missing its call) is left out whole.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core import facts, native, parts
from ..core.layout import CLEARED_KEY, MESSAGE_OVERHEAD
from ..errors import InvalidItemError
from ..types import BuildOptions, ContextItem, ItemType
from .select import Unit, ranked_key

#: the first user turn of an Anthropic conversation whose oldest kept message is the assistant's
CONTINUED = "(earlier conversation omitted)"


def _meta(item: ContextItem) -> dict[str, Any]:
    return item.metadata or {}


def role_of(item: ContextItem) -> str:
    """``system``, ``user``, ``assistant``, ``tool`` or ``context`` (rendered as text);
    ``core.facts.role_class`` is the rule, which the item's stored letters also keep."""
    return facts.role_class(item.type, item.role, item.metadata)


def calls_in(item: ContextItem, role: str | None = None) -> list[dict[str, Any]]:
    """The tool calls an assistant message makes ([] for other items), as stored; ``role``: the
    item's ``role_of``, when the caller has it."""
    if item.type is not ItemType.ASSISTANT_MESSAGE or (role or role_of(item)) != "assistant":
        return []
    return list(_meta(item).get("tool_calls") or ())


def context_header(item: ContextItem) -> str:
    """The line above a context item's content: ``[<type> <source_ref>]``."""
    source = f" {item.source_ref}" if item.source_ref else ""
    return f"[{item.type.value}{source}]\n"


def context_text(item: ContextItem) -> str:
    """A context item as text: its header, then its content."""
    return context_header(item) + parts.text_of(item.content)


def complete(unit: Unit) -> bool:
    """False for a tool-call group with a call that has no result, or a result without its call."""
    if len(unit.items) == 1 and unit.items[0].metadata is None:
        return True  # most units: one plain message
    roles = [(i, role_of(i)) for i in unit.items]
    calls = {c["id"] for i, role in roles for c in calls_in(i, role)}
    answered = {_meta(i)["tool_call_id"] for i, role in roles if role == "tool"}
    return calls == answered


def item_cost(item: ContextItem, count: Callable[[str], int]) -> int:
    """What an item costs as (at most) one message: its stored tokens, the message overhead, and
    a context header."""
    header = count(context_header(item)) if role_of(item) == "context" else 0
    return item.token_count + MESSAGE_OVERHEAD + header


def unit_cost(unit: Unit, count: Callable[[str], int]) -> int:
    """What a unit costs as messages (see ``item_cost``)."""
    return sum(item_cost(i, count) for i in unit.items)


def arrange(
    items: Sequence[ContextItem], order: str, relevance: Mapping[str, float] | None = None
) -> tuple[list[ContextItem], list[str]]:
    """System items first, then (``sections``/``priority``) context items (the scored ones best
    first) then the conversation, or (``arrival``) everything else in arrival order; each tool
    result right after the message that called it. With their roles (``role_of``), in order."""
    key = ranked_key(relevance)
    system_key = key if order != "arrival" else (lambda i: (i.type.rank, 0, i.seq))
    roles = {id(i): role_of(i) for i in items}
    out = sorted((i for i in items if roles[id(i)] == "system"), key=system_key)
    rest = sorted((i for i in items if roles[id(i)] != "system"), key=_SEQ)
    if order != "arrival":
        rest = sorted((i for i in rest if roles[id(i)] == "context"), key=key) + [
            i for i in rest if roles[id(i)] != "context"
        ]
    results = {_meta(i)["tool_call_id"]: i for i in rest if roles[id(i)] == "tool"}
    for item in rest:
        role = roles[id(item)]
        if role == "tool":
            continue  # placed after its call
        out.append(item)
        if item.metadata:
            out += [results[call["id"]] for call in calls_in(item, role)]
    return out, [roles[id(i)] for i in out]


_SEQ = operator.attrgetter("seq")


def openai(ordered: Sequence[ContextItem], roles: Sequence[str], model: str | None = None) -> list[dict[str, Any]]:
    """OpenAI chat messages, in the order given, of items in these ``roles`` (see ``arrange``);
    ``model``: the model the build is for (``native.sends``)."""
    out: list[dict[str, Any]] = []
    for item, role in zip(ordered, roles, strict=True):
        if role == "context":
            out.append({"role": "system", "content": context_text(item)})
        elif role == "system":
            system_role = "developer" if item.role == "developer" else "system"
            out.append({"role": system_role, "content": _openai_content(item, system_role, model)})
        elif role == "tool":
            call_id = _meta(item)["tool_call_id"]
            out.append({"role": "tool", "tool_call_id": call_id, "content": _openai_content(item, "tool", model)})
        elif item.metadata and (calls := calls_in(item, role)):
            calls = parts.copied(calls)  # a caller may change them: not the stored ones
            content = _openai_content(item, "assistant", model) or None
            out.append({"role": "assistant", "content": content, "tool_calls": calls})
        elif (content := _openai_content(item, role, model)) or isinstance(item.content, str):
            out.append({"role": role, "content": content})  # (parts only another provider reads: none)
    return out


def _openai_content(item: ContextItem, role: str, model: str | None) -> str | list[dict[str, Any]]:
    """An item's content as an OpenAI message in ``role`` takes it: a str as it is; parts in
    OpenAI's shape (``parts.for_format``), text parts only but in a user message."""
    if isinstance(item.content, str):
        return item.content
    converted = parts.for_format(item.content, "openai", model)  # another provider's reasoning left out
    if not converted:
        return ""
    if role != "user" and not parts.only_text(converted):
        kind = next(p["type"] for p in converted if p["type"] != "text")
        raise InvalidItemError(
            f"item {item.id!r} holds a part of type {kind!r}, which an OpenAI {role} message cannot carry (text only)"
        )
    return converted


def _tool_use(call: dict[str, Any]) -> dict[str, Any]:
    try:
        arguments = json.loads(call["function"]["arguments"] or "{}")
    except ValueError:
        arguments = None
    return {
        "type": "tool_use",
        "id": call["id"],
        "name": call["function"]["name"],
        "input": arguments if isinstance(arguments, dict) else {"arguments": call["function"]["arguments"]},
    }


def _blocks(item: ContextItem, role: str, model: str | None) -> tuple[str, list[dict[str, Any]]]:
    """An item as (Anthropic role, content blocks)."""
    if role == "tool":
        result = item.content if isinstance(item.content, str) else _anthropic_parts(item, "a tool result", model)
        block = {"type": "tool_result", "tool_use_id": _meta(item)["tool_call_id"], "content": result}
        if _meta(item).get("is_error") is True:  # as Anthropic's tool result said it (``core.formats_in``)
            block["is_error"] = True
        return "user", [block]
    if role != "context" and not isinstance(item.content, str):
        blocks = _anthropic_parts(item, "" if role == "user" else "an assistant message", model)
    else:
        text = context_text(item) if role == "context" else parts.text_of(item.content)
        blocks = [{"type": "text", "text": text}] if text.strip() else []
    if role == "assistant":
        return "assistant", blocks + [_tool_use(c) for c in calls_in(item, role)]
    return "user", blocks


#: the part types each place of an Anthropic request takes (a user turn: every type); an assistant
#: message its own blocks, as they came (``core/native.py``)
_ANTHROPIC_TAKES = {
    "a tool result": ("text", "image"),
    "an assistant message": ("text", *native.ANTHROPIC_BLOCKS),
    "a system block": ("text",),
}


def _anthropic_parts(item: ContextItem, where: str, model: str | None) -> list[dict[str, Any]]:
    """An item's parts as Anthropic content blocks (``parts.for_format``), refusing a part that
    ``where`` (a key of ``_ANTHROPIC_TAKES``, or "" for a user turn) cannot carry."""
    assert not isinstance(item.content, str)
    converted = parts.for_format(item.content, "anthropic", model)
    for p in converted:
        if where and p["type"] not in _ANTHROPIC_TAKES[where]:
            raise InvalidItemError(f"item {item.id!r} holds a part of type {p['type']!r}, which {where} cannot carry")
    return converted


def _system_blocks(item: ContextItem, role: str) -> list[dict[str, Any]]:
    """An item of Anthropic's system block (in ``role``) as its text blocks."""
    if role == "context":
        return [{"type": "text", "text": context_text(item)}]
    if isinstance(item.content, str):
        return [{"type": "text", "text": item.content}]
    return _anthropic_parts(item, "a system block", None)


def _turns(
    ordered: Sequence[tuple[ContextItem, str]], owned: dict[int, list[dict[str, Any]]], model: str | None
) -> list[dict[str, Any]]:
    """Alternating user/assistant turns of (item, role) pairs (adjacent same-role items merged,
    tool results first in a user turn), starting with a user turn; ``owned`` gets each item's
    blocks (by ``id(item)``)."""
    turns: list[dict[str, Any]] = []
    for item, item_role in ordered:
        role, blocks = _blocks(item, item_role, model)
        owned[id(item)] = list(blocks)  # the turn may grow the list itself
        if not blocks:  # nothing Anthropic reads (another provider's reasoning alone): no empty turn
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        turn["content"].sort(key=lambda b: b["type"] != "tool_result")  # stable: results first
    if turns and turns[0]["role"] == "assistant":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": CONTINUED}]})
    last = turns[-1]["content"][-1] if turns and turns[-1]["role"] == "assistant" else None
    if last is not None and last["type"] == "text":
        last["text"] = last["text"].rstrip()
    return turns


def _system_roles(options: BuildOptions) -> set[str]:
    """The roles an Anthropic build puts in its system block (context too, unless ``arrival``)."""
    return {"system"} if options.order == "arrival" else {"system", "context"}


def has_conversation(ordered: Sequence[ContextItem], options: BuildOptions) -> bool:
    """Whether an Anthropic build of ``ordered`` has a message (an item outside the system block)."""
    in_system = _system_roles(options)
    return any(role_of(i) not in in_system for i in ordered)


#: whether the window's compaction may clear a tool result (the item, the name of its tool)
Clears = Callable[[ContextItem, "str | None"], bool]


def anthropic(
    ordered: Sequence[ContextItem], roles: Sequence[str], options: BuildOptions, clears: Clears | None = None
) -> dict[str, Any]:
    """``{"system": [...], "messages": [...]}`` for Anthropic's Messages API (``system`` left
    out when there is none); with ``cache_control=True``, cache breakpoints (see
    ``_breakpoints``; ``clears`` says which results a compaction may clear: any unpinned one
    when not given); ``roles``: the items' (see ``arrange``)."""
    in_system = _system_roles(options)
    paired = list(zip(ordered, roles, strict=True))
    system = [block for i, role in paired if role in in_system for block in _system_blocks(i, role)]
    conversation = [(i, role) for i, role in paired if role not in in_system]
    owned: dict[int, list[dict[str, Any]]] = {}
    turns = _turns(conversation, owned, options.model)
    if options.cache_control:
        _breakpoints(system, turns, [owned[id(i)] for i in _cache_edges(conversation, clears)])
    return {"system": system, "messages": turns} if system else {"messages": turns}


def _cache_edges(conversation: Sequence[tuple[ContextItem, str]], clears: Clears | None) -> list[ContextItem]:
    """The items a compaction's edit starts at, whose prefix a cache breakpoint keeps: the first
    tool result the latest clearing compaction cleared (the prompt before it is what the previous
    builds cached), and the oldest one it may clear and has not (where the next one starts)."""
    tools = {c["id"]: c["function"]["name"] for i, role in conversation for c in calls_in(i, role)}
    results = [(i, (i.metadata or {}).get(CLEARED_KEY)) for i, role in conversation if role == "tool"]
    by = [(i, m.get("compaction") if isinstance(m, dict) else None) for i, m in results]
    latest = max((n for _, n in by if isinstance(n, int)), default=None)
    edited = [i for i, n in by if latest is not None and n == latest]
    may = clears or (lambda item, _tool: not item.pinned)
    frontier = [i for i, m in results if m is None and may(i, tools.get(_meta(i).get("tool_call_id")))]
    return edited[:1] + frontier[:1]


def _breakpoints(system: list[dict[str, Any]], turns: list[dict[str, Any]], edges: list[list[dict[str, Any]]]) -> None:
    """Mark Anthropic cache breakpoints (four at most, the API's limit): the system block's end,
    the block before each edge's first block (``edges``: blocks of ``_cache_edges``), the last
    message's end; they replace any a stored part carries. Between compactions every build marks
    the same places, so each keeps its cached prefix alive; after one, the prefix up to the block
    before its first edit is read from the cache (a breakpoint's 20-block lookback would miss
    it). The blocks are this build's own (stored parts come as copies: ``parts.for_format``)."""
    flat = [block for turn in turns for block in turn["content"]]
    where = {id(block): n for n, block in enumerate(flat)}
    marks = {len(flat) - 1} if flat else set()
    for owned in edges:
        first = min((where[id(b)] for b in owned), default=0)
        if first > 0:
            marks.add(first - 1)
    for block in [*system, *flat]:
        block.pop("cache_control", None)
        if block["type"] == "tool_result" and isinstance(block["content"], list):
            for part in block["content"]:
                part.pop("cache_control", None)
    marks = {_markable(flat, n) for n in marks}
    for block in [*system[-1:], *(flat[n] for n in marks if flat[n]["type"] not in _UNMARKABLE)]:
        block["cache_control"] = {"type": "ephemeral"}


def _markable(flat: list[dict[str, Any]], n: int) -> int:
    """Where a cache breakpoint meant for block ``n`` goes: a thinking block takes none, the
    block before it does."""
    while n > 0 and flat[n]["type"] in _UNMARKABLE:
        n -= 1
    return n


#: the blocks a cache breakpoint cannot go on (Anthropic's thinking blocks)
_UNMARKABLE = ("thinking", "redacted_thinking")
