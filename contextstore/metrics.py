"""OpenTelemetry metrics under the names of the original specification.

The instruments (three gauges, the latency histograms, the compaction, usage and turn counters)
and what each measures are listed in ``docs/observability.md`` (Metrics).

Every measurement carries the attribute ``window_id``. The gauges come from the counters every
mutating script answers with (``wire.Counters``), never from scanning items, and are observed
when the application's metric reader collects. Latencies are queued (a deque append) and handed
to the histograms when the reader collects, or every ``FLUSH_AT`` measurements, so an add pays
for no SDK call; the histograms therefore carry no trace exemplars. Without the
``opentelemetry-api`` package (extra ``contextstore[otel]``) nothing is recorded; with it and no
SDK installed by the application, the API's no-op meter costs next to nothing.

Every store of a process reports through one set of instruments per meter provider (the
OpenTelemetry SDK keeps the first instrument registered under a name and drops the callbacks of
any later one): the gauges observe every open store's windows, whichever store was made first
and whether the application set its provider before or after. A closed store stops reporting
(its queued latencies are recorded first). Where two open stores report the same window id, the
counters of the most recent change win.

May import: ``core``.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from .core.version import __version__
from .core.wire import Counters

METER_NAME = "contextstore"
FLUSH_AT = 1024  # queued latencies recorded in the caller's thread when no reader collected them
_GAUGES: tuple[tuple[str, str, str, Callable[[Counters], float]], ...] = (
    ("agents.context.items", "{item}", "Current item count", lambda c: c.items),
    ("agents.context.tokens", "{token}", "Current token usage", lambda c: c.tokens),
    ("agents.context.usage_percent", "%", "Usage percentage",
     lambda c: c.tokens * 100.0 / c.max_tokens if c.max_tokens else 0.0),
)  # fmt: skip
_changes = itertools.count(1)  # orders changes across stores: the newest counters of a window win


def _package_version() -> str:
    return __version__


class Instruments:
    """The instruments of one meter provider, shared by every store that reports to it: the
    gauges' callbacks observe each member (an open store's ``Metrics``)."""

    def __init__(self, meter: Any) -> None:
        from opentelemetry.metrics import Observation

        self.members: weakref.WeakSet[Metrics] = weakref.WeakSet()
        self._lock = threading.Lock()

        def observer(value: Callable[[Counters], float]) -> Callable[[Any], list[Any]]:
            def observe(options: Any) -> list[Any]:
                return [Observation(value(c), {"window_id": w}) for w, c in self.latest().items()]

            return observe

        for name, unit, description, value in _GAUGES:
            meter.create_observable_gauge(name, callbacks=[observer(value)], unit=unit, description=description)
        self.add = meter.create_histogram(
            "agents.context.add_latency_ms", unit="ms", description="Add operation latency"
        )
        self.build = meter.create_histogram(
            "agents.context.build_latency_ms", unit="ms", description="Build operation latency"
        )
        self.compactions = meter.create_counter(
            "agents.context.compaction_total", unit="{compaction}", description="Total compaction operations"
        )
        self.freed = meter.create_counter(
            "agents.context.tokens_freed_total", unit="{token}", description="Total tokens freed by compaction"
        )
        self.invalidated = meter.create_counter(
            "agents.context.tokens_invalidated_total",
            unit="{token}",
            description="Prompt tokens from each compaction's first change on (prompt cache invalidated)",
        )
        self.turn = meter.create_histogram(
            "agents.context.turn_duration_ms", unit="ms", description="Turn duration (lease held)"
        )
        self.provider_tokens = meter.create_counter(
            "agents.context.provider_tokens_total", unit="{token}", description="Tokens the provider reported"
        )
        self.turn_conflicts = meter.create_counter(
            "agents.context.turn_conflict_total", unit="{conflict}", description="Turns rejected, enqueued or lost"
        )

    def join(self, member: Metrics) -> None:
        """Report ``member``'s windows from now on."""
        with self._lock:
            self.members.add(member)

    def leave(self, member: Metrics) -> None:
        """Stop reporting ``member``'s windows."""
        with self._lock:
            self.members.discard(member)

    def latest(self) -> dict[str, Counters]:
        """Every member's windows, each with the counters of its most recent change; queued
        latencies are recorded on the way (a collection is when they are due)."""
        with self._lock:
            members = list(self.members)
        newest: dict[str, tuple[int, Counters]] = {}
        for member in members:
            member.flush()
            for window_id, (n, counters) in list(member.last.items()):
                if window_id not in newest or newest[window_id][0] < n:
                    newest[window_id] = (n, counters)
        return {w: c for w, (_, c) in newest.items()}


