"""Plans for snapshots: one consistent read of config and items, and an atomic restore into
any window id."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Protocol

import msgspec

from ..core import blobs, jsontext, validate, wire
from ..core.config import config_values, creation_config
from ..core.keys import STAGED, staged_keys
from ..core.layout import MAX_SEQ
from ..core.stored import stored_json
from ..errors import InvalidItemError, InvalidOptionsError, ToolCallLinkError, is_error, raise_for_reply
from ..types import ArchivedSummary, ContextItem, ContextSnapshot, WindowConfig
from . import blobs as blob_plans
from .base import Plan, ScriptCall, Settings, WindowState, new_request
from .reads import ATTEMPTS, read, read_after, stamp

SNAPSHOT_FORMAT = 1


def snapshot(state: WindowState) -> Plan[ContextSnapshot]:
    """The window's config and items (arrival order, with ids, seq, added_at, pins), and the
    archive entries of the summaries among them."""
    found = yield from read(state, "fifo")
    return (yield from snapshot_from(state, found, found.items()))


def snapshot_from(state: WindowState, found: wire.ReadReply, items: list[ContextItem]) -> Plan[ContextSnapshot]:
    """A snapshot of ``items`` (of the read ``found``, arrival order) with the archive entries of
    the summaries among them."""
    archive = yield from _archive(state, {i.id or "" for i in items})
    return _snapshot_of(state, found.config(state.config), items, archive)


def _snapshot_of(
    state: WindowState, cfg: WindowConfig, items: list[ContextItem], archive: list[ArchivedSummary]
) -> ContextSnapshot:
    return ContextSnapshot(
        format_version=SNAPSHOT_FORMAT,
        window_id=state.window_id,
        created_at=datetime.now(UTC),
        max_tokens=cfg.max_tokens,
        max_items=cfg.max_items,
        compaction_threshold=cfg.compaction_threshold,
        default_strategy=cfg.default_strategy,
        ttl_seconds=cfg.ttl_seconds,
        items=items,
        keep_recent=cfg.keep_recent,
        clear_at_least=cfg.clear_at_least,
        clear_exclude_tools=list(cfg.clear_exclude_tools),
        warn_percent=cfg.warn_percent,
        events_maxlen=cfg.events_maxlen,
        archive_ttl_seconds=cfg.archive_ttl_seconds,
        archive=archive,
        compaction_target=cfg.compaction_target,
    )


class SnapshotSink(Protocol):
    """Where ``write_snapshot`` writes: bytes in order, and back to the start (a file)."""

    def write(self, data: bytes) -> object:
        """Append ``data``."""

    def restart(self) -> None:
        """Drop everything written so far."""


#: items per page of ``write_snapshot``
EXPORT_PAGE = 500
#: where a snapshot's JSON holds its items (``msgspec`` encodes the fields in order, and no
#: value before ``items`` can hold this text: the window id's alphabet has no quote)
_ITEMS = b'"items":[]'


def write_snapshot(state: WindowState, sink: SnapshotSink) -> Plan[int]:
    """``snapshot()``'s JSON (``jsontext.encode``: the escaping rule of every JSON the project
    writes, so a file's bytes never drive a terminal), written to ``sink`` a page of items at a
    time, so a window of any size is written in bounded memory; returns how many items. The pages
    count when each saw the (epoch, seq, item count) of the window's meta read first, else the
    sink starts again; after ``ATTEMPTS`` such races, the snapshot is read whole and written."""
    for attempt in range(ATTEMPTS):
        if attempt:
            sink.restart()
        head = wire.decode_read(raise_for_reply((yield ScriptCall("peek", state.keys, ["meta"]))))
        base = _snapshot_of(state, head.config(state.config), [], [])
        sink.write(jsontext.encode(base).partition(_ITEMS)[0] + b'"items":[')
        ids: set[str] = set()
        after = 0
        while after >= 0:
            found, after = yield from read_after(state, "", after, EXPORT_PAGE)
            if stamp(found.meta) != stamp(head.meta):
                break
            for item in found.items():
                sink.write((b"," if ids else b"") + jsontext.encode(item))
                ids.add(item.id or "")
        else:
            archive = yield from _archive(state, ids)
            sink.write(b"]" + jsontext.encode(msgspec.structs.replace(base, archive=archive)).partition(_ITEMS)[2])
            return len(ids)
    sink.restart()
    whole = yield from snapshot(state)
    sink.write(jsontext.encode(whole))
    return len(whole.items)


def _archive(state: WindowState, ids: set[str]) -> Plan[list[ArchivedSummary]]:
    """The unexpired archive entries of the summaries among the items ``ids`` (one call for the
    index, one per entry). An entry whose summary is not among them, or whose items are (a
    summary or its undo raced the read), is left out: the snapshot holds what the window held at
    its read."""
    index = wire.decode_read(raise_for_reply((yield ScriptCall("archived", state.keys, wire.archived_args()))))
    out = []
    for pair in index.raw:
        summary_id, _, ms = wire.text(pair).rpartition("=")
        if summary_id not in ids:
            continue
        reply = yield ScriptCall("archived", state.keys, wire.archived_args(summary_id))
        replaced = wire.decode_read(raise_for_reply(reply)).items()
        if replaced and not any(i.id in ids for i in replaced):
            expires = datetime.fromtimestamp(int(ms) / 1000, UTC)
            out.append(ArchivedSummary(summary_id=summary_id, expires_at=expires, items=replaced))
    return out


def _snapshot_config(snap: ContextSnapshot, item_limit: int) -> WindowConfig:
    given = {
        "max_tokens": snap.max_tokens,
        "max_items": snap.max_items,
        "compaction_threshold": snap.compaction_threshold,
        "default_strategy": snap.default_strategy,
        "ttl_seconds": snap.ttl_seconds,
        "keep_recent": snap.keep_recent,
        "clear_at_least": snap.clear_at_least,
        "clear_exclude_tools": list(snap.clear_exclude_tools),
        "warn_percent": snap.warn_percent,
        "events_maxlen": snap.events_maxlen,
        "archive_ttl_seconds": snap.archive_ttl_seconds,
        "compaction_target": snap.compaction_target,
    }
    values = config_values(given, item_limit)
    if values.max_items is None:
        raise InvalidOptionsError("snapshot max_items must be set")
    return creation_config(values, item_limit)


Row = tuple[ContextItem, bytes, validate.NewItem]


#: an id the store gives: ``ctx-<seq>`` (an item), ``ctx-<seq>.<n>`` (a summary, with the seq of
#: the oldest item it replaced)
_GIVEN_ID = re.compile(r"ctx-(\d+)(\.\d+)?")


def _restored_id(item_id: object, seq: int) -> str:
    """A snapshot item's id: one the store gives, naming the item's own seq, or a caller's id
    as an add takes it (``InvalidItemError``)."""
    given = _GIVEN_ID.fullmatch(item_id) if isinstance(item_id, str) else None
    if given is None:
        return validate.caller_id(item_id)
    if int(given.group(1)) != seq:
        raise InvalidItemError(f"snapshot item {item_id!r} has seq {seq}: an id the store gives names its seq")
    return str(item_id)


def _restored_item(settings: Settings, it: ContextItem, payloads: dict[str, str]) -> Row:
    """A snapshot item checked like an add, its stored JSON, and its checked form; the payloads
    of its blobs go into ``payloads`` (by sha)."""
    validate.int_in(f"the seq of snapshot item {it.id!r}", it.seq, 1, MAX_SEQ, InvalidItemError)
    _restored_id(it.id, it.seq)
    norm = validate.new_item(
        it.content,
        limits=settings.item_limits(),
        type=it.type,
        priority=it.priority,
        pinned=it.pinned,
        role=it.role,
        source_ref=it.source_ref,
        metadata=it.metadata,
        token_count=it.token_count,
        group=it.group,
        restoring=True,
    )
    full = ContextItem(
        content=it.content,
        type=norm.type,
        priority=norm.priority,
        token_count=norm.token_count,
        pinned=it.pinned,
        role=it.role,
        source_ref=it.source_ref,
        metadata=norm.metadata,
        id=it.id,
        added_at=it.added_at,
        seq=it.seq,
        group=norm.group,
    )
    stored, found = blobs.split(full.content, settings.blob_threshold)
    payloads.update(found)
    return (
        full,
        stored_json(msgspec.structs.replace(full, content=stored) if stored is not full.content else full),
        norm,
    )


def _write(
    state: WindowState,
    request: str,
    rows: list[Row],
    configs: wire.Args,
    archive: list[wire.ArchiveEntry],
    fork: wire.Args,
) -> Plan[None]:
    """Write a restore: its items ``wire.ROWS_A_CALL`` at a time, all but the last part staged
    (stage.lua, in keys named after the request: a retry resumes its staging), then restore.lua,
    which moves what was staged into the window with the last part, in one step."""
    parts = [rows[i : i + wire.ROWS_A_CALL] for i in range(0, len(rows), wire.ROWS_A_CALL)] or [[]]
    staging = staged_keys(state.keys, hashlib.sha1(request.encode()).hexdigest()[:16])
    for done, part in enumerate(parts[:-1]):
        reply = yield ScriptCall("stage", staging, wire.stage_args(done * wire.ROWS_A_CALL, part))
        raise_for_reply(reply, InvalidOptionsError)
    staged = len(rows) - len(parts[-1])
    args = [*configs, *wire.restore_args(parts[-1], archive, staged), *fork]
    keys = (*state.keys, *(getattr(staging, name) for name in STAGED)) if staged else state.keys
    reply = yield ScriptCall("restore", keys, args, request)
    if staged and is_error(reply):
        yield ScriptCall("stage", staging, ["drop"])
    raise_for_reply(reply, InvalidOptionsError)


def _restored_items(settings: Settings, snap: ContextSnapshot, item_limit: int, payloads: dict[str, str]) -> list[Row]:
    if not isinstance(snap.items, list) or not all(isinstance(i, ContextItem) for i in snap.items):
        raise InvalidItemError("snapshot items must be a list of ContextItem")
    if len(snap.items) > item_limit:
        raise InvalidOptionsError(f"snapshot holds {len(snap.items)} items; item_limit is {item_limit}")
    rows = [_restored_item(settings, it, payloads) for it in snap.items]
    rows.sort(key=lambda row: row[0].seq)
    ids, seqs = {r[0].id for r in rows}, {r[0].seq for r in rows}
    if len(ids) != len(rows) or len(seqs) != len(rows):
        raise InvalidItemError("snapshot repeats an item id or a seq")
    _check_tool_links([r[2] for r in rows])
    return rows


def _check_tool_links(items: list[validate.NewItem]) -> None:
    """The tool calls and results of a snapshot's items link as an add links them: every call id
    once, every result answering a call among them, in its call's group (``ToolCallLinkError``)."""
    calls: dict[str, str | None] = {}
    for item in items:
        for _, call_id in item.tool_calls:
            if call_id in calls:
                raise ToolCallLinkError(f"snapshot tool call id {call_id!r} appears twice")
            calls[call_id] = item.group
    for item in items:
        answered = item.tool_call_id
        if answered is None:
            continue
        if answered not in calls:
            raise ToolCallLinkError(f"snapshot tool_result answers tool call {answered!r}, which it does not hold")
        if item.group != calls[answered]:
            raise ToolCallLinkError(f"snapshot tool_result for {answered!r} is in another group than its call")


