"""``contextstore demo``: worker processes share one window while it evicts and compacts; then
the built prompt, the stats and the verify() result are printed."""

from __future__ import annotations

import multiprocessing as mp
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from ..embedded import EmbeddedServer
from ..errors import ContextWindowFullError
from ..sync import ContextStore, ContextWindow
from ..types import BuildOptions, ItemType
from .app import EXIT_ERROR, EXIT_OK
from .views import stats_view


@dataclass(frozen=True)
class DemoOptions:
    """What ``contextstore demo`` runs: where, how many workers, how many adds each."""

    url: str | None
    path: str | None
    prefix: str
    window: str
    workers: int
    items: int
    max_tokens: int


_TOPICS = [
    "the flaky integration test",
    "the cache invalidation bug",
    "the Q3 migration plan",
    "the retry policy",
    "the failing deploy",
    "the memory leak in the parser",
]

_round_barrier: Any = None


def _init_worker(barrier: Any) -> None:
    global _round_barrier
    _round_barrier = barrier


def _demo_turn(win: ContextWindow, rng: random.Random, worker: int, turn: int) -> None:
    topic = rng.choice(_TOPICS)
    kind = rng.random()
    source = f"worker-{worker}"
    if kind < 0.45:
        win.add(
            f"Worker {worker} asks: what is the status of {topic}? (turn {turn})",
            type=ItemType.USER_MESSAGE,
            role="user",
            priority=rng.randint(30, 70),
            source_ref=source,
        )
    elif kind < 0.8:
        win.add(
            f"Worker {worker} answers: {topic} is being handled; next step is a fix and a "
            f"regression test (turn {turn}).",
            type=ItemType.ASSISTANT_MESSAGE,
            role="assistant",
            priority=rng.randint(30, 70),
            source_ref=source,
        )
    else:
        numbers = " ".join(str(rng.randint(0, 999)) for _ in range(40))
        win.add(
            f"tool output for {topic}: {numbers}",
            type=ItemType.TOOL_RESULT,
            priority=rng.randint(0, 40),
            source_ref=source,
        )


def _demo_worker(url: str, prefix: str, window_id: str, worker: int, n: int, seed: int) -> tuple[int, int]:
    """One worker process: ``n`` adds to the shared window. Returns (added, refused as too big)."""
    rng = random.Random(seed)
    added = refused = 0
    with ContextStore.from_url(url, prefix=prefix) as store:
        win = store.window(window_id)
        for turn in range(n):
            if _round_barrier is not None:
                _round_barrier.wait(60)  # workers take their turns in rounds, so they interleave
            try:
                _demo_turn(win, rng, worker, turn)
                added += 1
            except ContextWindowFullError:
                refused += 1  # an item bigger than what the window can make room for
    return added, refused


def _run_workers(url: str, args: DemoOptions) -> tuple[int, int, float]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(args.workers)
    t0 = time.perf_counter()
    with ctx.Pool(args.workers, initializer=_init_worker, initargs=(barrier,)) as pool:
        results = pool.starmap(
            _demo_worker, [(url, args.prefix, args.window, w, args.items, 1000 + w) for w in range(args.workers)]
        )
    return sum(a for a, _ in results), sum(r for _, r in results), time.perf_counter() - t0


def cmd_demo(args: DemoOptions) -> int:
    """Several worker processes add to one window while it compacts; then build and stats."""
    server = None
    url = args.url
    if not url:
        server = EmbeddedServer(args.path)
        server.ensure_running()
        url = server.url
        print(f"embedded redis-server at {server.path} ({url})")
    with ContextStore.from_url(url, prefix=args.prefix) as store:
        store.window(args.window).delete()
        win = store.window(args.window, max_tokens=args.max_tokens, compaction_threshold=85.0)
        win.add(
            "You are a helpful engineering assistant shared by several agent workers.",
            type=ItemType.SYSTEM_PROMPT,
            pinned=True,
            priority=100,
        )
        win.add(
            "Answer briefly and cite the tool output you rely on.", type=ItemType.INSTRUCTION, pinned=True, priority=90
        )
        added, refused, elapsed = _run_workers(url, args)
        ok = _demo_report(store, win, args, added, refused, elapsed)
    if server is not None:
        print(
            f"\nthe embedded server keeps running for other processes; inspect it with "
            f"`redis-cli -s {server.socket_path}`, stop it with `contextstore server stop`"
        )
    return EXIT_OK if ok else EXIT_ERROR


def _demo_report(
    store: ContextStore, win: ContextWindow, args: DemoOptions, added: int, refused: int, elapsed: float
) -> bool:
    items = win.items()
    stats = win.stats()
    report = win.verify()
    seqs = [i.seq for i in items]
    within = stats.current_tokens <= (stats.max_tokens or 0)
    ok = report.ok and len({i.id for i in items}) == len(items) and seqs == sorted(seqs) and within
    reserve = min(200, args.max_tokens // 4)
    built = win.build_structured(BuildOptions(reserve_for_response=reserve, max_history_items=6))
    print(
        f"\n{args.workers} workers added {added} items in {elapsed:.2f}s "
        f"({added / elapsed:.0f} adds/s)" + (f"; {refused} refused as too big for the window" if refused else "")
    )
    writers = Counter(i.source_ref for i in items if i.source_ref)
    print("the window now holds items from: " + ", ".join(f"{w} ({n})" for w, n in sorted(writers.items())) + "\n")
    print("=== built prompt " + "=" * 60)
    print(built.content)
    print("=" * 77)
    print(
        f"included {len(built.included_item_ids)} items, {built.total_tokens} tokens (budget "
        f"{args.max_tokens} - {reserve} reserved); {len(built.excluded_item_ids)} did not fit, "
        f"{len(built.omitted_item_ids)} left out by the options (max_history_items=6)\n"
    )
    Console().print(stats_view(stats))
    kinds = Counter(e.kind for e in win.events(since="0"))
    print("events: " + ", ".join(f"{k}={v}" for k, v in sorted(kinds.items())))
    print(
        f"verify(): {'OK' if report.ok else 'BROKEN: ' + '; '.join(report.problems)}; "
        f"within budget: {'yes' if within else 'NO'}"
    )
    return ok
