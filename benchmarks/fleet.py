"""What one Redis shard pays per agent turn when a fleet of stateless workers shares its sessions.

    pip install -e '.[bench]' && python benchmarks/fleet.py [--sessions 2000] [--workers 4] [--seconds 20]
    python benchmarks/fleet.py --smoke        # seconds: contextstore (both kinds of worker) and the floor
    python benchmarks/fleet.py --max-items 300   # contextstore's sessions at an item cap: turns evict
    python benchmarks/fleet.py --turns 500      # the same turns on every run: to pair two versions

One private server per run (the embedded default's Valkey 9, and a Redis 7.x where one is
installed: both by default), S sessions pre-filled with 20-1000 chat messages each (users, assistants, and tool
calls with their results), W worker processes taking turns for random sessions (no affinity).
contextstore runs twice: with workers that keep the store's default item cache (a shortened run,
where every session fits in it, finds most windows cached and reads only what other workers
added), and with stateless workers (``item_cache_bytes=0``: every build starts cold, reading the
window's facts and then the bodies that fit, as with the defaults, where the sessions are ~9x a
worker's cache). A turn builds the prompt within a budget,
then adds the user's message and the assistant's answer, and one turn in three a tool call with
its result. Half the sessions fit their budget, half are 3x over it; each half runs on its own.
With ``--max-items N`` contextstore's sessions hold at most N items (2,000 by default), so a full
one evicts its oldest at every add (then the messages lost or duplicated are not counted).
With ``--turns N`` each worker takes N turns a half, the same ones on every run: the way to pair
two versions, since a timed run's cost per turn depends on how many turns it took (a caching
worker's first turn on a session reads it whole, so a slower run spends more of its turns cold).

The same turns, side by side, for openai-agents ``RedisSession`` (get_items, trimmed to the
budget on the client, add_items), LangChain ``RedisChatMessageHistory`` (messages,
``trim_messages``, add_messages), llama-index ``RedisChatStore`` + ``ChatMemoryBuffer`` (get
within a token limit, put), and the floor (LRANGE, trimmed on the client, one RPUSH per message).

Per system it reports the Redis CPU per turn (the commands' time from ``INFO commandstats``, where
``EXEC`` and a script count with the commands they run and those count again on their own, and
the server process's ``used_cpu_user + used_cpu_sys``), the turns per second one shard could
carry (1 s / the process CPU per turn), the client's p50 / p99 per turn and the bytes moved per turn; then the goals
as met / not met. Writes benchmarks/results/fleet.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis

import contextstore as cs

from _common import (
    PEER_DISTS,
    chat_message,
    redis_binary,
    redis_server,
    server_version,
    summarize,
    table,
    versions,
    write_result,
)

# -- the conversations -------------------------------------------------------------------------

#: one message of a session: (kind, content, call id); kinds: user, assistant, call, result
Msg = tuple[str, str, str]


def session_messages(sid: int, smallest: int, largest: int) -> list[Msg]:
    """The pre-filled history of session ``sid``: turns of a question, sometimes a tool call
    and its result, and an answer, until it holds ``smallest``-``largest`` messages."""
    rng = random.Random(sid)
    want, out, turn = rng.randint(smallest, largest), [], 0
    while len(out) < want:  # whole turns: a tool call always with its result
        out += turn_messages(rng, f"s{sid}t{turn}")
        turn += 1
    return out


def turn_messages(rng: random.Random, tag: str, tool_every: int = 3) -> list[Msg]:
    """One turn: the user's message, a tool call and its result one time in ``tool_every``, the answer."""
    out: list[Msg] = [("user", chat_message(rng, "user"), "")]
    if rng.randrange(tool_every) == 0:
        call_id = f"call_{tag}"
        out += [
            ("call", '{"query": "status of ' + tag + '"}', call_id),
            ("result", chat_message(rng, "assistant"), call_id),
        ]
    out.append(("assistant", chat_message(rng, "assistant"), ""))
    return out


def encoding() -> Any:
    from contextstore.core.tokens import _load_encoding

    return _load_encoding("cl100k_base")


# -- the systems -------------------------------------------------------------------------------


