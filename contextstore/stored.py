"""An item's JSON: as stored (a value of the ``:items`` hash), and whole, as the scripts send it.

Stored, an item holds only what no other key of its window does: ``{"added_at_us":<µs>,`` (the
script writes it, ``layout.STORED_HEAD``) then the body the client encodes once before the add
(``ItemBody``: content, role, source_ref, metadata; nulls left out). Its seq, token count,
priority, type and group live in ``:attrs``, its pin in ``:pinned``, its id is the hash field. A
script sends the whole item (``full_json`` in lua/lib/items.lua), which ``decode_item`` reads.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import msgspec

from .layout import STORED_HEAD
from .types import ContextItem, ItemType
from .validate import NewItem

_encoder = msgspec.json.Encoder()


class ItemBody(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The client-encoded part of a stored item. Fields that are None are left out (a window
    written by 0.1 spells them ``null``; both read the same)."""

    content: str
    role: str | None = None
    source_ref: str | None = None
    metadata: dict[str, Any] | None = None


class StoredItem(ItemBody, kw_only=True, omit_defaults=False):
    """A whole item, as the scripts send it (``full_json`` in lua/lib/items.lua)."""

    priority: int
    pinned: bool
    seq: int
    id: str
    added_at_us: int
    type: str
    token_count: int
    group: str | None = None


_decoder = msgspec.json.Decoder(StoredItem)


def body_json(item: NewItem | ContextItem) -> bytes:
    """The client-encoded body of an item's stored JSON (a JSON object starting ``{"content":``)."""
    return _encoder.encode(
        ItemBody(content=item.content, role=item.role, source_ref=item.source_ref, metadata=item.metadata)
    )


def stored_json(item: ContextItem) -> bytes:
    """A complete item (from a snapshot) as ``:items`` stores it: its time, then its body."""
    added = item.added_at or datetime.now(timezone.utc)
    if added.tzinfo is None:
        added = added.replace(tzinfo=timezone.utc)
    return f"{STORED_HEAD}{int(added.timestamp() * 1_000_000)},".encode() + body_json(item)[1:]


def decode_item(raw: bytes | str) -> ContextItem:
    """A whole item's JSON, as the scripts send it, as a ``ContextItem``."""
    s = _decoder.decode(raw)
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
        group=s.group,
    )
