"""OpenAI Responses API input items from a window's items (``build_messages(format="responses")``).

Roles as ``render/messages.py`` gives them: system text and context items are ``system`` (or
``developer``) messages, the conversation ``user`` and ``assistant`` messages, a tool call a
``function_call`` item and its result a ``function_call_output`` right after it. An assistant
item's parts go in their order: the Responses items it was given as (native parts:
``reasoning``, ``message``, ``function_call``, ``compaction``) as they came, its text as an
assistant message; a call no native part is, a ``function_call`` item after them. Another
provider's parts are left out (``core/native.py``). No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core import native, parts
from ..errors import InvalidItemError
from ..types import ContextItem
from . import messages


def responses(ordered: Sequence[ContextItem], roles: Sequence[str], model: str | None) -> list[dict[str, Any]]:
    """The Responses API's ``input`` items of ``ordered`` (in these ``roles``, see
    ``messages.arrange``); ``model``: the model the build is for (``native.sends``)."""
    out: list[dict[str, Any]] = []
    for item, role in zip(ordered, roles, strict=True):
        if role == "context":
            out.append({"role": "system", "content": messages.context_text(item)})
        elif role == "system":
            system_role = "developer" if item.role == "developer" else "system"
            out.append({"role": system_role, "content": _system_text(item)})
        elif role == "tool":
            call_id = (item.metadata or {})["tool_call_id"]
            out.append({"type": "function_call_output", "call_id": call_id, "output": _content(item, "a tool result")})
        elif role == "assistant":
            out += _assistant(item, model)
        else:
            out.append({"role": "user", "content": _content(item, "")})
    return out


def _system_text(item: ContextItem) -> str:
    if isinstance(item.content, str):
        return item.content
    converted = parts.for_format(item.content, "openai")
    if not parts.only_text(converted):
        raise InvalidItemError(f"item {item.id!r} holds a part that is not text, which a system message cannot carry")
    return "\n".join(p["text"] for p in converted)


def _assistant(item: ContextItem, model: str | None) -> list[dict[str, Any]]:
    """An assistant item as Responses items: its parts in order (text gathered into assistant
    messages), then the calls none of them is."""
    out: list[dict[str, Any]] = []
    text: list[str] = []

    def said() -> None:
        if text:
            out.append({"role": "assistant", "content": "\n".join(text)})
            text.clear()

    content = [{"type": "text", "text": item.content}] if isinstance(item.content, str) and item.content else []
    for part in content if isinstance(item.content, str) else item.content:
        if part["type"] == native.NATIVE and native.sends(part, "responses", model):
            said()
            out.append(parts.copied(part["value"]))
        elif part["type"] in ("text", native.NATIVE):
            shown = part["text"] if part["type"] == "text" else native.text_of(part)
            text += [shown] if shown else []
        else:
            raise InvalidItemError(
                f"item {item.id!r} holds a part of type {part['type']!r}, which an assistant message cannot carry"
            )
    said()
    sent = native.carried(item.content, "responses", model)
    for call in messages.calls_in(item, "assistant"):
        if call["id"] not in sent:
            function = call["function"]
            out.append({"type": "function_call", "call_id": call["id"], "name": function["name"],
                        "arguments": function["arguments"]})  # fmt: skip
    return out


def _content(item: ContextItem, where: str) -> str | list[dict[str, Any]]:
    """A user message's or a tool result's content: a str as it is; parts as Responses input
    content (``input_text``, ``input_image``, ``input_file``), by way of their OpenAI shape."""
    if isinstance(item.content, str):
        return item.content
    out = [_input_part(item, p, where) for p in parts.for_format(item.content, "openai")]
    return out


def _input_part(item: ContextItem, part: dict[str, Any], where: str) -> dict[str, Any]:
    kind = part["type"]
    if kind == "text":
        return {"type": "input_text", "text": part["text"]}
    if kind == "image_url":
        image = part["image_url"]
        return {"type": "input_image", "image_url": image["url"], "detail": image.get("detail", "auto")}
    if kind == "file":
        return {"type": "input_file", **part["file"]}
    if kind == "input_audio" and not where:
        return {"type": "input_audio", "input_audio": dict(part["input_audio"])}
    raise InvalidItemError(f"item {item.id!r} holds a part of type {kind!r}, which {where or 'a message'} cannot carry")