_by_provider: weakref.WeakKeyDictionary[Any, Instruments] = weakref.WeakKeyDictionary()
_global: list[Instruments] = []  # the instruments of the API's global provider, made once
_registry_lock = threading.Lock()


def instruments_for(provider: Any) -> Instruments | None:
    """The shared instruments of ``provider`` (None: the API's global provider, which may be
    set later: the API's proxy meter binds them then), or None without the OpenTelemetry API."""
    try:
        from opentelemetry import metrics
    except ImportError:
        return None
    with _registry_lock:
        if provider is None or provider is metrics.get_meter_provider():
            if not _global:
                _global.append(Instruments(metrics.get_meter_provider().get_meter(METER_NAME, _package_version())))
            return _global[0]
        found = _by_provider.get(provider)
        if found is None:
            found = _by_provider[provider] = Instruments(provider.get_meter(METER_NAME, _package_version()))
        return found


class Metrics:
    """What one store reports (a no-op without the OpenTelemetry API): the counters each of its
    windows last answered with, observed through the provider's shared gauges when the
    application's reader collects, and its latencies, queued until then so that an add makes
    no SDK call."""

    def __init__(self, meter_provider: Any = None) -> None:
        self._instruments = instruments_for(meter_provider)
        self.enabled = self._instruments is not None
        self.last: dict[str, tuple[int, Counters]] = {}
        self._queued: deque[tuple[Any, float, dict[str, str]]] = deque()
        if self._instruments is not None:
            self._instruments.join(self)

    def close(self) -> None:
        """Record what is queued and stop reporting (the store closed)."""
        if self._instruments is not None:
            self.flush()
            self._instruments.leave(self)
            self.last.clear()

    def changed(self, window_id: str, counters: Counters) -> None:
        """Keep a window's counters after a mutation (the gauges' next values), and count the
        compactions it ran."""
        if self._instruments is None:
            return
        self.last[window_id] = (next(_changes), counters)
        if counters.compactions:
            attrs = {"window_id": window_id}
            self._instruments.compactions.add(counters.compactions, attrs)
            self._instruments.freed.add(counters.freed, attrs)
            self._instruments.invalidated.add(counters.invalidated, attrs)

    def add_latency(self, window_id: str, ms: float) -> None:
        """Queue one add call's wall time for the latency histogram."""
        if self._instruments is not None:
            self._queue(self._instruments.add, ms, window_id)

    def build_latency(self, window_id: str, ms: float) -> None:
        """Queue one build's wall time for the latency histogram."""
        if self._instruments is not None:
            self._queue(self._instruments.build, ms, window_id)

    def turn_ended(self, window_id: str, ms: float, outcome: str) -> None:
        """Queue one turn's duration (``outcome``: ok, error or lost)."""
        if self._instruments is not None:
            self._queued.append((self._instruments.turn, ms, {"window_id": window_id, "outcome": outcome}))

    def turn_conflict(self, window_id: str, outcome: str) -> None:
        """Count a turn that met another: rejected, enqueued, lost."""
        if self._instruments is not None:
            self._instruments.turn_conflicts.add(1, {"window_id": window_id, "outcome": outcome})

    def usage_reported(self, window_id: str, counts: tuple[int, int, int, int], model: str | None) -> None:
        """Count what a ``record_usage`` call reported (input, output, cache-read, cache-write
        tokens; a caller's retry under the same request id, which records nothing, counts again)."""
        if self._instruments is not None:
            for kind, n in zip(("input", "output", "cache_read", "cache_write"), counts, strict=True):
                if n:
                    self._instruments.provider_tokens.add(
                        n, {"window_id": window_id, "kind": kind, "model": model or ""}
                    )

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
