"""Plans for the blobs of content parts (§18, ``core/blobs.py``): storing them before the add
that refers to them, checking after it that they are still there, and sweeping away those no
window refers to any more."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from ..core import blobs
from ..core.keys import window_keys
from ..core.validate import NewItem
from .base import PlainRead, Plan, ScriptCall, Settings, WindowState


def put(settings: Settings, state: WindowState, payloads: Mapping[str, str]) -> Plan[None]:
    """Store each blob for ``state``'s window (blob_put.lua, one call each), before the add
    that refers to them: a sweep leaves them ``GRACE_MS`` for it. A blob this store has stored
    or read before is likely there still: only its sha goes first, its payload only if it is
    not (a screenshot seen again costs the network ~100 bytes, not its size)."""
    scope = blobs.scope_of(state.window_id)
    for sha, payload in payloads.items():
        keys = blobs.blob_keys(settings.prefix, scope, sha)
        known = sha in settings.blob_cache
        if not known or not int((yield ScriptCall("blob_put", keys, [sha, "", state.window_id]))):
            yield ScriptCall("blob_put", keys, [sha, payload, state.window_id])
        settings.blob_cache.put(sha, payload)


def noted(settings: Settings, state: WindowState, payloads: Mapping[str, str]) -> Plan[None]:
    """After the add that refers to them: note each blob stored again now, and store again one a
    sweep took before the add ran (it was slower than ``GRACE_MS``), so that no acknowledged
    item refers to a missing blob."""
    scope = blobs.scope_of(state.window_id)
    for sha, payload in payloads.items():
        keys = blobs.blob_keys(settings.prefix, scope, sha)
        if not int((yield ScriptCall("blob_put", keys, [sha, "", state.window_id]))):
            yield ScriptCall("blob_put", keys, [sha, payload, state.window_id])


def stored_parts(settings: Settings, items: list[NewItem]) -> tuple[list[NewItem], dict[str, str]]:
    """``items`` as stored (their large payloads replaced by blob tokens: ``blobs.split``) and
    those payloads, by sha."""
    out, payloads = [], {}
    for item in items:
        content, found = blobs.split(item.content, settings.blob_threshold)
        out.append(msgspec.structs.replace(item, content=content) if found else item)
        payloads.update(found)
    return out, payloads


def sweep(settings: Settings, scope: str) -> Plan[int]:
    """One sweep of ``scope``'s blobs (``blobs.scope_of``), slot by slot: each blob stored more than ``GRACE_MS``
    ago that none of its holders counts any more is dropped (blob_drop.lua, which does nothing
    when the blob was stored again since the sweep read it); the holders that stopped counting
    it leave its entry. How many blobs were dropped."""
    dropped = 0
    for group in blobs.groups(scope):
        index = blobs.group_tag(settings.prefix, scope, group) + "index"
        cursor = "0"
        while True:
            now, cursor, flat = yield ScriptCall("blob_index", (index,), [cursor, str(blobs.SWEEP_BATCH)])
            entries = {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)}
            dropped += yield from _sweep_entries(settings, scope, int(_text(now)), entries)
            cursor = _text(cursor)
            if cursor == "0":
                break
    return dropped


def _sweep_entries(settings: Settings, scope: str, now_ms: int, entries: dict[str, str]) -> Plan[int]:
    """Sweep one page of a slot's index (sha -> "<ms stored> <holder> ...")."""
    old = {sha: e.split() for sha, e in entries.items() if e.split() and int(e.split()[0]) < now_ms - blobs.GRACE_MS}
    by_holder: dict[str, list[str]] = {}
    for sha, words in old.items():
        for holder in words[1:]:
            by_holder.setdefault(holder, []).append(sha)
    counted: set[tuple[str, str]] = set()
    for holder, shas in by_holder.items():
        got = yield ScriptCall("blob_counts", window_keys(settings.prefix, holder), shas)
        counted.update((holder, sha) for sha, n in zip(shas, got, strict=True) if n is not None and int(n) > 0)
    dropped = 0
    for sha, words in old.items():
        gone = [h for h in words[1:] if (h, sha) not in counted]
        if gone:
            blob = blobs.blob_keys(settings.prefix, scope, sha)
            dropped += int((yield ScriptCall("blob_drop", blob, [sha, entries[sha], *gone])))
    return dropped


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def moved_to_tenants(settings: Settings) -> Plan[int]:
    """Move the blobs that windows of a tenant (an id with a ``:``) stored in the prefix's shared
    keys, where blobs lay before they had scopes, into each such window's scope; a shared blob
    left with no other holder is dropped. An operator's step, run once after the upgrade (it
    reads the shared keys: a tenant's user may not). How many blobs were copied into a scope."""
    moved = 0
    for group in blobs.GROUPS:
        index, cursor = blobs.group_tag(settings.prefix, "", group) + "index", "0"
        while True:
            _, cursor, flat = yield ScriptCall("blob_index", (index,), [cursor, str(blobs.SWEEP_BATCH)])
            for i in range(0, len(flat), 2):
                moved += yield from _moved(settings, _text(flat[i]), _text(flat[i + 1]))
            if (cursor := _text(cursor)) == "0":
                break
    return moved


def _moved(settings: Settings, sha: str, entry: str) -> Plan[int]:
    """Copy shared blob ``sha`` (index ``entry``) into the scope of each of its holders that has
    one, then take those holders off the shared entry."""
    shared = blobs.blob_keys(settings.prefix, "", sha)
    scoped = [h for h in entry.split()[1:] if blobs.scope_of(h)]
    if not scoped:
        return 0
    [raw] = yield PlainRead((("GET", shared.data),))
    payload = blobs.checked_payload(shared.data, sha, raw)
    for holder in scoped:
        scoped_keys = blobs.blob_keys(settings.prefix, blobs.scope_of(holder), sha)
        yield ScriptCall("blob_put", scoped_keys, [sha, payload, holder])
    yield ScriptCall("blob_drop", shared, [sha, entry, *scoped])
    return len(scoped)
