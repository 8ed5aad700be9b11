"""How long each script runs on the server at the largest windows. Redis runs one script at a
time and serves nobody meanwhile, so the goal is that no call runs longer than ~50 ms (far below
the busy-script threshold, lua-time-limit, 5000 ms, past which Redis answers BUSY to everyone).

Two windows at the limits a store accepts:
  bytes: item_limit=1000 items of max_content_bytes=1 MiB each (1 GiB of content)
  count: item_limit=200000 items (the largest item_limit, core/layout.MAX_ITEM_LIMIT) of ~100 bytes
On each: an evicting add at capacity, a cold build (every item read), a warm build (the store
has cached the items), a snapshot read, an add that crosses the compaction threshold (the window
compacts from 100% to 84% inside the add), a compaction that removes every unpinned item, a clear.
Durations are the server's own, so network and client time do not count: the mean per script
call (INFO commandstats) and the longest single call (SLOWLOG, which logs every call over 2 ms).
Starts its own bundled redis-server and stops it. Prints a table; writes
benchmarks/results/bounds.json.
Run:  python benchmarks/bounds.py [--quick]   (--quick: 100 MiB / 20000 items)
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import redis

import contextstore as cs
from contextstore.core.layout import MAX_ITEM_LIMIT

from _common import redis_server, write_result

BUSY_MS = 5000.0
GOAL_MS = 50.0
#: how a script call reaches the server: FCALL / FCALL_RO, or EVALSHA (functions=False, a cluster)
SCRIPT_CALLS = (b"EVALSHA", b"EVAL", b"FCALL", b"FCALL_RO")


def longest_call_ms(client: redis.Redis) -> float:
    """The longest script call since the last SLOWLOG RESET (0 when none took over 2 ms)."""
    entries = client.slowlog_get(1000)
    took = [e["duration"] for e in entries if e["command"].split(b" ", 1)[0].upper() in SCRIPT_CALLS]
    return max(took, default=0) / 1000


def script_stats(client: redis.Redis) -> tuple[int, float]:
    """(script calls, server µs per call) since the last CONFIG RESETSTAT, from INFO commandstats."""
    calls, usec = 0, 0.0
    for name, st in client.info("commandstats").items():
        if name.removeprefix("cmdstat_").upper().encode() in SCRIPT_CALLS:
            calls += int(st["calls"])
            usec += float(st["usec"])
    return calls, (usec / calls if calls else 0.0)


def measure(client: redis.Redis, store: cs.ContextStore, name: str, n_items: int, size: int) -> list[dict]:
    store_limit = n_items
    w = store.window(name, max_items=store_limit)
    body = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[: size - 12]
    batch = max(1, min(1000, (64 << 20) // size))  # keep each call's arguments under ~64 MiB
    t0 = time.perf_counter()
    for start in range(0, n_items, batch):
        w.add_many(
            [
                {
                    "content": f"{i:>10}: {body}",
                    "token_count": max(1, size // 4),
                    "priority": i % 101,
                    "type": "retrieved_document",
                }
                for i in range(start, min(n_items, start + batch))
            ]
        )
    fill_s = time.perf_counter() - t0
    rows = []

    def step(what: str, fn) -> None:
        client.config_resetstat()
        client.slowlog_reset()
        t = time.perf_counter()
        fn()
        wall = time.perf_counter() - t
        calls, per_call_us = script_stats(client)
        server_ms = per_call_us / 1000
        rows.append(
            {
                "window": f"{n_items} x {size} B",
                "operation": what,
                "script_calls": calls,
                "server_ms_per_call": server_ms,
                "longest_call_ms": longest_call_ms(client),
                "wall_ms": wall * 1000,
                "busy_fraction": server_ms / BUSY_MS,
            }
        )

    step("add at capacity (evicts 1)", lambda: w.add("one more " + body[:100], token_count=3))
    everything = cs.BuildOptions(max_tokens=10**9, reserve_for_response=0, max_history_items=0)
    step("build, cold (reads every item)", lambda: w.build(everything))
    step("build, warm (items cached)", lambda: w.build(everything))
    step("snapshot (read all)", w.snapshot)
    total = w.stats().current_tokens
    w.configure(max_tokens=total, compaction_threshold=99)  # full: the next add compacts to 84%
    step("add over the threshold (to 84%)", lambda: w.add("one more", token_count=max(1, size // 4)))
    step("configure max_tokens (no work)", lambda: w.configure(max_tokens=10))
    step("compact to 0% (removes all)", lambda: w.compact("remove_low_priority", 0))
    w.add_many([{"content": f"{i}: {body[:200]}", "token_count": 1} for i in range(min(n_items, 1000))])
    step("clear", w.clear)
    w.delete()
    print(f"  filled {n_items} items of {size} B in {fill_s:.1f}s", file=sys.stderr)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    with redis_server() as url:
        client = redis.Redis.from_url(url)
        client.config_set("client-query-buffer-limit", str(1 << 30))
        client.config_set("slowlog-log-slower-than", "2000")  # µs: inner commands of a script are logged too
        client.config_set("slowlog-max-len", "1000")
        version = client.info("server")["redis_version"]
        rows: list[dict] = []
        scenarios = (
            [(100, 1 << 20, 1000), (20_000, 100, 20_000)]
            if a.quick
            else [(1000, 1 << 20, 1000), (MAX_ITEM_LIMIT, 100, MAX_ITEM_LIMIT)]
        )
        for n, size, limit in scenarios:
            with cs.ContextStore(client, item_limit=limit, max_content_bytes=max(size, 1 << 20)) as store:
                rows += measure(client, store, f"bounds-{n}", n, size)
        client.close()
    print(
        f"Redis {version} (bundled), Python {platform.python_version()}, {platform.machine()}; "
        f"goal: no call over {GOAL_MS:.0f} ms; busy-script threshold {BUSY_MS:.0f} ms"
    )
    print(f"{'window':<22}{'operation':<32}{'calls':>6}{'ms/call':>9}{'longest':>9}{'wall ms':>10}{'≤ 50 ms':>9}")
    for r in rows:
        print(
            f"{r['window']:<22}{r['operation']:<32}{r['script_calls']:>6}{r['server_ms_per_call']:>9.1f}"
            f"{r['longest_call_ms']:>9.1f}{r['wall_ms']:>10.1f}{'yes' if r['longest_call_ms'] <= GOAL_MS else 'NO':>9}"
        )
    write_result("bounds", {"redis": version, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
