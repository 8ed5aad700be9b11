"""What a long agent session costs in provider input, against a simulated prompt cache.

    python benchmarks/cost.py [--turns 300] [--large-turns 100]
    python benchmarks/cost.py --smoke          # seconds: 40 and 15 turns

A synthetic tool-using session (each turn a user message, an assistant tool call with 1-3
results, an answer; a retrieved document every 10 turns) is replayed turn by turn on one
private redis-server, building Anthropic messages (``cache_control=True``) after each turn and
"sending" them to a simulated provider:

- it counts 25% more tokens than the store's estimates (tiktoken ``cl100k_base``), the
  under-estimate users report for other models; the model's context is 32,000 of *its* tokens,
  and a prompt over it less the 2,000 kept for the answer is one the provider refuses;
- it caches prompts as Anthropic does: the prefix up to each breakpoint (of 1,024 tokens or
  more), for 5 minutes refreshed on use (turns are 30 s apart); a request reads the longest
  cached prefix that ends at one of its breakpoints or up to 20 blocks before one at 0.1x, and
  writes the rest up to its last breakpoint at 1.25x (Anthropic's price ratios). The same
  requests also go to two other caches, for comparison: Anthropic's with breakpoints on the
  system block and the last block only (the build's before it marked where compactions edit),
  and one that reads any prefix shared with the previous request (no breakpoints needed).

Strategies: **trim every turn** (a window that never compacts; each build keeps the newest
messages within the budget, the way LangChain's ``trim_messages`` does); **clear at threshold**
(``clear_tool_results`` at 85%, ``clear_at_least``: the window's own compaction, as before
reported usage); the same **with calibration** (after each call, ``record_usage`` reports what
the provider counted: budgets then apply ``max_tokens / token_calibration``); and that with
``compaction_target=40`` (each compaction goes down to 40% rather than 15 points below the
threshold, so there are fewer of them, and each prompt in between extends the last), and with
``compaction_target=5`` (as far as clearing goes: every result outside ``keep_recent``). The 100-turn
session has tool results ten times larger (a group of them takes up to half the window, so the
windows there keep the 2 newest units from compaction rather than 6).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import contextstore as cs

from _common import chat_message, redis_server, table, write_result

#: the simulated provider counts this many tokens per estimated token
PROVIDER_RATIO = 1.25
#: the model's context, in the provider's tokens, and what each build keeps free for the answer
CONTEXT, RESERVE = 32_000, 2_000
READ_PRICE, WRITE_PRICE = 0.1, 1.25  # per input token, Anthropic's cache read / cache write ratios
#: Anthropic's cache: blocks looked back from a breakpoint, an entry's lifetime (s, refreshed on
#: use), the shortest prefix it caches (tokens); and the seconds between two turns
LOOKBACK, LIFETIME, MIN_CACHED, TURN_SECONDS = 20, 300, 1024, 30

STRATEGIES = {  # name: (window options, record usage)
    "trim every turn": ({"max_tokens": None, "max_items": 5_000}, False),
    "clear at threshold": (
        {"max_tokens": CONTEXT, "default_strategy": "clear_tool_results", "keep_recent": 6, "clear_at_least": 6000},
        False,
    ),
    "clear at threshold, calibrated": (
        {"max_tokens": CONTEXT, "default_strategy": "clear_tool_results", "keep_recent": 6, "clear_at_least": 6000},
        True,
    ),
    "clear at threshold down to 40%, calibrated": (
        {"max_tokens": CONTEXT, "default_strategy": "clear_tool_results", "keep_recent": 6, "clear_at_least": 6000,
         "compaction_target": 40.0},
        True,
    ),
    "clear at threshold down to 5%, calibrated": (
        {"max_tokens": CONTEXT, "default_strategy": "clear_tool_results", "keep_recent": 6, "clear_at_least": 6000,
         "compaction_target": 5.0},
        True,
    ),
}  # fmt: skip


def _turn(w: Any, t: int, rng: random.Random, result_scale: int) -> None:
    calls = [
        {"id": f"call_{t}_{k}", "type": "function", "function": {"name": "search", "arguments": f'{{"q": {t}}}'}}
        for k in range(rng.randint(1, 3))
    ]
    if t % 10 == 5:
        w.add(chat_message(rng, "assistant"), type="retrieved_document", source_ref=f"doc-{t}.md")
    w.add(chat_message(rng, "user"), role="user")
    w.add_many([
        {"content": "", "role": "assistant", "metadata": {"tool_calls": calls}},
        *({"content": chat_message(rng, "assistant") * result_scale, "role": "tool",
           "metadata": {"tool_call_id": c["id"]}} for c in calls),
    ])  # fmt: skip
    w.add(chat_message(rng, "assistant"), role="assistant")


class Cache:
    """A provider's prompt cache. ``anthropic``: prefixes are cached at the request's breakpoints
    (those of at least MIN_CACHED tokens) for LIFETIME seconds, refreshed when read or written
    again; a request reads the longest cached prefix that ends at one of its breakpoints or up to
    LOOKBACK blocks before one. Otherwise the longest prefix shared with the previous request is
    read, wherever it ends (the model of a cache that needs no breakpoints)."""

    def __init__(self, anthropic: bool) -> None:
        self.anthropic, self.entries = anthropic, {}
        self.read = self.written = self.cost = 0.0

    def send(self, keys: list[int], sizes: list[int], marks: set[int], now: float) -> tuple[int, int]:
        """Cache read and cache write tokens of a request of blocks whose prefixes have ``keys``."""
        ends = [sum(sizes[: n + 1]) for n in range(len(sizes))]
        if self.anthropic:
            near = {p for b in marks for p in range(max(0, b - LOOKBACK), b + 1)}
            hit = max((p for p in near if self.entries.get(keys[p], -1.0) >= now), default=-1)
            for p in [b for b in marks if ends[b] >= MIN_CACHED] + ([hit] if hit >= 0 else []):
                self.entries[keys[p]] = now + LIFETIME
            last = max(marks, default=-1)
        else:
            hit = max((p for p, k in enumerate(keys) if k in self.entries), default=-1)
            self.entries, last = dict.fromkeys(keys, now), len(keys) - 1
        read = ends[hit] if hit >= 0 else 0
        written = max(0, ends[last] - read) if last >= 0 and ends[last] >= MIN_CACHED else 0
        self.read, self.written = self.read + read, self.written + written
        self.cost += READ_PRICE * read + WRITE_PRICE * written + (ends[-1] - read - written if ends else 0)
        return read, written


class Provider:
    """The simulated provider: its token count of a prompt, its limit, and three caches of the
    same requests: Anthropic's with the build's breakpoints, Anthropic's with breakpoints on the
    system block and the last block only, and one that reads any prefix shared with the
    previous request."""

    def __init__(self, counter: cs.TokenCounter) -> None:
        self.counter, self.sizes = counter, {}
        self.caches = {"breakpoints": Cache(True), "two breakpoints": Cache(True), "any prefix": Cache(False)}
        self.refused = self.over = 0

    def size(self, block: str) -> int:
        if block not in self.sizes:
            self.sizes[block] = self.counter.count(block)
        return self.sizes[block]

    def send(self, built: dict[str, Any], plain: list[str], estimated: int, now: float) -> tuple[int, int]:
        """Cache read and cache write tokens of one request (``built``, its blocks ``plain``; its
        whole prompt as the provider counts it: PROVIDER_RATIO x the store's estimate, spread over
        the blocks) with the build's breakpoints; the other caches see the same request."""
        blocks = _blocks(built)
        keys, key = [], 0
        for text in plain:
            key = hash((key, text))
            keys.append(key)
        total, raw = round(estimated * PROVIDER_RATIO), [self.size(t) for t in plain]
        sizes = [round(total * r / max(1, sum(raw))) for r in raw]
        if total > CONTEXT - RESERVE:
            self.refused, self.over = self.refused + 1, self.over + total - (CONTEXT - RESERVE)
        marks = {n for n, b in enumerate(blocks) if "cache_control" in b}
        two = {len(built.get("system", [])) - 1, len(blocks) - 1} - {-1}
        self.caches["two breakpoints"].send(keys, sizes, two, now)
        self.caches["any prefix"].send(keys, sizes, marks, now)
        return self.caches["breakpoints"].send(keys, sizes, marks, now)


