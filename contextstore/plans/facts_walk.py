"""A facts read's state (``plans/facts_read.py``): the ``Facts`` it gives, and the ``Walk`` under
way, which knows what it has read of a window's ``:attrs``, what it still has to read, and how far
back along ``:fifo`` it has come."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..core import facts, stored, wire
from ..core.layout import RANK_WEIGHT, order_score
from ..types import ContextItem, ItemType
from .facts_reach import Jump, Reach

#: ``:order`` scores below and from which items are not conversation messages (the ranks of
#: ``user_message`` and ``assistant_message``, 5 and 6, lie between): what ``ZRANGEBYSCORE`` lists
_BEFORE_CONVERSATION = f"({ItemType.USER_MESSAGE.rank * RANK_WEIGHT}"
_AFTER_CONVERSATION = str((ItemType.ASSISTANT_MESSAGE.rank + 1) * RANK_WEIGHT)


def unconversed_reads(k: Any) -> tuple[tuple[Any, ...], ...]:
    """The reads that list the ids of the items before and after the conversation in build
    order (``:order``): those a build offers whatever ``max_history_items`` says."""
    return (
        ("ZRANGEBYSCORE", k.order, "-inf", _BEFORE_CONVERSATION),
        ("ZRANGEBYSCORE", k.order, _AFTER_CONVERSATION, "+inf"),
    )


class Growth(NamedTuple):
    """How a facts read's items grew from the store's earlier facts of the window."""

    #: the earlier facts' items (the very list), the items added since (arrival order), the ids
    #: removed since
    earlier: list[ContextItem]
    added: list[ContextItem]
    removed: set[str]


@dataclass(slots=True)
class Facts:
    """What a build chooses by, read without the items' bodies (``read_facts``): the window's
    meta and pinned count, and its items as ``facts.stub`` makes them, in build order
    (``found.decoded``); with each id's ``:attrs`` value, which decoding its body needs."""

    found: wire.ReadReply
    #: id -> its ``:attrs`` value, as read (bytes): ``value`` gives one as text
    attrs: dict[Any, Any]
    #: the items among ``found``'s read whole already (``read_whole``, or held by the store), by id
    whole: dict[str, ContextItem] = field(default_factory=dict)
    #: the seq from which the conversation was read whole (0: all of it): what ``Settled`` takes
    oldest: int = 0
    #: when these grew from the store's earlier facts: how (what a store grows its memos from,
    #: ``ItemCache.keep_facts``)
    grown: Growth | None = None
    #: what they hold of the conversation by a build's budget, when that decided (None: ``oldest``
    #: and ``max_history_items`` did): the builds these facts decide (``facts_reach.holds``)
    reach: Reach | None = None

    def value(self, item_id: str) -> str:
        """Item ``item_id``'s ``:attrs`` value, as text (``KeyError`` when it was not read)."""
        raw = self.attrs.get(item_id.encode())
        return wire.text(self.attrs[item_id] if raw is None else raw)


