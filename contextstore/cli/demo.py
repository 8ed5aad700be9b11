"""``contextstore demo``: worker processes serve one conversation through a shared window, turn
by turn (each turn a question, a tool call with its result and an answer, stored in one atomic
``add_many``), while the window compacts; then what a worker would send the model next, the
stats and the verify() result are printed."""

from __future__ import annotations

import multiprocessing as mp
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from .. import ContextStore, ContextWindow, EmbeddedServer
from ..errors import BudgetTooSmallError, ContextWindowFullError
from ..types import BuildOptions, BuiltMessages
from .app import EXIT_ERROR, EXIT_OK
from .views import first_line, plain, stats_view


@dataclass(frozen=True)
class DemoOptions:
    """What ``contextstore demo`` runs: where, how many workers, how many turns each."""

    url: str | None
    path: str | None
    prefix: str
    window: str
    workers: int
    turns: int
    max_tokens: int


#: what the user asks about, and what the status tool says of it
_STATUS = {
    "the failing deploy": "deploy #4411 failed at step 3 (migrations): lock timeout on table orders",
    "the flaky integration test": "test_checkout failed 3 of the last 20 runs, always on runner ci-7",
    "the cache invalidation bug": "fix merged in #982; cache hit rate back to 94%",
    "the Q3 migration plan": "14 of 22 services migrated; payments and search remain",
    "the memory leak in the parser": "heap grows 40 MB/hour in parser v2.3; v2.4 with the fix is in review",
    "the retry policy": "retries capped at 5 with jitter since Monday; no retry storms since",
}
#: the width the demo prints at when stdout is no terminal (never 80 columns)
PIPED_WIDTH = 120
#: the reserve a worker keeps for the model's answer when it builds (at most the 15% of the
#: window above its compaction threshold)
RESERVE = 300

_round_barrier: Any = None


def _init_worker(barrier: Any) -> None:
    global _round_barrier
    _round_barrier = barrier


def _turn(rng: random.Random, worker: int, turn: int) -> list[Any]:
    """One turn of the conversation, written by ``worker``: the user's question, the assistant's
    call of the status tool, its result, and the answer, as one group (compaction and builds
    keep or drop a turn whole)."""
    topic = rng.choice(sorted(_STATUS))
    call_id = f"call_w{worker}_t{turn}"
    call = {"id": call_id, "type": "function", "function": {"name": "status", "arguments": f'{{"of": "{topic}"}}'}}
    common = {"source_ref": f"worker-{worker}", "group": f"turn-w{worker}-t{turn}"}
    details = " ".join(str(rng.randint(100, 999)) for _ in range(rng.randint(20, 60)))
    return [
        {"content": f"What is the status of {topic}?", "role": "user", **common},
        {"content": "", "role": "assistant", "metadata": {"tool_calls": [call]}, **common},
        {
            "content": f"{_STATUS[topic]}. Log: {details}",
            "role": "tool",
            "metadata": {"tool_call_id": call_id},
            **common,
        },
        {"content": f"Status of {topic}: {_STATUS[topic]}.", "role": "assistant", **common},
    ]


def _demo_worker(url: str, prefix: str, window_id: str, worker: int, n: int, seed: int) -> tuple[int, int]:
    """One worker process: ``n`` turns in the shared window. Returns (turns stored, refused)."""
    rng = random.Random(seed)
    stored = refused = 0
    with ContextStore.from_url(url, prefix=prefix) as store:
        win = store.window(window_id)
        for turn in range(n):
            if _round_barrier is not None:
                _round_barrier.wait(60)  # workers take turns in rounds, so the conversation interleaves
            try:
                win.add_many(_turn(rng, worker, turn), request_id=f"{window_id}-w{worker}-t{turn}")
                stored += 1
            except ContextWindowFullError:
                refused += 1  # a turn bigger than what the window can make room for
    return stored, refused


def _run_workers(url: str, args: DemoOptions) -> tuple[int, int, float]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(args.workers)
    t0 = time.perf_counter()
    with ctx.Pool(args.workers, initializer=_init_worker, initargs=(barrier,)) as pool:
        results = pool.starmap(
            _demo_worker, [(url, args.prefix, args.window, w, args.turns, 1000 + w) for w in range(args.workers)]
        )
    return sum(a for a, _ in results), sum(r for _, r in results), time.perf_counter() - t0


