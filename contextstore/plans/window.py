"""Plans for a window as a whole: attach (and create), configure, stats, verify, delete."""

from __future__ import annotations

from typing import Any

import msgspec

from .. import logs
from ..core import blobs, wire
from ..core.config import config_values, creation_config
from ..core.keys import prefix_of, validate_window_id, window_keys
from ..core.layout import Meta, calibrated, calibration_of, window_version
from ..core.validate import flag
from ..core.verify import VerifyReport, inspect_window, referenced_blobs
from ..errors import ConfigConflictError, InvalidOptionsError, WindowNotFoundError, raise_for_reply
from ..types import ContextWindowStats, ItemType, WindowConfig
from .base import PlainRead, Plan, ScriptCall, Settings, WindowState, new_request
from .reads import ATTEMPTS, raw_stamp, read
from .usage import totals_of


def open_window(
    settings: Settings, window_id: object, passed: dict[str, Any], create: object = True
) -> Plan[WindowState]:
    """Attach to a window: create it with ``passed`` if it is missing (``create=True``), else
    raise ``WindowNotFoundError``; a passed value that differs from the stored config raises
    ``ConfigConflictError``. ``None`` counts as not passed."""
    create = flag("create", create)
    state = handle_state(settings, window_id, passed)
    wid = state.window_id
    values = config_values({k: v for k, v in passed.items() if v is not None}, settings.item_limit)
    if create:
        reply = raise_for_reply(
            (yield ScriptCall("ensure", state.keys, wire.config_args(state.config))), InvalidOptionsError
        )
        stored = wire.config_from(reply[1:])
        if int(reply[0]):
            logs.initialized(wid, stored.max_tokens)
    else:
        found = yield from read(state, "meta")
        if not found.exists:
            raise WindowNotFoundError(wid)
        stored = found.config(state.config)
    conflicts = {k: (v, getattr(stored, k)) for k, v in values.passed().items() if getattr(stored, k) != v}
    if conflicts:
        raise ConfigConflictError(wid, conflicts)
    state.config = stored
    return state


def handle_state(settings: Settings, window_id: object, passed: dict[str, Any]) -> WindowState:
    """A window's state from the caller's config alone, with no I/O (``store.handle()``): the
    first mutation creates the window with it; nothing is compared with a stored config."""
    wid = validate_window_id(window_id)
    values = config_values({k: v for k, v in passed.items() if v is not None}, settings.item_limit)
    keys, config = window_keys(settings.prefix, wid), creation_config(values, settings.item_limit)
    return WindowState(wid, keys, config, settings.plain_reads)


def configure(state: WindowState, changes: dict[str, Any], request_id: object = None) -> Plan[WindowConfig]:
    """Change the stored config for every worker, atomically; returns the config after it.
    ``max_tokens=None`` removes the token limit, ``ttl_seconds=None`` the expiry."""
    request = new_request("configure", request_id)
    if "max_items" in changes and changes["max_items"] is None:
        raise InvalidOptionsError("max_items cannot be None in configure()")
    values = config_values(changes, state.config.item_limit).passed()
    args = wire.configure_args(state.config, values)
    reply = raise_for_reply((yield ScriptCall("configure", state.keys, args, request)), InvalidOptionsError)
    state.config = wire.config_from(reply)
    return state.config


def delete(state: WindowState, request_id: object = None) -> Plan[bool]:
    """Delete every key of the window (its request log stays, so a retried delete answers True)."""
    return bool((yield ScriptCall("delete", state.keys, [], new_request("delete", request_id))))


def _by_type(meta: dict[str, str], prefix: str) -> dict[ItemType, int]:
    return {ItemType(k[len(prefix) :]): int(v) for k, v in meta.items() if k.startswith(prefix) and int(v)}