class FleetSystem:
    """One store as a worker of a fleet uses it: ``turn`` builds within a budget then adds."""

    name = ""

    def __init__(self, url: str) -> None:
        self.url = url
        self.count = encoding().encode

    def fill(self, sid: str, messages: list[Msg]) -> None: ...

    def turn(self, sid: str, budget: int, new: list[Msg]) -> int:
        """Build within ``budget``, then add ``new``; returns how many messages the build kept."""
        raise NotImplementedError

    def trimmed(self, texts: list[str], budget: int) -> int:
        """How many of the newest ``texts`` fit ``budget`` tokens (the peers trim on the client)."""
        used = kept = 0
        for text in reversed(texts):
            used += len(self.count(text)) + 4
            if used > budget:
                break
            kept += 1
        return kept

    def stored(self, sid: str) -> int | None:
        """How many messages session ``sid`` holds (None where this benchmark does not count)."""
        return None

    def close(self) -> None: ...


class ContextStoreFleet(FleetSystem):
    name = "contextstore"
    #: the store's item cache (None: its default, 64 MiB): what a worker keeps of the windows it read
    cache_bytes: int | None = None

    def __init__(self, url: str) -> None:
        super().__init__(url)
        cache = {} if self.cache_bytes is None else {"item_cache_bytes": self.cache_bytes}
        self.store = cs.ContextStore.from_url(url, prefix="cs", item_limit=max(2000, max_items()), **cache)
        self.windows: dict[str, Any] = {}

    def window(self, sid: str) -> Any:
        if sid not in self.windows:
            self.windows[sid] = self.store.handle(sid, max_tokens=200_000, max_items=max_items())
        return self.windows[sid]

    @staticmethod
    def entry(m: Msg) -> dict[str, Any]:
        kind, content, call_id = m
        if kind == "call":
            call = {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": content}}
            return {"content": "", "role": "assistant", "metadata": {"tool_calls": [call]}}
        if kind == "result":
            return {"content": content, "role": "tool", "metadata": {"tool_call_id": call_id}}
        return {"content": content, "role": kind}

    def fill(self, sid: str, messages: list[Msg]) -> None:
        w = self.window(sid)
        for i in range(0, len(messages), 200):
            w.add_many([self.entry(m) for m in messages[i : i + 200]])

    def turn(self, sid: str, budget: int, new: list[Msg]) -> int:
        w = self.window(sid)
        opts = cs.BuildOptions(max_tokens=budget, reserve_for_response=0, max_history_items=100_000)
        built = w.build_messages_structured(opts)
        w.add_many([self.entry(new[0])])
        if len(new) > 2:
            w.add_many([self.entry(m) for m in new[1:3]])
        w.add_many([self.entry(new[-1])])
        return len(built.included_item_ids)

    def stored(self, sid: str) -> int | None:
        held = self.window(sid).stats().total_items
        return held if held < max_items() else None  # at its cap it evicts: not counted

    def close(self) -> None:
        self.store.close()


#: contextstore's sessions' item cap (``--max-items``): above the largest session, none evicts
MAX_ITEMS = 2000


def max_items() -> int:
    """The item cap of contextstore's sessions, in every worker process (``--max-items``)."""
    return int(os.environ.get("CONTEXTSTORE_BENCH_MAX_ITEMS", MAX_ITEMS))


class StatelessFleet(ContextStoreFleet):
    """Workers that keep nothing of a window between turns (``item_cache_bytes=0``): every build
    starts cold, as a worker's does whose cache no longer holds the window (the defaults, 2000
    sessions of up to 1000 messages, are ~9x a worker's 64 MiB cache); its chat builds read the
    window's facts, then the bodies that fit."""

    name = "contextstore, stateless workers"
    cache_bytes = 0


class FloorFleet(FleetSystem):
    """The floor of a list store: LRANGE 0 -1, trimmed on the client, one RPUSH per message."""

    name = "floor (LRANGE + RPUSH)"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.client = redis.Redis.from_url(url)

    def fill(self, sid: str, messages: list[Msg]) -> None:
        self.client.rpush(f"floor:{sid}", *(json.dumps(m) for m in messages))

    def turn(self, sid: str, budget: int, new: list[Msg]) -> int:
        texts = [json.loads(x)[1] for x in self.client.lrange(f"floor:{sid}", 0, -1)]
        kept = self.trimmed(texts, budget)
        for m in new:
            self.client.rpush(f"floor:{sid}", json.dumps(m))
        return kept

    def stored(self, sid: str) -> int | None:
        return int(self.client.llen(f"floor:{sid}"))

    def close(self) -> None:
        self.client.close()


class AgentsFleet(FleetSystem):
    name = "openai-agents"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import asyncio

        import redis.asyncio as aredis

        self.loop = asyncio.new_event_loop()
        self.client = aredis.Redis.from_url(url)

    def session(self, sid: str) -> Any:
        from agents.extensions.memory.redis_session import RedisSession

        return RedisSession(sid, redis_client=self.client, key_prefix="agents")

    @staticmethod
    def item(m: Msg) -> dict[str, Any]:
        kind, content, call_id = m
        if kind == "call":
            return {"type": "function_call", "call_id": call_id, "name": "lookup", "arguments": content}
        if kind == "result":
            return {"type": "function_call_output", "call_id": call_id, "output": content}
        return {"role": kind, "content": content}

    def fill(self, sid: str, messages: list[Msg]) -> None:
        self.loop.run_until_complete(self.session(sid).add_items([self.item(m) for m in messages]))

    def turn(self, sid: str, budget: int, new: list[Msg]) -> int:
        async def go() -> int:
            s = self.session(sid)
            items = await s.get_items()
            texts = [str(i.get("content") or i.get("output") or i.get("arguments") or "") for i in items]
            kept = self.trimmed(texts, budget)
            await s.add_items([self.item(new[0])])
            if len(new) > 2:
                await s.add_items([self.item(m) for m in new[1:3]])
            await s.add_items([self.item(new[-1])])
            return kept

        return self.loop.run_until_complete(go())

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


class LangChainFleet(FleetSystem):
    name = "langchain"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage, trim_messages

        self.AI, self.Human, self.Tool, self.trim = AIMessage, HumanMessage, ToolMessage, trim_messages
        count = self.count

        def tokens(m: BaseMessage) -> int:
            return len(count(str(m.content))) + 4

        tokens.__annotations__ = {"m": BaseMessage, "return": int}  # trim_messages sums it per message
        self.tokens = tokens

    def history(self, sid: str) -> Any:
        from langchain_community.chat_message_histories import RedisChatMessageHistory

        return RedisChatMessageHistory(sid, url=self.url, key_prefix="langchain:")

    def message(self, m: Msg) -> Any:
        kind, content, call_id = m
        if kind == "call":
            return self.AI(content="", tool_calls=[{"name": "lookup", "args": json.loads(content), "id": call_id}])
        if kind == "result":
            return self.Tool(content=content, tool_call_id=call_id)
        return self.Human(content=content) if kind == "user" else self.AI(content=content)

    def fill(self, sid: str, messages: list[Msg]) -> None:
        self.history(sid).add_messages([self.message(m) for m in messages])

    def turn(self, sid: str, budget: int, new: list[Msg]) -> int:
        h = self.history(sid)
        kept = self.trim(h.messages, max_tokens=budget, token_counter=self.tokens, strategy="last")
        h.add_message(self.message(new[0]))
        if len(new) > 2:
            h.add_messages([self.message(m) for m in new[1:3]])
        h.add_message(self.message(new[-1]))
        return len(kept)


class LlamaIndexFleet(FleetSystem):
    name = "llama-index"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import redis.asyncio as aredis
        from llama_index.core.llms import ChatMessage
        from llama_index.core.memory import ChatMemoryBuffer
        from llama_index.storage.chat_store.redis import RedisChatStore

        self.ChatMessage, self.Buffer = ChatMessage, ChatMemoryBuffer
        self.client, self.aclient = redis.Redis.from_url(url), aredis.Redis.from_url(url)
        self.chat_store = RedisChatStore(redis_url=url, redis_client=self.client, aredis_client=self.aclient)

    def message(self, m: Msg) -> Any:
        kind, content, call_id = m
        if kind == "call":
            call = {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": content}}
            return self.ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [call]})
        if kind == "result":
            return self.ChatMessage(role="tool", content=content, additional_kwargs={"tool_call_id": call_id})
        return self.ChatMessage(role=kind, content=content)

    def fill(self, sid: str, messages: list[Msg]) -> None:
        self.chat_store.set_messages(f"llama:{sid}", [self.message(m) for m in messages])

    def turn(self, sid: str, budget: int, new: list[Msg]) -> int:
        memory = self.Buffer.from_defaults(
            token_limit=budget, chat_store=self.chat_store, chat_store_key=f"llama:{sid}", tokenizer_fn=self.count
        )
        kept = len(memory.get())
        for m in new:
            memory.put(self.message(m))
        return kept

    def close(self) -> None:
        self.client.close()


