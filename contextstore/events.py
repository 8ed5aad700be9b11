"""Typed events: one msgspec Struct per kind of change a window's stream records.

Every event has ``kind`` (the tag), ``id`` (the stream entry id), ``window_id`` and ``at`` (the
entry's time, from its id). The other fields are those the scripts write (see
``docs/observability.md``). ``decode()`` turns one stream entry into its event with one
reusable conversion; a kind this version does not know becomes an ``OtherEvent``.

May import: ``types``; no I/O (no redis, asyncio, subprocess or HTTP).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Union

import msgspec

from .types import CompactionStrategy, ItemType


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """What every event carries."""

    id: str
    window_id: str
    at: datetime

    @property
    def kind(self) -> str:
        """The event's kind (its tag): ``item_added``, ``compacted``, ..."""
        return str(type(self).__struct_config__.tag)


class ItemEvent(Event, frozen=True, kw_only=True):
    """What the events about one item carry: which item, its type and tokens, and the
    window's tokens after the change."""

    item_id: str
    type: ItemType
    token_count: int
    total_tokens_after: int


class ItemAdded(ItemEvent, frozen=True, kw_only=True, tag="item_added"):
    """An item was added."""


class ItemRemoved(ItemEvent, frozen=True, kw_only=True, tag="item_removed"):
    """An item left the window; ``reason``: manual, eviction, compaction, clear or rewind."""

    reason: str


class ItemCleared(ItemEvent, frozen=True, kw_only=True, tag="item_cleared"):
    """A tool result's content was replaced by the placeholder (CLEAR_TOOL_RESULTS); its
    ``token_count`` is the placeholder's."""

    tokens_freed: int


class Compacted(Event, frozen=True, kw_only=True, tag="compacted"):
    """A compaction removed or cleared items."""

    strategy: CompactionStrategy
    items_removed: int
    items_cleared: int = 0
    tokens_freed: int
    usage_before_percent: float
    usage_after_percent: float
    total_tokens_after: int
    #: the tokens a prompt built in arrival order held from the first item the compaction changed
    #: on (before it): what the provider's prompt cache can no longer serve (None: not known)
    tokens_invalidated: int | None = None
    #: the summary that replaced the removed items (SUMMARIZE)
    summary_id: str | None = None


class Cleared(Event, frozen=True, kw_only=True, tag="cleared"):
    """``clear()`` ran."""

    items_cleared: int
    tokens_cleared: int
    included_pinned: bool
    total_tokens_after: int


class PriorityChanged(Event, frozen=True, kw_only=True, tag="priority_changed"):
    """An item's priority changed."""

    item_id: str
    priority: int
    previous_priority: int


class Pinned(Event, frozen=True, kw_only=True, tag="pinned"):
    """An item was pinned."""

    item_id: str
    pinned: bool = True


class Unpinned(Event, frozen=True, kw_only=True, tag="unpinned"):
    """An item was unpinned."""

    item_id: str
    pinned: bool = False


class Restored(Event, frozen=True, kw_only=True, tag="restored"):
    """A snapshot was restored into the window."""

    items: int
    items_replaced: int
    total_tokens_after: int
    archived: int = 0  # the snapshot's archive entries kept (undo_summary works for them)
    archive_dropped: int = 0  # entries left out: expired, or their summary not restored


class Configured(Event, frozen=True, kw_only=True, tag="configured"):
    """The window's config changed; only the changed options are set."""

    max_tokens: int | None = None
    max_items: int | None = None
    threshold: float | None = None
    strategy: CompactionStrategy | None = None
    ttl: int | None = None
    keep_recent: int | None = None
    clear_at_least: int | None = None
    clear_exclude: str | None = None
    warn_percent: float | None = None
    events_maxlen: int | None = None
    archive_ttl: int | None = None
    target: float | None = None


class Built(Event, frozen=True, kw_only=True, tag="built"):
    """A prompt (``build_time_ms``) or chat messages (``format``) were built."""

    items_included: int
    items_excluded: int
    items_omitted: int = 0
    total_tokens: int
    was_compacted: bool
    build_time_ms: float | None = None
    format: str | None = None
    #: the window's version the build was made from (what ``record_usage`` names)
    version: str | None = None


class UsageRecorded(Event, frozen=True, kw_only=True, tag="usage_recorded"):
    """``record_usage()`` stored what the provider reported for the build of ``version``;
    ``estimated_tokens`` is what that build estimated (None: its ``built`` event was not found,
    so the calibration stayed), ``token_calibration`` the window's after it."""

    version: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    model: str = ""
    estimated_tokens: int | None = None
    token_calibration: float


