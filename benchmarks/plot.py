"""PNG plots of the last benchmarks/peers.py and benchmarks/fleet.py runs, for docs/benchmarks.md.

python benchmarks/plot.py      (reads benchmarks/results/peers.json and fleet.json, whichever
                                exist, and writes docs/img/*.png)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "img"
COLORS = {
    "bare EVALSHA (ZADD+HSET)": "#999999",
    "bare fetch (HMGET of the built items)": "#999999",
    "contextstore": "#d62728",
    "llama-index": "#1f77b4",
    "openai-agents": "#2ca02c",
    "langchain": "#ff7f0e",
}


def bars(ax: plt.Axes, labels: list[str], values: list[float], unit: str, log: bool = False) -> None:
    ax.bar(range(len(labels)), values, color=[COLORS.get(s, "#555555") for s in labels])
    short = [s.split(" (")[0] for s in labels]  # "bare EVALSHA (ZADD+HSET)" -> "bare EVALSHA"
    ax.set_xticks(range(len(labels)), short, fontsize=8, rotation=30, ha="right")
    ax.set_ylabel(unit)
    if log:
        ax.set_yscale("log")
    for i, v in enumerate(values):
        ax.annotate(f"{v:,.0f}" if v >= 10 else f"{v:.2f}", (i, v), ha="center", va="bottom", fontsize=7)


def fleet(r: dict) -> None:
    """fleet.png: Redis CPU per agent turn, per system, sessions that fit and 3x over, per server."""
    servers = list(r["servers"])
    fig, axes = plt.subplots(1, len(servers), figsize=(6.5 * len(servers), 4.4), squeeze=False)
    for ax, version in zip(axes[0], servers, strict=True):
        systems = list(r["servers"][version])
        for k, case in enumerate(("fits", "over")):
            values = [r["servers"][version][s][case]["server_cpu_us_per_turn"] for s in systems]
            xs = [i + (k - 0.5) * 0.4 for i in range(len(systems))]
            ax.bar(xs, values, width=0.4, label="sessions that fit" if case == "fits" else "sessions 3x over",
                   color="#1f77b4" if case == "fits" else "#ff7f0e")  # fmt: skip
            for x, v in zip(xs, values, strict=True):
                ax.annotate(f"{v:,.0f}", (x, v), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(systems)), [s.replace(", ", ",\n") for s in systems], fontsize=8, rotation=20)
        ax.set_ylabel("Redis CPU µs per turn (process)")
        ax.set_title(f"a fleet on one shard, Redis {version}", fontsize=10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "fleet.png", dpi=110)


def main() -> int:
    results = ROOT / "benchmarks" / "results"
    OUT.mkdir(parents=True, exist_ok=True)
    if (results / "fleet.json").exists():
        fleet(json.loads((results / "fleet.json").read_text()))
    if not (results / "peers.json").exists():
        print(f"wrote {', '.join(p.name for p in sorted(OUT.glob('*.png')))} to {OUT}")
        return 0
    r = json.loads((results / "peers.json").read_text())

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (n, stats) in zip(axes, r["append"].items(), strict=True):
        labels = list(stats)
        bars(ax, labels, [stats[s]["p50_us"] for s in labels], "µs per append (p50)")
        ax.set_title(f"append, {n} messages")
    fig.tight_layout()
    fig.savefig(OUT / "append.png", dpi=110)

    fig, axes = plt.subplots(1, 4, figsize=(16, 4.2))
    for ax, (case, row) in zip(axes, r["build"].items(), strict=True):
        labels = [k for k, v in row.items() if isinstance(v, dict)]
        bars(ax, labels, [row[s]["p50_us"] / 1000 for s in labels], "ms per build (p50, log)", log=True)
        ax.set_title(f"token-limited build: {case}", fontsize=9)
    fig.tight_layout()
    fig.savefig(OUT / "build.png", dpi=110)

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = list(r["memory"])
    bars(ax, labels, [r["memory"][s]["bytes_per_item"] for s in labels], "bytes per stored message")
    ax.set_title("Redis memory per message (1000 messages)")
    fig.tight_layout()
    fig.savefig(OUT / "memory.png", dpi=110)

    fig, ax = plt.subplots(figsize=(7, 4))
    systems = list(r["concurrency"]["1"])
    for s in systems:
        ws = sorted(r["concurrency"], key=int)
        ax.plot(
            [int(w) for w in ws],
            [r["concurrency"][w][s]["adds_per_second"] for w in ws],
            "o-",
            color=COLORS.get(s),
            label=s,
        )
    ax.set_xlabel("writer processes")
    ax.set_ylabel("appends per second (all writers)")
    ax.set_xticks([1, 2, 4])
    ax.legend(fontsize=8)
    ax.set_title("concurrent writers, one shared history")
    fig.tight_layout()
    fig.savefig(OUT / "writers.png", dpi=110)
    print(f"wrote {', '.join(p.name for p in sorted(OUT.glob('*.png')))} to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