SYSTEMS: dict[str, type[FleetSystem]] = {
    s.name: s for s in (ContextStoreFleet, StatelessFleet, FloorFleet, AgentsFleet, LangChainFleet, LlamaIndexFleet)
}
PEERS = ("openai-agents", "langchain", "llama-index")
#: contextstore's rows: workers with the default item cache, and workers that keep nothing
OURS = (ContextStoreFleet.name, StatelessFleet.name)

# -- the run -----------------------------------------------------------------------------------


def fill_part(name: str, url: str, sids: list[int], smallest: int, largest: int) -> dict[int, int]:
    """Fill sessions ``sids`` (one worker process); returns each one's tokens."""
    system = SYSTEMS[name](url)
    tokens = {}
    for sid in sids:
        messages = session_messages(sid, smallest, largest)
        system.fill(f"s{sid}", messages)
        tokens[sid] = sum(len(system.count(c)) + 4 for _, c, _ in messages)
    system.close()
    return tokens


def work(
    name: str, url: str, sids: list[int], budgets: dict[int, int], seed: int, deadline: float, turns: int = 0
) -> tuple[list[float], dict[int, int]]:
    """One worker process: turns for random sessions of ``sids`` until ``deadline`` (one at
    least, however late the process started), or ``turns`` of them when given (the same turns
    on every run: ``seed`` picks the sessions and writes the messages); the time of each turn
    and how many messages it added to each session."""
    rng = random.Random(seed)
    system = SYSTEMS[name](url)
    times: list[float] = []
    added: dict[int, int] = {}
    n = 0
    while n < turns if turns else (n == 0 or time.time() < deadline):
        sid = rng.choice(sids)
        new = turn_messages(rng, f"w{seed}n{n}")
        t = time.perf_counter()
        system.turn(f"s{sid}", budgets[sid], new)
        times.append(time.perf_counter() - t)
        added[sid] = added.get(sid, 0) + len(new)
        n += 1
    system.close()
    return times, added


