"""The fleet's long sessions, two versions side by side: how a change moves the shard's cost of a turn.

    python benchmarks/fleet_paired.py --baseline /path/to/an/older/checkout [--rounds 3] [--turns 150]
    python benchmarks/fleet_paired.py --baseline DIR --short      # the short sessions (20-1,000 messages)

Each round runs ``benchmarks/fleet.py`` (this checkout's, with ``--no-single-calls``) once per
version, the order alternating, each with that version first on its path: contextstore's caching and
stateless workers on 12 sessions of 1,500-3,000 messages (``--short``: 300 of 20-1,000), 4 workers
taking ``--turns`` turns each per half (the same turns for both versions), on the Redis 7 ``fleet.py``
finds. A long session is where a shared store earns its keep, and where a regression hides from short
ones: this is how a change to the read or write path is paired. Per worker kind and half (sessions
that fit their budget, sessions 3x over it): the server process's CPU per turn (median over the
rounds, with its spread) and the ratio; then the KiB moved per turn.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import table

HERE = Path(__file__).resolve().parents[1]
SYSTEMS = ("contextstore", "contextstore, stateless workers")
CASES = ("fits", "over")


def one_run(checkout: Path, args: argparse.Namespace) -> dict[str, dict[str, dict[str, float]]]:
    """One fleet run of ``checkout``'s contextstore: system -> half -> CPU µs and KiB per turn."""
    sizes = ["--sessions", "300", "--smallest", "20", "--largest", "1000"] if args.short else [
        "--sessions", "12", "--smallest", "1500", "--largest", "3000"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fleet.json"
        cmd = [sys.executable, str(HERE / "benchmarks" / "fleet.py"), *sizes, "--workers", "4", "--server", "7",
               "--turns", str(args.turns), "--no-single-calls", "--json", str(out), "--only", *SYSTEMS]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=1800)
        results = json.loads(out.read_text())
    (by_system,) = results["servers"].values()
    return {
        s: {c: {"cpu": by_system[s][c]["server_cpu_us_per_turn"], "kib": by_system[s][c]["bytes_per_turn"] / 1024}
            for c in CASES}
        for s in SYSTEMS
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout of the version to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--turns", type=int, default=150, help="turns each worker takes per half")
    ap.add_argument("--short", action="store_true", help="300 short sessions instead of 12 long ones")
    args = ap.parse_args()
    versions = {"baseline": args.baseline.resolve(), "this": HERE}
    runs: dict[str, list[dict[str, dict[str, dict[str, float]]]]] = {v: [] for v in versions}
    for n in range(args.rounds):
        order = list(versions) if n % 2 == 0 else list(reversed(versions))
        for v in order:
            print(f"round {n + 1}/{args.rounds}: {v} ...", file=sys.stderr, flush=True)
            runs[v].append(one_run(versions[v], args))
    rows = []
    for s in SYSTEMS:
        for c in CASES:
            cpu = {v: [r[s][c]["cpu"] for r in runs[v]] for v in versions}
            kib = {v: statistics.median(r[s][c]["kib"] for r in runs[v]) for v in versions}
            base, this = statistics.median(cpu["baseline"]), statistics.median(cpu["this"])
            rows.append([
                "caching" if s == "contextstore" else "stateless", c,
                f"{base:,.0f} ({min(cpu['baseline']):,.0f}-{max(cpu['baseline']):,.0f})",
                f"{this:,.0f} ({min(cpu['this']):,.0f}-{max(cpu['this']):,.0f})",
                f"{this / base:.2f}x", f"{kib['baseline']:,.0f} -> {kib['this']:,.0f}",
            ])  # fmt: skip
    kind = "300 sessions of 20-1,000 messages" if args.short else "12 sessions of 1,500-3,000 messages"
    print(f"\n### The fleet, {kind}: {args.baseline.name} against this checkout, {args.rounds} rounds\n")
    print(table(["workers", "sessions", "Redis CPU µs/turn, baseline (min-max)", "this (min-max)", "ratio",
                 "KiB moved/turn"], rows))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
