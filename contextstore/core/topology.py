"""Whether a Redis Cluster's slot layout held still while ``windows()`` scanned it.

A window's keys can move between nodes while SCAN walks the primaries one after another: a key
that leaves a node not scanned yet for one already scanned is missed. ``windows()`` therefore
reads every primary's view of itself (``CLUSTER NODES``) before and after each pass, and scans
again while a slot was migrating or the layout changed (a migration that started and ended
within the pass), keeping what every pass found.
"""

from __future__ import annotations

from typing import Any

#: ``windows()`` scans again while slots move, at most this many passes in all
WINDOW_SCAN_PASSES = 5

Layout = tuple[tuple[str, tuple[str, ...]], ...]


def _tables(reply: Any) -> list[dict[str, Any]]:
    """redis-py's parsed ``CLUSTER NODES`` of one node ({address: fields}), or of several
    ({node: {address: fields}})."""
    if not isinstance(reply, dict) or not reply:
        return []
    if any(isinstance(v, dict) and "flags" in v for v in reply.values()):
        return [reply]
    return [t for t in reply.values() if isinstance(t, dict)]


def layout_of(reply: Any) -> Layout | None:
    """Who serves which slots, comparable between two reads; None while any primary migrates
    or imports a slot (keys are on their way between nodes)."""
    layout = []
    for table in _tables(reply):
        for address, fields in table.items():
            if "myself" not in str(fields.get("flags", "")):
                continue
            if fields.get("migrations"):
                return None
            layout.append((address, tuple(str(s) for s in fields.get("slots", ()))))
    return tuple(sorted(layout))
