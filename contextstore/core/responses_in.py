"""OpenAI Responses items as ``add_many(..., format="responses")`` takes them: a Response's
``output`` list as it came, and the ``input`` items a loop sends (``message`` items or their
short ``{"role", "content"}`` form, ``function_call_output``), as plain dicts.

What the model answered (``reasoning``, an assistant ``message``, ``function_call``,
``compaction`` and any other output item) becomes assistant items: one for each run of items up
to its function calls (a reasoning item stays with the calls it precedes), each of its items a
native part in its place (``core/native.py``: a ``function_call`` item is also the item's tool
call). A ``function_call_output`` becomes a tool item answering its call; a user, system or
developer message an item of that role, its ``input_*`` content as content parts. An assistant
message in the short form (no id) is plain text. No I/O.

May import: ``errors``, ``core.native``.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidItemError
from . import native

#: the input items that are not the model's own (the others are: assistant items)
_INPUT = ("function_call_output", "item_reference")


def entries(items: list[Any], model: str | None) -> list[dict[str, Any]]:
    """Responses items (plain dicts) as ``add_many`` entries."""
    out: list[dict[str, Any]] = []
    run: list[tuple[int, dict[str, Any]]] = []  # the model's items not yet made into entries
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidItemError(f"item {n} must be a Responses item (a dict with a 'type' or a 'role')")
        kind = item.get("type", "message" if "role" in item else None)
        if not isinstance(kind, str):
            raise InvalidItemError(f"item {n} must be a Responses item (a dict with a 'type' or a 'role')")
        if (kind != "message" and kind not in _INPUT) or (kind == "message" and item.get("role") == "assistant"):
            run.append((n, item))
            continue
        out += _answers(run, model)
        run = []
        if kind == "item_reference":
            raise InvalidItemError(f"item {n} is an item_reference: store the item it refers to, not the reference")
        out.append(_output(n, item) if kind == "function_call_output" else _message(n, item))
    return out + _answers(run, model)


def _answers(run: list[tuple[int, dict[str, Any]]], model: str | None) -> list[dict[str, Any]]:
    """The model's items as assistant entries: a new one after each run of function calls."""
    out: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for n, item in run:
        is_call = item.get("type") == "function_call"
        if calls and not is_call:
            out.append(_answer(content, calls))
            content, calls = [], []
        if is_call:
            call = _call(n, item)
            calls.append(call)
            content.append(native.wrap("responses", item, call=call["id"], model=model))
        elif "id" not in item and item.get("role") == "assistant":  # the short form: plain text
            content += _assistant_text(n, item)
        else:
            content.append(native.wrap("responses", item, model=model))
    return [*out, _answer(content, calls)] if content or calls else out


def _answer(content: list[dict[str, Any]], calls: list[dict[str, Any]]) -> dict[str, Any]:
    entry: dict[str, Any] = {"content": content or "", "role": "assistant"}
    if calls:
        entry["metadata"] = {"tool_calls": calls}
    return entry


def _call(n: int, item: dict[str, Any]) -> dict[str, Any]:
    """A ``function_call`` item as the tool call the store keeps (Chat Completions' shape)."""
    if not all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
        raise InvalidItemError(f"item {n} ('function_call') needs 'call_id', 'name' and 'arguments', each a str")
    return {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": item["name"], "arguments": item["arguments"]},
    }


def _assistant_text(n: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    content = item.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidItemError(f"item {n} (an assistant message) needs 'content', a str or a list")
    return [
        {"type": "text", "text": p["text"]} for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
    ]


def _output(n: int, item: dict[str, Any]) -> dict[str, Any]:
    """A ``function_call_output`` as a tool item answering its call."""
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str):
        raise InvalidItemError(f"item {n} ('function_call_output') needs 'call_id', a str")
    content = output if isinstance(output, str) else _parts(n, output)
    return {"content": content, "role": "tool", "metadata": {"tool_call_id": call_id}}


def _message(n: int, item: dict[str, Any]) -> dict[str, Any]:
    """A user, system or developer message as an item of that role."""
    role, content = item.get("role"), item.get("content")
    if role not in ("user", "system", "developer"):
        raise InvalidItemError(f"item {n} is a message of role {role!r}: user, system, developer or assistant")
    return {"content": content if isinstance(content, str) else _parts(n, content), "role": role}


def _parts(n: int, content: object) -> list[dict[str, Any]]:
    """Responses input content (``input_text``, ``input_image``, ``input_file``,
    ``input_audio``) as the store's content parts."""
    if not isinstance(content, list) or not content:
        raise InvalidItemError(f"item {n}: content must be a str or a non-empty list of input content")
    return [_part(n, m, p) for m, p in enumerate(content)]


def _part(n: int, m: int, part: Any) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        return {"type": "image_url", "image_url": {"url": part["image_url"], "detail": part.get("detail") or "auto"}}
    if kind == "input_file":
        file = {k: part[k] for k in ("file_id", "file_data", "filename") if isinstance(part.get(k), str)}
        if "file_id" in file or "file_data" in file:
            return {"type": "file", "file": file}
    if kind == "input_audio" and isinstance(part.get("input_audio"), dict):
        return {"type": "input_audio", "input_audio": part["input_audio"]}
    raise InvalidItemError(
        f"item {n}, content {m} ({kind!r}) is not input content the store keeps: input_text, input_image "
        "(by image_url), input_file (by file_id or file_data), input_audio"
    )
