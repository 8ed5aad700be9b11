"""The facts of a window a build chooses by (``plans/build_read.py`` reads them first): its meta,
its pins and the ``:attrs`` of the items the build can offer, in plain commands, walking the
conversation back only as far as the build's options reach; or, when the build uses every item,
every attrs and body at once."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core import facts, stored, validate, wire
from ..core.layout import RANK_WEIGHT, Meta, meta_text, order_score
from ..types import BuildOptions, ContextItem, ItemType
from .base import PlainRead, Plan, WindowState
from .reads import ATTEMPTS, STAMP, raw_stamp


def recent_for(options: BuildOptions) -> int:
    """How many of the newest ids a facts read for a build with ``options`` takes first: twice
    the conversation it may offer, and some, so one step mostly suffices."""
    most = options.max_history_items if options.include_recent_history else 0
    return 2 * most + 16


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
    #: after adds alone: the earlier facts' items these grew from, and the added ones in arrival
    #: order (what a store grows its memos from, ``ItemCache.keep_facts``)
    grown: tuple[list[ContextItem], list[ContextItem]] | None = None

    def value(self, item_id: str) -> str:
        """Item ``item_id``'s ``:attrs`` value, as text (``KeyError`` when it was not read)."""
        raw = self.attrs.get(item_id.encode())
        return wire.text(self.attrs[item_id] if raw is None else raw)


#: ``:attrs`` fields the first round trip of a facts read scans: a small hash (a listpack, up to
#: 128 fields on Redis 7 and Valkey, 512 on 6.2) comes whole whatever the count, and then the
#: facts are read in that one round trip; a large one sends about this many, then the walk
SCAN_COUNT = 32
#: ``:order`` scores below and from which items are not conversation messages (the ranks of
#: ``user_message`` and ``assistant_message``, 5 and 6, lie between): what ``ZRANGEBYSCORE`` lists
_BEFORE_CONVERSATION = f"({ItemType.USER_MESSAGE.rank * RANK_WEIGHT}"
_AFTER_CONVERSATION = str((ItemType.ASSISTANT_MESSAGE.rank + 1) * RANK_WEIGHT)
#: ``settled(stubs, oldest)``: whether the facts read so far (every unit whose newest member's
#: seq is at least ``oldest``, whole, and every pinned or non-conversation item) decide the build
Settled = Callable[[list[ContextItem], int], bool]


def read_facts(
    state: WindowState,
    settled: Settled,
    recent: int,
    uses_all: Callable[[dict[str, str]], bool] | None = None,
    last: Facts | None = None,
    everything_first: bool = False,
) -> Plan[Facts | None]:
    """What a build within a budget chooses by (``plans/chat.py``), in plain commands and no item
    body: the window's meta and pins, and the ``:attrs`` of the items a build can offer. A small
    window's come whole in one round trip (``SCAN_COUNT``). Of a larger one: every pinned item,
    every item that is not a conversation message, and the conversation from the newest back
    (``recent`` ids first, twice as many each further step) until ``settled`` says the build's
    conversation is decided (``max_history_items``), each item with the members of its tool-call
    group; so what it reads follows the options, not the window's length. Every round trip
    checks the meta's epoch, seq and item count: the facts count only while those hold still
    (read again, ``ATTEMPTS`` times). An item whose letters say its body is needed
    (``facts.needs_body``: parallel tool calls, a ``source_ref`` header) is read whole in the
    walk's next round trip (``Facts.whole``). ``last``, the store's last facts read of the window:
    when the window has only had items added since (same epoch; its item count grew by as much as
    its seq), their attrs still hold, and the walk reads those of the added items only (a page of
    ``APPENDED_PAGE`` newest ids first). ``everything_first``: every item is a candidate whatever
    the window holds, and the caller keeps what it reads: the first round trip reads every attrs
    and body. None when the window is missing or kept moving,
    or when an item's letters are missing (stored before they were kept): the caller reads the
    window whole then."""
    for _ in range(ATTEMPTS):
        if everything_first:
            got = yield from _whole_first(state)
        else:
            got = yield from _facts_once(state, settled, max(1, recent), uses_all, last)
        if got is not _MOVED:
            return got
    return None


