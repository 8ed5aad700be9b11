"""Validation of input and the stored JSON layout of items. Pure functions, no I/O."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import msgspec

from .errors import InvalidItemError, InvalidOptionsError
from .types import CompactionStrategy, ContextItem, ItemType, WindowConfig

_GENERATED_ID = re.compile(r"ctx-\d+")
_WS = re.compile(r"\s")
MAX_CALLER_ID = 128


class StoredItem(msgspec.Struct, kw_only=True):
    """An item as stored in ``:items``. The field order IS the layout: the Lua scripts build the
    first five fields and splice ``priority``/``pinned`` without decoding the rest."""

    priority: int
    pinned: bool
    seq: int
    id: str
    added_at_us: int
    type: str
    token_count: int
    content: str
    role: str | None = None
    source_ref: str | None = None
    metadata: dict[str, Any] | None = None


class ItemBody(msgspec.Struct, kw_only=True):
    """The client-encoded tail of a stored item (everything the client knows before the add)."""

    type: str
    token_count: int
    content: str
    role: str | None = None
    source_ref: str | None = None
    metadata: dict[str, Any] | None = None


class NewItem(msgspec.Struct, kw_only=True):
    """A validated item on its way in (token_count 0 = still to count)."""

    content: str
    type: ItemType
    priority: int
    pinned: bool
    role: str | None
    source_ref: str | None
    metadata: dict[str, Any] | None
    token_count: int
    id: str | None


_stored_decoder = msgspec.json.Decoder(StoredItem)
_encoder = msgspec.json.Encoder()


def _type(value: object) -> ItemType:
    if isinstance(value, ItemType):
        return value
    if isinstance(value, str):
        try:
            return ItemType(value)
        except ValueError:
            pass
    allowed = ", ".join(t.value for t in ItemType)
    raise InvalidItemError(f"type {value!r} is not an ItemType ({allowed})")


def _check_json(metadata: object) -> dict[str, Any] | None:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise InvalidItemError(f"metadata must be a dict, not {type(metadata).__name__}")
    _reject_non_finite(metadata)
    try:
        # round-trip so what is stored is exactly what comes back (tuples become lists, ...)
        decoded = msgspec.json.decode(_encoder.encode(dict(metadata)))
    except (TypeError, ValueError, OverflowError, msgspec.MsgspecError) as exc:
        raise InvalidItemError(f"metadata is not JSON-serialisable: {exc}") from exc
    if not isinstance(decoded, dict):  # pragma: no cover - a Mapping always encodes as object
        raise InvalidItemError("metadata must encode as a JSON object")
    return decoded


def _reject_non_finite(value: object) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidItemError("metadata may not hold NaN or infinity")
    if isinstance(value, Mapping):
        for v in value.values():
            _reject_non_finite(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _reject_non_finite(v)


def _opt_str(name: str, value: object, limit: int = 10_000) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise InvalidItemError(f"{name} must be a str of at most {limit} characters or None")
    _utf8(name, value)
    return value


def _utf8(name: str, value: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidItemError(f"{name} is not valid UTF-8 text: {exc}") from exc


def validate_priority(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 100:
        raise InvalidItemError(f"priority must be an int from 0 to 100, not {priority!r}")
    return priority


def validate_caller_id(item_id: object) -> str:
    if (
        not isinstance(item_id, str)
        or not 1 <= len(item_id) <= MAX_CALLER_ID
        or _WS.search(item_id)
        or _GENERATED_ID.fullmatch(item_id)
    ):
        raise InvalidItemError(
            f"item id {item_id!r} must be 1-{MAX_CALLER_ID} characters without whitespace and "
            "not of the form ctx-<digits> (those are generated)"
        )
    _utf8("id", item_id)
    return item_id


def validate_item(
    content_or_item: object,
    *,
    max_content_bytes: int,
    type: object = ItemType.CODE,  # noqa: A002
    priority: object = 50,
    pinned: object = False,
    role: object = None,
    source_ref: object = None,
    metadata: object = None,
    token_count: object = None,
    id: object = None,  # noqa: A002
) -> NewItem:
    """Check one item completely (before anything is written). Raises InvalidItemError."""
    content: object
    if isinstance(content_or_item, ContextItem):
        it = content_or_item
        content, type, priority, pinned = it.content, it.type, it.priority, it.pinned
        role, source_ref, metadata, id = it.role, it.source_ref, it.metadata, it.id
        if not isinstance(it.token_count, int) or isinstance(it.token_count, bool) or it.token_count < 0:
            raise InvalidItemError(f"token_count must be an int >= 0, not {it.token_count!r}")
        token_count = it.token_count if it.token_count > 0 else None
    else:
        content = content_or_item
    if not isinstance(content, str):
        raise InvalidItemError(f"content must be a str, not {type_name(content)}")
    if not content.strip():
        raise InvalidItemError("content must not be empty or blank")
    size = len(_utf8("content", content))
    if size > max_content_bytes:
        raise InvalidItemError(f"content is {size} bytes in UTF-8; the limit is {max_content_bytes}")
    if not isinstance(pinned, bool):
        raise InvalidItemError(f"pinned must be a bool, not {pinned!r}")
    if token_count is not None:
        if isinstance(token_count, bool) or not isinstance(token_count, int) or token_count < 1:
            raise InvalidItemError(f"token_count must be an int >= 1, not {token_count!r}")
    return NewItem(
        content=content,
        type=_type(type),
        priority=validate_priority(priority),
        pinned=pinned,
        role=_opt_str("role", role, 200),
        source_ref=_opt_str("source_ref", source_ref),
        metadata=_check_json(metadata),
        token_count=token_count or 0,
        id=None if id is None else validate_caller_id(id),
    )


def type_name(value: object) -> str:
    return type(value).__name__


def item_args(item: NewItem) -> list[str | bytes]:
    """The six ARGV fields of one item for add.lua / commit.lua."""
    body = _encoder.encode(
        ItemBody(
            type=item.type.value,
            token_count=item.token_count,
            content=item.content,
            role=item.role,
            source_ref=item.source_ref,
            metadata=item.metadata,
        )
    )
    return [
        item.id or "",
        body,
        item.type.value,
        str(item.token_count),
        str(item.priority),
        "1" if item.pinned else "0",
    ]


def stored_json(item: ContextItem) -> bytes:
    """Encode a complete item (from a snapshot) in the stored layout."""
    added = item.added_at or datetime.now(timezone.utc)
    if added.tzinfo is None:
        added = added.replace(tzinfo=timezone.utc)
    return _encoder.encode(
        StoredItem(
            priority=item.priority,
            pinned=item.pinned,
            seq=item.seq,
            id=item.id or "",
            added_at_us=int(added.timestamp() * 1_000_000),
            type=item.type.value,
            token_count=item.token_count,
            content=item.content,
            role=item.role,
            source_ref=item.source_ref,
            metadata=item.metadata,
        )
    )


def decode_item(raw: bytes | str) -> ContextItem:
    s = _stored_decoder.decode(raw)
    return ContextItem(
        content=s.content,
        type=ItemType(s.type),
        priority=s.priority,
        token_count=s.token_count,
        pinned=s.pinned,
        role=s.role,
        source_ref=s.source_ref,
        metadata=s.metadata,
        id=s.id,
        added_at=datetime.fromtimestamp(s.added_at_us / 1_000_000, tz=timezone.utc),
        seq=s.seq,
    )


# -- window config ---------------------------------------------------------------------------

def _int_opt(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidOptionsError(f"{name} must be an int from {lo} to {hi}, not {value!r}")
    return value


def validate_config_values(values: dict[str, Any], item_limit: int) -> dict[str, Any]:
    """Validate (and normalise) whichever config fields are present."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key == "max_tokens":
            out[key] = None if value is None else _int_opt(key, value, 1, 10**12)
        elif key == "max_items":
            out[key] = None if value is None else _int_opt(key, value, 1, item_limit)
        elif key == "compaction_threshold":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                0 < value <= 100
            ):
                raise InvalidOptionsError(
                    f"compaction_threshold must be a number with 0 < t <= 100, not {value!r}"
                )
            out[key] = float(value)
        elif key == "default_strategy":
            try:
                out[key] = CompactionStrategy(value)
            except ValueError:
                raise InvalidOptionsError(f"unknown compaction strategy {value!r}") from None
        elif key == "ttl_seconds":
            out[key] = None if value is None else _int_opt(key, value, 1, 10**9)
        else:
            raise InvalidOptionsError(f"unknown window option {key!r}")
    return out


