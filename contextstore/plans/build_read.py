"""The one read of every build (``plans/chat.py``, ``plans/build.py``): the facts of what it can
offer, then the bodies of what a chat build chose (or of what a prompt build can offer), in
plain commands; what is read follows what the build can offer, not the window's length, and a
store with an item cache (``core/itemcache.py``) reads no body it holds, and may build from its
last facts read with no read at all (``build_read``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from ..core import facts, stored, wire
from ..core.itemcache import CachedWindow, Derived, Grown, ItemCache, WholeListing
from ..core.layout import Meta, build_inputs
from ..errors import BudgetTooSmallError, InvalidOptionsError, NoConversationError, raise_for_reply
from ..types import BuildOptions, ContextItem
from .base import PlainRead, Plan, ScriptCall, Settings, WindowState
from .budget import uses_every_item
from .facts_reach import Budgeted
from .facts_read import Facts, Settled, decides, read_facts, recent_for
from .reads import ATTEMPTS, STAMP, read, stamp

__all__ = ["Bodies", "Facts", "Recipe", "build_read", "read_bodies", "read_facts", "read_whole", "recent_for"]

T = TypeVar("T")


#: how a build reads the bodies of the items it chose from the facts (``read_bodies``): given
#: their stubs and the ``built`` event's arguments, the items, or None (the window moved on)
Bodies = Callable[[list[ContextItem], wire.Args], Plan[list[ContextItem] | None]]
#: a build on a read: ``run(found, held, bodies)``, where ``held`` is the meta its ``built`` event
#: must find (None: none, after a whole read) and ``bodies`` reads the bodies of what it chose
#: (None: ``found`` holds them); None when the window moved on (nothing written)
Run = Callable[[wire.ReadReply, "dict[str, str] | None", "Bodies | None"], Plan["T | None"]]
#: what a build from the last facts alone gives up on: errors those facts may have caused wrongly
_MAYBE_STALE = (BudgetTooSmallError, InvalidOptionsError, NoConversationError)


@dataclass(frozen=True, slots=True)
class Recipe:
    """What one kind of build asks of the one read of builds (``build_read``): made once per
    build by ``plans/build.py`` (a prompt) and ``plans/chat.py`` (chat messages)."""

    #: the build's options (what it offers, its budget: ``budget.uses_every_item``)
    options: BuildOptions
    #: whether the facts read so far decide the build (``facts_read.read_facts``)
    settled: Settled
    #: whether the build chooses what it takes by the budget (a chat build, from the facts; a
    #: prompt build from the items its walk reads whole), so that it uses every item only when the
    #: window's stored tokens are within the budget; a prompt build with relevance scores reads
    #: every item it may offer
    chooses: bool
    #: the items the build reads whole before it chooses (every item of a prompt, the scored
    #: ones of a build with relevance scores); None: none
    whole: Callable[[ContextItem], bool] | None = None
    #: the build decides on a read (compaction, relevance scores): never from the last facts alone
    fresh: bool = False
    #: every item competes however many the window holds (``select.all_compete`` of its item cap)
    all_compete: bool = False
    #: a build that chooses by its budget: its facts read stops where the budget fills
    #: (``plans/facts_reach.py``); None: ``settled`` alone decides how far it reads
    budgeted: Budgeted | None = None

    @property
    def recent(self) -> int:
        """How many of the newest ids the facts read takes first (``recent_for``)."""
        return recent_for(self.options)


def build_read(settings: Settings, state: WindowState, recipe: Recipe, run: Run[T]) -> Plan[T]:
    """``run`` a build on the one read of builds: the facts of what it can offer (``read_facts``;
    the ``recipe``'s ``settled`` says when they decide the build), with the items its ``whole``
    picks read whole (``read_whole``: a prompt build's every item, a scored build's scored ones),
    and the bodies of the items a chat build takes read with its ``built`` event
    (``read_bodies``). A store with an item cache reads no body it holds, and first tries its
    last facts read of the window (``_from_last``; not when ``fresh``: compaction and relevance
    scores decide on a read). A build that uses every item of a window
    (``budget.uses_every_item``) reads every attrs and body at once (``_reads_everything``), as
    does a store that keeps items and holds no facts of a window whose every item competes
    (``all_compete``). When the facts cannot serve (an item stored before the letters were
    kept; a window that kept moving), ``run`` builds on a whole read. A build whose window moved
    between its facts and its bodies (another worker's add) reads the facts again, from those it
    read when the store keeps them, ``ATTEMPTS`` times before that whole read."""
    whole, settled = recipe.whole, recipe.settled
    cache, window = settings.item_cache, state.keys.meta
    last = cache.last_facts(window)
    if last is not None and not recipe.fresh and not cache.moving(window) and decides(last, settled, recipe.budgeted):
        done = yield from _from_last(settings, state, last, whole, run)
        if done is not None:
            return done
    everything = partial(_reads_everything, cache, state, recipe)
    for _ in range(ATTEMPTS):  # a window other workers write may move between a build's round trips
        first_all = recipe.all_compete and last is None and bool(settings.item_cache_bytes)
        got = yield from read_facts(state, settled, recipe.recent, everything, last, first_all, recipe.budgeted)
        if got is None:
            break
        if last is not None and stamp(last.found.meta) == stamp(got.found.meta):
            cache.moving(window, False)  # a quiet window again: builds may start from the facts
        done = yield from _run_on(settings, state, got, whole, run, read_now=True)
        if done is not None:
            return done
        last = cache.last_facts(window)  # the facts just read (a store that keeps them): read on from them
    found = yield from read(state, "order")
    done = yield from run(found, None, None)
    assert done is not None  # a build on a read needs nothing to hold
    return done


def _from_last(
    settings: Settings, state: WindowState, last: Facts, whole: Callable[[ContextItem], bool] | None, run: Run[T]
) -> Plan[T | None]:
    """``run`` on the store's last facts read of the window, with no read: its ``built`` event,
    written only while the window holds those facts' meta, is then its one call. None (the
    window noted as moving, ``ItemCache.moving``: builds read first until a read finds it as
    last read) when the window moved on, or when those facts raised an error they may have
    caused wrongly (a read decides)."""
    try:
        done = yield from _run_on(settings, state, last, whole, run)
    except _MAYBE_STALE:
        done = None
    if done is None:
        settings.item_cache.moving(state.keys.meta, True)
    return done


def _reads_everything(
    cache: ItemCache, state: WindowState, recipe: Recipe, meta: dict[str, str], scanned: bool
) -> bool:
    """Whether a facts read of the window whose meta is ``meta`` reads every attrs and body at
    once: the build uses every item (``budget.uses_every_item``) and the store holds fewer than
    half of them, unless the first round trip's scan brought every attrs (``scanned``) and the
    build reads only the bodies it takes (no ``whole``): those come with its ``built`` event then,
    one round trip fewer."""
    if scanned and recipe.whole is None:
        return False
    held = cache.held(state.keys.meta, meta.get(Meta.EPOCH, ""))
    if 2 * held >= int(meta.get(Meta.ITEMS) or 0):
        return False
    return uses_every_item(state, recipe.options, recipe.chooses, wire.ReadReply(meta, 0, []))


def _run_on(
    settings: Settings,
    state: WindowState,
    got: Facts,
    whole: Callable[[ContextItem], bool] | None,
    run: Run[T],
    read_now: bool = False,
) -> Plan[T | None]:
    """``run`` on the facts ``got``: the items the store holds at their epoch (and those
    ``whole`` picks, read) in place of their stubs; None when the window moved on. Facts this
    build read (``read_now``) with every body at hand (read with them, or held at their epoch and
    seq) are one view of the window: its ``built`` event is then written whatever came since, as
    after a whole read (another worker's add while the client chose must not cost a second read)."""
    entry = settings.item_cache.entry(state.keys.meta, got.found.meta.get(Meta.EPOCH, ""))
    if entry is not None:
        settings.item_cache.keep_facts(state.keys.meta, entry, got)
    held = _whole_held(entry, got, whole) if whole is not None else None
    if held is not None:  # as an earlier build of these facts listed them: nothing to read
        got = held
    else:
        if entry is not None:
            got = _with_held(got, entry)
        if whole is not None:
            read_got = yield from _read_whole_kept(settings, state, entry, got, whole)
            if read_got is None:
                return None
            got = read_got
    got.found.cached = entry
    bodies = partial(_bodies_kept, settings, state, entry, got)
    every_body = read_now and all(s.id in got.whole for s in got.found.items())
    return (yield from run(got.found, None if every_body else build_inputs(got.found.meta), bodies))


def _read_whole_kept(
    settings: Settings, state: WindowState, entry: CachedWindow | None, got: Facts, which: Callable[[ContextItem], bool]
) -> Plan[Facts | None]:
    """``read_whole``, the items read kept in the store's cache (``entry``), and the listing kept
    in its memo for the next build of the same facts (``_whole_held``)."""
    read_got = yield from read_whole(state, got, which)
    if read_got is not None and entry is not None:
        settings.item_cache.keep(state.keys.meta, entry, read_got.whole.values())
        _listing_grown(entry.derived, got.found.items(), read_got, which)
        entry.derived.whole = WholeListing(got.found.items(), which, read_got.found.items())
    return read_got


def _listing_grown(
    derived: Derived, stubs: list[ContextItem], got: Facts, which: Callable[[ContextItem], bool]
) -> None:
    """When the facts ``stubs`` grew from the last ones (``derived.grown_from``, left by
    ``ItemCache.keep_facts``) and a build listed those whole too, say the same of the listings:
    ``got``'s grew from that one, so that its units grow from that one's (``select.units_for``)."""
    grew = derived.grown_from
    if grew is None or grew.items is not stubs:
        return
    last = grew.previous_memo.whole
    if last is None or last.stubs is not grew.previous or last.which is not which:
        return
    added = [got.whole.get(s.id or "", s) if which(s) else s for s in grew.added]
    derived.grown_from = Grown(got.found.items(), last.listing, grew.previous_memo, added, grew.removed)


def _whole_held(entry: CachedWindow | None, got: Facts, which: Callable[[ContextItem], bool]) -> Facts | None:
    """``got`` with the items ``which`` picks whole as an earlier build of the very same facts
    listed them (kept in ``entry``'s memo by ``_read_whole_kept``: the very list, so that what
    builds worked out from it holds), under ``got``'s meta; None when no build did."""
    memo = entry.derived.whole if entry is not None else None
    if memo is None or memo.stubs is not got.found.items() or memo.which is not which:
        return None
    return Facts(wire.ReadReply(got.found.meta, got.found.pinned, [], memo.listing), got.attrs, got.whole, got.oldest)


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
        if held is not None:  # checked when it was read
            out.append(held)
            continue
        item = _decoded(got, stub, read[stub.id or ""])
        if item is None or facts.of_item(item) != facts.stored_letters(got.value(stub.id or "")):
            return None
        out.append(item)
    return out


def _decoded(got: Facts, stub: ContextItem, json: Any) -> ContextItem | None:
    """The stored item ``stub`` stands for, from its body ``json`` (None: the item went)."""
    return None if json is None else stored.decode_item([stub.id, json, got.value(stub.id or ""), stub.pinned])


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
