"""The one read of every build (``plans/chat.py``, ``plans/build.py``): the facts of what it can
offer, then the bodies of what a chat build chose (or of what a prompt build can offer), in
plain commands; what is read follows what the build can offer, not the window's length, and a
store with an item cache (``core/itemcache.py``) reads no body it holds, and may build from its
last facts read with no read at all (``build_read``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from ..core import facts, stored, wire
from ..core.itemcache import CachedWindow
from ..core.layout import RANK_WEIGHT, Meta, build_inputs, meta_text
from ..errors import BudgetTooSmallError, InvalidOptionsError, NoConversationError, raise_for_reply
from ..types import BuildOptions, ContextItem, ItemType
from .base import PlainRead, Plan, ScriptCall, Settings, WindowState
from .reads import ATTEMPTS, STAMP, raw_stamp, read, stamp

T = TypeVar("T")


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
    attrs: dict[str, str]
    #: the items among ``found``'s read whole already (``read_whole``, or held by the store), by id
    whole: dict[str, ContextItem] = field(default_factory=dict)
    #: the seq from which the conversation was read whole (0: all of it): what ``Settled`` takes
    oldest: int = 0


#: how a build reads the bodies of the items it chose from the facts (``read_bodies``): given
#: their stubs and the ``built`` event's arguments, the items, or None (the window moved on)
Bodies = Callable[[list[ContextItem], wire.Args], Plan[list[ContextItem] | None]]
#: a build on a read: ``run(found, held, bodies)``, where ``held`` is the meta its ``built`` event
#: must find (None: none, after a whole read) and ``bodies`` reads the bodies of what it chose
#: (None: ``found`` holds them); None when the window moved on (nothing written)
Run = Callable[[wire.ReadReply, "dict[str, str] | None", "Bodies | None"], Plan["T | None"]]
#: what a build from the last facts alone gives up on: errors those facts may have caused wrongly
_MAYBE_STALE = (BudgetTooSmallError, InvalidOptionsError, NoConversationError)


def build_read(
    settings: Settings,
    state: WindowState,
    settled: Settled,
    recent: int,
    run: Run[T],
    whole: Callable[[ContextItem], bool] | None = None,
    fresh: bool = False,
    uses_all: Callable[[wire.ReadReply], bool] | None = None,
    all_compete: bool = False,
) -> Plan[T]:
    """``run`` a build on the one read of builds: the facts of what it can offer (``read_facts``;
    ``settled`` says when they decide the build, ``recent`` how far back they start), with the
    items ``whole`` picks read whole (``read_whole``: a prompt build's every item, a scored
    build's scored ones), and the bodies of the items a chat build takes read with its ``built``
    event (``read_bodies``). A store with an item cache reads no body it holds at the window's
    epoch, and first tries its last facts read of the window with no read at all (unless
    ``fresh``: compaction and relevance scores decide on a read; nor while builds find the
    window moving, ``ItemCache.moving``): its ``built`` event, written only while the window
    holds those facts' meta, is then its one call. ``uses_all`` says from a window's meta whether
    the build uses every item of it (all compete, and a chat build's budget holds them): then,
    unless the store holds most of their bodies, the facts read takes every body at once
    (``_everything``); when every item competes however many the window holds (``all_compete``)
    and the store keeps items but holds no facts of the window, its first round trip reads every
    attrs and body (all are candidates, and the store keeps them). When the facts cannot serve
    (an item stored before the letters were kept; a window that kept moving), ``run`` builds on
    a whole read."""
    cache, window = settings.item_cache, state.keys.meta

    def everything(meta: dict[str, str]) -> bool:
        held = cache.held(window, meta.get(Meta.EPOCH, ""))
        return (
            uses_all is not None and 2 * held < int(meta.get(Meta.ITEMS) or 0) and uses_all(wire.ReadReply(meta, 0, []))
        )

    last = cache.last_facts(window)
    if last is not None and not fresh and not cache.moving(window) and _decides(last, settled):
        try:
            done = yield from _run_on(settings, state, last, whole, run)
        except _MAYBE_STALE:
            done = None  # the read below decides
        if done is not None:
            return done
        cache.moving(window, True)
    first_all = all_compete and last is None and bool(settings.item_cache_bytes)
    got = yield from read_facts(state, settled, recent, everything, last, first_all)
    if got is not None:
        if last is not None and stamp(last.found.meta) == stamp(got.found.meta):
            cache.moving(window, False)  # a quiet window again: builds may start from the facts
        done = yield from _run_on(settings, state, got, whole, run)
        if done is not None:
            return done
    found = yield from read(state, "order")
    done = yield from run(found, None, None)
    assert done is not None  # a build on a read needs nothing to hold
    return done


def _decides(got: Facts, settled: Settled) -> bool:
    """Whether the facts ``got`` (read for some build) decide a build that ``settled`` judges."""
    return got.oldest == 0 or settled(got.found.items(), got.oldest)


def _run_on(
    settings: Settings, state: WindowState, got: Facts, whole: Callable[[ContextItem], bool] | None, run: Run[T]
) -> Plan[T | None]:
    """``run`` on the facts ``got``: the items the store holds at their epoch (and those
    ``whole`` picks, read) in place of their stubs; None when the window moved on."""
    entry = settings.item_cache.entry(state.keys.meta, got.found.meta.get(Meta.EPOCH, ""))
    if entry is not None:
        settings.item_cache.keep_facts(entry, got)
        got = _with_held(got, entry)
    if whole is not None:
        read_got = yield from read_whole(state, got, whole)
        if read_got is None:
            return None
        got = read_got
        if entry is not None:
            settings.item_cache.keep(state.keys.meta, entry, got.whole.values())
    got.found.cached = entry
    bodies = partial(_bodies_kept, settings, state, entry, got)
    return (yield from run(got.found, build_inputs(got.found.meta), bodies))


def _with_held(got: Facts, entry: CachedWindow) -> Facts:
    """``got`` with the items ``entry`` holds whole among them (``got`` itself when none): the same
    id at the same seq (a caller may reuse an id once its item is gone; a seq names one content
    within an epoch)."""
    held = {}
    for stub in got.found.items():
        item = entry.items.get(stub.id or "")
        if item is not None and item.seq == stub.seq and stub.id not in got.whole:
            held[stub.id or ""] = item
    if not held:
        return got
    return Facts(got.found, got.attrs, {**got.whole, **held}, got.oldest)


def _bodies_kept(
    settings: Settings,
    state: WindowState,
    entry: CachedWindow | None,
    got: Facts,
    stubs: list[ContextItem],
    event: wire.Args,
) -> Plan[list[ContextItem] | None]:
    """``read_bodies``, the items read kept in the store's cache (``entry``)."""
    out = yield from read_bodies(state, got, stubs, event)
    if out is not None and entry is not None:
        settings.item_cache.keep(state.keys.meta, entry, out)
    return out


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
        got = yield from _facts_once(state, settled, max(1, recent), uses_all, last, everything_first)
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


#: what one attempt of a facts read answers when the window changed between its round trips
_MOVED = Facts(wire.ReadReply({}, 0, []), {})


def _facts_once(
    state: WindowState,
    settled: Settled,
    recent: int,
    uses_all: Callable[[dict[str, str]], bool] | None,
    last: Facts | None,
    everything_first: bool,
) -> Plan[Facts | None]:
    """One attempt of ``read_facts``; ``_MOVED`` when the window changed under it."""
    k = state.keys
    if everything_first:
        whole = yield PlainRead(
            (("HGETALL", k.meta), ("SMEMBERS", k.pinned), ("HGETALL", k.attrs), ("HGETALL", k.items))
        )
        return None if whole is None or not whole[0] else _all_facts(*whole)
    recent = min(recent, APPENDED_PAGE) if last is not None else recent
    first = yield PlainRead((
        ("HGETALL", k.meta), ("SMEMBERS", k.pinned), ("HSCAN", k.attrs, 0, "COUNT", SCAN_COUNT),
        ("ZRANGEBYSCORE", k.order, "-inf", _BEFORE_CONVERSATION),
        ("ZRANGEBYSCORE", k.order, _AFTER_CONVERSATION, "+inf"),
        ("LRANGE", k.fifo, -recent, -1),
    ))  # fmt: skip
    if first is None or not first[0]:
        return None
    meta, pinned, (cursor, scanned), before, after, page = first
    if uses_all is not None and uses_all(meta_text(meta)):
        return (yield from _everything(state, meta, pinned, None if int(cursor) else scanned))
    walk = _Walk(set(pinned) | set(before) | set(after), page, recent)
    added = _added(last.found.meta, meta_text(meta)) if last is not None else None
    if last is not None and added is not None and (walk.whole or added <= len(page)):
        walk.reuse(last)
    if not int(cursor):  # the whole of :attrs
        walk.attrs, walk.todo, walk.whole = scanned, set(), True
    while True:
        if not walk.pending():
            stubs = walk.stubs(pinned)
            if stubs is None:
                return None
            if walk.pending():  # bodies the stubs need: read in the next round trip
                pass
            elif walk.whole or settled(stubs, walk.oldest()):
                values = {wire.text(i): wire.text(v) for i, v in walk.attrs.items()}
                return Facts(wire.ReadReply(meta_text(meta), len(pinned), [], stubs), values, walk.items, walk.oldest())
            else:
                walk.more, walk.floor = True, None
        reply = yield PlainRead((("HMGET", k.meta, *STAMP), *walk.commands(k)))
        if reply is None:
            return None
        if tuple(reply[0]) != raw_stamp(meta):
            return _MOVED
        if not walk.took(reply[1:], pinned):
            return None  # an id without attrs or body: corrupt, the whole read says where


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
    values = {wire.text(i): wire.text(v) for i, v in attrs.items()}
    found = wire.ReadReply(meta_text(meta), len(pinned), [], items)
    return Facts(found, values, {i.id or "": i for i in items})


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
                self.attrs[i] = value
                group = value.split(b"|")[5] if value.count(b"|") >= 5 else b""
                if group and group not in self.listed and not self.whole:
                    self.groups.add(group)
                    self.listed.add(group)
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
        self.attrs.update({i.encode(): v.encode() for i, v in last.attrs.items()})
        self.items.update(last.whole)
        if last.oldest == 0:
            self.whole = True
        self.floor = last.oldest

    def stubs(self, pinned: set[Any]) -> list[ContextItem] | None:
        """The items read, as ``facts.stub`` makes them (or whole, where ``facts.needs_body``:
        those not read yet are noted to read, ``pending``), in build order; None when one cannot
        be chosen at all (its attrs have no letters or do not decode: the whole read says where)."""
        out = []
        for i in stored.listing(self.attrs, {}, by_seq=False):
            try:
                item_id, value = wire.text(i), wire.text(self.attrs[i])
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


def read_bodies(
    state: WindowState, got: Facts, stubs: list[ContextItem], event: wire.Args
) -> Plan[list[ContextItem] | None]:
    """The stored items ``stubs`` (from ``got``) stand for, in their order: one plain ``HMGET``
    of their bodies and, in the same transaction, ``event`` (event.lua's arguments: the
    ``built`` event, written only while the window holds ``got``'s meta, so the bodies are
    ``got``'s too). None when the window moved on (nothing written), a body disagrees with its
    letters (the event is written: only corruption or another writer's letters can do that), or
    the server is at maxmemory: the caller builds on a whole read then. Items ``got`` holds whole
    already (``read_whole``) are not read again."""
    ids = [s.id or "" for s in stubs if s.id not in got.whole]
    built = ScriptCall("event", state.keys, event)
    reply = (yield PlainRead((("HMGET", state.keys.items, *ids),), then=built)) if ids else [(yield built)]
    if reply is None or raise_for_reply(reply[-1]) != 1:
        return None
    read = dict(zip(ids, reply[0] if ids else [], strict=True))
    out = []
    for stub in stubs:
        held = got.whole.get(stub.id or "")
        item = held if held is not None else _decoded(got, stub, read[stub.id or ""])
        if item is None or facts.of_item(item) != facts.stored_letters(got.attrs[stub.id or ""]):
            return None
        out.append(item)
    return out


def _decoded(got: Facts, stub: ContextItem, json: Any) -> ContextItem | None:
    """The stored item ``stub`` stands for, from its body ``json`` (None: the item went)."""
    return None if json is None else stored.decode_item([stub.id, json, got.attrs[stub.id or ""], stub.pinned])


def read_whole(state: WindowState, got: Facts, which: Callable[[ContextItem], bool]) -> Plan[Facts | None]:
    """``got`` with the items ``which`` picks whole (a text build chooses with its items' edges,
    and relevance scores need the texts they score, which only the bodies hold), in a new
    ``Facts`` (``got`` may be a store's cached facts, which other builds share): those it does
    not hold whole already read with one plain ``HMGET``, checked against the window's epoch,
    seq and count in the same transaction. None when the window moved on, an item went, or the
    server is at maxmemory: the caller builds on a whole read then."""
    stubs = got.found.items()
    wanted = [s for s in stubs if which(s) and s.id not in got.whole]
    whole = dict(got.whole)
    if wanted:
        ids = [s.id or "" for s in wanted]
        reply = yield PlainRead((("HMGET", state.keys.meta, *STAMP), ("HMGET", state.keys.items, *ids)))
        if reply is None or tuple(None if v is None else wire.text(v) for v in reply[0]) != stamp(got.found.meta):
            return None
        for stub, json in zip(wanted, reply[1], strict=True):
            item = _decoded(got, stub, json)
            if item is None:
                return None
            whole[item.id or ""] = item
    listing = [whole.get(s.id or "", s) if which(s) else s for s in stubs]
    found = wire.ReadReply(got.found.meta, got.found.pinned, [], listing)
    return Facts(found, got.attrs, whole, got.oldest)
