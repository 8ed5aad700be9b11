"""A build's read of a window, for a store that caches windows (``core/itemcache.py``): nothing
when the cache holds the window as it is, the added items alone when only adds happened since,
the whole window otherwise (``plans/reads.py`` does the reading in bounded calls).

Where the server runs scripts by ``EVALSHA`` (Redis 6.2: each call re-creates the script's
helpers) and plain reads are allowed (not a cluster's client), the added items are read with
plain commands: one transaction reads the meta, the pinned count and the ``:fifo`` ids from the
newest cached one on, the next the added bodies with their attrs and pins, checking that nothing
changed in between; whatever that cannot settle is asked of build_read.lua. It costs the shard
0.6-0.8x build_read.lua's call there, for one more round trip. Where the server has functions,
build_read.lua (``FCALL_RO``) costs the shard about what the two transactions do, in one round trip, so it stays
(``docs/benchmarks.md``).
"""

from __future__ import annotations

from typing import Any

from ..core import stored, wire
from ..core.itemcache import CachedWindow
from ..core.layout import Meta, meta_text
from ..types import ContextItem
from .base import PlainRead, Plan, Settings, WindowState
from .reads import APPENDED, STAMP, UNCHANGED, Listing, plain_ok, plain_whole, read_listing, stamp

#: most added ids a plain appended read lists (build_read.lua's APPENDED_MAX); more: build_read.lua
APPENDED_MAX = 512


def read_for_build(settings: Settings, state: WindowState) -> Plan[wire.ReadReply]:
    """The window in build order, for a build: the ids, and the JSON only of the items the
    store has not cached (``itemcache``); nothing but the meta when the cache holds the window
    as it is; read again in full if the cache raced."""
    cache, window = settings.item_cache, state.keys.meta
    known = cache.known(window)
    while True:
        plain = (yield from plain_whole(state, "order")) if known is None and (yield from plain_ok(state)) else None
        if plain is not None:  # nothing cached: the whole window, plainly
            found = plain.found
            return _cached(found, cache.merge(window, None, found.meta, found.raw, plain.ids) or ([], None))
        listing = None
        if known is not None and state.plain_reads and settings.evalsha_scripts():
            listing = yield from plain_appended(state, known)
        if listing is None:
            head = [known.epoch, str(known.seq)] if known is not None else ["", "-1"]
            tail = [str(known.count)] if known is not None else []
            listing = yield from read_listing(state, "build_read", head, tail=tail)
        found = listing.found
        if listing.status == UNCHANGED and known is not None:
            cache.moving(window, False)  # a quiet window again: builds may start from the cache
            return _cached(found, (known.ordered, cache.touch(window, known)))
        merged: tuple[list[ContextItem], CachedWindow | None] | None
        if listing.status == APPENDED and known is not None:
            merged = cache.extend(window, known, found.meta, found.raw, listing.ids)
        else:
            merged = cache.merge(window, known, found.meta, found.raw, listing.ids)
        if merged is not None:
            return _cached(found, merged)
        known = None


def plain_appended(state: WindowState, known: CachedWindow) -> Plan[Listing | None]:
    """What build_read.lua answers about ``known`` when the window is as cached
    (``UNCHANGED``) or only had items added since (``APPENDED``, with their entries), in plain
    commands; None when it is neither, when it moved on between the two calls, or at maxmemory
    (build_read.lua settles it then). The added ids are the ``:fifo`` ids after the newest cached one:
    ``:fifo`` is in increasing seq order, and within an epoch an id whose seq is at most the
    cache's was there when the cache read the window, so when the id before the added ones is
    such, and the window holds the cached count plus them, nothing went."""
    k, start = state.keys, max(known.count - 1, 0)
    reply = yield PlainRead((("HGETALL", k.meta), ("SCARD", k.pinned), ("LRANGE", k.fifo, start, start + APPENDED_MAX)))
    if reply is None or not reply[0]:
        return None
    meta, tail = meta_text(reply[0]), list(reply[2])
    if meta.get(Meta.EPOCH) != known.epoch:
        return None
    if meta.get(Meta.SEQ) == str(known.seq) and meta.get(Meta.ITEMS) == str(known.count):
        return Listing(wire.ReadReply(meta, int(reply[1]), []), [], [], UNCHANGED)
    added = tail[1:] if known.count else tail  # all of them when the count below holds (LRANGE cuts at 512)
    if not added or int(meta.get(Meta.ITEMS) or 0) != known.count + len(added):
        return None
    entries = yield from _added_entries(state, known, meta, tail[0] if known.count else None, added)
    if entries is None:
        return None
    return Listing(wire.ReadReply(meta, int(reply[1]), entries), added, [], APPENDED)


def _added_entries(
    state: WindowState, known: CachedWindow, meta: dict[str, str], before: Any, added: list[Any]
) -> Plan[Any]:
    """The entries (``[id, stored JSON, attrs, pinned]``) of the ``added`` ids, read in one
    transaction with the window's stamp and the attrs of ``before`` (the id listed just before
    them, None when the cache holds no item); None when the stamp is no longer ``meta``'s,
    ``before`` has a seq above the cache's (it is not the cached item of that id), or an entry is
    incomplete."""
    k, listed = state.keys, added if before is None else [before, *added]
    reads = (("HMGET", k.meta, *STAMP), ("HMGET", k.attrs, *listed), ("HMGET", k.items, *added))
    reply = yield PlainRead((*reads, ("SMISMEMBER", k.pinned, *added)))
    if reply is None or tuple(None if v is None else wire.text(v) for v in reply[0]) != stamp(meta):
        return None
    attrs, jsons, pins = list(reply[1]), reply[2], reply[3]
    if before is not None:
        seen = attrs.pop(0)
        if seen is None or stored.seq_of(seen) > known.seq:
            return None
    if any(v is None for v in attrs) or any(j is None for j in jsons):
        return None
    return [[i, j, a, int(p)] for i, j, a, p in zip(added, jsons, attrs, pins, strict=True)]


def _cached(found: wire.ReadReply, merged: tuple[list[ContextItem], CachedWindow | None]) -> wire.ReadReply:
    """``found`` with its items in build order and the cache entry they are now, which keeps
    this read's meta and pinned count (``cached_for_build``)."""
    found.decoded, found.cached = merged
    if found.cached is not None:
        found.cached.read = (found.meta, found.pinned)
    return found


def cached_for_build(settings: Settings, state: WindowState) -> tuple[wire.ReadReply, dict[str, str]] | None:
    """The window as the store's cache holds it, with no call (None when nothing is cached): the
    read a build may start from, and the meta fields it holds (``Meta.BUILD_INPUTS``), which the
    build's ``built`` event checks (event.lua); when they moved on, the build reads and runs again."""
    cache, window = settings.item_cache, state.keys.meta
    known = cache.known(window)
    if known is None or known.read is None or cache.moving(window):
        return None
    meta, pinned = known.read
    held = {f: meta.get(f, "") for f in Meta.BUILD_INPUTS}
    return wire.ReadReply(meta, pinned, [], known.ordered, cache.touch(window, known)), held
