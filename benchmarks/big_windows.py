"""What each operation costs as a window grows: the shard and the client, per call.

    python benchmarks/big_windows.py [--sizes 2000 20000 200000] [--server PATH]
    python benchmarks/big_windows.py --smoke      # seconds: 200 and 2,000 items
    python benchmarks/big_windows.py --builds     # the cold builds only

One private server (the embedded default's Valkey by default); for each size a window is filled with
that many chat messages (users and assistants, 10-300 words each), then each operation runs once
from a store that holds nothing of the window (a fleet's stateless worker, ``item_cache_bytes=0``),
except the warm build, which a store that just built the window runs again. Per operation: the
client's wall time, the server's CPU (``used_cpu_user + used_cpu_sys`` of ``INFO cpu``), the bytes
the server sent (``total_net_output_bytes``), the commands it ran (``INFO commandstats``, a
script's own commands counted with it), and for ``contextstore show`` (a process of its own,
piped, then on a terminal of 40 rows, where it shows the most recent screen) its peak memory
(``VmHWM``). The builds are chat messages within an 8,000-token budget, the same
~90 messages at every size: what a build returns does not grow with the window. The store's
``item_limit`` bounds a window at 200,000 items (``core/layout.MAX_ITEM_LIMIT``).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis

import contextstore as cs

from _common import conversation, redis_server, server_version, table

ROOT = Path(__file__).resolve().parents[1]
BUDGET = cs.BuildOptions(max_tokens=8000, reserve_for_response=0)
#: the same budget with room for the last 100 messages (~90 of them fit)
BUDGET_100 = cs.BuildOptions(max_tokens=8000, reserve_for_response=0, max_history_items=100)
#: the same budget letting every message compete: an agent that wants the most history that fits
BUDGET_ALL = cs.BuildOptions(max_tokens=8000, reserve_for_response=0, max_history_items=100_000)
#: the same, with a query: the window's retrieved documents go best first (BM25), before the conversation
BUDGET_QUERY = cs.BuildOptions(max_tokens=8000, reserve_for_response=0, max_history_items=100_000, query="pricing")
#: the cold builds measured against what they return: (options, chat messages or a prompt)
MEASURED_BUILDS = {
    "build, cold, 100 messages": (BUDGET_100, "messages"),
    "build, cold, every message competes": (BUDGET_ALL, "messages"),
    "build_structured, cold, every message competes": (BUDGET_ALL, "prompt"),
    "build, cold, every message competes, a query": (BUDGET_QUERY, "messages"),
}
#: how many retrieved documents the window holds while the build with a query runs (then removed)
DOCUMENTS = 12


def _counters(r: redis.Redis) -> tuple[float, int, int]:
    """The server's CPU seconds, bytes sent and commands run so far."""
    info = r.info("everything")
    calls = sum(int(v["calls"]) for k, v in info.items() if k.startswith("cmdstat_") and isinstance(v, dict))
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"]), int(info["total_net_output_bytes"]), calls


def measured(r: redis.Redis, fn: Callable[[], Any]) -> dict[str, float]:
    """One call of ``fn``: client ms, server CPU ms, bytes the server sent, commands it ran (the
    counters' own INFO call taken off)."""
    cpu0, out0, calls0 = _counters(r)
    t = time.perf_counter()
    fn()
    ms = (time.perf_counter() - t) * 1000
    cpu1, out1, calls1 = _counters(r)
    idle_cpu, idle_out, idle_calls = _idle(r)
    return {
        "client_ms": ms,
        "server_ms": max(0.0, (cpu1 - cpu0 - idle_cpu) * 1000),
        "bytes": max(0, out1 - out0 - idle_out),
        "commands": max(0, calls1 - calls0 - idle_calls),
    }


def command_usec(r: redis.Redis, fn: Callable[[], Any], runs: int = 10) -> float:
    """The median over ``runs`` calls of ``fn`` of the time the server spent in its commands
    (``INFO commandstats``: a transaction's or script's commands count with it and alone too),
    which, unlike the process's CPU, leaves out its background work."""

    def spent() -> int:
        stats = r.info("commandstats")
        return sum(int(v["usec"]) for k, v in stats.items() if k != "cmdstat_info")

    per = []
    for _ in range(runs):
        before = spent()
        fn()
        per.append(spent() - before)
    return float(statistics.median(per))


def _idle(r: redis.Redis) -> tuple[float, int, int]:
    """What two counter reads with nothing between cost (taken off each measurement)."""
    a, b = _counters(r), _counters(r)
    return b[0] - a[0], b[1] - a[1], b[2] - a[2]


def fill(url: str, prefix: str, n: int) -> None:
    with cs.ContextStore.from_url(url, prefix=prefix, item_limit=max(n, 1000), item_cache_bytes=0) as store:
        w = store.window("big", max_items=max(n, 1000))
        talk = conversation(min(n, 2000))
        for i in range(0, n, 500):
            batch = [talk[j % len(talk)] for j in range(i, min(n, i + 500))]
            w.add_many([{"content": c, "role": role, "type": f"{role}_message"} for role, c in batch])


