"""What recording the OpenTelemetry metrics costs an add, measured side by side in one run.

Two stores on one private redis-server: one with the OpenTelemetry API and no SDK (what an
application that configures no metrics gets: the API's no-op meter), one recording every
measurement into the SDK (an in-memory reader, collected every 500 adds as an exporter would).
Adds alternate between them, one each in turn, so machine noise falls on both alike; the overhead
is the median of the paired differences. The instrument calls alone are also timed in-process.
Run:  python benchmarks/metrics_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import timeit

import contextstore as cs
from contextstore.core.wire import Counters
from contextstore.metrics import Metrics

from _common import chat_message, redis_server, summarize, table, versions, write_result


def paired_adds(url: str, n: int) -> tuple[list[float], list[float], list[float]]:
    """n adds on each store, alternating which goes first; returns both lists of seconds, and the
    seconds of each collection (off the adds' path, as on an exporter's thread)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    plain = cs.ContextStore.from_url(url, prefix="bench-nosdk")
    measured = cs.ContextStore.from_url(url, prefix="bench-sdk", meter_provider=provider)
    windows = [plain.window("m", max_tokens=8000), measured.window("m", max_tokens=8000)]
    rng = random.Random(7)
    texts = [chat_message(rng, "user") for _ in range(2000)]
    samples: list[list[float]] = [[], []]
    collections: list[float] = []
    for i in range(n + 300):  # the first 300 of each warm up
        for k in (0, 1) if i % 2 else (1, 0):
            t = time.perf_counter()
            windows[k].add(texts[i % len(texts)], type="user_message", role="user")
            if i >= 300:
                samples[k].append(time.perf_counter() - t)
        if i % 500 == 499:
            t = time.perf_counter()
            reader.get_metrics_data()
            collections.append(time.perf_counter() - t)
    plain.close()
    measured.close()
    provider.shutdown()
    return samples[0], samples[1], collections


def instrument_cost_us() -> dict[str, float]:
    """The client-side calls one add makes (counters kept, latency recorded), in-process."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    quiet = Counters(tokens=6000, items=80, max_tokens=8000, compactions=0, freed=0)
    compacting = Counters(tokens=5600, items=70, max_tokens=8000, compactions=1, freed=1600)
    out = {}
    for name, metrics in (("API, no SDK", Metrics()), ("SDK", Metrics(provider))):
        for label, counters in (("add", quiet), ("add that compacted", compacting)):
            calls = lambda m=metrics, c=counters: (m.changed("w", c), m.add_latency("w", 0.3))  # noqa: E731
            out[f"{name}: {label}"] = min(timeit.repeat(calls, number=20000, repeat=5)) / 20000 * 1e6
    provider.shutdown()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer adds")
    n = 1000 if ap.parse_args().quick else 5000
    with redis_server() as url:
        plain, measured, collections = paired_adds(url, n)
    diffs = [(m - p) * 1e6 for p, m in zip(plain, measured, strict=True)]
    p_plain, p_sdk = summarize(plain), summarize(measured)
    overhead = statistics.median(diffs)
    rows = [
        ["add, metrics API without SDK", f"{p_plain['p50_us']:.1f}", f"{p_plain['p99_us']:.1f}", n],
        ["add, metrics recorded by the SDK", f"{p_sdk['p50_us']:.1f}", f"{p_sdk['p99_us']:.1f}", n],
    ]
    print(table(["operation", "p50 µs", "p99 µs", "adds"], rows))
    print(
        f"\nmedian paired difference: {overhead:.1f} µs = {overhead / p_plain['p50_us'] * 100:.1f}% of an add"
        f" (p50 difference {(p_sdk['p50_us'] - p_plain['p50_us']) / p_plain['p50_us'] * 100:.1f}%)\n"
    )
    calls = instrument_cost_us()
    collect_us = statistics.median(collections) * 1e6
    print(f"one collection (every 500 adds, on the reader's side): {collect_us:.0f} µs median\n")
    print(table(["instrument calls per add, in-process, amortized", "µs"], [[k, f"{v:.2f}"] for k, v in calls.items()]))
    out = write_result(
        "metrics_overhead",
        {
            "versions": versions("opentelemetry-api", "opentelemetry-sdk"),
            "adds": {"api_no_sdk": p_plain, "sdk": p_sdk},
            "median_paired_difference_us": overhead,
            "overhead_percent": overhead / p_plain["p50_us"] * 100,
            "instrument_calls_us": calls,
            "collection_every_500_adds_us": collect_us,
        },
    )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
