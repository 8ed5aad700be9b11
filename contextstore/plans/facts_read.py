"""The facts of a window a build chooses by (``plans/build_read.py`` reads them first): its meta,
its pins and the ``:attrs`` of the items the build can offer, in plain commands, walking the
conversation back only as far as the build's options reach; or, when the build uses every item,
every attrs and body at once."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from ..core import stored, validate, wire
from ..core.layout import Meta, meta_text
from ..types import BuildOptions, ContextItem
from . import facts_reach
from .base import PlainRead, Plan, WindowState
from .facts_reach import Budgeted, Reach
from .facts_walk import Facts, Walk, unconversed_reads
from .reads import ATTEMPTS, STAMP, raw_stamp

__all__ = ["Facts", "Settled", "decides", "read_facts", "recent_for"]


#: the most ids a facts read of a window larger than ``EVERY_ATTRS`` items takes first: a build
#: that lets more of the conversation compete reads on in pages twice as large, until its budget
#: or its ``max_history_items`` decides; of a smaller window it reads every attrs at once
FIRST_PAGE, EVERY_ATTRS = 512, 1024


def recent_for(options: BuildOptions) -> int:
    """How far back a facts read for a build with ``options`` reaches first: twice the
    conversation it may offer, and some, so one step mostly suffices (``FIRST_PAGE`` ids at most
    of a larger window: ``_facts_once``)."""
    most = options.max_history_items if options.include_recent_history else 0
    return 2 * most + 16


#: ``:attrs`` fields the first round trip of a facts read scans: a small hash (a listpack, up to
#: ``LISTPACK_ITEMS`` fields by default) comes whole whatever the count, and then the facts are
#: read in that one round trip; a large one sends about this many, then the walk.
#: A first read reaching past a small window scans nothing (``_facts_once``): the scan of a
#: listpack collects every field before it replies, ~3x the shard's work of its ``HGETALL``
SCAN_COUNT = 32
#: ``settled(stubs, oldest)``: whether the facts read so far (every unit whose newest member's
#: seq is at least ``oldest``, whole, and every pinned or non-conversation item) decide the build
Settled = Callable[[list[ContextItem], int], bool]


def read_facts(
    state: WindowState,
    settled: Settled,
    recent: int,
    uses_all: Callable[[dict[str, str], bool], bool] | None = None,
    last: Facts | None = None,
    everything_first: bool = False,
    budgeted: Budgeted | None = None,
) -> Plan[Facts | None]:
    """What a build within a budget chooses by (``plans/chat.py``), in plain commands and no item
    body: the window's meta and pins, and the ``:attrs`` of the items a build can offer. A small
    window's come whole in one round trip (``SCAN_COUNT``); a first read whose ``recent`` reaches
    past a small window (``LISTPACK_ITEMS``) scans nothing, and reads every attrs (or the walk's
    first page) in its second round trip, unless the build uses every item. Of a larger one:
    every pinned item, every item that is not a conversation message, and the conversation from
    the newest back (``recent`` ids first, twice as many each further step) until ``settled``
    says the build's conversation is decided (``max_history_items``), each item with the members
    of its tool-call group; so what it reads follows the options, not the window's length. Every
    round trip checks the meta's epoch, seq and item count: the facts count only while those hold
    still (read again, ``ATTEMPTS`` times). An item whose letters say its body is needed
    (``facts.needs_body``: parallel tool calls, a ``source_ref`` header) is read whole in the
    walk's next round trip (``Facts.whole``). ``last``, the store's last facts read of the window:
    when the window has only had items added since (same epoch; its item count grew by as much as
    its seq), or added and its oldest unpinned ones removed (``_gone``: an eviction), their attrs
    still hold, and the walk reads those of the added items only (a page of ``APPENDED_PAGE``
    newest ids first). ``uses_all(meta, scanned)``: whether the next round trip reads every attrs
    and body (``_everything``) instead, given the meta and whether the first one's scan brought
    every attrs (False when it scanned nothing). ``everything_first``: every item is a candidate
    whatever the window holds, and the caller keeps what it reads: the first round trip reads
    every attrs and body. ``budgeted``: a build that chooses by its budget, whose walk stops where
    the budget fills (``plans/facts_reach.py``: the older messages that may still fit are read from
    ``:sizes``, nothing else older). None when the window is missing or kept moving, or when an
    item's letters are missing (stored before they were kept): the caller reads the window whole then."""
    for _ in range(ATTEMPTS):
        if everything_first:
            got = yield from _whole_first(state)
        else:
            got = yield from _facts_once(state, (settled, budgeted), max(1, recent), uses_all, last)
        if got is not _MOVED:
            return got
    return None


#: how many of the newest ids a facts read takes first when the store holds the window's last
#: facts: what was added since is mostly fewer
APPENDED_PAGE = 64


