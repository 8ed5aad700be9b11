"""Plans for the archive of summaries: reading what a summary replaced, and undoing it."""

from __future__ import annotations

from ..core import validate, wire
from ..errors import raise_for_reply
from ..types import ContextItem
from .base import Plan, ScriptCall, WindowState, new_request


def archived(state: WindowState, summary_id: object) -> Plan[list[ContextItem]]:
    """The items summary ``summary_id`` replaced, as they were stored, in arrival order; [] when
    the archive holds none for it (unknown id, or ``archive_ttl_seconds`` passed)."""
    args = wire.archived_args(validate.item_id(summary_id))
    found = wire.decode_read(raise_for_reply((yield ScriptCall("archived", state.keys, args))))
    return sorted(found.items(), key=lambda i: i.seq)


def undo_summary(state: WindowState, summary_id: object, request_id: object = None) -> Plan[int]:
    """Put back the items summary ``summary_id`` replaced (same ids, seq, content, order) and
    remove the summary, atomically; the number of items put back. ``SummaryNotFoundError`` if
    the archive no longer holds them or the summary left the window; ``ContextWindowFullError``
    if they no longer fit; ``DuplicateItemError`` if one of their ids (or tool call ids, or
    groups) is in use again. Nothing changes when it fails."""
    request = new_request("undo", request_id)
    args = wire.undo_args(validate.item_id(summary_id))
    return int(raise_for_reply((yield ScriptCall("undo", state.keys, args, request))))
