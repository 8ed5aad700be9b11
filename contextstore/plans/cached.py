"""A build's read of a window, for a store that caches windows (``core/itemcache.py``): nothing
when the cache holds the window as it is, the added items alone when only adds happened since,
the whole window otherwise (``plans/reads.py`` does the reading in bounded calls): build_read.lua
answers the first two, one call on every server.
"""

from __future__ import annotations

from ..core import wire
from ..core.itemcache import CachedWindow
from ..core.layout import build_inputs
from ..types import ContextItem
from .base import Plan, Settings, WindowState
from .reads import APPENDED, UNCHANGED, plain_ok, plain_whole, read_listing


def read_for_build(settings: Settings, state: WindowState, fits: bool | None = None) -> Plan[wire.ReadReply]:
    """The window in build order, for a build: the ids, and the JSON only of the items the
    store has not cached (``itemcache``); nothing but the meta when the cache holds the window
    as it is; read again in full if the cache raced. ``fits``: whether the window fits one
    plain read, when the caller already asked (``reads.plain_ok``)."""
    cache, window = settings.item_cache, state.keys.meta
    known = cache.known(window)
    while True:
        whole = known is None and (fits if fits is not None else (yield from plain_ok(state)))
        fits = None  # asked again after a race
        plain = (yield from plain_whole(state, "order")) if whole else None
        if plain is not None:  # nothing cached: the whole window, plainly
            found = plain.found
            return _cached(found, cache.merge(window, None, found.meta, found.raw, plain.ids) or ([], None))
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
    held = build_inputs(meta)
    return wire.ReadReply(meta, pinned, [], known.ordered, cache.touch(window, known)), held