def _since(old: dict[str, str], new: dict[str, str]) -> tuple[int, int] | None:
    """How many items a window whose meta was ``old`` and is ``new`` had added, and how many
    removed, with no change in place (the same epoch: every stored item is as it was, and every
    added item raised the seq by one); None when anything else happened."""
    if not old.get(Meta.EPOCH) or old.get(Meta.EPOCH) != new.get(Meta.EPOCH):
        return None
    added = int(new.get(Meta.SEQ) or 0) - int(old.get(Meta.SEQ) or 0)
    grew = int(new.get(Meta.ITEMS) or 0) - int(old.get(Meta.ITEMS) or 0)
    return (added, added - grew) if added >= max(grew, 0) else None


#: how many of ``:fifo``'s oldest ids a facts read with the store's last facts takes, at most,
#: to find the oldest unpinned one (``_gone``): the pinned items come first, and then one
OLDEST_PAGE = 64


def _oldest_page(last: Facts) -> int:
    """How many of ``:fifo``'s oldest ids ``_gone`` needs: one more than ``last``'s pinned items."""
    return min(last.found.pinned + 1, OLDEST_PAGE)


def _gone(last: Facts, removed: int, oldest: list[Any]) -> set[str] | None:
    """The ids of the ``removed`` items that went since ``last`` when they are its oldest unpinned
    ones (an eviction, a compaction of the oldest): ``last`` holds every item, and the first id of
    ``oldest`` (``:fifo``'s oldest now) that ``last`` does not hold pinned is the one after them.
    ``:fifo`` holds every item in arrival order, so any of them still there would come before it,
    and as many went as were removed: no other. None otherwise (the walk reads the facts again)."""
    if last.oldest != 0:
        return None
    items = last.found.items()
    pinned = {i.id for i in items if i.pinned}
    first = next((wire.text(i) for i in oldest if wire.text(i) not in pinned), None)
    unpinned = [i for i in items if not i.pinned]
    if first is None or removed >= len(unpinned):
        return None
    before = heapq.nsmallest(removed + 1, unpinned, key=lambda i: i.seq)
    return {i.id or "" for i in before[:-1]} if before[-1].id == first else None


#: how many ids a facts read with the store's last facts guesses were added since (``_guessed``):
#: of a window of up to ``LISTPACK_ITEMS`` items, and of a larger one. A hash of up to 512 fields
#: is a listpack (the default ``hash-max-listpack-entries`` of Redis 7 and Valkey), where each id
#: looked up is a walk of the fields, to the end for an id not there:
#: 32 guesses cost the shard more than the rest of a cached fleet worker's build. (The same bound
#: says when a first read's page of newest ids would reach past a window a scan brings whole.)
GUESSED_SMALL, GUESSED = 8, 32
LISTPACK_ITEMS = 512


def _guessed(last: Facts | None) -> list[str]:
    """The ids of the items added since ``last`` when they were added without ids of their own
    (the store names them by seq: ``validate.generated_id``), up to ``GUESSED`` of them
    (``GUESSED_SMALL`` in a window small enough for a listpack): their attrs are read with the
    first round trip, so that after such adds the facts take one."""
    if last is None:
        return []
    seq = int(last.found.meta.get(Meta.SEQ) or 0)
    count = GUESSED_SMALL if int(last.found.meta.get(Meta.ITEMS) or 0) <= LISTPACK_ITEMS else GUESSED
    return [validate.generated_id(s) for s in range(seq + 1, seq + 1 + count)]


#: what one attempt of a facts read answers when the window changed between its round trips
_MOVED = Facts(wire.ReadReply({}, 0, []), {})


