"""What a store keeps of the items it has read, so that a build moves only what is new.

While a window's epoch (``layout.Meta.EPOCH``) stays the same, a stored item never changes: every
script that changes an item in place (pin, priority, a cleared tool result) or brings items
back with seqs already handed out (a summary, its undo, a restore, a new lifetime) starts a new
epoch, and so does a config change. So a client that holds every item of epoch E up to seq S
asks build_read.lua for the ids in build order and the JSON of the items above S
only; at a new epoch it gets them all again. Within an epoch every add takes a new seq and every
removal lowers the item count, so when the epoch, the seq and the count are still the ones the
client holds, so is the window: build_read.lua then lists nothing, and the client reuses its listing
(``ordered``) and what it worked out from it (``derived``: the units a build chooses from). A
build may even start from the cache with no read at all: its one call, the ``built`` event, is
written only if the epoch, the seq, the count, the lifetime and the removals still hold
(``plans.reads.cached_for_build``). Sans-I/O: ``known`` says what to ask for, ``merge`` turns
the reply into the items.

Entries are immutable (a merge makes a new one) so threads sharing a store never see a half
update; a store keeps at most ``max_bytes`` of content, least recently built windows go first.
"""

from __future__ import annotations

import threading
from bisect import insort
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ..types import ContextItem
from . import parts
from .layout import Meta, order_score
from .stored import decode_item

#: content bytes a store caches by default (across its windows)
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
#: how many windows too large to cache a store remembers as such
TOO_LARGE_KEPT = 1024


class CachedWindow:
    """The items of one window at one epoch: every item up to ``seq``, by id (as the replies
    spell ids: bytes or str), the last listing (``count`` items in build order), and per-item
    build costs memoised per build format."""

    __slots__ = ("costs", "count", "derived", "epoch", "items", "ordered", "read", "seq", "size")

    def __init__(
        self, epoch: str, seq: int, items: dict[Any, ContextItem], size: int, ordered: list[ContextItem]
    ) -> None:
        self.epoch, self.seq, self.items, self.size = epoch, seq, items, size
        #: the window's items in build order when it was read, and how many there were
        self.ordered, self.count = ordered, len(ordered)
        #: what builds worked out from ``ordered`` (render.select.Units), dropped with it; after
        #: ``extend``, ``base`` holds the previous listing's, to grow from
        self.derived: dict[str, Any] = {}
        #: (separator, prefix, suffix, slack) -> item seq (or a pair of seqs) -> cost
        #: (render.prompt.JointCosts; a seq names one content within an epoch, an id may be
        #: reused by a caller)
        self.costs: dict[tuple[str, str, str, int], dict[Any, int]] = {}
        #: the meta hash and pinned count of the last read that confirmed this entry (a build from
        #: the cache alone uses them, and its ``built`` event is written only if they still hold)
        self.read: tuple[dict[str, str], int] | None = None


def _size(items: Sequence[ContextItem]) -> int:
    return sum(len(i.content) if isinstance(i.content, str) else parts.size(i.content) for i in items)


def listing_key(item: ContextItem) -> tuple[int, str]:
    """Where an item stands in a build read's listing: its ``:order`` score (a tie by id, as a
    sorted set breaks it)."""
    return (order_score(item.type.rank, item.priority, item.seq), item.id or "")


