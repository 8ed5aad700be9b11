"""Aggregate add throughput: one Redis against a Redis Cluster of 1 and 3 primaries, at 1, 2, 4
and 8 client processes.

Each client process adds ~560-byte chat messages (the peers benchmark's) round-robin to 8
windows of its own (so the windows spread over the cluster's slots), with the default store
options, for a fixed time after every process is connected; the table shows the adds per second
of all processes together, and the p50 / p99 of one add. Every server runs on this machine
(127.0.0.1, TCP for all, so the standalone row pays the same network stack), started by the
script from the bundled redis-server binary and stopped afterwards; client processes and servers
share the machine's cores, so on a small machine more processes and more shards compete for the
same CPUs: read the table as what this machine shows, not as a cluster's capacity.
Writes benchmarks/results/scale.json.
Run:  python benchmarks/scale.py [--seconds 3] [--processes 1 2 4 8]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import contextstore as cs

from _common import conversation, redis_binary, redis_server, summarize, write_result

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from cluster_support import LocalCluster

WINDOWS_PER_PROCESS = 8


def client(url: str, worker: int, seconds: float, ready: Any, go: Any, out: Any) -> None:
    """Add messages until ``seconds`` after ``go``; put (adds, latencies in s) on ``out``."""
    msgs = conversation(200, seed=worker)
    with cs.ContextStore.from_url(url, prefix="scale") as store:
        windows = [store.window(f"p{worker}-w{k}", max_items=200) for k in range(WINDOWS_PER_PROCESS)]
        windows[0].add("warm up")
        ready.release()
        go.wait()
        lat: list[float] = []
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            role, text = msgs[i % len(msgs)]
            t = time.perf_counter()
            windows[i % len(windows)].add(
                text, type="user_message" if role == "user" else "assistant_message", role=role
            )
            lat.append(time.perf_counter() - t)
            i += 1
        out.put((i, lat))


def run(url: str, processes: int, seconds: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=client, args=(url, w, seconds, ready, go, out)) for w in range(processes)]
    for p in procs:
        p.start()
    for _ in procs:
        if not ready.acquire(timeout=120):
            raise RuntimeError("a client process did not connect")
    go.set()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(60)
    adds = sum(n for n, _ in results)
    lat = [x for _, xs in results for x in xs]
    return {"processes": processes, "adds": adds, "adds_per_s": adds / seconds, **summarize(lat)}


def setups(primaries: list[int]) -> list[tuple[str, Any]]:
    """(name, a context manager yielding a URL) for the standalone server and each cluster."""

    class Cluster:
        def __init__(self, n: int) -> None:
            self.cluster = LocalCluster(primaries=n, binary=redis_binary())

        def __enter__(self) -> str:
            return self.cluster.start().url()

        def __exit__(self, *exc: Any) -> None:
            self.cluster.stop()

    return [("standalone", redis_server(tcp=True))] + [
        (f"cluster, {n} primar{'y' if n == 1 else 'ies'}", Cluster(n)) for n in primaries
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="how long each cell adds (default 3)")
    ap.add_argument("--processes", type=int, nargs="*", default=[1, 2, 4, 8], help="client process counts")
    ap.add_argument("--primaries", type=int, nargs="*", default=[1, 3], help="cluster sizes (primaries)")
    args = ap.parse_args()
    rows: dict[str, list[dict[str, Any]]] = {}
    for name, server in setups(args.primaries):
        with server as url:
            rows[name] = [run(url, n, args.seconds) for n in args.processes]
    print(f"\nadds/s of all client processes together ({os.cpu_count()} cores, {platform.python_version()})\n")
    print("| setup | " + " | ".join(f"{n} process{'es' if n > 1 else ''}" for n in args.processes) + " |")
    print("|---|" + "---|" * len(args.processes))
    for name, cells in rows.items():
        print(
            f"| {name} | "
            + " | ".join(f"{c['adds_per_s']:,.0f} (p50 {c['p50_us']:.0f} µs, p99 {c['p99_us']:.0f} µs)" for c in cells)
            + " |"
        )
    print(f"\nwrote {write_result('scale', {'seconds': args.seconds, 'cpus': os.cpu_count(), 'rows': rows})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
