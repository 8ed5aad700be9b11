"""Items as the lines of a transcript, the text both summarizers read."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..core.parts import text_of
from ..types import ContextItem, ItemType

_ROLES = {ItemType.USER_MESSAGE: "user", ItemType.ASSISTANT_MESSAGE: "assistant"}


def speaker(item: ContextItem) -> str:
    """Who or what an item is: its role, else its type, with its source for context items."""
    if item.type is ItemType.TOOL_RESULT:
        return "tool result"
    who = item.role or _ROLES.get(item.type) or item.type.value.replace("_", " ")
    return f"{who} {item.source_ref}" if item.source_ref and not item.role else who


def calls_text(item: ContextItem) -> str:
    """The tool calls an assistant message makes, as ``name(arguments)``; "" without any."""
    calls = (item.metadata or {}).get("tool_calls") or []
    out = []
    for call in calls if isinstance(calls, list) else []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        args = fn.get("arguments", "")
        out.append(f"{fn.get('name', '?')}({args if isinstance(args, str) else json.dumps(args)})")
    return ", ".join(out)


def line(item: ContextItem) -> str:
    """One item as a transcript line: ``[speaker] content`` (and the tools it calls)."""
    text = text_of(item.content).strip()
    calls = calls_text(item)
    if calls:
        text = f"{text} (calls {calls})" if text else f"calls {calls}"
    return f"[{speaker(item)}] {text}"


def transcript(items: Sequence[ContextItem]) -> str:
    """The items as transcript lines, in the order given."""
    return "\n".join(line(i) for i in items)
