"""Plans for items: add and add_many, reads (get, items, ordered_items), remove, pin, priority,
clear."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from .. import logs
from ..core import formats_in, native, parts, toolcalls, validate, wire
from ..core.layout import MAX_ITEM_LIMIT
from ..core.stored import decode_item
from ..errors import (
    ContextWindowFullError,
    InvalidItemError,
    InvalidOptionsError,
    ToolCallLinkError,
    corrupt_value,
    raise_for_reply,
)
from ..types import ContextItem
from . import blobs as blob_plans
from .base import Plan, ScriptCall, Settings, WindowState, new_request
from .compaction import COMPACT_CHUNK, compact_for_add
from .reads import PAGE_IDS, read, read_after, read_page

log = logging.getLogger("contextstore")

#: times an add may ask to compact first (other writers may fill the window again meanwhile);
#: after that it compacts inside its own script, however long that takes
COMPACT_FIRST_ROUNDS = 3


Entry = tuple[object, dict[str, Any]]


def entries(items: object, fmt: object = "openai", model: object = None) -> list[Entry]:
    """``add_many`` input (each a str, a ContextItem or a dict of ``add()`` keywords; or messages
    in a provider's own shape, ``fmt``, from ``model``: ``core.formats_in``) as (content or item,
    keywords) pairs."""
    items = formats_in.entries(items, fmt, model)
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InvalidItemError("add_many() takes a list of str, ContextItem or dict")
    out: list[Entry] = []
    for entry in items:
        if not isinstance(entry, dict):
            out.append((entry, {}))
            continue
        fields = dict(entry)
        validate.known_names("add_many key", map(str, fields), {"content", *validate.ITEM_KEYWORDS})
        if "content" not in fields:
            raise InvalidItemError("an add_many dict needs 'content'")
        out.append((fields.pop("content"), fields))
    return out


def _checked(settings: Settings, batch: Sequence[Entry]) -> list[validate.NewItem]:
    """Every item validated, caller ids unique within the call, token counts filled in."""
    items = [validate.new_item(obj, limits=settings.item_limits(), **kw) for obj, kw in batch]
    seen: set[str] = set()
    for it in items:
        if it.id is not None:
            if it.id in seen:
                raise InvalidItemError(f"item id {it.id!r} appears twice in one call")
            seen.add(it.id)
    _link_results(items)
    for it in items:  # a provider's own parts: what they cost in its format, whatever was given
        if isinstance(it.content, list):
            native.counted(it.content, settings.counter.count)
    todo = [i for i, it in enumerate(items) if it.token_count == 0]
    if todo:
        texts = [parts.counted_text(items[i].content) + toolcalls.calls_text(items[i].metadata) for i in todo]
        for i, n in zip(todo, settings.counter.count_many(texts), strict=True):
            items[i].token_count = max(1, n + parts.media_tokens(items[i].content, settings.counter.count))
    return items


def _link_results(items: list[validate.NewItem]) -> None:
    """A tool result whose call comes in the same call takes (or must match) the call's group;
    the server resolves and checks the others against the calls it holds."""
    groups = {call: it.group for it in items for _, call in it.tool_calls}
    if len(groups) != sum(len(it.tool_calls) for it in items):
        raise ToolCallLinkError("two tool calls of one add_many share an id")
    for it in items:
        if it.tool_call_id is None or it.tool_call_id not in groups:
            continue
        if it.group is None:
            it.group = groups[it.tool_call_id]
        elif it.group != groups[it.tool_call_id]:
            raise InvalidItemError(
                f"tool_result for {it.tool_call_id!r} is in group {it.group!r}, its call in {groups[it.tool_call_id]!r}"
            )


def replace(
    settings: Settings,
    state: WindowState,
    batch: Sequence[Entry],
    last: object = None,
    request_id: object = None,
    expect_ids: object = None,
    expect_version: object = None,
) -> Plan[wire.AddReply]:
    """Replace the newest ``last`` items (None: every item) with ``batch`` in one step (add.lua);
    with ``expect_ids``, only if the newest items are exactly those (``VersionConflictError``)."""
    if expect_ids is not None:
        ids = validate.id_list("expect_ids", expect_ids)
        if last is not None and last != len(ids):
            raise InvalidOptionsError(f"last={last!r} but expect_ids names {len(ids)} items")
        what = "=" + " ".join(ids)
    else:
        what = "all" if last is None else str(validate.int_in("last", last, 1, MAX_ITEM_LIMIT))
    return (yield from add(settings, state, batch, request_id, what, expect_version))


def add(
    settings: Settings,
    state: WindowState,
    batch: Sequence[Entry],
    request_id: object = None,
    replacing: str = "",
    expect_version: object = None,
    turn: str = "",
) -> Plan[wire.AddReply]:
    """Add items all-or-nothing (add.lua): evict at ``max_items``, compact at the threshold,
    or raise ``ContextWindowFullError`` with the window unchanged. With ``expect_version``,
    only while the window's version is that one (``VersionConflictError``); ``turn``: the
    turn's condition (``contextstore.turns``). An unconditional add whose compaction is larger
    than ``COMPACT_CHUNK`` items runs it first, in parts, when it is sure to fit after it; a
    conditional one compacts inside its own script, so that its failure changes nothing (parts
    would be applied before its condition is checked the last time)."""
    request = new_request("replace" if replacing else "add", request_id)
    version = validate.version("expect_version", expect_version)
    conditions = " ".join(c for c in ("" if version is None else f"v={version}", turn) if c)
    items, payloads = blob_plans.stored_parts(settings, _checked(settings, batch))
    yield from blob_plans.put(settings, state, payloads)
    runs, trigger, freed = 0, 0, 0
    for round in range(COMPACT_FIRST_ROUNDS + 1):
        defer = COMPACT_CHUNK if round < COMPACT_FIRST_ROUNDS and not conditions else 0
        args = wire.add_args(state.config, items, settings.placeholder_tokens, replacing, defer, conditions)
        got = yield from _add_call(state, args, request)
        if isinstance(got, wire.AddReply):
            break
        ran, more = yield from compact_for_add(settings, state, got)
        runs, trigger, freed = runs + ran, trigger or got.tokens, freed + more
    if not isinstance(got, wire.AddReply):  # pragma: no cover - the last round never asks
        raise AssertionError("add.lua asked to compact first although told not to")
    reply = got
    if runs:
        reply.compactions, reply.trigger, reply.freed = reply.compactions + runs, trigger, reply.freed + freed
    yield from blob_plans.noted(settings, state, payloads)
    if log.isEnabledFor(logging.DEBUG):
        for item in reply.items:
            logs.item_added(state.window_id, item)
    if reply.compactions:
        limit = state.config.max_tokens or 0
        logs.compaction_triggered(state.window_id, reply.trigger * 100.0 / limit if limit else 0.0)
        strategy = state.config.default_strategy
        logs.compacted(state.window_id, strategy.value if strategy.server_side else "remove_low_priority", reply.freed)
    return reply


def _add_call(state: WindowState, args: wire.Args, request: str) -> Plan[wire.AddReply | wire.CompactFirst]:
    """One add.lua call, decoded; a FULL answer is logged and raised."""
    try:
        return wire.decode_add(raise_for_reply((yield ScriptCall("add", state.keys, args, request))))
    except ContextWindowFullError as full:
        logs.window_full(state.window_id, full.current, full.max, full.requested)
        raise


def get(state: WindowState, item_id: object) -> Plan[ContextItem | None]:
    """One item by id, or None."""
    args = wire.fetch_args(0, [validate.item_id(item_id)])
    found = wire.decode_read(raise_for_reply((yield ScriptCall("fetch", state.keys, args))))
    return found.items()[0] if found.raw and found.raw[0] else None  # false: no such item


def items(state: WindowState, types: object = None, limit: object = None) -> Plan[list[ContextItem]]:
    """Items in arrival order, filtered by type; ``limit`` keeps the most recent N."""
    wanted, most = validate.item_types(types), validate.limit(limit)
    if most == 0 or wanted is None:
        return []
    found = yield from read(state, "fifo", wanted, most)
    return found.items()


#: items per page of ``iterate`` unless the caller says
ITERATE_PAGE = 500


def check_iteration(types: object, page_size: object) -> tuple[str | None, int]:
    """``iterate``'s arguments checked (before the first page is read): the types wanted (None:
    a filter nothing passes) and the page size."""
    return validate.item_types(types), validate.int_in("page_size", page_size, 1, PAGE_IDS)


def iterate(state: WindowState, types: str | None, after: int, page_size: int) -> Plan[tuple[list[ContextItem], int]]:
    """One page of ``iter_items``: the items with a seq above ``after`` among the next
    ``page_size`` of arrival order (of them, those of ``types``; None: a filter nothing passes,
    no call), and the seq the next page starts after (-1: this was the last)."""
    if types is None:
        return [], -1
    found, cursor = yield from read_after(state, types, after, page_size)
    if 0 <= cursor <= after:  # :fifo out of seq order: the next page would start here again
        raise corrupt_value(state.keys.fifo, "", "ids out of seq order")
    return found.items(), cursor


def ordered_items(
    state: WindowState, types: object = None, pinned_only: bool = False, offset: object = 0, limit: object = None
) -> Plan[list[ContextItem]]:
    """Items in build order (type rank, priority desc, arrival); only pinned ones if asked.
    ``offset`` / ``limit``: only the places ``offset`` .. ``offset + limit - 1`` of the build order
    (of them, the items of ``types``), read alone (``reads.read_page``)."""
    wanted, first, most = validate.item_types(types), validate.int_in("offset", offset, 0), validate.limit(limit)
    if wanted is None or most == 0:
        return []
    order = "pinned" if pinned_only else "order"
    if first == 0 and most < 0:
        found = yield from read(state, order, wanted)
    else:
        found = yield from read_page(state, order, wanted, first, most if most >= 0 else MAX_ITEM_LIMIT)
    return found.items()


def remove(state: WindowState, item_id: object, request_id: object = None) -> Plan[bool]:
    """Remove one item; False if it is absent."""
    request = new_request("remove", request_id)
    args = wire.one_item_args(validate.item_id(item_id))
    removed = bool(raise_for_reply((yield ScriptCall("remove", state.keys, args, request))))
    if removed:
        logs.item_removed(state.window_id, str(item_id), "manual")
    return removed


def pop(state: WindowState, count: object = 1, request_id: object = None) -> Plan[list[ContextItem]]:
    """Remove and return the ``count`` newest items (arrival order), newest first."""
    n = validate.int_in("count", count, 1, MAX_ITEM_LIMIT)
    request = new_request("pop", request_id)
    raw = raise_for_reply((yield ScriptCall("pop", state.keys, wire.one_item_args(str(n)), request)))
    popped = [decode_item(j) for j in raw]
    for item in popped:
        logs.item_removed(state.window_id, item.id or "", "manual")
    return popped


def set_pinned(state: WindowState, item_id: object, pinned: bool, request_id: object = None) -> Plan[bool]:
    """Pin or unpin one item; False if it is absent."""
    request = new_request("pin" if pinned else "unpin", request_id)
    args = wire.one_item_args(validate.item_id(item_id), "1" if pinned else "0")
    return bool(raise_for_reply((yield ScriptCall("pin", state.keys, args, request))))


def update_priority(state: WindowState, item_id: object, priority: object, request_id: object = None) -> Plan[bool]:
    """Change one item's priority (and its place in build order); False if it is absent."""
    request = new_request("priority", request_id)
    value = validate.priority(priority)
    args = wire.one_item_args(validate.item_id(item_id), str(value))
    return bool(raise_for_reply((yield ScriptCall("priority", state.keys, args, request))))


def clear(state: WindowState, include_pinned: object = False, request_id: object = None) -> Plan[int]:
    """Remove every unpinned item (every item with ``include_pinned``); returns how many."""
    request = new_request("clear", request_id)
    if not isinstance(include_pinned, bool):
        raise InvalidOptionsError("include_pinned must be a bool")
    args = wire.clear_args(include_pinned)
    return int(raise_for_reply((yield ScriptCall("clear", state.keys, args, request))))
