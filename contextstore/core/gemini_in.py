"""Gemini ``contents`` as ``add_many(..., format="gemini")`` takes them: ``Content`` entries
(``{"role": "user" | "model", "parts": [...]}``) as the ``google-genai`` SDK gives them or as the
REST API spells them (camelCase keys become the SDK's snake_case; values are kept as they are).

A ``model`` content becomes one assistant item: a plain text part as text; a thought, a part
with a ``thought_signature`` and any other part (``function_call`` too) a native part in its
place (``core/native.py``), each ``function_call`` also the item's tool call (the call's ``id``,
or one the store makes when Gemini gave none). A ``user`` content becomes its function
responses (each a tool item answering its call, the ``response`` object kept as JSON text) and
then the rest as one user item (``text``; ``inline_data`` as an image, audio or file part;
``file_data`` of an image as its URL). A function response without an ``id`` answers the oldest
call of its name in the same ``add_many`` that no response answered yet. No I/O.

May import: ``errors``, ``core.native``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..errors import InvalidItemError
from . import native

#: the prefix of the call ids the store makes for Gemini calls without one
CALL_ID_PREFIX = "gemini-call-"


def entries(contents: list[Any], model: str | None) -> list[dict[str, Any]]:
    """Gemini contents (plain dicts) as ``add_many`` entries."""
    out: list[dict[str, Any]] = []
    waiting: dict[str, list[str]] = {}  # a function's name -> its calls in this batch not answered yet
    for n, content in enumerate(contents):
        spelled = native.gemini_spelled(content)
        if not isinstance(spelled, dict) or spelled.get("role") not in ("user", "model"):
            raise InvalidItemError(f"content {n} must be {{'role': 'user' or 'model', 'parts': [...]}}")
        parts = spelled.get("parts")
        if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) and p for p in parts):
            raise InvalidItemError(f"content {n} needs 'parts': a non-empty list of parts")
        out += [_model(n, parts, model, waiting)] if spelled["role"] == "model" else _user(n, parts, waiting)
    return out


def _model(n: int, parts: list[dict[str, Any]], model: str | None, waiting: dict[str, list[str]]) -> dict[str, Any]:
    """A model content as one assistant entry."""
    content: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for m, part in enumerate(parts):
        if "function_call" in part:
            call = part["function_call"]
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise InvalidItemError(f"content {n}, part {m} (function_call) needs a 'name', a str")
            given = call.get("id")
            call_id: str = given if isinstance(given, str) and given else _new_id()
            function = {"name": call["name"], "arguments": json.dumps(call.get("args") or {}, ensure_ascii=False)}
            calls.append({"id": call_id, "type": "function", "function": function})
            waiting.setdefault(call["name"], []).append(call_id)
            content.append(native.wrap("gemini", part, call=call_id, model=model))
        elif set(part) == {"text"}:
            content.append({"type": "text", "text": part["text"]})
        else:  # a thought, a signed part, or one only Gemini reads
            content.append(native.wrap("gemini", part, model=model))
    entry: dict[str, Any] = {"content": content, "role": "assistant"}
    if calls:
        entry["metadata"] = {"tool_calls": calls}
    return entry


def _new_id() -> str:
    return CALL_ID_PREFIX + uuid.uuid4().hex[:24]


def _user(n: int, parts: list[dict[str, Any]], waiting: dict[str, list[str]]) -> list[dict[str, Any]]:
    """A user content: each function response an entry (in their order), then the rest as one."""
    out = [_response(n, m, p, waiting) for m, p in enumerate(parts) if "function_response" in p]
    rest = [_part(n, m, p) for m, p in enumerate(parts) if "function_response" not in p]
    if rest:
        out.append({"content": rest, "role": "user"})
    return out


def _response(n: int, m: int, part: dict[str, Any], waiting: dict[str, list[str]]) -> dict[str, Any]:
    """A ``function_response`` part as a tool item answering its call."""
    reply = part["function_response"]
    if not isinstance(reply, dict) or not isinstance(reply.get("name"), str):
        raise InvalidItemError(f"content {n}, part {m} (function_response) needs a 'name', a str")
    if reply.get("parts"):
        raise InvalidItemError(f"content {n}, part {m} (function_response) has parts of its own, which are not kept")
    response = reply.get("response", {})
    if not isinstance(response, dict):
        raise InvalidItemError(f"content {n}, part {m} (function_response) has a 'response' that is no object")
    call_id = reply.get("id") if isinstance(reply.get("id"), str) and reply["id"] else None
    if call_id is None:
        pending = waiting.get(reply["name"]) or []
        if not pending:
            raise InvalidItemError(
                f"content {n}, part {m}: function_response {reply['name']!r} has no id, and no call of that name "
                "comes before it in this add_many: give it its call's id, or add it with the model content that called"
            )
        call_id = pending[0]
    if call_id in waiting.get(reply["name"], []):
        waiting[reply["name"]].remove(call_id)
    text = json.dumps(response, ensure_ascii=False)
    return {"content": text, "role": "tool", "metadata": {"tool_call_id": call_id}}


def _part(n: int, m: int, part: dict[str, Any]) -> dict[str, Any]:
    """A user part as a content part of the store."""
    if isinstance(part.get("text"), str) and set(part) == {"text"}:
        return {"type": "text", "text": part["text"]}
    inline = part.get("inline_data")
    if isinstance(inline, dict) and isinstance(inline.get("mime_type"), str) and isinstance(inline.get("data"), str):
        media, data = inline["mime_type"], inline["data"]
        if media.startswith("audio/"):
            return {"type": "input_audio", "input_audio": {"data": data, "format": media.removeprefix("audio/")}}
        if media.startswith("image/"):
            return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}
        return {"type": "file", "file": {"file_data": f"data:{media};base64,{data}"}}
    file = part.get("file_data")
    if (
        isinstance(file, dict)
        and isinstance(file.get("file_uri"), str)
        and str(file.get("mime_type", "image/")).startswith("image/")
    ):
        return {"type": "image_url", "image_url": {"url": file["file_uri"]}}
    raise InvalidItemError(
        f"content {n}, part {m} is not a user part the store keeps: text, inline_data, file_data (of an image), "
        "function_response"
    )
