"""Messages in a provider's own shape, as ``add_many(..., format=)`` takes them (contract §21): a
loop stores what the API returned without converting it, as dicts or as the SDK's objects.
``"anthropic"``: Messages API ``{"role", "content"}`` entries, the content a str or content
blocks (``text``, ``image``, ``document``, ``thinking``, ``redacted_thinking``, ``compaction``,
``tool_use``; in a user turn ``tool_result``); ``"responses"`` and ``"gemini"``:
``core/responses_in.py``, ``core/gemini_in.py``. Each message becomes the items a build in that
format gives back: an assistant message one item (its ``tool_use`` blocks as its tool calls, its
thinking and compaction blocks native parts, ``core/native.py``, the other blocks its content
parts, in their order), a user message its tool results (each an item of its own) and then the
rest. No I/O.

May import: ``errors``, ``types``, ``core.native``, ``core.responses_in``, ``core.gemini_in``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..errors import InvalidItemError, InvalidOptionsError
from ..types import CHAT_FORMATS
from . import gemini_in, native, responses_in


def entries(messages: object, fmt: object, model: object = None) -> list[Any]:
    """``messages`` in format ``fmt`` (one of ``CHAT_FORMATS``) as ``add_many`` entries (dicts
    of ``add()`` keywords); "openai" ones as they are. ``model``: the model that produced them,
    kept on their native parts. ``InvalidOptionsError`` for an unknown format or a model that is
    no str, ``InvalidItemError`` naming the message and block for one in no shape of the format."""
    if fmt not in CHAT_FORMATS:
        raise InvalidOptionsError(f"format must be one of {', '.join(map(repr, CHAT_FORMATS))}, not {fmt!r}")
    if model is not None and (not isinstance(model, str) or not model or not model.isprintable()):
        raise InvalidOptionsError(f"model must be a non-empty printable str, not {model!r}")
    if fmt == "openai":
        return messages  # type: ignore[return-value]
    if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Iterable):
        raise InvalidItemError(f"add_many(format={fmt!r}) takes a list of the format's messages (or items)")
    listed = [_plain(m) for m in messages]
    if fmt == "responses":
        return responses_in.entries(listed, model)
    if fmt == "gemini":
        return gemini_in.entries(listed, model)
    out: list[dict[str, Any]] = []
    for n, message in enumerate(listed):
        out += _anthropic(n, message, model)
    return out


def _plain(value: Any) -> Any:
    """An SDK object (a pydantic model: a block, a message, an item, a part) as the dict the
    API's JSON holds."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _anthropic(n: int, message: Any, model: str | None) -> list[dict[str, Any]]:
    """One Anthropic message as entries."""
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant") or "content" not in message:
        raise InvalidItemError(f"message {n} must be {{'role': 'user' or 'assistant', 'content': ...}}")
    role, content = message["role"], message["content"]
    if isinstance(content, str):
        return [{"content": content, "role": role}]
    if not (isinstance(content, list) and all(_typed(b) for b in content)):
        raise InvalidItemError(f"message {n}: content must be a str or a list of content blocks with a 'type'")
    return _assistant(n, content, model) if role == "assistant" else _user(n, content)


def _typed(block: Any) -> bool:
    return isinstance(block, dict) and isinstance(block.get("type"), str)


def _assistant(n: int, blocks: list[dict[str, Any]], model: str | None) -> list[dict[str, Any]]:
    """An assistant message: one item, its tool uses as tool calls, its own blocks (thinking,
    compaction) native parts, the other blocks its parts."""
    calls = [_call(n, m, b) for m, b in enumerate(blocks) if b["type"] == "tool_use"]
    rest = [
        native.wrap("anthropic", b, model=model) if b["type"] in native.ANTHROPIC_BLOCKS else b
        for b in blocks
        if b["type"] != "tool_use"
    ]
    entry: dict[str, Any] = {"content": rest or "", "role": "assistant"}
    if calls:
        entry["metadata"] = {"tool_calls": calls}
    if not rest and not calls:
        raise InvalidItemError(f"message {n}: an assistant message with no content block")
    return [entry]


def _call(n: int, m: int, block: dict[str, Any]) -> dict[str, Any]:
    """A ``tool_use`` block as the tool call the store keeps (OpenAI's shape; an Anthropic build
    gives the block back)."""
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        raise InvalidItemError(f"message {n}, block {m} ('tool_use') needs 'id' and 'name', both str")
    if not isinstance(block.get("input", {}), dict):
        raise InvalidItemError(f"message {n}, block {m} ('tool_use') has an 'input' that is no object")
    arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
    return {"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": arguments}}


def _user(n: int, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A user message: each tool result an item (in their order), then the other blocks as one."""
    out = [_result(n, m, b) for m, b in enumerate(blocks) if b["type"] == "tool_result"]
    rest = [b for b in blocks if b["type"] != "tool_result"]
    if rest:
        out.append({"content": rest, "role": "user"})
    return out


def _result(n: int, m: int, block: dict[str, Any]) -> dict[str, Any]:
    """A ``tool_result`` block as a tool item answering its call."""
    call_id, content = block.get("tool_use_id"), block.get("content", "")
    if not isinstance(call_id, str):
        raise InvalidItemError(f"message {n}, block {m} ('tool_result') needs 'tool_use_id', a str")
    metadata: dict[str, Any] = {"tool_call_id": call_id}
    if block.get("is_error"):
        metadata["is_error"] = True
    return {"content": content if content not in ([], None) else "", "role": "tool", "metadata": metadata}
