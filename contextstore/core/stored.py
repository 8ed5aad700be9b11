"""An item as stored (a value of the ``:items`` hash), and as the scripts send it.

Stored, an item holds only what no other key of its window does: ``{"added_at_us":<µs>,`` (the
script writes it, ``layout.STORED_HEAD``) then the body the client encodes once before the add
(``ItemBody``: content, role, source_ref, metadata; nulls left out). Its seq, token count,
priority, type, flags and group live in ``:attrs`` (``seq|tokens|priority|type[|flags|group]``),
its pin in ``:pinned``, its id is the hash field. A script sends an item as those parts,
``[id, stored JSON, attrs, pinned]`` (``raw_entry`` in lua/lib/items.lua), and ``decode_item``
puts them together here: the server does no per-item string work. A window written by 0.1
spelled every field in the stored JSON; its body decodes the same (the other fields are read
from ``:attrs`` and ``:pinned``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import msgspec

from ..errors import InvalidItemError, corrupt_value
from ..types import TYPE_RANKS, ContextItem, ItemType
from . import blobs, parts, toolcalls
from .layout import MAX_TIME_US, STORED_HEAD, order_score
from .validate import NewItem

_encoder = msgspec.json.Encoder()


class ItemBody(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The client-encoded part of a stored item. Fields that are None are left out (a window
    written by 0.1 spells them ``null``; both read the same). ``blobs``, first: the blobs its
    content parts refer to (``core/blobs.py``)."""

    blobs: list[str] | None = None
    content: str | list[dict[str, Any]]
    role: str | None = None
    source_ref: str | None = None
    metadata: dict[str, Any] | None = None


class StoredBody(ItemBody, kw_only=True):
    """What ``decode_item`` reads of a stored JSON (either layout): its time and its body."""

    added_at_us: int


_decoder = msgspec.json.Decoder(StoredBody)
#: a script's entry of one item: [id, stored JSON, attrs, pinned (1/0)]
Entry = list[Any]


def body_json(item: NewItem | ContextItem) -> bytes:
    """The client-encoded body of an item's stored JSON (a JSON object starting ``{"content":``,
    or ``{"blobs":`` when its content refers to blobs: ``blobs.split`` made it)."""
    refs = blobs.tokens_in(item.content)
    return _encoder.encode(
        ItemBody(
            blobs=refs or None, content=item.content, role=item.role, source_ref=item.source_ref, metadata=item.metadata
        )
    )


def stored_json(item: ContextItem) -> bytes:
    """A complete item (from a snapshot) as ``:items`` stores it: its time, then its body."""
    added = item.added_at or datetime.now(UTC)
    if added.tzinfo is None:
        added = added.replace(tzinfo=UTC)
    return f"{STORED_HEAD}{int(added.timestamp() * 1_000_000)},".encode() + body_json(item)[1:]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


#: the errors decoding a stored value in a shape no script writes may raise
_UNREADABLE = (msgspec.MsgspecError, ValueError, TypeError, RecursionError, InvalidItemError)
#: the time ``added_at_us`` counts from (a sum with it: a third of ``fromtimestamp``'s time)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: an ``:attrs`` type as stored -> the type (a lookup: a third of ``ItemType(kind)``'s time)
_TYPES = {t.value: t for t in ItemType}


class _Attrs(NamedTuple):
    seq: int
    tokens: int
    priority: int
    type: ItemType
    group: str | None


def _attrs_of(attrs: bytes | str) -> _Attrs:
    seq, tokens, priority, kind, *rest = _text(attrs).split("|", 5)
    item_type = _TYPES.get(kind)
    if not (seq.isdigit() and tokens.isdigit() and priority.isdigit()) or len(rest) not in (0, 2) or not item_type:
        raise ValueError("not seq|tokens|priority|type[|flags|group]")
    return _Attrs(int(seq), int(tokens), int(priority), item_type, (rest[1] or None) if rest else None)