#: how many of the newest ids a facts read takes first when the store holds the window's last
#: facts: what was added since is mostly fewer
APPENDED_PAGE = 64


def _added(old: dict[str, str], new: dict[str, str]) -> int | None:
    """How many items a window whose meta was ``old`` and is ``new`` had added and nothing else
    (no removal, no change in place: the same epoch, and the item count grew by as much as the
    seq, which every added item raises by one); None when anything else happened."""
    if not old.get(Meta.EPOCH) or old.get(Meta.EPOCH) != new.get(Meta.EPOCH):
        return None
    added = int(new.get(Meta.SEQ) or 0) - int(old.get(Meta.SEQ) or 0)
    grew = int(new.get(Meta.ITEMS) or 0) - int(old.get(Meta.ITEMS) or 0)
    return added if added == grew and added >= 0 else None


#: how many ids a facts read with the store's last facts guesses were added since (``_guessed``)
GUESSED = 32


def _guessed(last: Facts | None) -> list[str]:
    """The ids of the items added since ``last`` when they were added without ids of their own
    (the store names them by seq: ``validate.generated_id``), up to ``GUESSED`` of them: their
    attrs are read with the first round trip, so that after such adds the facts take one."""
    if last is None:
        return []
    seq = int(last.found.meta.get(Meta.SEQ) or 0)
    return [validate.generated_id(s) for s in range(seq + 1, seq + 1 + GUESSED)]


#: what one attempt of a facts read answers when the window changed between its round trips
_MOVED = Facts(wire.ReadReply({}, 0, []), {})


def _facts_once(
    state: WindowState,
    settled: Settled,
    recent: int,
    uses_all: Callable[[dict[str, str]], bool] | None,
    last: Facts | None,
) -> Plan[Facts | None]:
    """One attempt of ``read_facts``; ``_MOVED`` when the window changed under it."""
    k = state.keys
    recent = min(recent, APPENDED_PAGE) if last is not None else recent
    # a store holding the window's last facts scans no attrs: what was added it reads by id,
    # and guesses the ids first: those the store gives items added without one
    scan = (("HSCAN", k.attrs, 0, "COUNT", SCAN_COUNT),) if last is None else ()
    guess = _guessed(last)
    first = yield PlainRead((
        ("HGETALL", k.meta), ("SMEMBERS", k.pinned), *scan,
        ("ZRANGEBYSCORE", k.order, "-inf", _BEFORE_CONVERSATION),
        ("ZRANGEBYSCORE", k.order, _AFTER_CONVERSATION, "+inf"),
        ("LRANGE", k.fifo, -recent, -1),
        *((("HMGET", k.attrs, *guess),) if guess else ()),
    ))  # fmt: skip
    if first is None or not first[0]:
        return None
    replies = list(first)
    guessed = replies.pop() if guess else []
    meta, pinned, (cursor, scanned), before, after, page = replies if scan else (*replies[:2], (1, {}), *replies[2:])
    text_meta = meta_text(meta)
    if uses_all is not None and uses_all(text_meta):
        return (yield from _everything(state, meta, pinned, None if int(cursor) else scanned))
    walk = _Walk(set(pinned) | set(before) | set(after), page, recent)
    added = _added(last.found.meta, text_meta) if last is not None else None
    if last is not None and added == 0:  # as last read: the same items, under the meta read now
        return _as_last(last, text_meta, len(pinned))
    if last is not None and added is not None and (walk.whole or added <= len(page)):
        walk.reuse(last)
        walk.guessed(
            page[len(page) - added :] if added else [], {g.encode(): v for g, v in zip(guess, guessed, strict=True)}
        )
    if not int(cursor):  # the whole of :attrs
        walk.attrs, walk.todo, walk.whole = scanned, set(), True
    return (yield from _walked(state, walk, meta, pinned, settled))