class Walk:
    """One facts read under way: the attrs read so far, the ids and groups still to read, and
    how far back along ``:fifo`` it has come."""

    def __init__(self, ids: set[Any], page: list[Any], size: int) -> None:
        #: id -> its ``:attrs`` value (bytes), for every id read
        self.attrs: dict[Any, Any] = {}
        self.todo: set[Any] = ids | set(page)
        self.groups: set[Any] = set()  # groups whose members are still to list
        self.listed: set[Any] = set()  # groups listed
        #: the ``:fifo`` ids read, oldest first, and whether that is all of ``:fifo``
        self.recent: list[Any] = list(page)
        self.whole = len(page) < size
        #: the next page's size, and whether the next round trip reads it
        self.size = size * 2
        self.more = False
        #: whether the items before and after the conversation in build order are still to list
        #: (``unconversed_reads``): a walk that began from the store's last facts did not list them
        self.unlisted = False
        #: the items read whole (``facts.needs_body``), by id (text), and the ids still to read so
        self.items: dict[str, ContextItem] = {}
        self.bodies: set[Any] = set()
        #: an earlier facts read whose attrs still hold (``reuse``), the ids it holds that went
        #: since, and the attrs read since
        self.last: Facts | None = None
        self.gone: set[str] = set()
        self.added: dict[Any, Any] = {}
        #: what ``stubs`` grew from the earlier read (``Facts.grown``)
        self.grown: Growth | None = None
        #: the seq the window's conversation is read from when an earlier read's attrs are
        #: reused (``reuse``), else None (``oldest``: the first of ``recent``)
        self.floor: int | None = None
        #: whether each item's body is read with its attrs (``facts_reach.Budgeted.bodies``)
        self.with_bodies = False
        #: the walk's reach by the budget: one it reused (``Facts.reach``), the jump under way, whether
        #: one was started, and the ids a jump found, whose groups are listed (``plans/facts_reach.py``)
        self.reach: Reach | None = None
        self.jump: Jump | None = None
        self.sized = False
        self.jumped: set[Any] = set()
        #: what the last round trip asked for (``commands``)
        self.asked: list[Any] = []
        self.asked_groups: list[Any] = []
        self.asked_bodies: list[Any] = []

    def commands(self, k: Any) -> list[tuple[Any, ...]]:
        """This round trip's reads: the attrs still to read, the groups' members, the bodies
        needed, a page, and the listing of the build order while ``unlisted``."""
        self.asked = sorted(self.todo - self.attrs.keys())
        self.asked_groups = sorted(self.groups)
        self.asked_bodies = sorted(self.bodies.union(self.asked) if self.with_bodies else self.bodies)
        self.todo, self.groups, self.bodies = set(), set(), set()
        reads: list[tuple[Any, ...]] = []
        if self.asked:
            reads.append(("HMGET", k.attrs, *self.asked))
        if self.asked_groups:
            reads.append(("HMGET", k.groups, *self.asked_groups))
        if self.asked_bodies:
            reads.append(("HMGET", k.items, *self.asked_bodies))
        if self.more:
            reads.append(("LRANGE", k.fifo, -len(self.recent) - self.size, -len(self.recent) - 1))
        if self.unlisted:
            reads += unconversed_reads(k)
        return reads

    def took(self, replies: list[Any], pinned: set[Any]) -> bool:
        """Take a round trip's replies (``commands``); False when an id has no attrs or no body."""
        at = 0
        if self.asked:
            for i, value in zip(self.asked, replies[at], strict=True):
                if value is None or not isinstance(value, bytes):
                    return False
                self._take(i, value)
            at += 1
        if self.asked_groups:
            for members in replies[at]:
                self.todo.update((members or b"").split())
            at += 1
        if self.asked_bodies:
            for i, json in zip(self.asked_bodies, replies[at], strict=True):
                if json is None:
                    return False
                item = stored.decode_item([i, json, self.attrs[i], i in pinned])
                self.items[item.id or ""] = item
            at += 1
        if self.more:
            page = replies[at]
            self.recent[:0] = page
            self.todo.update(page)
            self.whole = len(page) < self.size
            self.size, self.more = self.size * 2, False
            at += 1
        if self.unlisted:  # the listing's replies come last (``commands``)
            for listed in replies[at:]:
                self.todo.update(listed)
            self.unlisted = False
        return True

    def _take(self, item_id: Any, value: bytes) -> None:
        """Take an id's attrs; the members of its group are listed next, unless every item is
        read (``whole``) or an earlier read's are reused: that read holds every member the
        group had then (unless the item is older than what it held), and the page holds every one
        added since."""
        self.attrs[item_id] = value
        if self.last is not None:
            self.added[item_id] = value
        group = value.split(b"|")[5] if value.count(b"|") >= 5 else b""
        if not group or group in self.listed or self.whole:
            return
        if self.last is None or item_id in self.jumped or self._before_last(value):
            self.groups.add(group)
            self.listed.add(group)

    def _before_last(self, value: bytes) -> bool:
        """Whether the item of an attrs ``value`` is older than the conversation the earlier read
        reused held (a page read past it: its group may lie further back)."""
        assert self.last is not None
        return bool(self.last.oldest) and int(value.split(b"|", 1)[0]) < self.last.oldest

    def guessed(self, added: list[Any], values: dict[bytes, Any]) -> None:
        """After ``reuse``: take the attrs of the ``added`` ids (the page's newest) that were
        read by guess (``_guessed``: id -> value); the others are read by id next."""
        for i in added:
            value = values.get(i)
            if isinstance(value, bytes):
                self._take(i, value)

    def found(self, ids: list[Any]) -> None:
        """Read the attrs of ``ids`` (a jump's, ``plans/facts_reach.py``) next, with their groups."""
        self.jumped.update(ids)
        self.todo.update(ids)

    def with_whole(self, wanted: Callable[[ContextItem], bool], stubs: list[ContextItem]) -> list[ContextItem] | None:
        """``stubs`` with the items ``wanted`` picks whole, from the bodies read; None when some
        were not read (their bodies are read in the next round trip)."""
        missing = [s.id or "" for s in stubs if wanted(s) and (s.id or "") not in self.items]
        for item_id in missing:
            key = item_id.encode()
            self.bodies.add(key if key in self.attrs else item_id)
        return None if missing else [self.items[s.id or ""] if wanted(s) else s for s in stubs]

    def pending(self) -> bool:
        """Whether ids, groups or bodies are still to read."""
        return bool(self.unlisted or self.groups or self.bodies or self.todo - self.attrs.keys())

    def oldest(self) -> int:
        """The seq of the oldest ``:fifo`` id read (0: all of them)."""
        if self.whole or not self.recent:
            return 0
        return self.floor if self.floor is not None else int(self.attrs[self.recent[0]].split(b"|", 1)[0])

    def reuse(self, last: Facts, gone: set[str]) -> None:
        """Take ``last``'s attrs (and the items it read whole) as read: every item it held but
        those ``gone`` is still there at the same seq, and the page holds every item added since
        (``_since``). Attrs ``last`` read of items it left out (``facts_reach.beyond``: units
        its build could not offer) are not taken: a build that can offers them once it reads them."""
        held = last.found.items()
        if len(held) == len(last.attrs):
            self.attrs.update(last.attrs)
        else:
            ids = {i.id for i in held}
            self.attrs.update((k, v) for k, v in last.attrs.items() if wire.text(k) in ids)
        self.items.update(last.whole)
        for item_id in gone:
            self.attrs.pop(item_id.encode(), None)
            self.attrs.pop(item_id, None)
            self.items.pop(item_id, None)
        self.last, self.gone = last, gone
        if last.oldest == 0:
            self.whole = True
        self.floor = last.oldest

    def stubs(self, pinned: set[Any]) -> list[ContextItem] | None:
        """The items read, as ``facts.stub`` makes them (or whole, where ``facts.needs_body``:
        those not read yet are noted to read, ``pending``), in build order; None when one cannot
        be chosen at all (its attrs have no letters or do not decode: the whole read says where).
        After ``reuse``, the earlier read's items (in build order already) but those gone, with
        the added ones put in their places."""
        if self.last is not None:
            fresh = self._stubs(self.added, pinned)
            if fresh is None:
                return None
            earlier = self.last.found.items()
            out = [i for i in earlier if i.id not in self.gone] if self.gone else list(earlier)
            for stub in fresh:
                bisect.insort(out, stub, key=lambda i: order_score(i.type.rank, i.priority, i.seq))
            self.grown = Growth(earlier, sorted(fresh, key=lambda i: i.seq), self.gone)
            return out
        return self._stubs(self.attrs, pinned)

    def _stubs(self, attrs: dict[Any, Any], pinned: set[Any]) -> list[ContextItem] | None:
        """``stubs`` of the items of ``attrs``."""
        out = []
        for i in stored.listing(attrs, {}, by_seq=False):
            try:
                item_id, value = wire.text(i), wire.text(attrs[i])
            except UnicodeDecodeError:
                return None
            stub = self.items.get(item_id) if self.with_bodies else None
            stub = stub or facts.stub(item_id, value, i in pinned)
            if stub is None and facts.needs_body(value):
                stub = self.items.get(item_id)
                if stub is None:
                    self.bodies.add(i)
                    continue
            if stub is None:
                return None
            out.append(stub)
        return out