#: runs the command and writes its peak memory (VmHWM, kB) to stderr last: the kernel's ru_maxrss
#: of a child counts what its parent held when it forked (the benchmark's own hundreds of MB)
_SHOW_PEAK = (
    "import atexit, runpy, sys\n"
    "def peak():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'): sys.stderr.write('\\npeak_kb=' + line.split()[1] + '\\n')\n"
    "atexit.register(peak)\n"
    "sys.argv = ['contextstore', *sys.argv[1:]]\n"
    "runpy.run_module('contextstore.cli', run_name='__main__')\n"
)


def show(url: str, prefix: str, terminal: bool = False) -> dict[str, float]:
    """``contextstore show`` in a process of its own, piped (every item) or on a terminal of 40
    rows and 120 columns (a screen's worth): wall ms and its peak memory (MB)."""
    command = [sys.executable, "-c", _SHOW_PEAK, "--url", url, "--prefix", prefix, "show", "big"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LINES": "40", "COLUMNS": "120"}
    t = time.perf_counter()
    if terminal:
        screen, tty = pty.openpty()
        fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        proc = subprocess.Popen(command, stdout=tty, stderr=subprocess.PIPE, env=env)
        os.close(tty)
        drain = threading.Thread(target=_drain, args=(screen,), daemon=True)
        drain.start()
        _, err_bytes = proc.communicate()
        returncode = proc.returncode
    else:
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
        returncode, err_bytes = done.returncode, done.stderr
    ms = (time.perf_counter() - t) * 1000
    err = err_bytes.decode()
    if returncode != 0 or "peak_kb=" not in err:
        raise SystemExit(f"contextstore show failed: {err[-500:]}")
    return {"client_ms": ms, "rss_mb": int(err.rsplit("peak_kb=", 1)[1].split()[0]) / 1024}


def _drain(fd: int) -> None:
    """Read a terminal's output until it closes (so the program never blocks writing it)."""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def _stored_bytes(r: redis.Redis, prefix: str, ids: list[str]) -> int:
    """What the items ``ids`` hold in Redis: their stored JSON and their ``:attrs`` values."""
    pipe = r.pipeline(transaction=False)
    for i in ids:
        pipe.hstrlen(f"{prefix}:{{big}}:items", i)
        pipe.hstrlen(f"{prefix}:{{big}}:attrs", i)
    return sum(pipe.execute())


def one_size(url: str, n: int, builds_only: bool = False) -> dict[str, dict[str, float]]:
    prefix = f"big{n}"
    fill(url, prefix, n)
    r = redis.Redis.from_url(url)
    out: dict[str, dict[str, float]] = {}
    limit = max(n, 1000)

    def cold() -> cs.ContextStore:
        return cs.ContextStore.from_url(url, prefix=prefix, item_limit=limit, item_cache_bytes=0)

    with cold() as s:
        w = s.handle("big")
        out["add one message"] = measured(r, lambda: w.add("one more question?", role="user", type="user_message"))
        out["stats"] = measured(r, w.stats)
        out["build, cold"] = measured(r, lambda: w.build_messages(BUDGET))
        for name, (options, kind) in MEASURED_BUILDS.items():
            if options.query is None:
                out[name] = _measured_build(r, prefix, w, options, kind)
        out.update(_with_documents(url, r, prefix, w, limit))
        if builds_only:
            return out
        out["items(limit=50)"] = measured(r, lambda: w.items(limit=50))
    with cs.ContextStore.from_url(url, prefix=prefix, item_limit=limit) as warm:
        h = warm.handle("big")
        h.build_messages(BUDGET)
        out["build, warm (unchanged)"] = measured(r, lambda: h.build_messages(BUDGET))
    with cold() as s:
        w = s.handle("big")
        out["snapshot"] = measured(r, w.snapshot)
        out["verify"] = measured(r, w.verify)
    shown: dict[str, float] = {}
    server = measured(r, lambda: shown.update(show(url, prefix)))
    out["contextstore show"] = {**server, **shown}
    screen: dict[str, float] = {}
    server = measured(r, lambda: screen.update(show(url, prefix, terminal=True)))
    out["contextstore show, terminal"] = {**server, **screen}
    with cold() as s:
        out.update(_branching(r, s.handle("big")))
        s.handle("big-fork").delete()
        out["delete"] = measured(r, s.handle("big").delete)
    r.close()
    return out


def _measured_build(
    r: redis.Redis, prefix: str, w: cs.ContextWindow, options: cs.BuildOptions, kind: str
) -> dict[str, float]:
    """A cold build (chat ``messages`` or a ``prompt``): ``measured``, the bytes of the items it
    returned (``returned``) and the server's time in its commands (``command_us``)."""

    def once() -> Any:
        return w.build_messages_structured(options) if kind == "messages" else w.build_structured(options)

    built: list[Any] = []
    out = measured(r, lambda: built.append(once()))
    out["returned"] = _stored_bytes(r, prefix, built[0].included_item_ids)
    out["command_us"] = command_usec(r, once, runs=40)
    return out


def _with_documents(
    url: str, r: redis.Redis, prefix: str, w: cs.ContextWindow, limit: int
) -> dict[str, dict[str, float]]:
    """The cold builds with a query (a stateless store with a BM25 scorer), while the window holds
    ``DOCUMENTS`` retrieved documents of 40-160 words (removed after)."""
    docs = [f"doc-{d}" for d in range(DOCUMENTS)]
    w.add_many([
        {"content": f"doc {d}: " + "pricing tiers and limits " * (10 + 10 * (d % 4)), "type": "retrieved_document",
         "id": docs[d]}
        for d in range(DOCUMENTS)
    ])  # fmt: skip
    out = {}
    options = {"item_limit": limit, "item_cache_bytes": 0, "relevance_scorer": cs.BM25Scorer()}
    with cs.ContextStore.from_url(url, prefix=prefix, **options) as s:
        for name, (options, kind) in MEASURED_BUILDS.items():
            if options.query is not None:
                out[name] = _measured_build(r, prefix, s.handle("big"), options, kind)
    for doc in docs:
        w.remove(doc)
    return out


def longest(r: redis.Redis, fn: Callable[[], Any]) -> dict[str, float]:
    """``measured`` of one call of ``fn``, and the longest command it ran (ms, the server's
    ``SLOWLOG`` with every command logged): how long it held the shard from every other client
    at once."""
    old = r.config_get("slowlog-*")
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 1_000_000)
    r.slowlog_reset()
    try:
        out = measured(r, fn)
        out["longest_ms"] = max((e["duration"] for e in r.slowlog_get(1_000_000)), default=0) / 1000
    finally:
        for name, value in old.items():
            r.config_set(name, value)
        r.slowlog_reset()
    return out