def cmd_demo(args: DemoOptions) -> int:
    """Several worker processes serve one conversation in one window while it compacts; then
    the next build, the stats and verify()."""
    server = None
    url = args.url
    console = _console()
    if not url:
        server = EmbeddedServer(args.path)
        server.ensure_running()
        url = server.url
        console.print(plain(f"embedded server at {server.path} ({url})"))
    with ContextStore.from_url(url, prefix=args.prefix) as store:
        store.window(args.window).delete()
        win = store.window(args.window, max_tokens=args.max_tokens, keep_recent=2, default_strategy="remove_oldest")
        win.add_many(
            [
                {
                    "content": "You are the on-call assistant of an engineering team.",
                    "type": "system_prompt",
                    "pinned": True,
                    "priority": 100,
                    "id": "system",
                },
                {
                    "content": "Check the status tool before you answer; answer in one sentence.",
                    "type": "instruction",
                    "pinned": True,
                    "priority": 90,
                    "id": "rules",
                },
            ]
        )
        stored, refused, elapsed = _run_workers(url, args)
        ok = _demo_report(console, win, args, stored, refused, elapsed)
    if server is not None:
        console.print(
            plain(
                f"\nthe embedded server keeps running for other processes. Look inside:\n"
                f"  contextstore show {args.window}    contextstore watch {args.window}    "
                f"redis-cli -s {server.socket_path}\n"
                f"stop it with: contextstore server stop"
            )
        )
    return EXIT_OK if ok else EXIT_ERROR


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=PIPED_WIDTH)


def _messages_table(built: BuiltMessages, width: int) -> Table:
    """What a worker would send: one row per message, its role and first line."""
    table = Table(box=None, pad_edge=False, show_header=False)
    table.add_column("role", style="bold", no_wrap=True)
    table.add_column("message", no_wrap=True, overflow="ellipsis", max_width=max(20, width - 12))
    assert isinstance(built.messages, list)
    for m in built.messages:
        calls = m.get("tool_calls") or []
        text = m.get("content") or ", ".join(
            f"calls {c['function']['name']}({c['function']['arguments']})" for c in calls
        )
        table.add_row(m["role"], plain(first_line(str(text), width)))
    return table


def _show_next_build(console: Console, win: ContextWindow, max_tokens: int) -> None:
    """The chat messages a worker would send now, within the window's budget less a reserve that
    agrees with the threshold (the window never keeps more than a build can send)."""
    reserve = min(RESERVE, max_tokens * 15 // 100)
    budget = max_tokens - reserve
    console.rule(plain(f"what a worker sends the model next: {budget} tokens ({max_tokens} - {reserve} reserved)"))
    try:
        built = win.build_messages_structured(BuildOptions(reserve_for_response=reserve, max_history_items=1000))
    except BudgetTooSmallError as exc:  # a window too small for one turn and a reserve
        console.print(plain(f"nothing: {exc}\n"))
        return
    console.print(_messages_table(built, console.width))
    console.rule()
    console.print(
        plain(
            f"{len(built.included_item_ids)} items as {len(built.messages)} messages, {built.total_tokens} tokens; "
            f"{len(built.excluded_item_ids)} older items did not fit (newest turns first)\n"
        )
    )


def _demo_report(
    console: Console, win: ContextWindow, args: DemoOptions, stored: int, refused: int, elapsed: float
) -> bool:
    items = win.items()
    stats = win.stats()
    report = win.verify()
    seqs = [i.seq for i in items]
    within = stats.current_tokens <= (stats.max_tokens or 0)
    ok = report.ok and len({i.id for i in items}) == len(items) and seqs == sorted(seqs) and within
    turns = args.workers * args.turns
    console.print(
        plain(
            f"\n{args.workers} workers took {turns} turns of one conversation in {elapsed:.2f}s "
            f"({stored / elapsed:.0f} turns/s); each turn: 4 items in one atomic add_many"
            + (f"\n{refused} turns refused as too big for the window" if refused else "")
        )
    )
    writers = Counter(i.source_ref for i in items if i.source_ref)
    pinned = sum(1 for i in items if i.pinned)
    from_workers = ", ".join(f"{w}: {n}" for w, n in sorted(writers.items()))
    console.print(
        plain(
            f"the window holds {len(items)} items: {pinned} pinned (system prompt, rules) + "
            f"{sum(writers.values())} from the workers\n  ({from_workers})\n"
            f"{stats.compaction_count} compactions removed the oldest turns whole ({stats.total_tokens_freed} tokens)"
        )
    )
    _show_next_build(console, win, args.max_tokens)
    console.print(stats_view(stats))
    kinds = Counter(e.kind for e in win.events(since="0"))
    console.print(plain("events: " + ", ".join(f"{k}={v}" for k, v in sorted(kinds.items()))))
    console.print(
        plain(
            f"verify(): {'OK' if report.ok else 'BROKEN: ' + '; '.join(report.problems)}; "
            f"within budget: {'yes' if within else 'NO'}"
        )
    )
    return ok
