"""Reads of a window in bounded calls, so that no read script runs long however large the window.

A window whose config keeps it within one page (``max_tokens`` and ``max_items``), or one its
config does not bound that holds little enough (its stored tokens and item count, asked first),
is read whole with plain commands in one MULTI/EXEC (``plain_whole``) when the store's client is not
a cluster's: the server sends what its keys hold, about seven times cheaper than a script
copying the same data through Lua. Builds read the facts of what they can offer instead
(``plans/build_read.py``), and read whole only when those cannot serve.

A read lists ids (in arrival or build order) in pages of at most ``PAGE_IDS`` and returns item
JSON up to ``PAGE_BYTES`` per call; the JSON it could not send is fetched by id afterwards, in
calls of the same size. A small window (the common case) is read in one call.

The result is exact, as one script would have read it: a listing of several pages counts only
when every page saw the same epoch, seq and item count (no item added or removed, none changed in
place, in between), and fetched JSON counts only at the listing's epoch (an item's JSON does not
change within an epoch) and when every item is still there. Otherwise the read starts again; after
``ATTEMPTS`` such races it reads the window in one unbounded call, so a read always ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import stored, wire
from ..core.layout import Meta, meta_text
from ..errors import raise_for_reply
from .base import PlainRead, Plan, ScriptCall, WindowState

#: most ids one call lists
PAGE_IDS = 5000
#: most bytes of item JSON one call returns (at least one item, however large)
PAGE_BYTES = 4 << 20
#: reads started again after the window changed under them, before one unbounded call
ATTEMPTS = 4
#: the most bytes of stored JSON a token may stand for: a window whose ``max_tokens`` times this
#: is within ``PAGE_BYTES`` (and ``max_items`` within ``PAGE_IDS``) is read whole in one call
BYTES_PER_TOKEN = 8


@dataclass(slots=True)
class Listing:
    """What a paged read gathered: the first page's meta and pinned count, the listed ids, the
    JSON read so far (in the order asked for), the ids whose JSON is still to fetch."""

    found: wire.ReadReply
    ids: list[Any]
    deferred: list[Any]


def _plain_fits(state: WindowState) -> bool:
    """Whether the whole window may be read with plain commands in one call: its config keeps
    it within the bounds of one page (``max_tokens`` and ``max_items``; a restore may exceed
    them, which only makes that one reply larger)."""
    cfg = state.config
    small = cfg.max_tokens is not None and cfg.max_tokens * BYTES_PER_TOKEN <= PAGE_BYTES
    return state.plain_reads and small and cfg.max_items <= PAGE_IDS


def plain_ok(state: WindowState) -> Plan[bool]:
    """Whether a whole-window read may be plain commands in one call: the config keeps the window
    within one page (``_plain_fits``, no call), or, for a window its config does not bound (no
    ``max_tokens``: the default), what it holds now is within one page. That costs one plain
    ``HMGET`` of its stored tokens and item count first: a round trip for the client and a few
    µs for the shard, against the ~4 µs per item a script read costs the shard (it copies each
    item through Lua)."""
    if _plain_fits(state):
        return True
    if not state.plain_reads:
        return False
    reply = yield PlainRead((("HMGET", state.keys.meta, Meta.TOKENS, Meta.ITEMS),))
    if reply is None:  # at maxmemory: no plain reads
        return False
    ((tokens, items),) = reply
    if not (wire.text(tokens or b"0").isdigit() and wire.text(items or b"0").isdigit()):
        return False  # corrupt counters: the script's read reports them
    return int(tokens or 0) * BYTES_PER_TOKEN <= PAGE_BYTES and int(items or 0) <= PAGE_IDS


def plain_whole(state: WindowState, mode: str) -> Plan[Listing | None]:
    """The whole window in one MULTI/EXEC of plain commands: the meta and every item's stored
    JSON, attrs and pin, which the client puts together, in arrival (``fifo``) or build order,
    worked out from the attrs (``stored.listing``: what ``:fifo`` and ``:order`` hold, without
    sending either); the server sends what its keys hold and does no per-item work. None when
    the server is at maxmemory (``PlainRead``): read with scripts then."""
    k = state.keys
    commands = (("HGETALL", k.meta), ("HGETALL", k.items), ("HGETALL", k.attrs), ("SMEMBERS", k.pinned))
    reply = yield PlainRead(commands)
    if reply is None:
        return None
    meta, jsons, attrs, pinned = reply
    ids = stored.listing(attrs, jsons, by_seq=mode == "fifo")
    return Listing(_whole_reply(meta, jsons, attrs, pinned, ids), list(ids), [])


def _whole_reply(
    meta: dict[Any, Any], jsons: dict[Any, Any], attrs: dict[Any, Any], pinned: set[Any], ids: list[Any]
) -> wire.ReadReply:
    """A whole-window read as the scripts answer it, from what the keys hold: the meta, and an
    entry ``[id, stored JSON, attrs, pinned]`` per id of ``ids`` (in that order) with JSON."""
    found = wire.ReadReply(meta_text(meta), len(pinned), [])
    found.raw = [[i, jsons[i], attrs.get(i, b""), int(i in pinned)] for i in ids if i in jsons]
    return found


#: the meta fields that change whenever a window's items do (an add, a removal, a change in place)
STAMP = (Meta.EPOCH, Meta.SEQ, Meta.ITEMS)


def raw_stamp(meta: Mapping[Any, Any]) -> tuple[Any, ...]:
    """``stamp`` of a meta hash as Redis sent it (bytes keys and values, not decoded: what an
    ``HMGET`` of the ``STAMP`` fields answers, to compare with)."""
    return tuple(meta.get(f.encode()) for f in STAMP)


def stamp(meta: dict[str, str]) -> tuple[str | None, ...]:
    """What changes whenever a window's items do: a listing is consistent if it stays put."""
    return tuple(meta.get(f) for f in STAMP)


