"""Move windows from one Redis server to another: snapshot, restore, compare, delete.

    python move_window.py redis://old-host:6379/0 redis://new-host:6379/0 agent-7 agent-8

Point the writers of a window at the new server (or stop them) before you move it: a window is
deleted from the old server only when it is still exactly what was copied, so a write that came
in meanwhile is copied again instead of lost; a write after the delete would start a new window
on the old server.
"""

from __future__ import annotations

import sys

import contextstore as cs


def move(source: cs.ContextStore, target: cs.ContextStore, window_id: str, attempts: int = 5) -> int:
    """Copy one window to ``target`` and delete it from ``source``; returns how many items moved."""
    old = source.window(window_id, create=False)  # WindowNotFoundError if there is no such window
    for _ in range(attempts):
        snap = old.snapshot()
        new = target.handle(window_id)
        new.restore(snap)  # items and config, atomically: the window exists whole or not at all
        if new.snapshot().items != snap.items:
            raise RuntimeError(f"{window_id}: the copy on the target differs; the source is kept")
        if old.snapshot().items == snap.items:  # nothing was written to the source while copying
            old.delete()
            return len(snap.items)
    raise RuntimeError(f"{window_id}: still being written to after {attempts} copies; stop its writers first")


def main(source_url: str, target_url: str, *window_ids: str) -> None:
    """Move each named window, reporting as it goes."""
    source, target = cs.ContextStore.from_url(source_url), cs.ContextStore.from_url(target_url)
    for window_id in window_ids:
        print(f"{window_id}: moved {move(source, target, window_id)} items")
        stats = target.window(window_id, create=False).stats()
        print(f"{window_id} on the target: {stats.total_items} items, {stats.current_tokens} tokens")


if __name__ == "__main__":
    main(*sys.argv[1:])