def _restored_archive(
    settings: Settings, snap: ContextSnapshot, rows: list[Row], payloads: dict[str, str]
) -> list[wire.ArchiveEntry]:
    """The snapshot's archive entries, each item checked like a restored one; an entry names a
    summary among the snapshot's items and none of its items is one of them."""
    if not isinstance(snap.archive, list) or not all(isinstance(a, ArchivedSummary) for a in snap.archive):
        raise InvalidOptionsError("snapshot archive must be a list of ArchivedSummary")
    ids = {r[0].id for r in rows}
    entries: list[wire.ArchiveEntry] = []
    for entry in snap.archive:
        if entry.summary_id not in ids or not entry.items:
            raise InvalidOptionsError(f"snapshot archive entry {entry.summary_id!r} names no summary of the snapshot")
        if not isinstance(entry.expires_at, datetime) or entry.expires_at.tzinfo is None:
            raise InvalidOptionsError(f"snapshot archive entry {entry.summary_id!r} needs an aware expires_at")
        replaced = [_restored_item(settings, it, payloads) for it in entry.items]
        if any(r[0].id in ids for r in replaced):
            raise InvalidItemError(f"snapshot archive entry {entry.summary_id!r} holds an item the window holds")
        _check_tool_links([r[2] for r in replaced])
        entries.append((entry.summary_id, int(entry.expires_at.timestamp() * 1000), replaced))
    return entries