def wrong_counts(name: str, url: str, expected: dict[int, int]) -> int | None:
    """Messages lost or duplicated over every session (None: the system cannot count them)."""
    system = SYSTEMS[name](url)
    try:
        counts = {sid: system.stored(f"s{sid}") for sid in expected}
    finally:
        system.close()
    if any(c is None for c in counts.values()):
        return None
    return sum(abs(int(counts[sid] or 0) - want) for sid, want in expected.items())


def server_counters(url: str) -> dict[str, float]:
    """What the server says it spent: commands' own µs, its process CPU, bytes in and out."""
    c = redis.Redis.from_url(url)
    try:
        stats, cpu, net = c.info("commandstats"), c.info("cpu"), c.info("stats")
    finally:
        c.close()
    per = {k.removeprefix("cmdstat_"): v for k, v in stats.items()}
    return {
        "commands_us": sum(float(v["usec"]) for v in per.values()),
        "cpu_us": (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6,
        "bytes": float(net["total_net_input_bytes"]) + float(net["total_net_output_bytes"]),
        "by_command": {k: (int(v["calls"]), float(v["usec"])) for k, v in per.items()},
    }


def phase(
    pool: Any, name: str, url: str, sids: list[int], budgets: dict[int, int], workers: int, seconds: float, turns: int
) -> dict[str, Any]:
    """The ``workers`` processes of ``pool`` (started already) take turns on ``sids`` for
    ``seconds`` (or ``turns`` each, when given), each with a store of its own; what the server
    paid per turn."""
    c = redis.Redis.from_url(url)
    c.config_resetstat()
    c.close()
    before = server_counters(url)
    deadline = time.time() + 0.1 + seconds  # each worker picks up its part meanwhile
    parts = pool.starmap(work, [(name, url, sids, budgets, 1000 + w, deadline, turns) for w in range(workers)])
    after = server_counters(url)
    times = [t for p, _ in parts for t in p]
    added = {sid: sum(a.get(sid, 0) for _, a in parts) for sid in sids}
    turns = len(times)
    commands_us = (after["commands_us"] - before["commands_us"]) / turns
    cpu_us = (after["cpu_us"] - before["cpu_us"]) / turns
    top = sorted(after["by_command"].items(), key=lambda kv: -kv[1][1])[:8]
    return {
        "turns": turns,
        "server_commands_us_per_turn": commands_us,
        "server_cpu_us_per_turn": cpu_us,
        "turns_per_second_one_shard": 1e6 / max(cpu_us, 1e-9),  # commandstats counts nested calls twice
        "bytes_per_turn": (after["bytes"] - before["bytes"]) / turns,
        "client": summarize(times),
        "top_commands": {k: {"calls_per_turn": n / turns, "us_per_turn": us / turns} for k, (n, us) in top},
        "added": added,
    }


def run_system(name: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    c = redis.Redis.from_url(url)
    c.flushall()
    c.close()
    ctx = mp.get_context("spawn")
    sids = list(range(args.sessions))
    parts = [sids[w :: args.workers] for w in range(args.workers)]
    with ctx.Pool(args.workers) as pool:  # started once: the phases' workers are up when they begin
        filled = pool.starmap(fill_part, [(name, url, p, args.smallest, args.largest) for p in parts])
        tokens = {sid: n for part in filled for sid, n in part.items()}
        fits = [s for s in sids if s % 2 == 0]
        over = [s for s in sids if s % 2 == 1]
        budgets = {s: tokens[s] * 2 if s % 2 == 0 else max(50, tokens[s] // 3) for s in sids}
        used = redis.Redis.from_url(url).info("memory")["used_memory"]
        out = {"sessions": len(sids), "messages_per_session": [args.smallest, args.largest], "used_memory": used}
        out["fits"] = phase(pool, name, url, fits, budgets, args.workers, args.seconds / 2, args.turns)
        out["over"] = phase(pool, name, url, over, budgets, args.workers, args.seconds / 2, args.turns)
    filled = {sid: len(session_messages(sid, args.smallest, args.largest)) for sid in sids}
    added = {**out["fits"].pop("added"), **out["over"].pop("added")}
    out["lost_or_duplicated"] = wrong_counts(name, url, {sid: filled[sid] + added[sid] for sid in sids})
    return out


def redis7() -> str | None:
    """A redis-server 7 or newer on PATH or where Debian puts it."""
    for found in (shutil.which("redis-server"), "/usr/bin/redis-server", "/usr/local/bin/redis-server"):
        if not found or not os.path.exists(found):
            continue
        out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30).stdout
        m = re.search(r"v=(\d+)\.", out)
        if m and int(m.group(1)) >= 7:
            return found
    return None


# -- the report --------------------------------------------------------------------------------


def report(results: dict[str, Any], names: list[str]) -> None:
    for server, by_system in results["servers"].items():
        for case, title in (("fits", "sessions that fit their budget"), ("over", "sessions 3x over their budget")):
            rows = []
            for s in names:
                r = by_system[s][case]
                rows.append(
                    [
                        s,
                        f"{r['server_commands_us_per_turn']:.0f}",
                        f"{r['server_cpu_us_per_turn']:.0f}",
                        f"{r['turns_per_second_one_shard']:,.0f}",
                        f"{r['client']['p50_us'] / 1000:.2f}",
                        f"{r['client']['p99_us'] / 1000:.2f}",
                        f"{r['bytes_per_turn'] / 1024:.1f}",
                        r["turns"],
                    ]
                )
            print(f"\n### Redis {server}: {title}\n")
            print(
                table(
                    [
                        "system",
                        "Redis µs/turn (commandstats, nested twice)",
                        "Redis CPU µs/turn (process)",
                        "turns/s one shard",
                        "client p50 ms",
                        "client p99 ms",
                        "KiB moved/turn",
                        "turns",
                    ],
                    rows,
                )
            )
        for ours in (n for n in OURS if n in by_system):
            print(f"\n{ours}: the costliest commands per turn (a script's time includes the commands it runs):")
            for case in ("fits", "over"):
                top = by_system[ours][case]["top_commands"]
                print(
                    f"  {case}: "
                    + ", ".join(f"{k} {v['calls_per_turn']:.1f}x {v['us_per_turn']:.0f}µs" for k, v in top.items())
                )
    goals(results, names)


def _turn_goals(server: str, name: str, by_system: dict[str, Any], peers: list[str]) -> list[list[str]]:
    """The Redis-CPU-per-turn goals of one of ``OURS`` against the best peer of this run."""
    rows = []
    for case, factor, label in (("fits", 1.0, "≤ the best peer's"), ("over", 0.5, "≤ 0.5x the best peer's")):
        if not peers:
            break
        ours = by_system[name][case]["server_cpu_us_per_turn"]
        best_name = min(peers, key=lambda p: by_system[p][case]["server_cpu_us_per_turn"])
        best = by_system[best_name][case]["server_cpu_us_per_turn"]
        ratio = ours / best
        rows.append(
            [f"Redis {server}: {name}: Redis CPU per turn, {case} {label}",
             f"{ours:.0f} vs {best:.0f} µs, {best_name} ({ratio:.2f}x)", "met" if ratio <= factor else "not met"]
        )  # fmt: skip
    return rows


def goals(results: dict[str, Any], names: list[str]) -> None:
    """Every goal of the issue this benchmark answers, met or not, from this run."""
    if results["shard"]:
        from shard import report as report_shard

        for server, costs in results["shard"].items():
            report_shard(server, costs)
    peers = [n for n in names if n in PEERS]
    rows = []
    for server, by_system in results["servers"].items():
        for name in (n for n in OURS if n in by_system):
            rows += _turn_goals(server, name, by_system, peers)
            lost = by_system[name]["lost_or_duplicated"]
            rows.append([f"Redis {server}: {name}: messages lost or duplicated over every session", str(lost),
                         "met" if lost == 0 else "not met"])  # fmt: skip
    if results["shard"]:
        from shard import goal_rows

        for server, costs in results["shard"].items():
            rows += goal_rows(server, costs)
    print("\n### Goals\n")
    print(table(["goal", "measured", "status"], rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--smallest", type=int, default=20, help="fewest messages a session is filled with")
    ap.add_argument("--largest", type=int, default=1000, help="most messages a session is filled with")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0, help="turns per system: half fit, half over")
    ap.add_argument(
        "--turns", type=int, default=0, help="turns each worker takes in each half instead of --seconds (paired runs)"
    )
    ap.add_argument("--only", nargs="*", default=None, help="systems (default: all)")
    ap.add_argument("--server", choices=["embedded", "7", "both"], default="both")
    ap.add_argument("--smoke", action="store_true", help="seconds: contextstore and the floor, small sizes, no file")
    ap.add_argument("--max-items", type=int, default=MAX_ITEMS, help="contextstore's sessions evict past this many")
    ap.add_argument("--no-single-calls", action="store_true", help="the fleet only (paired runs: any version)")
    ap.add_argument("--json", type=Path, help="write the results here (and not to benchmarks/results)")
    args = ap.parse_args()
    os.environ["CONTEXTSTORE_BENCH_MAX_ITEMS"] = str(args.max_items)
    if args.smoke:
        args.sessions, args.smallest, args.largest, args.workers, args.seconds = 12, 20, 60, 2, 1.0
        args.server = "embedded"
    names = args.only or ([*OURS, FloorFleet.name] if args.smoke else list(SYSTEMS))
    binaries = {"embedded": redis_binary()}
    if args.server in ("7", "both") and redis7():
        binaries["7"] = redis7()  # type: ignore[assignment]
    if args.server == "7":
        binaries.pop("embedded")
    results: dict[str, Any] = {"versions": versions(*PEER_DISTS), "args": vars(args), "servers": {}, "shard": {}}
    for binary in binaries.values():
        os.environ["CONTEXTSTORE_BENCH_REDIS"] = binary
        with redis_server(tcp=True) as url:
            version = server_version(url)
            results["servers"][version] = {}
            for name in names:
                print(f"Redis {version}: {name} ...", file=sys.stderr, flush=True)
                results["servers"][version][name] = run_system(name, url, args)
            if not args.no_single_calls:
                from shard import shard_costs  # this version's internals: not there in older ones

                print(f"Redis {version}: single calls ...", file=sys.stderr, flush=True)
                results["shard"][version] = shard_costs(url, 100 if args.smoke else 1000)
    report(results, names)
    if args.json is not None:
        args.json.write_text(json.dumps(results, default=str))
    elif not args.smoke:
        print(f"\nwrote {write_result('fleet', results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
