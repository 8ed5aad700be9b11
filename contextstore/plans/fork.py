"""Plans for forks (§19): a new window holding a window's items up to one of them (or as they were
at one of its versions), made by restore.lua as a new window that keeps its lineage; then the
window it came from notes the fork (forked.lua). And ``lineage()``."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from ..core.layout import Meta, window_version
from ..errors import InvalidOptionsError, WindowNotFoundError, raise_for_reply
from ..types import ContextItem, Lineage
from .base import Plan, ScriptCall, Settings, WindowState, new_request
from .reads import read
from .snapshot import restore, snapshot_from
from .window import handle_state


def fork(settings: Settings, state: WindowState, new_id: object, at: object = None) -> Plan[WindowState]:
    """Make window ``new_id`` with this window's items up to and including item ``at``, or as
    they were at version ``at`` (those still in the window), or all of them (None): every field
    of each item, the summaries' archive and the config as here; this window is not changed.
    The new window is written in one step (complete when it appears), then this one notes it.
    ``InvalidOptionsError`` with nothing written when ``new_id`` exists, ``at`` is neither an item
    nor a version of this window, or ``at`` would cut a tool call from its results."""
    child = handle_state(settings, new_id, {})
    if child.window_id == state.window_id:
        raise InvalidOptionsError("a fork needs an id of its own, not its window's")
    found = yield from read(state, "fifo")
    if not found.meta:
        raise WindowNotFoundError(state.window_id)
    kept, point = _prefix(found.items(), at, found.meta)
    snap = yield from snapshot_from(state, found, kept)
    child.config = msgspec.structs.replace(child.config, item_limit=found.config(state.config).item_limit)
    yield from restore(settings, child, snap, request_id=None, fork=(state.window_id, point))
    raise_for_reply((yield ScriptCall("forked", state.keys, [child.window_id, point], new_request("forked"))))
    return child


def _prefix(items: list[ContextItem], at: object, meta: Mapping[str, str]) -> tuple[list[ContextItem], str]:
    """The items a fork at ``at`` holds, and the item it is made at ("": none)."""
    if at is None:
        return items, (items[-1].id or "") if items else ""
    if not isinstance(at, str):
        raise InvalidOptionsError(f"at must be an item id, a version or None, not {type(at).__name__}")
    ids = [i.id for i in items]
    if at in ids:
        kept = items[: ids.index(at) + 1]
        after = {i.group for i in items[len(kept) :] if i.group}
        if kept[-1].group in after:
            raise InvalidOptionsError(
                f"a fork at {at!r} would cut tool-call group {kept[-1].group!r} apart: fork before or after it"
            )
        return kept, at
    return _at_version(items, at, meta)


def _at_version(items: list[ContextItem], version: str, meta: Mapping[str, str]) -> tuple[list[ContextItem], str]:
    """The items of version ``version`` still in the window: those of seq up to its seq, when the
    window is in the same lifetime and nothing was removed by hand since."""
    now, then = window_version(meta).split("."), version.split(".")
    problem = _version_problem(now, then)
    if problem:
        raise InvalidOptionsError(
            f"{version!r} is no item id of the window, and as a version {problem}: fork at an item id"
        )
    kept = [i for i in items if i.seq <= int(then[1])]
    return kept, (kept[-1].id or "") if kept else ""


def _version_problem(now: list[str], then: list[str]) -> str:
    """Why a fork cannot go back to version ``then`` of a window now at ``now`` ('' : it can)."""
    if len(then) != len(Meta.VERSION) or not all(part.isdigit() for part in then):
        return "it is malformed (a version is three numbers joined by '.', as stats() and builds report it)"
    if then[0] != now[0]:
        return "it is of another lifetime of the window (it was deleted or expired and made again since)"
    if int(then[1]) > int(now[1]):
        return f"it is from the future: the window has reached seq {now[1]}, the version names seq {then[1]}"
    if then[2] != now[2]:
        return "items were removed by hand since it (what it held is no longer all there)"
    return ""


def lineage(state: WindowState) -> Plan[Lineage]:
    """The window's parent and fork point (a fork's), and the forks made from it."""
    found = yield from read(state, "meta")
    meta = found.meta
    parent = meta.get(Meta.PARENT) or None
    point = (meta.get(Meta.FORK_POINT) or None) if parent else None
    return Lineage(parent=parent, fork_point=point, forks=(meta.get(Meta.FORKS) or "").split())