def _blocks(built: dict[str, Any]) -> list[dict[str, Any]]:
    """An Anthropic build's content blocks: the system's, then the messages'."""
    return [*built.get("system", []), *(b for turn in built["messages"] for b in turn["content"])]


def _plain(built: dict[str, Any]) -> list[str]:
    """An Anthropic build's blocks as the provider compares them (without their cache marks)."""
    return [json.dumps({k: v for k, v in b.items() if k != "cache_control"}, sort_keys=True) for b in _blocks(built)]


def most_extending(added: list[int], fixed: int) -> float:
    """The largest share of builds that can extend the previous one in a session whose turns add
    ``added`` estimated tokens each, with ``fixed`` tokens (the system prompt) in every prompt,
    when the provider refuses none: a build that extends the previous keeps all it sent, and
    every build sends its own turn, so the turns of a run of extending builds fit one prompt
    together. Packing the turns into as few runs as fit (greedy is fewest, for runs in order)
    leaves runs - 1 builds that cannot extend, whatever the compaction."""
    room, runs, used = (CONTEXT - RESERVE) / PROVIDER_RATIO - fixed, 1, 0
    for tokens in added:
        runs, used = (runs + 1, tokens) if used + tokens > room else (runs, used + tokens)
    return (len(added) - runs) / max(1, len(added) - 1)


