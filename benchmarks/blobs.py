"""What storing large parts once costs and saves: a computer-use loop, blobs against inline parts.

    python benchmarks/blobs.py [--turns 100] [--windows 10] [--kb 200] [--screens 2]
    python benchmarks/blobs.py --windows 1 --kb 300 --screens 20   # the session of issue #46
    python benchmarks/blobs.py --smoke       # seconds: 10 turns, 2 windows, 50 KB

One private redis-server. Each of ``--windows`` windows of one prefix runs ``--turns`` turns of
a computer-use agent: a user message with a screenshot (``--kb`` KiB of PNG that does not
compress; ``--screens`` distinct screens in turn, as a loop that goes back and forth sees them),
then the assistant's short answer. Once with ``blob_threshold_bytes`` at its default (16 KiB: each screen
is one blob of the prefix) and once at 0 (every part inline, as other stores keep them). Per
mode: Redis memory for the prefix (``MEMORY USAGE`` of every key), the server's bytes received
and sent, and per call the client's p50 for an add and for a cold ``build_messages`` (a store
that has read nothing: it fetches the blobs the build refers to), and the bytes the server sent
for a cold build whose budget keeps the last 3 screenshots.
"""

from __future__ import annotations

import argparse
import base64
import random
import statistics
import struct
import sys
import time
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis

import contextstore as cs

from _common import redis_server, table, write_result


def screenshot(seed: int, kb: int) -> str:
    """A PNG data: URL (its header says 1280x800) of ``kb`` KiB that does not compress."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 1280, 800, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", random.Random(seed).randbytes(kb * 1024))
    return "data:image/png;base64," + base64.b64encode(png + chunk(b"IEND", b"")).decode()


def _net(r: redis.Redis) -> tuple[int, int]:
    info = r.info("stats")
    return int(info["total_net_input_bytes"]), int(info["total_net_output_bytes"])


#: a budget that keeps the last 3 screenshots of a turn each (1,365 tokens a 1280x800 image)
LAST_THREE = cs.BuildOptions(max_tokens=4_400, reserve_for_response=0, max_history_items=1000)


def run(url: str, mode: str, threshold: int, args: argparse.Namespace) -> dict[str, Any]:
    turns, windows, kb = args.turns, args.windows, args.kb
    r = redis.Redis.from_url(url)
    screens = [screenshot(seed, kb) for seed in range(args.screens)]
    prefix = f"bench-{mode}"
    adds, builds = [], []
    net_before = _net(r)
    with cs.ContextStore.from_url(url, prefix=prefix, blob_threshold_bytes=threshold) as store:
        for n in range(windows):
            w = store.window(f"agent-{n}", max_tokens=1_000_000, max_items=1000)
            for t in range(turns):
                parts = [
                    {"type": "text", "text": f"turn {t}: what now?"},
                    {"type": "image_url", "image_url": {"url": screens[t % len(screens)]}},
                ]
                started = time.perf_counter()
                w.add(parts, role="user")
                adds.append(time.perf_counter() - started)
                w.add("Click the button on the left.", role="assistant")
    for n in range(windows):
        with cs.ContextStore.from_url(url, prefix=prefix, blob_threshold_bytes=threshold, item_cache_bytes=0) as cold:
            started = time.perf_counter()
            cold.window(f"agent-{n}").build_messages(cs.BuildOptions(reserve_for_response=0, max_history_items=1000))
            builds.append(time.perf_counter() - started)
    net_after = _net(r)
    with cs.ContextStore.from_url(url, prefix=prefix, blob_threshold_bytes=threshold, item_cache_bytes=0) as cold:
        before = _net(r)[1]
        last = cold.window("agent-0").build_messages_structured(LAST_THREE)
        budget_sent = _net(r)[1] - before
    memory = sum(r.memory_usage(k, samples=0) or 0 for k in r.scan_iter(f"{prefix}:*"))
    r.close()
    return {
        "memory_mb": memory / 2**20,
        "received_mb": (net_after[0] - net_before[0]) / 2**20,
        "sent_mb": (net_after[1] - net_before[1]) / 2**20,
        "add_p50_ms": statistics.median(adds) * 1000,
        "cold_build_p50_ms": statistics.median(builds) * 1000,
        "last_three_sent_kb": budget_sent / 1024,
        "last_three_images": sum(isinstance(m["content"], list) for m in last.messages),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--windows", type=int, default=10)
    ap.add_argument("--kb", type=int, default=200)
    ap.add_argument("--screens", type=int, default=2)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        args.turns, args.windows, args.kb = 10, 2, 50
    with redis_server() as url:
        results = {mode: run(url, mode, threshold, args) for mode, threshold in (("blobs", 16_384), ("inline", 0))}
    rows = [
        [mode, f"{r['memory_mb']:.1f}", f"{r['received_mb']:.1f}", f"{r['sent_mb']:.1f}", f"{r['add_p50_ms']:.2f}",
         f"{r['cold_build_p50_ms']:.1f}", f"{r['last_three_sent_kb']:,.0f} ({r['last_three_images']} images)"]
        for mode, r in results.items()
    ]  # fmt: skip
    print(f"\n### {args.windows} windows x {args.turns} turns, a {args.kb} KiB screenshot each turn "
          f"({args.screens} screens)\n")  # fmt: skip
    print(table(["parts", "Redis memory MB", "server received MB", "server sent MB", "add p50 ms",
                 "cold build p50 ms", "cold build of the last 3: KB sent"], rows))  # fmt: skip
    ratio = results["inline"]["memory_mb"] / results["blobs"]["memory_mb"]
    print(f"\nmemory: inline parts take {ratio:.0f}x what blobs take")
    print(f"written to {write_result('blobs', {'args': vars(args), 'results': results})}")


if __name__ == "__main__":
    main()