def time_ok(added_at_us: Any) -> bool:
    """Whether a stored ``added_at_us`` is a time a read gives: µs since 1970 (UTC), up to
    ``MAX_TIME_US`` (the last a ``datetime`` holds): a JSON integer (not a float, not a bool)."""
    return type(added_at_us) is int and 0 <= added_at_us <= MAX_TIME_US


def added_time(added_at_us: int) -> datetime:
    """The time an item was added, from its stored ``added_at_us``; ``ValueError`` for one that
    is not ``time_ok``."""
    if not time_ok(added_at_us):
        raise ValueError(f"added_at_us {added_at_us} is not a time from 1970 to 9999")
    return _EPOCH + timedelta(microseconds=added_at_us)


def decode_item(entry: Entry) -> ContextItem:
    """An item from the parts a script sends (``[id, stored JSON, attrs, pinned]``);
    ``CorruptWindowError`` naming the key and the item for parts in a shape no script writes
    (as an add checks them: the body's fields, tool calls and results, UTF-8, depth)."""
    item_id, json, attrs, pinned = entry
    name = _id_text(item_id)
    try:
        a = _attrs_of(attrs)
    except _UNREADABLE as exc:
        raise corrupt_value(":attrs", name, f"{type(exc).__name__}: {str(exc)[:200]}") from exc
    try:
        body = _decoder.decode(json)
        added = added_time(body.added_at_us)
        content = body.content if isinstance(body.content, str) else parts.check(body.content)  # as an add did
        toolcalls.calls_of(a.type, body.metadata)  # the shapes a build reads, as an add checked them
        toolcalls.result_call_id(a.type, body.role, body.metadata)
    except _UNREADABLE as exc:
        raise corrupt_value(":items", name, f"{type(exc).__name__}: {str(exc)[:200]}") from exc
    return ContextItem(
        content=content,
        type=a.type,
        priority=a.priority,
        token_count=a.tokens,
        pinned=bool(int(pinned or 0)),
        role=body.role,
        source_ref=body.source_ref,
        metadata=body.metadata,
        id=name,
        added_at=added,
        seq=a.seq,
        group=a.group,
    )


def _id_text(item_id: bytes | str) -> str:
    """An item id as text, even when its bytes are not UTF-8 (a corrupt window's)."""
    return item_id.decode("utf-8", "backslashreplace") if isinstance(item_id, bytes) else item_id


#: an ``:attrs`` type as stored -> its build rank
_RANKS = {t.value: rank for t, rank in TYPE_RANKS.items()}
#: where an id whose attrs are not in the shape the scripts write stands in a ``listing``: last
_LAST = float("inf")


def _listing_key(attrs: bytes | str, by_seq: bool) -> float:
    """An item's place in a ``listing``: its seq, or its ``:order`` score."""
    try:
        seq, _, priority, kind = _text(attrs).split("|", 4)[:4]
        return int(seq) if by_seq else order_score(_RANKS[kind], int(priority), int(seq))
    except (KeyError, ValueError):
        return _LAST


def listing(attrs: Mapping[Any, bytes | str], jsons: Mapping[Any, Any], by_seq: bool) -> list[Any]:
    """A window's ids as ``:fifo`` (``by_seq``: arrival order) or ``:order`` (build order,
    ``layout.order_score``; a tie by id, as a sorted set breaks it) lists them, worked out from
    its ``:attrs`` values (``attrs``: id -> value), so that a whole-window read need not send
    either key. An id with stored JSON (``jsons``) but attrs in a shape no script writes, or none,
    comes last, where decoding it reports the corruption."""
    ids = sorted(attrs, key=lambda i: (_listing_key(attrs[i], by_seq), i))
    return ids + [i for i in jsons if i not in attrs]


def entry_digest(entry: Entry, payloads: blobs.BlobCache) -> str:
    """What commit.lua checks an item by: the sha1 of its stored JSON (as Redis holds it: its
    blobs' payloads, which the read put in, back out), a newline, its attrs."""
    json, attrs = (x if isinstance(x, bytes) else x.encode() for x in entry[1:3])
    return hashlib.sha1(blobs.tokenized(json, payloads) + b"\n" + attrs).hexdigest()