def stats(state: WindowState) -> Plan[ContextWindowStats]:
    """The window's counters, read in O(1) from what the scripts maintain."""
    found = yield from read(state, "meta")
    cfg = found.config(state.config)
    tokens = found.counter(Meta.TOKENS)
    limit, calibration = cfg.max_tokens, calibration_of(found.meta)
    within = None if limit is None else calibrated(limit, calibration)
    return ContextWindowStats(
        window_id=state.window_id,
        total_items=found.counter(Meta.ITEMS),
        pinned_items=found.pinned,
        current_tokens=tokens,
        max_tokens=limit,
        max_items=cfg.max_items,
        available_tokens=None if within is None else max(0, within - tokens),
        usage_percent=0.0 if not within else tokens * 100.0 / within,
        compaction_threshold=cfg.compaction_threshold,
        default_strategy=cfg.default_strategy,
        items_by_type=_by_type(found.meta, Meta.ITEMS_OF),
        tokens_by_type=_by_type(found.meta, Meta.TOKENS_OF),
        compaction_count=found.counter(Meta.COMPACTIONS),
        total_tokens_freed=found.counter(Meta.FREED),
        version=window_version(found.meta),
        usage=totals_of(found.meta),
        token_calibration=calibration,
    )


#: entries per call of a paged verify read (dump.lua's parts): a few ms of the shard each
VERIFY_PAGE = 1000
#: most blobs one of verify's reads of blobs takes (their payloads may be large)
BLOBS_PER_READ = 16
#: where each paged key's entries go in dump.lua's whole reply (and its scores, for :attrs)
_PARTS = {"items": 2, "fifo": 3, "order": 4, "pinned": 5, "attrs": 6, "sizes": 16}


def verify(state: WindowState) -> Plan[VerifyReport]:
    """Read every key of the window as the server holds it (no cache) and report each broken
    invariant: the small keys in one call, the six that grow with the window in pages
    (``_paged_dump``), so no call holds the shard long; read again when the window changed
    between the calls, and after ``ATTEMPTS`` such races in one call. Each blob its items refer
    to is read from the server and checked against its sha (``_blobs_read``); the items are
    checked with the payloads that are sound put back."""
    for _ in range(ATTEMPTS):
        reply = yield from _paged_dump(state)
        if reply is not None:
            break
    else:
        reply = raise_for_reply((yield ScriptCall("dump", state.keys, [], inline=False)))
    payloads, found = yield from _blobs_read(state, referenced_blobs(reply))
    report = inspect_window(state.window_id, blobs.inlined(reply, payloads) if payloads else reply)
    return msgspec.structs.replace(report, problems=[*report.problems, *found]) if found else report


def _blobs_read(state: WindowState, shas: list[str]) -> Plan[tuple[dict[str, str], list[str]]]:
    """The payloads of the blobs of ``shas`` that are sound as the server holds them, and what is
    wrong with the others; read in calls of at most ``BLOBS_PER_READ`` blobs of one slot."""
    scope, prefix = blobs.scope_of(state.window_id), prefix_of(state.keys)
    by_slot: dict[str, list[str]] = {}
    for sha in shas:
        by_slot.setdefault(blobs.blob_keys(prefix, scope, sha).registry, []).append(sha)
    payloads: dict[str, str] = {}
    found: list[str] = []
    for group in by_slot.values():
        for at in range(0, len(group), BLOBS_PER_READ):
            part = group[at : at + BLOBS_PER_READ]
            keys = [blobs.blob_keys(prefix, scope, sha).data for sha in part]
            sound, said = blobs.checked_blobs(keys, part, (yield PlainRead(tuple(("GET", key) for key in keys))))
            payloads.update(sound)
            found += said
    return payloads, found


def _paged_dump(state: WindowState) -> Plan[list[Any] | None]:
    """dump.lua's whole reply put together from its head and the pages of each large key; None
    when a page's stamp (epoch, seq, item count) is not the first page's: the window changed."""
    reply = list(raise_for_reply((yield ScriptCall("dump", state.keys, ["head"], inline=False))))
    head = raw_stamp(dict(zip(reply[0][::2], reply[0][1::2], strict=True)))
    for name, at in _PARTS.items():
        entries, cursor = [], "0"
        while True:
            page = raise_for_reply(
                (yield ScriptCall("dump", state.keys, [name, cursor, str(VERIFY_PAGE)], inline=False))
            )
            if tuple(page[0]) != head:
                return None
            entries += page[2]
            if name == "attrs":
                reply[7] = [*reply[7], *page[3]]
            cursor = wire.text(page[1])
            if cursor == "0":
                break
        reply[at] = entries
    return reply