class UsageWarning(Event, frozen=True, kw_only=True, tag="usage_warning"):
    """Usage crossed the window's ``warn_percent`` upwards (once per crossing)."""

    usage_percent: float
    warn_percent: float
    total_tokens: int


class SummaryUndone(Event, frozen=True, kw_only=True, tag="summary_undone"):
    """``undo_summary()`` put back the items a summary replaced (and removed the summary)."""

    summary_id: str
    items_restored: int
    total_tokens_after: int


class Rewound(Event, frozen=True, kw_only=True, tag="rewound"):
    """``rewind()`` took the window back to ``item_id``: the ``items_removed`` items added after
    it wait in the archive under ``rewind_id``."""

    rewind_id: str
    item_id: str
    items_removed: int
    total_tokens_after: int


class RewindUndone(Event, frozen=True, kw_only=True, tag="rewind_undone"):
    """``undo_rewind()`` put back the items rewind ``rewind_id`` took."""

    rewind_id: str
    items_restored: int
    total_tokens_after: int


class Forked(Event, frozen=True, kw_only=True, tag="forked"):
    """A fork was made (``fork()``): on the new window, ``parent`` and ``items`` (what it holds);
    on the window it was made from, ``fork`` (the new window's id); on both, ``fork_point`` (the
    item it was made at, "" for an empty window)."""

    fork_point: str = ""
    parent: str = ""
    items: int = 0
    fork: str = ""


class TurnEvent(Event, frozen=True, kw_only=True):
    """What the events about a turn carry: its fencing ``token``; ``item_ids``: the items it
    wrote, space-separated."""

    token: str
    item_ids: str = ""


class TurnStarted(TurnEvent, frozen=True, kw_only=True, tag="turn_started"):
    """A turn took the window's lease (``took_over``: the owner of the turn it fenced off)."""

    owner: str
    policy: str
    lease_ms: int
    took_over: str = ""


class TurnEnded(TurnEvent, frozen=True, kw_only=True, tag="turn_ended"):
    """A turn gave its lease back (``outcome``: ok or error); ``pending``: inputs left waiting."""

    owner: str
    outcome: str
    duration_ms: int
    pending: int = 0


class TurnConflict(TurnEvent, frozen=True, kw_only=True, tag="turn_conflict"):
    """A turn met another: ``outcome`` rejected (TurnBusyError), enqueued (TurnQueuedError) or
    lost (a write after the lease was lost: TurnLostError); ``holder``: the running turn's owner."""

    outcome: str
    holder: str = ""
    pending: int = 0


class TurnInterrupted(TurnEvent, frozen=True, kw_only=True, tag="turn_interrupted"):
    """A running turn was fenced off by a turn of ``by`` (policy interrupt); its items stay."""

    owner: str
    by: str


class TurnRolledBack(TurnEvent, frozen=True, kw_only=True, tag="turn_rolled_back"):
    """A running turn was fenced off by a turn of ``by`` (policy rollback) and ``item_ids``,
    what it wrote, were removed (``item_removed`` events with reason rollback)."""

    owner: str
    by: str


class OtherEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An entry whose kind this version does not know (written by a newer one), as it is."""

    kind: str
    id: str
    window_id: str
    at: datetime
    fields: dict[str, str]


AnyEvent = Union[  # noqa: UP007 - a Union msgspec decodes by tag
    ItemAdded, ItemRemoved, ItemCleared, Compacted, Cleared, PriorityChanged, Pinned, Unpinned, Restored,
    Configured, Built, UsageRecorded, UsageWarning, SummaryUndone, Rewound, RewindUndone, Forked, TurnStarted,
    TurnEnded, TurnConflict, TurnInterrupted, TurnRolledBack,
]  # fmt: skip
KINDS = frozenset(c.__struct_config__.tag for c in AnyEvent.__args__)  # type: ignore[attr-defined]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def decode(window_id: str, entry_id: bytes | str, fields: dict[Any, Any]) -> Event | OtherEvent:
    """One stream entry (its id and field/value map) as its typed event."""
    eid = _text(entry_id)
    data = {_text(k): _text(v) for k, v in fields.items()}
    kind = data.pop("event", "")
    at = datetime.fromtimestamp(int(eid.split("-", 1)[0]) / 1000, tz=UTC)
    if kind in KINDS:
        try:
            event: Event = msgspec.convert(
                {"kind": kind, "id": eid, "window_id": window_id, "at": at, **data}, AnyEvent, strict=False
            )
            return event
        except msgspec.ValidationError:
            pass  # a field this version cannot read: keep it as it is
    return OtherEvent(kind=kind, id=eid, window_id=window_id, at=at, fields=data)
