"""Gemini ``contents`` from a window's items (``build_messages(format="gemini")``).

``{"system_instruction": {"parts": [...]}, "contents": [...]}`` (``system_instruction`` left
out when there is none), as the ``google-genai`` SDK takes them (its snake_case keys): system
text (and context items, unless the order is ``arrival``) in the system instruction; the
conversation as ``user`` and ``model`` contents, adjacent ones of a role merged. An assistant
item's parts go in their order: the Gemini parts it was given as (native parts: thoughts, signed
text, ``function_call`` parts with their ``thought_signature``) exactly as they came, its text
as text parts; a call no native part is, a ``function_call`` part (with its id) after them. A
tool result is a ``function_response`` part naming its call's function (and its id, when the
call was sent with one). Another provider's parts are left out (``core/native.py``). No I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..core import native, parts
from ..errors import InvalidItemError
from ..types import BuildOptions, ContextItem
from . import messages


def gemini(ordered: Sequence[ContextItem], roles: Sequence[str], options: BuildOptions) -> dict[str, Any]:
    """Gemini's request of ``ordered`` (in these ``roles``, see ``messages.arrange``)."""
    in_system = {"system"} if options.order == "arrival" else {"system", "context"}
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    calls: dict[str, tuple[str, bool]] = {}  # call id -> (its function's name, sent with its id)
    for item, role in zip(ordered, roles, strict=True):
        if role in in_system:
            system += [{"text": t} for t in [_text(item, role)] if t]
            continue
        speaker, made = ("model", _model_parts(item, options.model, calls)) if role == "assistant" else (
            "user", _user_parts(item, role, calls)
        )  # fmt: skip
        if not made:
            continue
        if contents and contents[-1]["role"] == speaker:
            contents[-1]["parts"] += made
        else:
            contents.append({"role": speaker, "parts": made})
    if contents and contents[0]["role"] == "model":
        contents.insert(0, {"role": "user", "parts": [{"text": messages.CONTINUED}]})
    return {"system_instruction": {"parts": system}, "contents": contents} if system else {"contents": contents}


def _text(item: ContextItem, role: str) -> str:
    if role == "context":
        return messages.context_text(item)
    return parts.text_of(item.content)


def _model_parts(item: ContextItem, model: str | None, calls: dict[str, tuple[str, bool]]) -> list[dict[str, Any]]:
    """An assistant item's parts, then the calls none of them is (noted in ``calls``)."""
    out: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = (
        [{"type": "text", "text": item.content}] if isinstance(item.content, str) else item.content
    )
    for part in content:
        if part["type"] == native.NATIVE and native.sends(part, "gemini", model):
            out.append(parts.copied(part["value"]))
        elif part["type"] in ("text", native.NATIVE):
            shown = part["text"] if part["type"] == "text" else native.text_of(part)
            out += [{"text": shown}] if shown else []
        else:
            out.append(_media(item, part, "an assistant message"))
    carriers = {p["call"]: p for p in content if p["type"] == native.NATIVE and "call" in p}
    for call in messages.calls_in(item, "assistant"):
        name, carrier = call["function"]["name"], carriers.get(call["id"])
        if carrier is not None and native.sends(carrier, "gemini", model):  # sent above, as it came
            calls[call["id"]] = (name, bool(carrier["value"]["function_call"].get("id")))
            continue
        calls[call["id"]] = (name, True)
        out.append({"function_call": {"id": call["id"], "name": name, "args": _args(call["function"]["arguments"])}})
    return out


def _args(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}


def _user_parts(item: ContextItem, role: str, calls: dict[str, tuple[str, bool]]) -> list[dict[str, Any]]:
    if role == "tool":
        return [_function_response(item, calls)]
    if role == "context":
        return [{"text": messages.context_text(item)}]
    if isinstance(item.content, str):
        return [{"text": item.content}] if item.content else []
    shown = [p for p in item.content if p.get("text") != ""]
    return [{"text": p["text"]} if p["type"] == "text" else _media(item, p, "") for p in shown]


def _function_response(item: ContextItem, calls: dict[str, tuple[str, bool]]) -> dict[str, Any]:
    """A tool result as the ``function_response`` of its call: a JSON object as its response,
    other text under ``output`` (``error`` when it says it failed), images as its parts."""
    call_id = (item.metadata or {})["tool_call_id"]
    name, with_id = calls[call_id]
    content = item.content
    text = content if isinstance(content, str) else parts.text_of([p for p in content if p["type"] == "text"])
    media = [] if isinstance(content, str) else [p for p in content if p["type"] != "text"]
    response = _object(text)
    if response is None:
        response = {"error" if (item.metadata or {}).get("is_error") is True else "output": text}
    out: dict[str, Any] = {"name": name, "response": response}
    if with_id:
        out["id"] = call_id
    if media:
        out["parts"] = [_media(item, p, "a tool result") for p in media]
    return {"function_response": out}


def _object(text: str) -> dict[str, Any] | None:
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _media(item: ContextItem, part: dict[str, Any], where: str) -> dict[str, Any]:
    """A part that is not text as Gemini's ``inline_data`` (its bytes inline) or ``file_data``
    (by URL); ``InvalidItemError`` for one held elsewhere (a provider's file id)."""
    data, media_type = parts.data_of(part)
    if data is not None and media_type and not where.startswith("an assistant"):
        payload = parts.payload_field(part)
        assert payload is not None
        _, base64 = parts.spelled(part[payload[0]][payload[1]])
        return {"inline_data": {"mime_type": media_type, "data": base64}}
    url = (part.get("image_url") or {}).get("url") or (part.get("source") or {}).get("url")
    if isinstance(url, str) and url.startswith("https://") and not where.startswith("an assistant"):
        return {"file_data": {"file_uri": url}}
    raise InvalidItemError(
        f"item {item.id!r} holds a part of type {part['type']!r}, which {where or 'a Gemini message'} cannot carry"
    )
