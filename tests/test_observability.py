"""Metrics through the OpenTelemetry SDK's in-memory reader, and the log records, of one
scripted sequence: adds, an eviction, a compaction, builds."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import contextstore as cs

otel_sdk = pytest.importorskip("opentelemetry.sdk.metrics")
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402

SECRET = "SECRET-CONTENT-7f3a"


def scripted(store: Any) -> Any:
    """A window of 1000 tokens and 3 items: 7 adds (4 evictions, one compaction), two builds."""
    w = store.window("obs", max_tokens=1000, max_items=3)
    for n, tokens in enumerate((10, 10, 10, 10, 400, 400)):  # the 4th, 5th and 6th add evict
        w.add(f"{SECRET} item {n}", token_count=tokens)
    w.add(f"{SECRET} last", token_count=100)  # evicts, then 800 + 100 > 85%: compacts 400 away
    w.build(cs.BuildOptions(reserve_for_response=0))
    w.build_messages(cs.BuildOptions(reserve_for_response=0))
    return w


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = list(m.data.data_points)
    return out


def test_every_metric_has_the_expected_value(make_store):
    reader = InMemoryMetricReader()
    provider = otel_sdk.MeterProvider(metric_readers=[reader])
    store = make_store(meter_provider=provider)
    stats = scripted(store).stats()
    points = _points(reader)

    def value(name: str) -> Any:
        (point,) = points[name]
        assert dict(point.attributes) == {"window_id": "obs"}
        return point

    assert value("agents.context.items").value == stats.total_items == 2
    assert value("agents.context.tokens").value == stats.current_tokens == 500
    assert value("agents.context.usage_percent").value == pytest.approx(stats.usage_percent) == 50.0
    assert value("agents.context.add_latency_ms").count == 7 and value("agents.context.add_latency_ms").sum > 0
    assert value("agents.context.build_latency_ms").count == 2
    assert value("agents.context.compaction_total").value == stats.compaction_count == 1
    assert value("agents.context.tokens_freed_total").value == stats.total_tokens_freed == 400
    (compacted,) = [e for e in store.window("obs").events(since="0") if isinstance(e, cs.events.Compacted)]
    assert value("agents.context.tokens_invalidated_total").value == compacted.tokens_invalidated > 0
    provider.shutdown()


def test_log_records_follow_the_specification_and_hold_no_content(make_store, caplog):
    with caplog.at_level(logging.DEBUG, logger="contextstore"):
        scripted(make_store())
        with pytest.raises(cs.ContextWindowFullError):
            make_store().window("obs").add("too big", token_count=5000)
        make_store().window("obs").remove("ctx-7")
    records = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "contextstore"]
    assert ("INFO", "Context window initialized for agent obs, max=1000 tokens") in records
    assert ("DEBUG", "Added context item ctx-1 type=code tokens=10 for agent obs") in records
    assert ("WARNING", "Context usage at 80.0% for agent obs, triggering compaction") in records
    assert ("INFO", "Compacted context for agent obs: strategy=remove_low_priority, freed=400tokens") in records
    built = [m for lvl, m in records if lvl == "DEBUG" and m.startswith("Built context: 2 items, ")]
    assert len(built) == 2 and all(m.endswith(" tokens for agent obs") for m in built)
    assert ("ERROR", "Context window full for agent obs: current=500, max=1000, requested=5000") in records
    assert len([m for _, m in records if m.startswith("Added context item")]) == 7
    assert all(SECRET not in m and "too big" not in m for _, m in records)
    assert any(r.getMessage() == "Removed context item ctx-7 reason=manual for agent obs" for r in caplog.records)


def test_queued_latencies_are_bounded_and_none_is_lost_across_threads():
    """Latencies wait in a queue for the reader; past FLUSH_AT the recording thread hands them
    over itself, and threads recording while another collects lose and double nothing."""
    import threading

    from contextstore.metrics import FLUSH_AT, Metrics

    reader = InMemoryMetricReader()
    provider = otel_sdk.MeterProvider(metric_readers=[reader])
    metrics = Metrics(provider)
    for _ in range(FLUSH_AT + 5):
        metrics.add_latency("w", 1.0)
    assert len(metrics._queued) == 5  # the first FLUSH_AT went to the histogram without a reader

    def record() -> None:
        for _ in range(3000):
            metrics.build_latency("w", 2.0)

    threads = [threading.Thread(target=record) for _ in range(4)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        _points(reader)  # collects (and so flushes) while the threads record
    for t in threads:
        t.join()
    points = _points(reader)
    (adds,) = points["agents.context.add_latency_ms"]
    (builds,) = points["agents.context.build_latency_ms"]
    assert adds.count == FLUSH_AT + 5 and adds.sum == FLUSH_AT + 5
    assert builds.count == 4 * 3000 and builds.sum == 2.0 * 4 * 3000
    assert not metrics._queued
    provider.shutdown()


def test_reported_usage_is_counted_and_usage_follows_the_calibration(make_store):
    reader = InMemoryMetricReader()
    provider = otel_sdk.MeterProvider(metric_readers=[reader])
    w = make_store(meter_provider=provider).window("paid", max_tokens=1000)
    w.add("a question of some length", role="user")
    built = w.build_structured(cs.BuildOptions(reserve_for_response=0))
    w.record_usage(built.version, input_tokens=built.total_tokens * 2, cache_read_tokens=7, model="m-1")
    w.add("another question", role="user")  # its counters come back through the calibration
    points = _points(reader)
    reported = {p.attributes["kind"]: p.value for p in points["agents.context.provider_tokens_total"]}
    assert reported == {"input": built.total_tokens * 2, "cache_read": 7}
    assert {p.attributes["model"] for p in points["agents.context.provider_tokens_total"]} == {"m-1"}
    (usage,) = points["agents.context.usage_percent"]
    assert usage.value == pytest.approx(w.stats().usage_percent, rel=0.01) and w.stats().token_calibration > 2
    provider.shutdown()