def restore(
    settings: Settings,
    state: WindowState,
    snap: object,
    request_id: object = None,
    dry_run: object = False,
    fork: tuple[str, str] | None = None,
) -> Plan[None]:
    """Replace the window's items and config with the snapshot's, atomically, keeping ids,
    order and a seq counter ahead of every restored seq; limits are not re-applied. Every item
    is checked as an add checks it (and its id against its seq, its tool links against the
    others') before anything is sent; ``dry_run`` stops there. The snapshot's archive entries
    come back with their expiry; those whose expiry passed (by the server's clock) are dropped,
    so ``undo_summary`` refuses them as if they had expired here. ``fork``: (the window it is
    made from, the item it is made at): the window is a new fork, refused if it exists
    (``plans/fork.py``)."""
    request = new_request("restore", request_id)
    dry = validate.flag("dry_run", dry_run)
    if not isinstance(snap, ContextSnapshot):
        raise InvalidOptionsError(f"restore() takes a ContextSnapshot, not {type(snap).__name__}")
    if snap.format_version != SNAPSHOT_FORMAT:
        raise InvalidOptionsError(f"unsupported snapshot format_version {snap.format_version!r}")
    target = _snapshot_config(snap, state.config.item_limit)
    payloads: dict[str, str] = {}
    rows = _restored_items(settings, snap, state.config.item_limit, payloads)
    archive = _restored_archive(settings, snap, rows, payloads)
    if dry:
        return None
    yield from blob_plans.put(settings, state, payloads)
    args = [*wire.config_args(state.config), *wire.config_args(target)]
    yield from _write(state, request, rows, args, archive, ["fork", *fork] if fork is not None else [])
    yield from blob_plans.noted(settings, state, payloads)
    state.config = target
    return None
