"""What an agent waits for when its window needs a summary: in the request path vs in the background.

One agent talks to one window (`warn_percent` 50, `compaction_threshold` 90, default strategy
summarize) on a private redis-server. Its summarizer is the extractive one behind a simulated
model latency (`--model-ms`, default 300). Two ways, in one run:

- **in the request path** (what summarization middleware does): before each add, the agent
  checks usage and, at `warn_percent`, calls `compact("summarize")` itself and waits for it;
- **in the background**: the agent only adds; `store.run_compactor()` runs in a thread of the
  same process (a separate process in production) and summarises when the window crosses
  `warn_percent`.

Printed per way: the agent's step latency (the add, plus its compaction in the first way), the
summaries made, and the add-time server-side fallbacks (compactions that removed turns without
summarising them, because the window reached the threshold before a summary landed).
Run:  python benchmarks/background_compaction.py [--quick] [--model-ms N]
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import contextstore as cs

from _common import chat_message, redis_server, summarize, table, write_result

WARN = 50.0


class SlowSummarizer:
    """The extractive summarizer behind a fixed delay, standing in for a model call."""

    def __init__(self, delay_s: float) -> None:
        self.inner, self.delay_s = cs.ExtractiveSummarizer(), delay_s

    def budget(self, items: Sequence[cs.ContextItem]) -> int:
        return self.inner.budget(items)

    def summarize(self, items: Sequence[cs.ContextItem]) -> str:
        time.sleep(self.delay_s)
        return self.inner.summarize(items)


def _window(store: cs.ContextStore, window_id: str) -> cs.ContextWindow:
    return store.window(
        window_id, max_tokens=4000, warn_percent=WARN, compaction_threshold=90, default_strategy="summarize",
        keep_recent=4,
    )  # fmt: skip


def _strategies(w: cs.ContextWindow) -> list[str]:
    return [e.strategy.value for e in w.events(since="0") if isinstance(e, cs.events.Compacted)]


def agent(w: cs.ContextWindow, texts: list[str], pace_s: float, in_request_path: bool) -> list[float]:
    """The agent's steps; returns each step's seconds."""
    steps = []
    for n, text in enumerate(texts):
        t = time.perf_counter()
        if in_request_path and w.stats().usage_percent >= WARN:
            w.compact("summarize", target_percent=WARN - 15)
        w.add(text, type="user_message" if n % 2 == 0 else "assistant_message")
        steps.append(time.perf_counter() - t)
        time.sleep(pace_s)
    return steps


def run(url: str, texts: list[str], model_s: float, pace_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with cs.ContextStore.from_url(url, prefix="bench-bg", summarizer=SlowSummarizer(model_s)) as store:
        w = _window(store, "request-path")
        out["in the request path"] = (agent(w, texts, pace_s, True), _strategies(w))
        w = _window(store, "background")
        stop = threading.Event()
        compactor = threading.Thread(
            target=store.run_compactor, args=(["background"],), kwargs={"stop": stop, "block_ms": 100}
        )
        compactor.start()
        time.sleep(0.3)  # the compactor's consumer group is in place
        steps = agent(w, texts, pace_s, False)
        time.sleep(model_s * 3)  # a summary under way lands
        stop.set()
        compactor.join()
        out["in the background"] = (steps, _strategies(w))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer steps")
    ap.add_argument("--model-ms", type=int, default=300, help="simulated model latency of one summary")
    ap.add_argument("--pace-ms", type=int, default=50, help="the agent's time between steps")
    args = ap.parse_args()
    n = 200 if args.quick else 600
    rng = random.Random(3)
    texts = [chat_message(rng, "user") for _ in range(n)]
    with redis_server() as url:
        got = run(url, texts, args.model_ms / 1000, args.pace_ms / 1000)
    rows, payload = [], {}
    for way, (steps, strategies) in got.items():
        s = summarize(steps)
        summaries = strategies.count("summarize")
        fallbacks = len(strategies) - summaries
        ms = [f"{s['p50_us'] / 1000:.2f}", f"{s['p99_us'] / 1000:.1f}", f"{max(steps) * 1000:.0f}"]
        rows.append([way, *ms, summaries, fallbacks])
        payload[way] = {"steps": s, "max_ms": max(steps) * 1000, "summaries": summaries, "fallbacks": fallbacks}
    print(f"{n} agent steps, {args.pace_ms} ms apart; one summary takes {args.model_ms} ms of (simulated) model time\n")
    print(table(["way", "step p50 ms", "step p99 ms", "step max ms", "summaries", "add-time fallbacks"], rows))
    out = write_result("background_compaction", {"model_ms": args.model_ms, "steps": n, **payload})
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
