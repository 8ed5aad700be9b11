"""Writer processes for the scale-out tests (importable by spawned processes): sync or asyncio
adds with the store's default retry policy, each outcome journalled."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import contextstore as cs

#: each writer stops after this many adds even if the test never says stop
MAX_ADDS = 600


def _journal(fh: Any, wid: str, content: str, outcome: Any) -> None:
    """One line: ``ack`` (with the item id), ``unreplicated`` or ``error`` (the exception)."""
    if isinstance(outcome, cs.ReplicationTimeoutError):
        line = f"unreplicated {wid} {content} {outcome.acknowledged_by}"
    elif isinstance(outcome, Exception):
        line = f"error {wid} {content} " + f"{type(outcome).__name__}: {str(outcome)[:200]}".replace("\n", " ")
    else:
        line = f"ack {wid} {content} {outcome.id}"
    fh.write(line + "\n")
    fh.flush()


def writer(
    url: str, prefix: str, window_ids: list[str], worker: int, api: str, journal: str, stop: Any, options: Any
) -> None:
    """Add ``w<worker>-<i>`` to the windows in turn until ``stop`` is set (or MAX_ADDS);
    journal each outcome."""
    if api == "async":
        asyncio.run(_awriter(url, prefix, window_ids, worker, journal, stop, options))
        return
    with cs.ContextStore.from_url(url, prefix=prefix, **options) as store, open(journal, "a") as fh:
        windows = [store.handle(wid) for wid in window_ids]
        for i in range(MAX_ADDS):
            if stop.is_set():
                break
            w, content = windows[i % len(windows)], f"w{worker}-{i}"
            try:
                outcome: Any = w.add(content, type="user_message", role="user")
            except Exception as exc:
                outcome = exc
            _journal(fh, w.window_id, content, outcome)
            time.sleep(0.002)


async def _awriter(
    url: str, prefix: str, window_ids: list[str], worker: int, journal: str, stop: Any, options: Any
) -> None:
    store = cs.AsyncContextStore.from_url(url, prefix=prefix, **options)
    try:
        windows = [store.handle(wid) for wid in window_ids]
        with open(journal, "a") as fh:
            for i in range(MAX_ADDS):
                if stop.is_set():
                    break
                w, content = windows[i % len(windows)], f"w{worker}-{i}"
                try:
                    outcome: Any = await w.add(content, type="user_message", role="user")
                except Exception as exc:
                    outcome = exc
                _journal(fh, w.window_id, content, outcome)
                await asyncio.sleep(0.002)
    finally:
        await store.close()


def read_journals(paths: list[str]) -> dict[str, list[tuple[str, ...]]]:
    """The journal lines by outcome (``ack``, ``unreplicated``, ``error``)."""
    out: dict[str, list[tuple[str, ...]]] = {"ack": [], "unreplicated": [], "error": []}
    for path in paths:
        with open(path) as fh:
            for line in fh:
                kind, *rest = line.rstrip("\n").split(" ", 3)
                out[kind].append(tuple(rest))
    return out