class ItemCache:
    """Per store: the windows' items it has read, bounded by ``max_bytes`` of content."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._windows: OrderedDict[str, CachedWindow] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        #: windows whose last build from the cache alone found them moved on (``moving``)
        self._moving: set[str] = set()
        #: the windows last read too large to keep (``too_large``), most recent last
        self._too_large: OrderedDict[str, None] = OrderedDict()

    def known(self, window: str) -> CachedWindow | None:
        """What the store holds of ``window`` (its meta key), or None."""
        return self._windows.get(window)

    def merge(
        self, window: str, known: CachedWindow | None, meta: dict[str, str], raw: Sequence[Any], ids: Sequence[Any]
    ) -> tuple[list[ContextItem], CachedWindow | None] | None:
        """The items of a ``build`` read in build order (the ``known`` ones from the cache, the
        rest decoded from ``raw``), and the window's new entry; None when an id is neither
        cached nor read (a race with this store's other readers: read again in full)."""
        epoch = meta.get(Meta.EPOCH, "")
        old = known.items if known is not None and known.epoch == epoch else {}
        fresh = [decode_item(r) for r in raw if r is not None]  # None: an id without JSON (corrupt)
        as_bytes = bool(ids) and isinstance(ids[0], bytes)
        items = {**old, **{(i.id.encode() if as_bytes else i.id): i for i in fresh}}  # type: ignore[union-attr]
        try:
            ordered = [items[i] for i in ids]
        except KeyError:
            if known is not None:
                return None
            return [items[i] for i in ids if i in items], None  # a full read skips what is corrupt
        size = (known.size if known is not None and old else 0) + _size(fresh)
        if len(items) > len(ids) + 64:  # drop what the window no longer holds
            items = dict(zip(ids, ordered, strict=True))
            size = _size(ordered)
        if not epoch:  # a window written before epochs: nothing to key a cache on
            return ordered, None
        entry = CachedWindow(epoch, int(meta.get(Meta.SEQ, 0)), items, size, ordered)
        if known is not None and old:
            entry.costs = known.costs
        self._store(window, entry)
        return ordered, entry

    def extend(
        self, window: str, known: CachedWindow, meta: dict[str, str], raw: Sequence[Any], ids: Sequence[Any]
    ) -> tuple[list[ContextItem], CachedWindow] | None:
        """The items of a build read that listed only the ids added since ``known`` (and their
        JSON): the known listing with them in their places, and the window's new entry; None
        when the epoch moved on or an added item has no JSON (read again in full)."""
        if meta.get(Meta.EPOCH, "") != known.epoch or any(r is None for r in raw) or len(raw) != len(ids):
            return None
        fresh = [decode_item(r) for r in raw]
        ordered = list(known.ordered)
        for item in fresh:
            insort(ordered, item, key=listing_key)
        items = {**known.items, **dict(zip(ids, fresh, strict=True))}
        entry = CachedWindow(known.epoch, int(meta.get(Meta.SEQ, 0)), items, known.size + _size(fresh), ordered)
        entry.costs = known.costs
        previous = {k: v for k, v in known.derived.items() if k != "base"}
        entry.derived["base"] = (ordered, known.ordered, previous, fresh)  # see render.select.units_for
        self._store(window, entry)
        return ordered, entry

    def moving(self, window: str, moving: bool | None = None) -> bool:
        """Whether ``window`` changed under its last build from the cache alone (set with
        ``moving=True``), so builds read first until a read finds it as cached (``False``):
        a window other workers keep writing would make every such build pay a second call."""
        with self._lock:
            if moving:
                self._moving.add(window)
            elif moving is not None:
                self._moving.discard(window)
            return window in self._moving

    def too_large(self, window: str) -> bool:
        """Whether ``window`` was, when last read, larger than this cache keeps (its builds read
        the window's facts and the chosen bodies instead: ``plans.chat``)."""
        return window in self._too_large

    def touch(self, window: str, entry: CachedWindow) -> CachedWindow:
        """``entry``, read again as it is: now the most recently built window."""
        with self._lock:
            if self._windows.get(window) is entry:
                self._windows.move_to_end(window)
        return entry

    def _store(self, window: str, entry: CachedWindow) -> None:
        with self._lock:
            gone = self._windows.pop(window, None)
            self._bytes -= gone.size if gone is not None else 0
            self._too_large.pop(window, None)
            if entry.size > self.max_bytes or not self.max_bytes:  # max_bytes=0: keep nothing
                self._moving.discard(window)
                if self.max_bytes:
                    self._too_large[window] = None
                    if len(self._too_large) > TOO_LARGE_KEPT:
                        self._too_large.popitem(last=False)
                return
            self._windows[window] = entry
            self._bytes += entry.size
            while self._bytes > self.max_bytes:
                dropped, oldest = self._windows.popitem(last=False)
                self._bytes -= oldest.size
                self._moving.discard(dropped)  # bounded by the windows cached
