"""The stored JSON of an item (a value of the ``:items`` hash).

Its fields come in a fixed order: the scripts write the head (``priority``, ``pinned``, ``seq``,
``id``, ``added_at_us``) themselves and change ``priority`` / ``pinned`` by rewriting that head
of the string, never by re-encoding the rest; the client encodes the body (``ItemBody``) once,
before the add, and the scripts append it to the head.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import msgspec

from .types import ContextItem, ItemType
from .validate import NewItem

_encoder = msgspec.json.Encoder()


class ItemBody(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The client-encoded tail of a stored item: everything the client knows before the add.
    Fields that are None are left out (a window written by 0.1 spells them ``null``; both read
    the same); ``group``, when present, comes last (``with_group`` in lua/lib/items.lua)."""

    type: str
    token_count: int
    content: str
    role: str | None = None
    source_ref: str | None = None
    metadata: dict[str, Any] | None = None
    group: str | None = None


class StoredItem(ItemBody, kw_only=True, omit_defaults=False):
    """A whole stored item, as decoded (the head fields, then the body)."""

    priority: int
    pinned: bool
    seq: int
    id: str
    added_at_us: int


_decoder = msgspec.json.Decoder(StoredItem)


def body_json(item: NewItem | ContextItem) -> bytes:
    """The body of an item's stored JSON (a complete JSON object starting ``{"type":"``)."""
    return _encoder.encode(
        ItemBody(
            group=item.group,
            type=item.type.value,
            token_count=item.token_count,
            content=item.content,
            role=item.role,
            source_ref=item.source_ref,
            metadata=item.metadata,
        )
    )


def stored_json(item: ContextItem) -> bytes:
    """A complete item (from a snapshot) in the stored layout: head, then body."""
    added = item.added_at or datetime.now(timezone.utc)
    if added.tzinfo is None:
        added = added.replace(tzinfo=timezone.utc)
    head = _encoder.encode(
        {
            "priority": item.priority,
            "pinned": item.pinned,
            "seq": item.seq,
            "id": item.id or "",
            "added_at_us": int(added.timestamp() * 1_000_000),
        }
    )
    return head[:-1] + b"," + body_json(item)[1:]


def decode_item(raw: bytes | str) -> ContextItem:
    """A stored item's JSON as a ``ContextItem``."""
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
