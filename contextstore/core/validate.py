"""Checks of what callers pass in: items, ids, priorities, option values. Pure functions that
either return the value (normalised) or raise the library's typed error; nothing is written
before they pass."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any, TypeGuard

import msgspec

from ..errors import ContextStoreError, InvalidItemError, InvalidOptionsError
from ..types import ROLE_TYPES, ContextItem, ItemType
from . import native, parts, sizes, toolcalls
from .facts import role_class
from .layout import CLEARED_KEY, MAX_PRIORITY

MAX_CALLER_ID = 128
#: how deep metadata may nest (a dict or list inside another counts one level)
MAX_METADATA_DEPTH = 64
#: the keywords of ``add()`` and of an ``add_many`` dict besides ``content``
ITEM_KEYWORDS = frozenset(
    {"type", "priority", "pinned", "role", "source_ref", "metadata", "token_count", "id", "group"}
)
_GENERATED_ID = re.compile(r"ctx-\d+")
_VERSION = re.compile(r"(\d{1,20}(\.\d{1,20}){0,7})?")
_WHITESPACE = re.compile(r"\s")
#: C0 and C1 control characters and DEL: a caller's id, group or role reaches terminals and logs
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._\-:@/+=]{1,128}")
#: a model's name: what providers name their models (1-200 characters, no control characters, no spaces)
_MODEL = re.compile(r"[^\x00-\x20\x7f]{1,200}")
_json = msgspec.json.Encoder()


def unknown_name(what: str, name: str, valid: Collection[str]) -> InvalidOptionsError:
    """The error for an unknown keyword ``name``: it names it and the closest valid one."""
    close = difflib.get_close_matches(name, sorted(valid), n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else f" (valid: {', '.join(sorted(valid))})"
    return InvalidOptionsError(f"unknown {what} {name!r}{hint}")


def known_names(what: str, given: Iterable[str], valid: Collection[str]) -> None:
    """Raise ``unknown_name`` for the first name of ``given`` (sorted) that is not ``valid``."""
    for name in sorted(set(given) - set(valid)):
        raise unknown_name(what, str(name), valid)


def int_in(
    name: str, value: object, low: int, high: int | None = None, error: type[ContextStoreError] = InvalidOptionsError
) -> int:
    """``value`` if it is an int (not a bool) in ``low..high`` (no upper bound when None)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bounds = f"from {low} to {high}" if high is not None else f">= {low}"
        raise error(f"{name} must be an int {bounds}, not {value!r}")
    return value


def number_in(name: str, value: object, low: float, high: float) -> float:
    """``value`` as a float if it is a number (not a bool) in ``low..high``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise InvalidOptionsError(f"{name} must be a number from {low:g} to {high:g}, not {value!r}")
    return float(value)


def generated_id(seq: int) -> str:
    """The id the store gives an item added without one, from its seq (add.lua: ``ctx-<seq>``)."""
    return f"ctx-{seq}"


def is_generated_id(value: str) -> bool:
    """Whether ``value`` is of the form the store generates (``ctx-<digits>``)."""
    return _GENERATED_ID.fullmatch(value) is not None


def item_id(value: object) -> str:
    """An item id argument (of get/remove/pin/...): a non-empty str of UTF-8 text."""
    if not isinstance(value, str) or not value:
        raise InvalidItemError(f"item id must be a non-empty str, not {value!r}")
    _utf8("item id", value)
    return value


def id_list(name: str, value: object) -> list[str]:
    """A non-empty list of item ids (each a non-empty str without whitespace), as given."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidOptionsError(f"{name} must be a list of item ids, not {value!r}")
    ids = list(value)
    if not ids or not all(isinstance(i, str) and i and not _WHITESPACE.search(i) for i in ids):
        raise InvalidOptionsError(f"{name} must be a non-empty list of item ids, not {value!r}")
    for i in ids:
        _utf8(name, i, InvalidOptionsError)
    return ids


def version(name: str, value: object) -> str | None:
    """A window ``version`` as a build or ``stats()`` reported it (digits and dots; "": no window), or None."""
    if value is not None and not (isinstance(value, str) and _VERSION.fullmatch(value)):
        raise InvalidOptionsError(f"{name} must be a version a build or stats() reported, not {value!r}")
    return value


def is_request_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a request id a call takes (``request_id``)."""
    return isinstance(value, str) and _REQUEST_ID.fullmatch(value) is not None


def is_model_name(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a model's name ``record_usage`` takes."""
    return isinstance(value, str) and _MODEL.fullmatch(value) is not None


def request_id(value: object) -> str:
    """A caller's request id: 1-128 characters of the window-id alphabet."""
    if not is_request_id(value):
        raise InvalidOptionsError(
            f"request_id must be 1-128 characters from A-Z a-z 0-9 . _ - : @ / + =, not {value!r}"
        )
    return value


def flag(name: str, value: object) -> bool:
    """A bool argument."""
    if not isinstance(value, bool):
        raise InvalidOptionsError(f"{name} must be a bool, not {value!r}")
    return value


