"""Two versions of contextstore side by side on one server, in alternating rounds: what a change
costs the shard per call and the client per call.

    python benchmarks/paired.py --baseline /path/to/an/older/checkout [--server PATH] [--rounds 8]

Each round runs, for each version in turn (the order alternates), a fresh worker process with
that version first on its path: it fills its own window (--messages chat messages, the first
time), then times --calls adds of one message and --calls builds of chat messages (a stateless
store: every build reads), and --calls builds of a caching store of a window at its item cap (300
items, or --messages if fewer), each after another store's turn (4 adds, each evicting the
oldest), with options that let every item compete (``max_history_items``): chat messages, then a
prompt. Per call: the server's own time for the add's script (``INFO commandstats``: every script
command's usec over its calls) and the client's p50. The table
gives each version's median over the rounds and the ratio; the machine's noise shows in the
spread (min-max) of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import redis_server, server_version, table

HERE = Path(__file__).resolve().parents[1]

#: what one round of one version runs, in a process of its own (the version first on its path)
WORKER = r"""
import json, random, statistics, sys, time
import redis
import contextstore as cs

url, prefix, messages, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
SCRIPTS = ("evalsha", "evalsha_ro", "fcall", "fcall_ro")
r = redis.Redis.from_url(url)

def script_usec():
    stats = r.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("usec", 0) for c in SCRIPTS), sum(
        stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in SCRIPTS)

rng = random.Random(7)
words = "the of and to in a is that for it as was with be by on not he this are or his from at which".split()
text = lambda: " ".join(rng.choice(words) for _ in range(90))
with cs.ContextStore.from_url(url, prefix=prefix, item_cache_bytes=0, item_limit=5000) as store:
    w = store.window("w", max_tokens=10**9, max_items=5000)
    if w.stats().total_items == 0:
        for i in range(0, messages, 100):
            w.add_many([{"content": text(), "role": ("user", "assistant")[j % 2]} for j in range(100)])
    out = {}
    for name, call in (("add", lambda: w.add(text(), role="user")),
                       ("build", lambda: w.build_messages(cs.BuildOptions(max_tokens=8000)))):
        call()
        usec0, calls0 = script_usec()
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            call()
            times.append((time.perf_counter() - t) * 1e6)
        usec1, calls1 = script_usec()
        out[name] = {"script_us": (usec1 - usec0) / max(1, calls1 - calls0), "client_p50_us": statistics.median(times)}
    w.remove("ctx-1")  # keep the window's size from round to round
    # a caching worker's build of a window at its item cap after another worker's turn (4 adds, 4 evictions)
    cap = min(300, messages)
    capped = store.window("capped", max_tokens=10**9, max_items=cap)
    if capped.stats().total_items == 0:
        capped.add_many([{"content": text(), "role": ("user", "assistant")[j % 2]} for j in range(cap)])
    with cs.ContextStore.from_url(url, prefix=prefix) as caching:
        seen = caching.window("capped")
        for name, build in (("build after evictions", seen.build_messages),
                            ("build (prompt) after evictions", seen.build_structured)):
            times = []
            for n in range(calls + 1):
                capped.add_many([{"content": text(), "role": ("user", "assistant")[j % 2]} for j in range(4)])
                t = time.perf_counter()
                build(cs.BuildOptions(max_tokens=8000, max_history_items=100_000))
                times.append((time.perf_counter() - t) * 1e6)
            out[name] = {"client_p50_us": statistics.median(times[1:])}  # the first: the cache was cold
out["version"] = cs.__file__
print(json.dumps(out))
"""


def _round(path: Path, url: str, prefix: str, messages: int, calls: int) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": str(path)}
    done = subprocess.run(  # run from the version's folder: `python -c` puts the working folder first
        [sys.executable, "-c", WORKER, url, prefix, str(messages), str(calls)],
        env=env, cwd=path, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the worker of {path} failed:\n{done.stderr[-2000:]}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if not got.pop("version").startswith(str(path)):
        raise SystemExit(f"the worker of {path} imported another contextstore")
    return got  # type: ignore[no-any-return]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout of the version to compare with")
    ap.add_argument("--server", help="the server binary (default: the embedded default's valkey-server)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--messages", type=int, default=1000)
    args = ap.parse_args()
    if args.server:
        os.environ["CONTEXTSTORE_BENCH_REDIS"] = args.server
    sides = {"baseline": args.baseline.resolve(), "this": HERE}
    got: dict[str, list[dict[str, dict[str, float]]]] = {side: [] for side in sides}
    with redis_server(tcp=True) as url:
        version = server_version(url)
        for n in range(args.rounds):
            order = list(sides) if n % 2 == 0 else list(reversed(sides))
            for side in order:
                got[side].append(_round(sides[side], url, f"pb-{side}", args.messages, args.calls))
    rows = []
    for op in ("add", "build", "build after evictions", "build (prompt) after evictions"):
        for metric in ("script_us", "client_p50_us"):
            if metric not in got["this"][0][op]:
                continue
            per = {side: [r[op][metric] for r in got[side]] for side in sides}
            base, this = statistics.median(per["baseline"]), statistics.median(per["this"])
            spread = " / ".join(f"{min(v):.0f}-{max(v):.0f}" for v in per.values())
            rows.append([op, metric, f"{base:.1f}", f"{this:.1f}", f"{this / base:.2f}x", spread])
    print(f"\n### Redis {version}: {args.rounds} alternating rounds of {args.calls} calls, {args.messages} messages\n")
    print(table(["call", "per call", "baseline", "this", "ratio", "spread of rounds (baseline / this)"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
