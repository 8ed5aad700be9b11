"""Plans for taking a window back to one of its items (``rewind``) and putting back what a
rewind took (``undo_rewind``): rewind.lua, one call each."""

from __future__ import annotations

from .. import logs
from ..core import validate, wire
from ..errors import InvalidOptionsError, raise_for_reply
from .base import Plan, ScriptCall, WindowState, new_request


def rewind(
    state: WindowState, to: object, expect_version: object = None, request_id: object = None, turn: str = ""
) -> Plan[str]:
    """Remove every item added after item ``to`` (pinned ones too) in one step, keeping them in
    the window's archive for ``archive_ttl_seconds``; the rewind id ``undo_rewind`` takes.
    Refused with nothing changed: ``InvalidOptionsError`` when ``to`` is not in the window or a
    tool call and its results would be cut apart, ``TurnBusyError`` while a turn other than
    ``turn`` (``t=<token>``: the caller's) holds the window, ``VersionConflictError`` when the
    window is not at ``expect_version``."""
    item = validate.item_id(to)
    args = ["rewind", item, _conditions(expect_version, turn)]
    rewind_id = wire.text(
        raise_for_reply((yield ScriptCall("rewind", state.keys, args, new_request("rewind", request_id))))
    )
    logs.rewound(state.window_id, item, rewind_id)
    return rewind_id


def undo_rewind(
    state: WindowState, rewind_id: object, expect_version: object = None, request_id: object = None, turn: str = ""
) -> Plan[int]:
    """Put back the items rewind ``rewind_id`` took, exactly as they were, in their places; how
    many. ``InvalidOptionsError`` when the archive no longer holds them (unknown id, undone
    already, or ``archive_ttl_seconds`` passed); ``ContextWindowFullError`` when they no longer
    fit; ``DuplicateItemError`` when one of their ids, tool call ids or groups is in use again;
    ``TurnBusyError`` and ``VersionConflictError`` as ``rewind``'s. Nothing changes when it fails."""
    if not isinstance(rewind_id, str) or not rewind_id.startswith("rewind-"):
        raise InvalidOptionsError(f"rewind_id must be what rewind() returned ('rewind-...'), not {rewind_id!r}")
    args = ["undo", validate.item_id(rewind_id), _conditions(expect_version, turn)]
    request = new_request("undo_rewind", request_id)
    return int(raise_for_reply((yield ScriptCall("rewind", state.keys, args, request))))


def _conditions(expect_version: object, turn: str) -> str:
    version = validate.version("expect_version", expect_version)
    return " ".join(c for c in ("" if version is None else f"v={version}", turn) if c)
