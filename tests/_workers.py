"""Worker functions for multi-process tests (importable by spawned processes)."""

from __future__ import annotations

import asyncio
import random

import contextstore as cs

TYPES = ["user_message", "assistant_message", "tool_result", "code", "error", "retrieved_document"]


def _spec(rng: random.Random, worker: int, i: int) -> dict:
    return {
        "content": f"w{worker} i{i} " + "tok " * rng.randint(1, 30),
        "type": rng.choice(TYPES),
        "priority": rng.randint(0, 100),
        "pinned": rng.random() < 0.02,
    }


def add_sync(url: str, prefix: str, window_id: str, worker: int, n: int) -> list[tuple[str, int]]:
    """Add n items one by one (and a few batches); return (id, seq) of every acknowledged add."""
    rng = random.Random(worker)
    acked: list[tuple[str, int]] = []
    with cs.ContextStore.from_url(url, prefix=prefix) as store:
        w = store.window(window_id)
        i = 0
        while i < n:
            if rng.random() < 0.1:
                batch = [_spec(rng, worker, i + k) for k in range(3)]
                w.add_many(batch)
                i += 3
                acked += [("batch", -1)] * 3
                continue
            spec = _spec(rng, worker, i)
            it = w.add(spec.pop("content"), **spec)
            acked.append((it.id, it.seq))
            i += 1
    return acked


def add_async(url: str, prefix: str, window_id: str, worker: int, n: int) -> list[tuple[str, int]]:
    async def go() -> list[tuple[str, int]]:
        rng = random.Random(worker)
        acked: list[tuple[str, int]] = []
        async with cs.AsyncContextStore.from_url(url, prefix=prefix) as store:
            w = await store.window(window_id)
            for i in range(n):
                spec = _spec(rng, worker, i)
                it = await w.add(spec.pop("content"), **spec)
                acked.append((it.id, it.seq))
        return acked

    return asyncio.run(go())