def _facts_once(
    state: WindowState,
    settled: tuple[Settled, Budgeted | None],
    recent: int,
    uses_all: Callable[[dict[str, str], bool], bool] | None,
    last: Facts | None,
) -> Plan[Facts | None]:
    """One attempt of ``read_facts``; ``_MOVED`` when the window changed under it."""
    k, deep = state.keys, recent
    recent = min(recent, APPENDED_PAGE) if last is not None else recent
    # with the window's last facts: no scan and no build order, the added items by id from the
    # page (guessed first: ids the store gives). A first read reaching past a small window
    # (``later``) scans none either: its next round trip reads them
    later = last is None and recent >= LISTPACK_ITEMS
    scan = (("HSCAN", k.attrs, 0, "COUNT", SCAN_COUNT),) if last is None and not later else ()
    walk_reads = () if later else _walk_reads(k, (recent := min(recent, FIRST_PAGE)), unconversed=last is None)
    guess = _guessed(last)
    since = (("HMGET", k.attrs, *guess), ("LRANGE", k.fifo, 0, _oldest_page(last) - 1)) if last is not None else ()
    first = yield PlainRead((
        ("HGETALL", k.meta), ("SMEMBERS", k.pinned), *scan, *walk_reads, *since,
    ))  # fmt: skip
    if first is None or not first[0]:
        return None
    replies = list(first)
    oldest, guessed = (replies.pop(), replies.pop()) if since else ([], [])
    meta, pinned, (cursor, scanned), *starts = replies if scan else (*replies[:2], (1, {}), *replies[2:])
    text_meta = meta_text(meta)
    if uses_all is not None and uses_all(text_meta, not int(cursor)):  # cursor 1 when nothing was scanned
        return (yield from _everything(state, meta, pinned, None if int(cursor) else scanned))
    if later:  # the walk starts from the newest ids, or every attrs of a window they hold whole
        every, recent = _first_reach(recent, text_meta, settled[1])
        reads = (("HGETALL", k.attrs),) if every else _walk_reads(k, recent)
        starts = yield from _read_on(state, meta, reads)
        if starts is None or starts is _MOVED:
            return starts
        if every:
            cursor, scanned, starts = 0, starts[0], []
    *listed, page = starts or ([],)
    walk = Walk(set(pinned).union(*listed), page, recent)
    walk.with_bodies = settled[1] is not None and settled[1].bodies
    change = _since(last.found.meta, text_meta) if last is not None else None
    if last is not None and change == (0, 0) and decides(last, *settled):  # as last read: the same items
        return _as_last(last, text_meta, len(pinned))
    if last is not None and change is not None:
        _reuse(walk, last, change, oldest, dict(zip((g.encode() for g in guess), guessed, strict=True)))
    if last is not None and walk.last is None and not walk.whole:  # not reused: read on as a first read
        walk.size, walk.more, walk.unlisted = max(walk.size, min(deep, FIRST_PAGE) - len(walk.recent)), True, True
    if not int(cursor):  # the whole of :attrs
        walk.attrs, walk.todo, walk.whole = scanned, set(), True
    return (yield from _walked(state, walk, (meta, text_meta), pinned, settled))


def decides(got: Facts, settled: Settled, budgeted: Budgeted | None) -> bool:
    """Whether the facts ``got`` (read for some build) decide a build: by how far back they hold
    the conversation (``settled``), or by its budget (``facts_reach.holds``; not a build with a
    query, whose room needs scores worked out on a read)."""
    if got.oldest == 0 or settled(got.found.items(), got.oldest):
        return True
    return facts_reach.holds(got.reach, budgeted, got.found.items(), got.found.meta)


def _first_reach(recent: int, meta: dict[str, str], budgeted: Budgeted | None) -> tuple[bool, int]:
    """After the meta of a first read reaching ``recent`` ids back, past a small window: whether
    it reads every attrs (the window holds no more, and no more than ``EVERY_ATTRS`` or twice what
    the walk would take first: one ``HGETALL`` costs the shard less than that walk), else how
    many ids its walk takes first (``FIRST_PAGE`` at most; what fills a budget, for a build that
    chooses by its budget: ``facts_reach.first_page``)."""
    held = int(meta.get(Meta.ITEMS) or 0)
    page = facts_reach.first_page(budgeted, meta) if budgeted is not None else None
    every = recent >= held and (held <= EVERY_ATTRS or (page is not None and 2 * page >= held))
    return every, min(recent, FIRST_PAGE, page or FIRST_PAGE)


def _walk_reads(k: Any, recent: int, unconversed: bool = True) -> tuple[tuple[Any, ...], ...]:
    """What a walk starts from: the ids of the items before and after the conversation in build
    order (unless not ``unconversed``), and the ``recent`` newest ids of ``:fifo``."""
    return (*(unconversed_reads(k) if unconversed else ()), ("LRANGE", k.fifo, -recent, -1))


def _read_on(state: WindowState, meta: dict[Any, Any], reads: tuple[tuple[Any, ...], ...]) -> Plan[Any]:
    """The replies of ``reads`` for a first read whose page reaches past a small window
    (``LISTPACK_ITEMS``), read after its first round trip when the build does not use every
    item: the walk's first reads (``_walk_reads``), or every attrs when the page would hold
    every item; ``_MOVED`` when the window changed since ``meta``, None when the read could not
    be made."""
    reply = yield PlainRead((("HMGET", state.keys.meta, *STAMP), *reads))
    if reply is None:
        return None
    return reply[1:] if tuple(reply[0]) == raw_stamp(meta) else _MOVED


def _reuse(walk: Walk, last: Facts, change: tuple[int, int], oldest: list[Any], guessed: dict[bytes, Any]) -> None:
    """Let ``walk`` take ``last``'s attrs as read, and those of the added items read by guess
    (``guessed``), when the window had ``change`` (added, removed) since and the walk's first page
    holds every added item: the removed ones its oldest (``_gone``, from ``:fifo``'s ``oldest``)."""
    added, removed = change
    gone = _gone(last, removed, oldest) if removed else set()
    if gone is not None and (walk.whole or added <= len(walk.recent)):
        walk.reuse(last, gone)
        walk.guessed(walk.recent[len(walk.recent) - added :] if added else [], guessed)
        walk.reach = None if gone else last.reach  # a reach by the budget holds while none went