def _branching(r: redis.Redis, w: cs.ContextWindow) -> dict[str, dict[str, float]]:
    """A fork of the whole window (and the memory it adds), a rewind of its last 100 items and
    the undo; with the longest command each ran."""
    used = int(r.info("memory")["used_memory"])
    out = {"fork (whole window)": longest(r, lambda: w.fork("big-fork"))}
    out["fork (whole window)"]["added_mb"] = (int(r.info("memory")["used_memory"]) - used) / 1e6
    to = w.items(limit=101)[0].id or ""
    rewound: list[str] = []
    out["rewind 100 items"] = longest(r, lambda: rewound.append(w.rewind(to)))
    out["undo_rewind 100 items"] = longest(r, lambda: w.undo_rewind(rewound[0]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000, 200000])
    ap.add_argument("--smoke", action="store_true", help="seconds: 200 and 2,000 items")
    ap.add_argument("--server", help="the server binary (default: the embedded default's valkey-server)")
    ap.add_argument("--builds", action="store_true", help="the cold builds only (to pair a change to the read path)")
    args = ap.parse_args()
    if args.server:
        os.environ["CONTEXTSTORE_BENCH_REDIS"] = args.server
    sizes = [200, 2000] if args.smoke else args.sizes
    with redis_server(tcp=True) as url:
        version = server_version(url)
        results = {n: one_size(url, n, args.builds) for n in sizes}
    ops = list(results[sizes[0]])
    print(f"\n### Redis {version}: one call of each operation, by window size (items)\n")
    rows = []
    for op in ops:
        for n in sizes:
            m = results[n][op]
            mem = f"{m['rss_mb']:.0f}" if "rss_mb" in m else f"+{m['added_mb']:.1f} (Redis)" if "added_mb" in m else ""
            held = f"{m['longest_ms']:.1f}" if "longest_ms" in m else ""
            rows.append([op, f"{n:,}", f"{m['client_ms']:.1f}", f"{m['server_ms']:.1f}",
                         f"{m['bytes'] / 1024:,.0f}", f"{m['commands']:.0f}", mem, held])  # fmt: skip
    headers = ["operation", "items", "client ms", "server CPU ms", "KB sent", "commands", "peak MB / MB added",
               "longest command ms"]  # fmt: skip
    print(table(headers, rows))
    for name in MEASURED_BUILDS:
        print(f"\n### {name}: what it sent against what it returns\n")
        first = results[sizes[0]][name]
        rows = []
        for n in sizes:
            m = results[n][name]
            rows.append([f"{n:,}", f"{m['bytes'] / 1024:,.1f}", f"{m['returned'] / 1024:,.1f}",
                         f"{m['bytes'] / max(1, m['returned']):.2f}", f"{m['command_us']:.0f}",
                         f"{m['command_us'] / max(1.0, first['command_us']):.2f}"])  # fmt: skip
        headers = ["items", "KB sent", "KB of the items returned (body + attrs)", "ratio",
                   "server µs in its commands (median of 40)", f"vs {sizes[0]:,}"]  # fmt: skip
        print(table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