def creation_config(values: dict[str, Any], item_limit: int) -> WindowConfig:
    """The config a new window gets from the (validated) values a caller passed."""
    max_tokens = values.get("max_tokens")
    max_items = values.get("max_items")
    if max_items is None:
        max_items = 50 if max_tokens is None else item_limit
    return WindowConfig(
        max_tokens=max_tokens,
        max_items=max_items,
        compaction_threshold=values.get("compaction_threshold", 85.0),
        default_strategy=values.get("default_strategy", CompactionStrategy.REMOVE_LOW_PRIORITY),
        ttl_seconds=values.get("ttl_seconds"),
        item_limit=item_limit,
    )


CONFIG_ARGS = 6  #: how many arguments config_args() gives


def config_args(cfg: WindowConfig) -> list[str | bytes]:
    """ARGV[1..6] of every mutating script."""
    return [
        str(cfg.max_tokens or 0),
        str(cfg.max_items),
        str(cfg.item_limit),
        repr(float(cfg.compaction_threshold)),
        cfg.default_strategy.value,
        str(cfg.ttl_seconds or 0),
    ]


def config_from_reply(values: list[Any]) -> WindowConfig:
    """Decode {max_tokens, max_items, item_limit, threshold, strategy, ttl} from a script."""
    mt, mi, il, th, st, ttl = (as_str(v) for v in values)
    return WindowConfig(
        max_tokens=int(mt) or None,
        max_items=int(mi),
        item_limit=int(il),
        compaction_threshold=float(th),
        default_strategy=CompactionStrategy(st),
        ttl_seconds=int(ttl) or None,
    )


def as_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