def _walked(
    state: WindowState, walk: _Walk, meta: dict[Any, Any], pinned: set[Any], settled: Settled
) -> Plan[Facts | None]:
    """The facts of ``walk``, read on until ``settled`` says they decide the build (or every item
    is read); ``_MOVED`` when the window changed under it, None when an item is corrupt."""
    while True:
        if not walk.pending():
            stubs = walk.stubs(pinned)
            if stubs is None:
                return None
            if walk.pending():  # bodies the stubs need: read in the next round trip
                pass
            elif walk.whole or settled(stubs, walk.oldest()):
                found = wire.ReadReply(meta_text(meta), len(pinned), [], stubs)
                return Facts(found, walk.attrs, walk.items, walk.oldest(), walk.grown)
            else:
                walk.more, walk.floor = True, None
        reply = yield PlainRead((("HMGET", state.keys.meta, *STAMP), *walk.commands(state.keys)))
        if reply is None:
            return None
        if tuple(reply[0]) != raw_stamp(meta):
            return _MOVED
        if not walk.took(reply[1:], pinned):
            return None  # an id without attrs or body: corrupt, the whole read says where


def _as_last(last: Facts, meta: dict[str, str], pinned: int) -> Facts:
    """``last``'s items (the very list: what builds worked out from it still holds) under ``meta``."""
    return Facts(wire.ReadReply(meta, pinned, [], last.found.items()), last.attrs, last.whole, last.oldest)


def _whole_first(state: WindowState) -> Plan[Facts | None]:
    """The facts of a window with every attrs and body, in one round trip (``read_facts``'
    ``everything_first``)."""
    k = state.keys
    whole = yield PlainRead((("HGETALL", k.meta), ("SMEMBERS", k.pinned), ("HGETALL", k.attrs), ("HGETALL", k.items)))
    return None if whole is None or not whole[0] else _all_facts(*whole)


def _everything(
    state: WindowState, meta: dict[Any, Any], pinned: set[Any], attrs: dict[Any, Any] | None
) -> Plan[Facts | None]:
    """The facts of a window whose every item the build uses (``read_facts``' ``uses_all``), read
    with every body: ``HGETALL`` of :items (and of :attrs, unless ``attrs`` holds the whole hash
    already: the first round trip's scan of a small one), in one transaction that checks the
    meta's epoch, seq and count (``_MOVED`` when they moved on). Cheaper for the shard than the
    walk and an ``HMGET`` of every body."""
    k = state.keys
    wanted = (("HGETALL", k.attrs),) if attrs is None else ()
    reply = yield PlainRead((("HMGET", k.meta, *STAMP), *wanted, ("HGETALL", k.items)))
    if reply is None:
        return None
    if tuple(reply[0]) != raw_stamp(meta):
        return _MOVED
    attrs, jsons = (reply[1], reply[2]) if attrs is None else (attrs, reply[1])
    return _all_facts(meta, pinned, attrs, jsons)


def _all_facts(meta: dict[Any, Any], pinned: set[Any], attrs: dict[Any, Any], jsons: dict[Any, Any]) -> Facts | None:
    """The facts of a window read whole (its meta, pins, every attrs and body); None when an item
    lacks its attrs or its body (corrupt: the whole read says where)."""
    if jsons.keys() != attrs.keys():
        return None
    items = [stored.decode_item([i, jsons[i], attrs[i], i in pinned]) for i in stored.listing(attrs, {}, by_seq=False)]
    found = wire.ReadReply(meta_text(meta), len(pinned), [], items)
    return Facts(found, attrs, {i.id or "": i for i in items})


