"""Worker processes for the fault tests (importable by spawned processes)."""

from __future__ import annotations

import hashlib
import random
import time
from collections import Counter

import contextstore as cs

# rides out a server restart of a few seconds: up to ~60 tries, at most 0.25 s apart
PATIENT = cs.RetryPolicy(attempts=60, base=0.02, cap=0.25)


def journal_adds(url: str, prefix: str, window_id: str, worker: int, n: int, journal: str) -> None:
    """Add n uniquely named items; after each call, append its outcome to the journal file:
    ``ack <content> <id>`` once acknowledged, ``unknown <content>`` when it gave up."""
    with cs.ContextStore.from_url(url, prefix=prefix, retry=PATIENT) as store, open(journal, "a") as fh:
        w = store.window(window_id)
        for i in range(n):
            content = f"w{worker}-{i}"
            try:
                it = w.add(content, type="user_message", role="user", priority=i % 100)
                fh.write(f"ack {content} {it.id}\n")
            except cs.StoreUnavailableError:
                fh.write(f"unknown {content}\n")
            fh.flush()


def payload(tag: str, size: int) -> tuple[str, str]:
    body = (tag + ":" + "0123456789abcdef" * (size // 16 + 1))[:size]
    return body, hashlib.sha256(body.encode()).hexdigest()


def big_adds_forever(url: str, prefix: str, window_id: str, worker: int) -> None:
    """Add large items (and batches) until killed."""
    with cs.ContextStore.from_url(url, prefix=prefix) as store:
        w = store.window(window_id)
        i = 0
        while True:
            batch = []
            for _ in range(1 + i % 4):
                body, digest = payload(f"w{worker}-{i}", 50_000 + 997 * (i % 50))
                batch.append({"content": body, "metadata": {"sha256": digest}, "type": "retrieved_document"})
                i += 1
            w.add_many(batch)


def _summarize(items: list[cs.ContextItem]) -> str:
    return "summary of " + ", ".join(i.id or "" for i in items)[:200]


EXPECTED = (cs.ContextWindowFullError, cs.BudgetTooSmallError)


def stress(
    url: str, prefix: str, window_ids: list[str], worker: int, seconds: float
) -> tuple[dict[str, int], list[str]]:
    """A random mix of every operation on a few shared windows for ``seconds``. Returns the
    count of each operation and the repr of every exception that is not an expected refusal."""
    rng = random.Random(1000 + worker)
    ops: Counter[str] = Counter()
    unexpected: list[str] = []
    with cs.ContextStore.from_url(url, prefix=prefix, summarizer=_summarize) as store:
        wins = [store.window(wid) for wid in window_ids]
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            w = rng.choice(wins)
            op = rng.choices(
                [
                    "add",
                    "add_many",
                    "get",
                    "remove",
                    "pin",
                    "unpin",
                    "priority",
                    "items",
                    "ordered",
                    "pinned_items",
                    "clear",
                    "compact",
                    "summarize",
                    "build",
                    "markdown",
                    "snapshot_restore",
                    "stats",
                    "configure",
                    "verify",
                    "replay",
                ],
                weights=[30, 6, 5, 5, 3, 3, 4, 4, 3, 2, 1, 2, 1, 5, 2, 1, 4, 1, 2, 3],
            )[0]
            try:
                if op == "add":
                    w.add(
                        f"w{worker} says " + "word " * rng.randint(1, 60),
                        type=rng.choice(
                            ["user_message", "assistant_message", "tool_result", "code", "retrieved_document"]
                        ),
                        priority=rng.randint(0, 100),
                        pinned=rng.random() < 0.03,
                        role=rng.choice([None, "user", "assistant"]),
                    )
                elif op == "add_many":
                    w.add_many([f"batch {worker} {k} " + "x " * rng.randint(1, 20) for k in range(rng.randint(1, 5))])
                elif op in ("get", "remove", "pin", "unpin", "priority"):
                    items = w.items(limit=20)
                    if items:
                        target = rng.choice(items).id or ""
                        if op == "get":
                            w.get(target)
                        elif op == "remove":
                            w.remove(target)
                        elif op == "pin":
                            w.pin(target)
                        elif op == "unpin":
                            w.unpin(target)
                        else:
                            w.update_priority(target, rng.randint(0, 100))
                elif op == "items":
                    w.items(types=rng.choice([None, ["user_message", "code"]]), limit=rng.choice([None, 5]))
                elif op == "ordered":
                    w.ordered_items()
                elif op == "pinned_items":
                    for it in w.pinned_items()[3:]:
                        w.unpin(it.id or "")  # keep pins from filling the window
                elif op == "clear":
                    w.clear()
                elif op == "compact":
                    w.compact(rng.choice(["remove_oldest", "remove_low_priority"]), rng.choice([30.0, 60.0]))
                elif op == "summarize":
                    w.compact("summarize", 50.0)
                elif op == "build":
                    w.build(cs.BuildOptions(reserve_for_response=rng.choice([0, 200]), compact=rng.random() < 0.2))
                elif op == "markdown":
                    w.to_markdown(limit=10)
                elif op == "snapshot_restore":
                    w.restore(w.snapshot())
                elif op == "stats":
                    w.stats()
                elif op == "configure":
                    w.configure(compaction_threshold=rng.choice([80.0, 85.0, 90.0]))
                elif op == "verify":
                    report = w.verify()
                    if not report.ok:
                        unexpected.append(f"verify: {report.problems}")
                elif op == "replay":  # a caller retrying with its own request id
                    rid = f"w{worker}-{ops['replay']}"
                    first = w.add(f"replayed {rid}", request_id=rid)
                    # the same answer, unless another worker removed the item by hand (remove,
                    # pop, clear, restore) in between: then the request runs again and stores it
                    # anew (tests/test_requests.py checks each case deterministically; here a
                    # restore of an older snapshot may even bring the first back meanwhile)
                    second = w.add(f"replayed {rid}", request_id=rid)
                    if second.content != first.content or (second.id != first.id and second.seq <= first.seq):
                        unexpected.append(f"replay of {rid} answered differently")
                ops[op] += 1
            except EXPECTED:
                ops[op + " (refused)"] += 1
            except Exception as exc:
                unexpected.append(f"{op}: {type(exc).__name__}: {exc}")
    return dict(ops), unexpected
