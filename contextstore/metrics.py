"""OpenTelemetry metrics under the names of the original specification.

| metric | kind | what |
|---|---|---|
| ``agents.context.items`` | gauge | items in the window after each change |
| ``agents.context.tokens`` | gauge | tokens in the window after each change |
| ``agents.context.usage_percent`` | gauge | tokens as a share of ``max_tokens`` (0 without one) |
| ``agents.context.add_latency_ms`` | histogram | one ``add`` / ``add_many`` call, wall time |
| ``agents.context.build_latency_ms`` | histogram | one build (text or messages), wall time |
| ``agents.context.compaction_total`` | counter | compactions run |
| ``agents.context.tokens_freed_total`` | counter | tokens freed by compactions |

Every measurement carries the attribute ``window_id``. The gauges come from the counters every
mutating script answers with (``wire.Counters``), never from scanning items, and are observed
when the application's metric reader collects. Latencies are queued (a deque append) and handed
to the histograms when the reader collects, or every ``FLUSH_AT`` measurements, so an add pays
for no SDK call; the histograms therefore carry no trace exemplars. Without the
``opentelemetry-api`` package (extra ``contextstore[otel]``) nothing is recorded; with it and no
SDK installed by the application, the API's no-op meter costs next to nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from .wire import Counters

METER_NAME = "contextstore"
FLUSH_AT = 1024  # queued latencies recorded in the caller's thread when no reader collected them


def _meter(provider: Any) -> Any:
    try:
        from opentelemetry import metrics
    except ImportError:
        return None
    from . import __version__

    return (provider or metrics.get_meter_provider()).get_meter(METER_NAME, __version__)


class Metrics:
    """The instruments of one store (a no-op without the OpenTelemetry API). The gauges are
    observed when the application's reader collects, from the counters each window last
    answered with, and latencies are queued until then, so an add makes no SDK call."""

    def __init__(self, meter_provider: Any = None) -> None:
        meter = _meter(meter_provider)
        self.enabled = meter is not None
        self._last: dict[str, Counters] = {}
        self._queued: deque[tuple[Any, float, dict[str, str]]] = deque()
        if meter is None:
            return
        for name, unit, description, value in (
            ("agents.context.items", "{item}", "Current item count", lambda c: c.items),
            ("agents.context.tokens", "{token}", "Current token usage", lambda c: c.tokens),
            ("agents.context.usage_percent", "%", "Usage percentage",
             lambda c: c.tokens * 100.0 / c.max_tokens if c.max_tokens else 0.0),
        ):  # fmt: skip
            meter.create_observable_gauge(name, callbacks=[self._observer(value)], unit=unit, description=description)
        self._add = meter.create_histogram(
            "agents.context.add_latency_ms", unit="ms", description="Add operation latency"
        )
        self._build = meter.create_histogram(
            "agents.context.build_latency_ms", unit="ms", description="Build operation latency"
        )
        self._compactions = meter.create_counter(
            "agents.context.compaction_total", unit="{compaction}", description="Total compaction operations"
        )
        self._freed = meter.create_counter(
            "agents.context.tokens_freed_total", unit="{token}", description="Total tokens freed by compaction"
        )

    def _observer(self, value: Callable[[Counters], float]) -> Callable[[Any], list[Any]]:
        from opentelemetry.metrics import Observation

        def observe(options: Any) -> list[Any]:
            self.flush()
            return [Observation(value(c), {"window_id": w}) for w, c in list(self._last.items())]

        return observe

    def changed(self, window_id: str, counters: Counters) -> None:
        """Keep a window's counters after a mutation (the gauges' next values), and count the
        compactions it ran."""
        if not self.enabled:
            return
        self._last[window_id] = counters
        if counters.compactions:
            attrs = {"window_id": window_id}
            self._compactions.add(counters.compactions, attrs)
            self._freed.add(counters.freed, attrs)

    def add_latency(self, window_id: str, ms: float) -> None:
        """Queue one add call's wall time for the latency histogram."""
        if self.enabled:
            self._queue(self._add, ms, window_id)

    def build_latency(self, window_id: str, ms: float) -> None:
        """Queue one build's wall time for the latency histogram."""
        if self.enabled:
            self._queue(self._build, ms, window_id)

    def flush(self) -> None:
        """Record every queued latency (thread-safe: each is taken off the deque exactly once)."""
        queued = self._queued
        while True:
            try:
                histogram, ms, attributes = queued.popleft()
            except IndexError:
                return
            histogram.record(ms, attributes)

    def _queue(self, histogram: Any, ms: float, window_id: str) -> None:
        self._queued.append((histogram, ms, {"window_id": window_id}))
        if len(self._queued) >= FLUSH_AT:
            self.flush()
