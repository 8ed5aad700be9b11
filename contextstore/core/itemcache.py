"""What a store keeps of the windows it has built, so that a build moves only what is new.

While a window's epoch (``layout.Meta.EPOCH``) stays the same, a stored item never changes: every
script that changes an item in place (pin, priority, a cleared tool result) or brings items back
with seqs already handed out (a summary, its undo, a restore, a new lifetime) starts a new epoch,
and so does a config change. So the bodies a store has read stay good for the whole epoch, and a
build reads from ``:items`` only those it lacks (``plans/build_read.py``). The store also keeps
each window's last facts read (what a build chooses by): a build may start from it with no read at
all, its one call the ``built`` event, which is written only if the epoch, the seq, the count, the
lifetime and the removals still hold (``Meta.BUILD_INPUTS``). Sans-I/O.

A store keeps at most ``max_bytes`` of content (0: nothing), least recently built windows going
first. An entry grows under the cache's lock and its items never change, so threads sharing a
store see each item whole or not at all.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from ..types import ContextItem
from . import parts

#: content bytes a store caches by default (across its windows)
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024


class Grown(NamedTuple):
    """How a window's listing of items grew from the last one a store built from: what builds
    worked out from that one carries over (``render.select.units_for`` grows its units)."""

    #: the listing that grew (a facts read's items, or a prompt build's listing of them whole)
    items: Sequence[ContextItem]
    #: the listing it grew from, and what builds worked out from that one
    previous: Sequence[ContextItem]
    previous_memo: Derived
    #: the items added since, in arrival order, and the ids removed since
    added: list[ContextItem]
    removed: set[str]


class WholeListing(NamedTuple):
    """A prompt build's listing of a facts read's items with those it reads whole in place of
    their stubs (``plans.build_read._whole_held``): the next build of the same facts uses it as is."""

    #: the facts read's items, which items it lists whole, and the listing
    stubs: Sequence[ContextItem]
    which: Callable[[ContextItem], bool]
    listing: list[ContextItem]


class MessageUnits(NamedTuple):
    """The items of a listing that chat messages can use (complete tool-call units), and the ids
    of the incomplete groups (``plans.chat._message_units``)."""

    items: Sequence[ContextItem]
    usable: list[ContextItem]
    left_out: list[str]


class Derived:
    """What builds worked out from one listing of a window's items, kept while builds get that
    very listing: its units (``render.select.Units``, by the listing's ``id``: a listing and the
    part of it chat messages use), the complete units chat messages use, a prompt build's
    listing whole, and what the listing grew from (until its units are grown from that one's)."""

    __slots__ = ("grown_from", "message_units", "units", "whole")

    def __init__(self) -> None:
        #: ``id(listing)`` -> its ``render.select.Units`` (two listings at most)
        self.units: dict[int, Any] = {}
        self.message_units: MessageUnits | None = None
        self.whole: WholeListing | None = None
        self.grown_from: Grown | None = None


class CachedWindow:
    """What a store holds of one window at one epoch: the items it has read whole, by id (each
    good while the window holds that id at its seq); its last
    facts read (``plans.facts_walk.Facts``) and what builds worked out from them (``derived``);
    per-item build costs memoised per build format."""

    __slots__ = ("costs", "derived", "epoch", "facts", "items", "size")

    def __init__(self, epoch: str) -> None:
        self.epoch = epoch
        self.items: dict[str, ContextItem] = {}
        self.size = 0
        #: the window's last facts read, and the memo of what builds worked out from them
        self.facts: Any = None
        self.derived = Derived()
        #: (separator, prefix, suffix, slack) -> item seq (or a pair of seqs) -> cost
        #: (render.prompt.JointCosts; a seq names one content within an epoch, an id may be
        #: reused by a caller)
        self.costs: dict[tuple[str, str, str, int], dict[Any, int]] = {}


def _size(item: ContextItem) -> int:
    return len(item.content) if isinstance(item.content, str) else parts.size(item.content)


class ItemCache:
    """Per store: the windows' items it has read, bounded by ``max_bytes`` of content."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._windows: OrderedDict[str, CachedWindow] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        #: windows whose last build from the cache alone found them moved on (``moving``)
        self._moving: set[str] = set()

    def entry(self, window: str, epoch: str) -> CachedWindow | None:
        """What the store holds of ``window`` (its meta key) at ``epoch``, now its most recently
        built window; None when it holds nothing of that epoch, or keeps nothing at all."""
        if not self.max_bytes or not epoch:  # a window written before epochs: nothing to key on
            return None
        with self._lock:
            held = self._windows.get(window)
            if held is None or held.epoch != epoch:
                if held is not None:
                    self._drop(window)
                held = self._windows[window] = CachedWindow(epoch)
            self._windows.move_to_end(window)
            return held

    def held(self, window: str, epoch: str) -> int:
        """How many of ``window``'s items the store holds whole at ``epoch``."""
        with self._lock:
            entry = self._windows.get(window)
            return len(entry.items) if entry is not None and entry.epoch == epoch else 0

    def last_facts(self, window: str) -> Any:
        """The window's last facts read (None: none)."""
        with self._lock:
            held = self._windows.get(window)
            return None if held is None else held.facts

    def keep_facts(self, window: str, entry: CachedWindow, facts: Any) -> None:
        """Keep ``facts`` as ``window``'s last facts read (in ``entry``, its entry). Its memos start
        afresh unless they hold the very items of the facts before; facts that grew from those
        (``facts.grown``, a ``plans.facts_walk.Growth``) leave what builds need to grow theirs
        (``Derived.grown_from``, read by ``render.select.units_for``), and the removed items' bodies go."""
        with self._lock:
            before, derived = entry.facts, entry.derived
            if before is facts:
                return
            same = before is not None and before.found.decoded is facts.found.decoded
            entry.facts = facts
            entry.derived = derived if same else Derived()
            grown = facts.grown
            if not same and before is not None and grown is not None and grown.earlier is before.found.decoded:
                previous = before.found.decoded
                entry.derived.grown_from = Grown(facts.found.decoded, previous, derived, grown.added, grown.removed)
            for item_id in grown.removed if grown is not None else ():
                self._forget(window, entry, item_id)

    def keep(self, window: str, entry: CachedWindow, items: Iterable[ContextItem]) -> None:
        """Keep ``items`` (read whole at ``entry``'s epoch) in ``entry``, then drop the least
        recently built windows while the store holds more than ``max_bytes``."""
        with self._lock:
            grew = 0
            for item in items:
                old = entry.items.get(item.id or "")
                if item.id and (old is None or old.seq != item.seq):  # an id a caller reused: its new item
                    entry.items[item.id] = item
                    grew += _size(item) - (_size(old) if old is not None else 0)
            entry.size += grew
            if self._windows.get(window) is entry:
                self._bytes += grew
            while self._bytes > self.max_bytes and self._windows:
                self._drop(next(iter(self._windows)))

    def _forget(self, window: str, entry: CachedWindow, item_id: str) -> None:
        """Drop item ``item_id`` (it went from the window) from ``entry``, ``window``'s."""
        item = entry.items.pop(item_id, None)
        size = _size(item) if item is not None else 0
        entry.size -= size
        if self._windows.get(window) is entry:
            self._bytes -= size

    def moving(self, window: str, moving: bool | None = None) -> bool:
        """Whether ``window`` changed under its last build from the cache alone (set with
        ``moving=True``), so builds read first until a read finds it as the cache holds it
        (``False``): a window other workers keep writing would make every such build pay a
        second call."""
        with self._lock:
            if moving:
                self._moving.add(window)
            elif moving is not None:
                self._moving.discard(window)
            return window in self._moving

    def _drop(self, window: str) -> None:
        gone = self._windows.pop(window)
        self._bytes -= gone.size
        self._moving.discard(window)