def replay(url: str, name: str, turns: int, result_scale: int, keep_recent: int) -> dict[str, Any]:
    options, calibrate = STRATEGIES[name]
    options = {**options, "keep_recent": keep_recent} if "keep_recent" in options else options
    with cs.ContextStore.from_url(url, prefix=f"cost-{abs(hash((name, turns)))}", item_limit=5_000) as store:
        w = store.window("session", **options)
        w.add("You are a research agent. Use the search tool.", role="system", pinned=True)
        provider, rng, extends, previous = Provider(store._settings.counter), random.Random(3), 0, None
        left_out = 0  # builds that left items out of the window (each breaks the cached prefix)
        fixed, added = w.stats().current_tokens, []  # each turn's tokens, where nothing compacts
        invalidated, seen = 0, "0"  # the compacted events' tokens_invalidated, read as the session goes
        budget = CONTEXT if options["max_tokens"] is None else None  # trim: the build's own budget
        opts = cs.BuildOptions(order="arrival", reserve_for_response=RESERVE, max_history_items=100_000,
                               max_tokens=budget, cache_control=True)  # fmt: skip
        for t in range(turns):
            _turn(w, t, rng, result_scale)
            if options["max_tokens"] is None:
                added.append(w.stats().current_tokens - fixed - sum(added))
            built = w.build_messages_structured(opts, format="anthropic")
            left_out += bool(built.excluded_item_ids)
            plain = _plain(built.messages)
            extends += previous is not None and plain[: len(previous)] == previous
            previous = plain
            read, written = provider.send(built.messages, plain, built.total_tokens, t * TURN_SECONDS)
            if calibrate:
                w.record_usage(built.version, input_tokens=0, cache_read_tokens=read, cache_write_tokens=written)
            for event in w.events(since=seen):
                seen = event.id
                invalidated += (isinstance(event, cs.events.Compacted) and event.tokens_invalidated) or 0
        stats = w.stats()
        w.delete()
    main = provider.caches["breakpoints"]
    return {
        "extends_previous": extends / max(1, turns - 1),
        "most_extending": most_extending(added, fixed) if added else None,
        "input_cost": main.cost,
        "two_breakpoints_cost": provider.caches["two breakpoints"].cost,
        "any_prefix_cost": provider.caches["any prefix"].cost,
        "cache_read_share": main.read / max(1, main.read + main.written),
        "refused": provider.refused,
        "tokens_over": provider.over,
        "compactions": stats.compaction_count,
        "breaks": max(0, turns - 1) - extends,
        "builds_leaving_out": left_out,
        "tokens_invalidated": invalidated,
        "token_calibration": stats.token_calibration,
    }


def _per_compaction(r: dict[str, Any]) -> str:
    """Builds that did not extend the previous, per compaction ("-" without compactions: such a
    strategy breaks the prefix by trimming, not compacting)."""
    return f"{r['breaks'] / r['compactions']:.2f}" if r["compactions"] else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--large-turns", type=int, default=100)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        args.turns, args.large_turns = 40, 15
    out: dict[str, Any] = {"provider_ratio": PROVIDER_RATIO, "context": CONTEXT, "sessions": {}}
    with redis_server() as url:
        for label, turns, scale, keep_recent in (
            (f"{args.turns} turns", args.turns, 2, 6),
            (f"{args.large_turns} turns, large tool results", args.large_turns, 20, 2),
        ):
            results = {name: replay(url, name, turns, scale, keep_recent) for name in STRATEGIES}
            out["sessions"][label] = results
            base = results["trim every turn"]["input_cost"]
            rows = [
                [name, f"{r['extends_previous']:.0%}", f"{r['cache_read_share']:.0%}", f"{r['input_cost']:,.0f}",
                 f"{r['input_cost'] / base:.2f}x", f"{r['two_breakpoints_cost']:,.0f}", f"{r['any_prefix_cost']:,.0f}",
                 r["refused"], f"{r['tokens_over']:,}", r["compactions"], _per_compaction(r),
                 r["builds_leaving_out"], f"{r['tokens_invalidated']:,}", f"{r['token_calibration']:.2f}"]
                for name, r in results.items()
            ]  # fmt: skip
            most = results["trim every turn"]["most_extending"]
            print(f"\n### {label} (provider counts {PROVIDER_RATIO}x the estimates; context {CONTEXT:,})\n")
            print(f"builds that can extend the previous at most, none refused: {most:.0%}\n")
            print(table(["strategy", "builds extending the previous", "cache-read share", "input cost",
                         "vs trim", "input cost, 2 breakpoints", "input cost, any prefix", "refused", "tokens over",
                         "compactions", "prefix breaks per compaction", "builds leaving items out",
                         "tokens invalidated", "calibration"],
                        rows))  # fmt: skip
            worst = max((r["breaks"] / r["compactions"] for r in results.values() if r["compactions"]), default=0.0)
            print(f"\nprefix breaks per compaction <= 1 in every compacting strategy: "
                  f"{'met' if worst <= 1 else 'not met'} (most {worst:.2f})")  # fmt: skip
    print(f"\nwritten to {write_result('cost', out)}")


if __name__ == "__main__":
    main()