class _Walk:
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
        #: the items read whole (``facts.needs_body``), by id (text), and the ids still to read so
        self.items: dict[str, ContextItem] = {}
        self.bodies: set[Any] = set()
        #: an earlier facts read whose attrs still hold (``reuse``), and the attrs read since
        self.last: Facts | None = None
        self.added: dict[Any, Any] = {}
        #: what ``stubs`` grew from the earlier read (``Facts.grown``)
        self.grown: tuple[list[ContextItem], list[ContextItem]] | None = None
        #: the seq the window's conversation is read from when an earlier read's attrs are
        #: reused (``reuse``), else None (``oldest``: the first of ``recent``)
        self.floor: int | None = None
        #: what the last round trip asked for (``commands``)
        self.asked: list[Any] = []
        self.asked_groups: list[Any] = []
        self.asked_bodies: list[Any] = []

    def commands(self, k: Any) -> list[tuple[Any, ...]]:
        """This round trip's reads: the attrs still to read, the groups' members, a page."""
        self.asked = sorted(self.todo - self.attrs.keys())
        self.asked_groups = sorted(self.groups)
        self.asked_bodies = sorted(self.bodies)
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
        return True

    def _take(self, item_id: Any, value: bytes) -> None:
        """Take an id's attrs; the members of its group are listed next, unless every item is
        read (``whole``) or an earlier read's are reused: that read holds every member the
        group had then, and the page holds every one added since."""
        self.attrs[item_id] = value
        if self.last is not None:
            self.added[item_id] = value
        group = value.split(b"|")[5] if value.count(b"|") >= 5 else b""
        if group and group not in self.listed and not self.whole and self.last is None:
            self.groups.add(group)
            self.listed.add(group)

    def guessed(self, added: list[Any], values: dict[bytes, Any]) -> None:
        """After ``reuse``: take the attrs of the ``added`` ids (the page's newest) that were
        read by guess (``_guessed``: id -> value); the others are read by id next."""
        for i in added:
            value = values.get(i)
            if isinstance(value, bytes):
                self._take(i, value)

    def pending(self) -> bool:
        """Whether ids, groups or bodies are still to read."""
        return bool(self.groups or self.bodies or self.todo - self.attrs.keys())

    def oldest(self) -> int:
        """The seq of the oldest ``:fifo`` id read (0: all of them)."""
        if self.whole or not self.recent:
            return 0
        return self.floor if self.floor is not None else int(self.attrs[self.recent[0]].split(b"|", 1)[0])

    def reuse(self, last: Facts) -> None:
        """Take ``last``'s attrs (and the items it read whole) as read: every item it held is still
        there at the same seq, and the page holds every item added since (``_added``)."""
        self.attrs.update(last.attrs)
        self.items.update(last.whole)
        self.last = last
        if last.oldest == 0:
            self.whole = True
        self.floor = last.oldest

    def stubs(self, pinned: set[Any]) -> list[ContextItem] | None:
        """The items read, as ``facts.stub`` makes them (or whole, where ``facts.needs_body``:
        those not read yet are noted to read, ``pending``), in build order; None when one cannot
        be chosen at all (its attrs have no letters or do not decode: the whole read says where).
        After ``reuse``, the earlier read's items (in build order already) with the added ones
        put in their places."""
        if self.last is not None:
            fresh = self._stubs(self.added, pinned)
            if fresh is None:
                return None
            earlier = self.last.found.items()
            out = list(earlier)
            for stub in fresh:
                bisect.insort(out, stub, key=lambda i: order_score(i.type.rank, i.priority, i.seq))
            self.grown = (earlier, sorted(fresh, key=lambda i: i.seq))
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
            stub = facts.stub(item_id, value, i in pinned)
            if stub is None and facts.needs_body(value):
                stub = self.items.get(item_id)
                if stub is None:
                    self.bodies.add(i)
                    continue
            if stub is None:
                return None
            out.append(stub)
        return out
