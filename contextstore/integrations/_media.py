"""A framework's images and files as content parts of the window item, for the integrations that
keep the framework's own form of a message to give it back exactly (openai-agents, LangChain).

The data moves into content parts (which count an image by its size, and store a large one once
per prefix as a blob); the kept form holds None where the data was, and a list of where it goes
back (``MEDIA`` in the item's metadata), so the data is never stored twice. Data the store would
refuse as a part (an image that is not one, a cut PNG) stays in the kept form, verbatim, and the
item's content says it was left out: a framework session stores every item its framework hands
it and gives it back exactly (its protocol wins), and no build sends what a provider refuses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..core import parts as content_parts
from ..errors import InvalidItemError

#: metadata key: where the data of a message's images and files goes back
MEDIA = "media"
#: a framework part -> where its data is (a path of keys) and the content part it becomes; None: not media
Rule = Callable[[Mapping[str, Any]], "tuple[tuple[str, ...], dict[str, Any]] | None"]


def _at(part: Mapping[str, Any], path: tuple[str | int, ...]) -> Any:
    value: Any = part
    for key in path:
        if isinstance(key, int):
            value = value[key] if isinstance(value, list) and 0 <= key < len(value) else None
        else:
            value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _set(part: Any, path: tuple[str | int, ...], value: Any) -> Any:
    """``part`` (a dict, or a list for an int key) with ``value`` at ``path``, copied on the way."""
    out: Any = list(part) if isinstance(part, list) else dict(part)
    out[path[0]] = value if len(path) == 1 else _set(part[path[0]], path[1:], value)
    return out


def _found(part: Mapping[str, Any], rule: Rule, nested: str | None) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Each image's or file's data in ``part``: where (a path of keys) and the content part it
    becomes; in the list under its key ``nested`` too (a tool result's items)."""
    found = rule(part)
    if found is not None:
        return [found] if isinstance(_at(part, found[0]), str) else []
    inner = part.get(nested) if nested else None
    out = []
    for j, sub in enumerate(inner if isinstance(inner, list) else []):
        made = rule(sub) if isinstance(sub, Mapping) else None
        if made is not None and isinstance(_at(sub, made[0]), str):
            out.append(((nested, j, *made[0]), made[1]))
    return out


def split(content: Any, rule: Rule, nested: str | None = None) -> tuple[Any, list[dict[str, Any]], list[list[Any]]]:
    """``content`` (a framework's list of parts, or one part) with each image's and file's data
    taken out (also from the list under a part's key ``nested``), the content parts they become,
    and where each goes back ([index in content or -1 for a single part, path, index of its
    content part])."""
    single = isinstance(content, Mapping)
    parts_in = [content] if single else content if isinstance(content, list) else []
    lean, parts, where, media = list(parts_in), [], [], 0
    for i, part in enumerate(parts_in):
        for path, made in _found(part, rule, nested) if isinstance(part, Mapping) else []:
            refused = _refused(made)
            if refused:  # kept verbatim in the kept form; the content says so
                parts.append({"type": "text", "text": refused})
                continue
            parts.append(made)
            where.append([-1 if single else i, list(path), media])
            media += 1
            lean[i] = _set(lean[i], path, None)
    return (lean[0] if single else lean) if where else content, parts, where


def _refused(made: dict[str, Any]) -> str:
    """Why the store refuses ``made`` as a content part, as the text that stands in its place in
    the item's content ('': it takes it)."""
    try:
        content_parts.check([made])
    except InvalidItemError as exc:
        kind = "file" if made["type"] == "file" else "image"
        return f"[{kind} data left out: {str(exc).partition(') ')[2] or exc}]"
    return ""


def joined(lean: Any, where: list[list[Any]], parts: list[dict[str, Any]]) -> Any:
    """The framework's content as it was given: ``lean`` with the data put back from the stored
    content parts (text parts excepted, in their order)."""
    media = [p for p in parts if p.get("type") != "text"]
    out = dict(lean) if isinstance(lean, Mapping) else list(lean)
    for index, path, n in where:
        value = data_of(media[n])
        if index == -1:
            out = _set(out, tuple(path), value)
        else:
            out[index] = _set(out[index], tuple(path), value)
    return out


def data_of(part: Mapping[str, Any]) -> str:
    """The data a content part holds (what ``split`` moved into it)."""
    kind = part["type"]
    if kind == "image_url":
        return str(part["image_url"]["url"])
    if kind == "file":
        return str(part["file"]["file_data"])
    return str(part["source"]["data"])  # image, document: a base64 source


def content(text: str, parts: list[dict[str, Any]]) -> Any:
    """A window item's content: its text alone, or its text and its media parts."""
    return [*([{"type": "text", "text": text}] if text else []), *parts] if parts else text
