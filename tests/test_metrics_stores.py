"""Metrics of several stores in one process: every open store's windows are observed and every
latency recorded, whatever the order of store creation and ``set_meter_provider``; a closed
store stops reporting. OpenTelemetry's global provider is set once per process, so each scenario
runs in a process of its own (tests/_metrics_worker.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import contextstore as cs

otel_sdk = pytest.importorskip("opentelemetry.sdk.metrics")
from _metrics_worker import points_by_window  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402

WORKER = Path(__file__).parent / "_metrics_worker.py"


def collected(redis_url: str, prefix: str, plan: str, close: int | None = None) -> dict[str, dict[str, float]]:
    args = [sys.executable, str(WORKER), redis_url, prefix, plan, *([str(close)] if close is not None else [])]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def assert_reported(points: dict[str, dict[str, float]], windows: list[int]) -> None:
    """Windows ``w<i>`` are reported with i + 2 items, i + 2 adds and one build each."""
    for i in windows:
        w = f"w{i}"
        assert points["agents.context.items"].get(w) == i + 2, (w, points)
        assert points["agents.context.tokens"].get(w, 0) > 0, (w, points)
        assert points["agents.context.add_latency_ms"].get(w) == i + 2, (w, points)
        assert points["agents.context.build_latency_ms"].get(w) == 1, (w, points)


@pytest.mark.parametrize(
    "plan",
    [
        "| sync sync",
        "sync sync |",
        "sync | sync",
        "| sync async sync",
        "async sync async |",
        "sync | async sync",
        "async | async",
    ],
)
def test_every_store_reports_whenever_the_provider_is_set(redis_url: str, prefix: str, plan: str) -> None:
    points = collected(redis_url, prefix, plan)
    n = len(plan.replace("|", " ").split())
    assert_reported(points, list(range(n)))
    assert set(points["agents.context.items"]) == {f"w{i}" for i in range(n)}


@pytest.mark.parametrize("plan", ["| sync sync sync", "sync async | sync"])
def test_a_closed_store_stops_reporting_and_keeps_what_it_measured(redis_url: str, prefix: str, plan: str) -> None:
    points = collected(redis_url, prefix, plan, close=1)
    assert "w1" not in points["agents.context.items"]  # the gauges no longer observe it
    assert_reported(points, [0, 2])
    # its latencies measured before close() were recorded
    assert points["agents.context.add_latency_ms"]["w1"] == 3
    assert points["agents.context.build_latency_ms"]["w1"] == 1


def test_stores_sharing_an_explicit_provider_all_report(make_store: Any, prefix: str) -> None:
    reader = InMemoryMetricReader()
    provider = otel_sdk.MeterProvider(metric_readers=[reader])
    stores = [make_store(meter_provider=provider, prefix=f"{prefix}-{n}") for n in range(3)]
    for i, store in enumerate(stores):
        win = store.window(f"w{i}", max_tokens=10_000)
        for n in range(i + 2):
            win.add(f"message {n}", type="text")
        win.build()
    out = points_by_window(reader)
    assert_reported(out, [0, 1, 2])
    provider.shutdown()


def test_the_newest_change_wins_when_two_stores_report_one_window(redis_url: str, prefix: str) -> None:
    reader = InMemoryMetricReader()
    provider = otel_sdk.MeterProvider(metric_readers=[reader])
    with (
        cs.ContextStore.from_url(redis_url, prefix=prefix, meter_provider=provider) as a,
        cs.ContextStore.from_url(redis_url, prefix=prefix, meter_provider=provider) as b,
    ):
        a.window("shared").add("one", type="text")
        b.window("shared").add("two", type="text")
        a.window("shared").add("three", type="text")
        items = [
            p.value
            for rm in reader.get_metrics_data().resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "agents.context.items"
            for p in m.data.data_points
        ]
    assert items == [3]
    provider.shutdown()
