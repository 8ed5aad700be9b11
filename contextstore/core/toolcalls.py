"""Tool calls as OpenAI's chat format spells them, checked on the way in.

The assistant message that calls tools is an ``assistant_message`` whose
``metadata["tool_calls"]`` is a list of ``{"id", "type": "function", "function": {"name",
"arguments"}}``; it may have empty content. Each result is a ``tool_result`` with
``role="tool"`` and ``metadata["tool_call_id"]``. A call and its results share a group.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ..errors import InvalidItemError, ToolCallLinkError
from ..types import ItemType

_ID = re.compile(r"\S{1,128}")
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_json = msgspec.json.Encoder()


def _call_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidItemError(f"{what} must be 1-128 characters without whitespace, not {value!r}")
    return value


def _one_call(call: object, n: int) -> tuple[str, str]:
    if not isinstance(call, dict):
        raise InvalidItemError(f"tool_calls[{n}] must be a dict, not {type(call).__name__}")
    function = call.get("function")
    if call.get("type", "function") != "function" or not isinstance(function, dict):
        raise InvalidItemError(f'tool_calls[{n}] must be {{"type": "function", "function": {{...}}}}')
    name, arguments = function.get("name"), function.get("arguments")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidItemError(f"tool_calls[{n}].function.name must be a tool name, not {name!r}")
    if not isinstance(arguments, str):
        raise InvalidItemError(f"tool_calls[{n}].function.arguments must be a str (JSON), not {arguments!r}")
    return name, _call_id(call.get("id"), f"tool_calls[{n}].id")


def calls_of(item_type: ItemType, metadata: dict[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """The (tool name, call id) of each tool call an assistant message makes (checked); () for
    other items."""
    if item_type is not ItemType.ASSISTANT_MESSAGE or not metadata or "tool_calls" not in metadata:
        return ()
    calls = metadata["tool_calls"]
    if not isinstance(calls, list) or not calls:
        raise InvalidItemError("metadata['tool_calls'] must be a non-empty list of tool calls")
    found = tuple(_one_call(call, n) for n, call in enumerate(calls))
    ids = [call_id for _, call_id in found]
    if len(set(ids)) != len(ids):
        raise ToolCallLinkError(f"tool call ids repeat within one message: {ids}")
    return found


def result_call_id(item_type: ItemType, role: str | None, metadata: dict[str, Any] | None) -> str | None:
    """The call a tool result answers (``metadata["tool_call_id"]``); None for other items. A
    ``role="tool"`` item must name it."""
    if item_type is not ItemType.TOOL_RESULT:
        return None
    found = (metadata or {}).get("tool_call_id")
    if found is None:
        if role == "tool":
            raise InvalidItemError("a tool_result with role 'tool' needs metadata['tool_call_id']")
        return None
    return _call_id(found, "metadata['tool_call_id']")


def calls_text(metadata: dict[str, Any] | None) -> str:
    """The tool calls as the model sees them (counted with the content)."""
    calls = (metadata or {}).get("tool_calls")
    return _json.encode(calls).decode() if calls else ""