def _walked(
    state: WindowState,
    walk: Walk,
    metas: tuple[dict[Any, Any], dict[str, str]],
    pinned: set[Any],
    settled: tuple[Settled, Budgeted | None],
) -> Plan[Facts | None]:
    """The facts of ``walk``, read on until ``settled`` says they decide the build (or every item
    is read), or the budget does (``_by_budget``); ``_MOVED`` when the window changed under it,
    None when an item is corrupt. ``metas``: the window's meta as read, and as text."""
    meta, text_meta = metas
    history_decides, budgeted = settled
    while True:
        if not walk.pending():
            stubs = walk.stubs(pinned)
            if stubs is None:
                return None
            if walk.pending():  # bodies the stubs need: read in the next round trip
                pass
            elif walk.whole or history_decides(stubs, walk.oldest()):
                found = wire.ReadReply(text_meta, len(pinned), [], stubs)
                return Facts(found, walk.attrs, walk.items, walk.oldest(), walk.grown)
            elif budgeted is not None and (reach := (yield from _by_budget(walk, budgeted, stubs, text_meta))):
                offered = facts_reach.beyond(reach, stubs)  # units left out: not grown from the last facts'
                found = wire.ReadReply(text_meta, len(pinned), [], offered)
                return Facts(
                    found, walk.attrs, walk.items, walk.oldest(), walk.grown if offered is stubs else None, reach
                )
            elif walk.pending():  # the bodies of the items a build with a query scores (``_by_budget``)
                pass
            elif walk.jump is not None:
                listed = yield from _listed(state, walk, meta, stubs, text_meta)
                if listed is True:
                    continue
                if listed is not False:  # moved, or could not read
                    return listed
            else:
                walk.more, walk.floor = True, None
        reply = yield PlainRead((("HMGET", state.keys.meta, *STAMP), *walk.commands(state.keys)))
        if reply is None:
            return None
        if tuple(reply[0]) != raw_stamp(meta):
            return _MOVED
        if not walk.took(reply[1:], pinned):
            return None  # an id without attrs or body: corrupt, the whole read says where


def _by_budget(walk: Walk, budgeted: Budgeted, stubs: list[ContextItem], meta: dict[str, str]) -> Plan[Reach | None]:
    """What the walk holds of the conversation by the budget when that decides the build (a reach
    it reused or finished); else None, with a jump started (``walk.jump``) when the budget
    filled in what was read (``facts_reach.start``). A build with a query (``Budgeted.scores``)
    scores its retrieved documents and working memory first: their bodies are read next when
    the walk does not hold them yet (``Walk.with_whole``)."""
    relevance = None
    if budgeted.scores is not None:
        scored = walk.with_whole(budgeted.scores.wanted, stubs)
        if scored is None:
            return None
        relevance = yield from budgeted.scores.of(scored)
    if facts_reach.holds(walk.reach, budgeted, stubs, meta, relevance):
        return walk.reach
    if walk.jump is not None:
        return walk.jump.reach() if walk.jump.done() else None
    if not walk.sized and not (walk.with_bodies and any((s.id or "") not in walk.items for s in stubs)):
        walk.jump = facts_reach.start(budgeted, stubs, walk.oldest(), meta, walk.size, relevance)
        walk.sized = walk.jump is not None
        if walk.jump is not None and walk.jump.done():  # no older message fits what is left
            return walk.jump.reach()
    return None


def _listed(
    state: WindowState, walk: Walk, meta: dict[Any, Any], stubs: list[ContextItem], text_meta: dict[str, str]
) -> Plan[Facts | bool | None]:
    """One round trip of the walk's jump (``facts_reach.Jump``): the messages it lists are read
    next (with their groups); True to go on, ``_MOVED`` when the window changed. False when the
    walk reads its next page instead (``:sizes`` does not hold every message, or the jump would
    list more than the page reads)."""
    jump = walk.jump
    assert jump is not None
    reply = yield PlainRead((("HMGET", state.keys.meta, *STAMP), *jump.commands(state.keys.sizes)))
    if reply is None:
        return None
    if tuple(reply[0]) != raw_stamp(meta):
        return _MOVED
    listed = jump.took(list(reply[1:]), stubs, text_meta)
    if listed is None:  # read on in pages (and try again after the next one, unless :sizes is short)
        walk.jump, walk.sized = None, jump.short
        walk.more, walk.floor = True, None
        return False
    walk.found(listed)
    return True


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