def item_types(types: object) -> str | None:
    """A type filter as the read script takes it: "" for all types, None when nothing can match
    (an empty list), else comma-separated type values."""
    if types is None:
        return ""
    if isinstance(types, (str, ItemType)):
        types = [types]
    if not isinstance(types, Iterable):
        raise InvalidOptionsError(f"types must be an ItemType, a str or a list of them, not {types!r}")
    out = []
    for t in types:
        try:
            out.append(ItemType(t).value)
        except ValueError:
            raise InvalidOptionsError(f"unknown item type {t!r}") from None
    return ",".join(out) if out else None


def limit(value: object) -> int:
    """A ``limit`` argument: None (-1: no limit) or an int >= 0."""
    return -1 if value is None else int_in("limit", value, 0)


# -- items -------------------------------------------------------------------------------------


class NewItem(msgspec.Struct, kw_only=True):
    """A validated item on its way in (``token_count`` 0: still to count)."""

    content: str | list[dict[str, Any]]
    type: ItemType
    priority: int
    pinned: bool
    role: str | None
    source_ref: str | None
    metadata: dict[str, Any] | None
    token_count: int
    id: str | None
    group: str | None = None
    #: the (tool name, call id) of each call an assistant message makes, or the call a tool
    #: result answers
    tool_calls: tuple[tuple[str, str], ...] = ()
    tool_call_id: str | None = None


def _utf8(name: str, value: str, error: type[ContextStoreError] = InvalidItemError) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(f"{name} is not valid UTF-8 text: {exc}") from exc


def text(name: str, value: str, error: type[ContextStoreError] = InvalidOptionsError) -> str:
    """``value`` if it encodes as UTF-8 (a lone surrogate does not)."""
    _utf8(name, value, error)
    return value


def _no_control(name: str, value: str) -> None:
    found = _CONTROL.search(value)
    if found:
        raise InvalidItemError(f"{name} {value[:60]!r} holds a control character ({found.group()!r})")


def _item_type(value: object) -> ItemType:
    if isinstance(value, ItemType):
        return value
    if isinstance(value, str):
        try:
            return ItemType(value)
        except ValueError:
            pass
    allowed = ", ".join(t.value for t in ItemType)
    raise InvalidItemError(f"type {value!r} is not an ItemType ({allowed})")


def _check_values(value: object, name: str = "metadata") -> None:
    """Walk metadata (or content parts: ``name``) without recursion: no NaN or infinity, at most
    ``MAX_METADATA_DEPTH`` levels."""
    todo: list[tuple[object, int]] = [(value, 1)]
    while todo:
        node, depth = todo.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise InvalidItemError(f"{name} may not hold NaN or infinity")
        if isinstance(node, (Mapping, list, tuple)):
            if depth > MAX_METADATA_DEPTH:
                raise InvalidItemError(f"{name} nests deeper than {MAX_METADATA_DEPTH} levels")
            todo.extend((child, depth + 1) for child in (node.values() if isinstance(node, Mapping) else node))


def metadata(value: object) -> dict[str, Any] | None:
    """JSON-serialisable metadata, round-tripped so what is stored is exactly what comes back
    (tuples become lists)."""
    return _metadata(value)[0]


def _metadata(value: object) -> tuple[dict[str, Any] | None, int]:
    """``metadata(value)`` and the size of its JSON in bytes (0 for None)."""
    if value is None:
        return None, 0
    if not isinstance(value, Mapping):
        raise InvalidItemError(f"metadata must be a dict, not {type(value).__name__}")
    _check_values(value)
    try:
        encoded = _json.encode(dict(value))
        decoded = msgspec.json.decode(encoded)
    except (TypeError, ValueError, OverflowError, msgspec.MsgspecError) as exc:
        raise InvalidItemError(f"metadata is not JSON-serialisable: {exc}") from exc
    if not isinstance(decoded, dict):  # pragma: no cover - a Mapping always encodes as an object
        raise InvalidItemError("metadata must encode as a JSON object")
    return decoded, len(encoded)


