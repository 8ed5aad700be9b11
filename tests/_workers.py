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


def tool_turns(url: str, prefix: str, window_id: str, worker: int, turns: int) -> list[str]:
    """``turns`` tool-calling turns (a question, a call with 1-3 parallel calls and their results
    in one add_many, an answer), with caller ids; returns the id of every item it added."""
    import json

    rng = random.Random(worker)
    added: list[str] = []
    with cs.ContextStore.from_url(url, prefix=prefix) as store:
        w = store.window(window_id)
        for t in range(turns):
            tag = f"w{worker}-t{t}"
            calls = [
                {
                    "id": f"{tag}-c{k}",
                    "type": "function",
                    "function": {"name": rng.choice(["search", "fetch", "run"]), "arguments": json.dumps({"t": t})},
                }
                for k in range(rng.randint(1, 3))
            ]
            w.add(f"{tag} asks", type="user_message", role="user", id=f"{tag}-q")
            w.add_many(
                [
                    {
                        "content": "",
                        "type": "assistant_message",
                        "role": "assistant",
                        "id": f"{tag}-call",
                        "metadata": {"tool_calls": calls},
                    },
                    *(
                        {
                            "content": f"{tag} result " + "x " * rng.randint(20, 80),
                            "type": "tool_result",
                            "role": "tool",
                            "id": f"{c['id']}-r",
                            "metadata": {"tool_call_id": c["id"]},
                        }
                        for c in calls
                    ),
                ]
            )
            w.add(f"{tag} answers", type="assistant_message", role="assistant", id=f"{tag}-a")
            added += [f"{tag}-q", f"{tag}-call", *(f"{c['id']}-r" for c in calls), f"{tag}-a"]
    return added


def add_and_remove(
    url: str, prefix: str, window_id: str, worker: int, n: int, use_async: bool, pace: float
) -> dict[str, list[str]]:
    """Add ``n`` conversation items with caller ids (``pace`` seconds apart) and remove about one
    in ten, one of its own ten latest (an agent retracting what it just said); returns the ids
    acknowledged as added and as removed."""
    rng = random.Random(100 + worker)
    specs = [
        {
            "id": f"w{worker}-{i}",
            "content": f"worker {worker} note {i}: the value of key-{worker}-{i} is {rng.randint(0, 10**6)}. "
            + "detail " * rng.randint(1, 12),
            "type": rng.choice(["user_message", "assistant_message"]),
        }
        for i in range(n)
    ]
    out: dict[str, list[str]] = {"added": [], "removed": []}

    async def go() -> None:
        async with cs.AsyncContextStore.from_url(url, prefix=prefix) as store:
            w = await store.window(window_id)
            for i, spec in enumerate(specs):
                out["added"].append((await w.add(spec.pop("content"), **spec)).id)
                victim = f"w{worker}-{i - rng.randrange(1, 10)}" if i > 10 and rng.random() < 0.1 else None
                if victim and await w.remove(victim):
                    out["removed"].append(victim)
                await asyncio.sleep(pace)

    if use_async:
        asyncio.run(go())
        return out
    import time

    with cs.ContextStore.from_url(url, prefix=prefix) as store:
        w = store.window(window_id)
        for i, spec in enumerate(specs):
            out["added"].append(w.add(spec.pop("content"), **spec).id)
            victim = f"w{worker}-{i - rng.randrange(1, 10)}" if i > 10 and rng.random() < 0.1 else None
            if victim and w.remove(victim):
                out["removed"].append(victim)
            time.sleep(pace)
    return out