def _list(state: WindowState, head: Sequence[str | bytes], page: int, budget: int) -> Plan[Listing | None]:
    """Every page of one listing of list.lua; None when the window changed between pages."""
    first: Listing | None = None
    start = 0
    while True:
        args = [*head, str(start), str(page), str(budget)]
        reply = raise_for_reply((yield ScriptCall("list", state.keys, args)))
        found = wire.decode_read(reply)
        if first is None:
            if not found.exists:
                return Listing(found, [], [])
            first = Listing(found, list(reply[3]), list(reply[4]))
        elif stamp(found.meta) != stamp(first.found.meta):
            return None
        else:
            first.found.raw.extend(found.raw)
            first.ids.extend(reply[3])
            first.deferred.extend(reply[4])
        start = int(reply[5])
        if start < 0:
            return first


def _fetch(state: WindowState, listing: Listing, budget: int) -> Plan[bool]:
    """The deferred JSON, appended to the listing's; False when an item went or the epoch
    changed since the listing."""
    epoch, raw, todo = listing.found.meta.get(Meta.EPOCH), listing.found.raw, listing.deferred
    while todo:
        args = wire.fetch_args(budget, todo[:PAGE_IDS])
        found = wire.decode_read(raise_for_reply((yield ScriptCall("fetch", state.keys, args))))
        if found.meta.get(Meta.EPOCH) != epoch or any(r is None for r in found.raw):
            return False
        raw.extend(found.raw)
        todo = todo[len(found.raw) :]
    listing.deferred = []
    return True


def read_listing(state: WindowState, head: Sequence[str | bytes], limit: int = -1) -> Plan[Listing]:
    """A whole listing of list.lua with its JSON, in bounded calls (one unbounded call after
    ``ATTEMPTS`` races); ``limit`` cuts a listing of several pages to its last N ids."""
    for attempt in range(ATTEMPTS + 1):
        bounded = attempt < ATTEMPTS
        listing = yield from _list(state, head, PAGE_IDS if bounded else 0, PAGE_BYTES if bounded else 0)
        if listing is None:
            continue
        if limit >= 0 and len(listing.ids) > limit:  # several pages, all of it deferred: cut here
            listing.ids = listing.deferred = listing.ids[len(listing.ids) - limit :]
        if (yield from _fetch(state, listing, PAGE_BYTES)):
            return listing
    raise AssertionError("an unbounded read has no pages to race")  # pragma: no cover


def read(state: WindowState, mode: str, types: str = "", limit: int = -1) -> Plan[wire.ReadReply]:
    """One consistent read of the window, decoded: ``meta`` alone (peek.lua), or the items of a
    listing (list.lua: fifo, order, pinned) filtered by ``types``, the last ``limit`` of them."""
    if mode == "meta":
        return wire.decode_read(raise_for_reply((yield ScriptCall("peek", state.keys, ["meta"]))))
    if mode in ("fifo", "order") and not types and limit < 0 and (yield from plain_ok(state)):
        plain = yield from plain_whole(state, mode)
        if plain is not None:
            return plain.found
    listing = yield from read_listing(state, wire.list_args(mode, types, limit), limit)
    return listing.found


def read_page(state: WindowState, order: str, types: str, first: int, count: int) -> Plan[wire.ReadReply]:
    """The items at places ``first`` .. ``first + count - 1`` of a listing (list.lua: ``order``,
    ``pinned`` or ``fifo``; of them, those of ``types``), with their JSON: the page's ids, then
    their bodies, so the server's work and the bytes it sends follow the page, not the window.
    Read again when an item went between the two calls; after ``ATTEMPTS`` races, the page of a
    whole read."""
    for _ in range(ATTEMPTS):
        args = [*wire.list_args(order, types), str(first), str(count), str(PAGE_BYTES)]
        reply = raise_for_reply((yield ScriptCall("list", state.keys, args)))
        found = wire.decode_read(reply)
        if not found.exists:
            return found
        listing = Listing(found, list(reply[3]), list(reply[4]))
        if (yield from _fetch(state, listing, PAGE_BYTES)):
            return listing.found
    whole = (yield from read_listing(state, wire.list_args(order, types))).found
    whole.raw = whole.raw[first : first + count]
    return whole


def read_after(state: WindowState, types: str, after: int, count: int) -> Plan[tuple[wire.ReadReply, int]]:
    """The items of arrival order with a seq above ``after``, among the next ``count`` (of them,
    those of ``types``), with their JSON, and the seq to continue after (-1 when none are left):
    one page of ``items.iterate``. The page is found by bisection on seq, so the server's work
    follows the page, and a page goes on from where the last one stopped however the window
    changed meanwhile. Read again when an item went between the ids and the JSON; after
    ``ATTEMPTS`` such races, the page's JSON in one call."""
    for attempt in range(ATTEMPTS + 1):
        budget = PAGE_BYTES if attempt < ATTEMPTS else 0
        args = [*wire.list_args("after", types), str(after), str(count), str(budget)]
        reply = raise_for_reply((yield ScriptCall("list", state.keys, args)))
        found = wire.decode_read(reply)
        if not found.exists:
            return found, -1
        listing = Listing(found, list(reply[3]), list(reply[4]))
        if (yield from _fetch(state, listing, PAGE_BYTES)):
            return listing.found, int(reply[5])
    raise AssertionError("a page read in one call has nothing to race")  # pragma: no cover