def _optional_text(name: str, value: object, most: int, plain: bool = False) -> str | None:
    """None, or a str of at most ``most`` characters of UTF-8 text (``plain``: and no control
    characters)."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > most:
        raise InvalidItemError(f"{name} must be a str of at most {most} characters or None")
    _utf8(name, value)
    if plain:
        _no_control(name, value)
    return value


def priority(value: object) -> int:
    """An item priority: an int from 0 to 100."""
    return int_in("priority", value, 0, MAX_PRIORITY, InvalidItemError)


def caller_id(value: object) -> str:
    """A caller-given item id: 1-128 characters, no whitespace or control characters, not of
    the form ctx-<digits>."""
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_CALLER_ID
        or _WHITESPACE.search(value)
        or _GENERATED_ID.fullmatch(value)
    ):
        raise InvalidItemError(
            f"item id {value!r} must be 1-{MAX_CALLER_ID} characters without whitespace and "
            "not of the form ctx-<digits> (those are generated)"
        )
    _utf8("id", value)
    _no_control("item id", value)
    return value


def _content(value: object, may_be_empty: bool) -> tuple[str | list[dict[str, Any]], int]:
    """The content and its size in bytes (UTF-8; content parts as JSON)."""
    if value is None and may_be_empty:
        value = ""
    if isinstance(value, list):
        _check_values(value, "content")
        safe = _json_safe("content", value)
        return safe, len(_json.encode(safe))
    if not isinstance(value, str):
        raise InvalidItemError(f"content must be a str or a list of content parts, not {type(value).__name__}")
    if not value.strip() and not may_be_empty:
        raise InvalidItemError("content must not be empty or blank (only a tool call's may)")
    return value, len(_utf8("content", value))


def _json_safe(name: str, value: Any) -> Any:
    """``value`` as JSON gives it back (``InvalidItemError`` when it does not encode)."""
    try:
        return msgspec.json.decode(_json.encode(value))
    except (TypeError, ValueError, OverflowError, msgspec.MsgspecError) as exc:
        raise InvalidItemError(f"{name} is not JSON-serialisable: {exc}") from exc


def item_keywords(item: ContextItem) -> dict[str, Any]:
    """The ``add`` keywords that store ``item`` as it is (its ``token_count`` checked; 0: count it)."""
    if isinstance(item.token_count, bool) or not isinstance(item.token_count, int) or item.token_count < 0:
        raise InvalidItemError(f"token_count must be an int >= 0, not {item.token_count!r}")
    return {
        "content": item.content,
        "type": item.type,
        "priority": item.priority,
        "pinned": item.pinned,
        "role": item.role,
        "source_ref": item.source_ref,
        "metadata": item.metadata,
        "token_count": item.token_count or None,
        "id": item.id,
        "group": item.group,
    }


def new_item(content_or_item: object, *, limits: sizes.ItemLimits, restoring: bool = False, **fields: Any) -> NewItem:
    """Check one item completely, before anything is written (``InvalidItemError``). Takes a
    str with ``add()``'s keywords, or a ``ContextItem`` (whose fields are used instead). Every
    size (``limits``) is checked before a part's data is decoded."""
    if "content" in fields:  # add(content=...)
        if content_or_item is not None:
            raise InvalidOptionsError("content is given twice: as the first argument and as content=")
        content_or_item = fields.pop("content")
    known_names("item keyword", fields, ITEM_KEYWORDS)
    given = (
        item_keywords(content_or_item)
        if isinstance(content_or_item, ContextItem)
        else {**fields, "content": content_or_item}
    )
    token_count = given.get("token_count")
    if token_count is not None:
        int_in("token_count", token_count, 1, None, InvalidItemError)
    item_id_, role = given.get("id"), given.get("role")
    item_type = _item_type(given["type"] if given.get("type") is not None else _implied_type(role))
    if isinstance(content_or_item, ContextItem) and item_type is ItemType.CODE and not restoring:
        item_type = _implied_type(role)  # a ContextItem's type left at its default
    meta, meta_bytes = _metadata(given.get("metadata"))
    if meta and CLEARED_KEY in meta and not restoring:
        raise InvalidItemError(f"metadata[{CLEARED_KEY!r}] is set by the store when it clears a tool result")
    calls = toolcalls.calls_of(item_type, meta)
    group = given.get("group")
    group = group_name(group) if group is not None else (calls[0][1] if calls else None)
    content, content_bytes = _content(given["content"], may_be_empty=bool(calls))
    source_ref = _optional_text("source_ref", given.get("source_ref"), 10_000)
    sizes.check(content, content_bytes, meta_bytes, source_ref, limits)
    if isinstance(content, list):
        content = parts.check(content)
        native.check_owner(content, role_class(item_type, role, meta), (call_id for _, call_id in calls))
    return NewItem(
        content=content,
        type=item_type,
        priority=priority(given.get("priority", 50)),
        pinned=_pinned(given.get("pinned", False)),
        role=_optional_text("role", role, 200, plain=True),
        source_ref=source_ref,
        metadata=meta,
        token_count=token_count or 0,
        id=None if item_id_ is None else caller_id(item_id_),
        group=group,
        tool_calls=calls,
        tool_call_id=toolcalls.result_call_id(item_type, role, meta),
    )


def _implied_type(role: object) -> ItemType:
    """The type a chat role implies (``user`` → user_message, ...), else ``code`` (seed 002)."""
    return ROLE_TYPES.get(role, ItemType.CODE) if isinstance(role, str) else ItemType.CODE


def group_name(value: object) -> str:
    """A group: 1-128 characters without whitespace or control characters."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_CALLER_ID or _WHITESPACE.search(value):
        raise InvalidItemError(f"group must be 1-{MAX_CALLER_ID} characters without whitespace, not {value!r}")
    _utf8("group", value)
    _no_control("group", value)
    return value


def _pinned(value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidItemError(f"pinned must be a bool, not {value!r}")
    return value
