"""A process of its own for tests/test_metrics_stores.py: OpenTelemetry's global meter provider
can be set once per process, so each scenario runs here.

    python _metrics_worker.py URL PREFIX "sync async | sync" [CLOSE_INDEX]

Makes the stores named in order ("|" marks where ``set_meter_provider`` is called), store i
adding i + 2 items to its window ``w<i>`` and building it once; closes store CLOSE_INDEX if given;
then prints what the SDK's in-memory reader collected, as JSON: per metric, per window id, the
gauge's value or the histogram's count.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from opentelemetry import metrics as otel_api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import contextstore as cs


def points_by_window(reader: InMemoryMetricReader) -> dict[str, dict[str, float]]:
    """What ``reader`` holds: metric name -> window id -> value (a histogram's count)."""
    out: dict[str, dict[str, float]] = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "count", None)
                    out.setdefault(metric.name, {})[str(point.attributes["window_id"])] = (
                        point.value if value is None else value
                    )
    return out


def main() -> None:
    url, prefix, plan = sys.argv[1], sys.argv[2], sys.argv[3].split()
    close_index = int(sys.argv[4]) if len(sys.argv) > 4 else None
    reader = InMemoryMetricReader()
    loop = asyncio.new_event_loop()
    stores: list[Any] = []
    for word in plan:
        if word == "|":
            otel_api.set_meter_provider(MeterProvider(metric_readers=[reader]))
            continue
        i = len(stores)
        if word == "sync":
            store: Any = cs.ContextStore.from_url(url, prefix=f"{prefix}-{i}")
            win = store.window(f"w{i}", max_tokens=10_000)
            for n in range(i + 2):
                win.add(f"message {n}", type="text")
            win.build()
        else:
            store = cs.AsyncContextStore.from_url(url, prefix=f"{prefix}-{i}")

            async def fill(store: Any = store, i: int = i) -> None:
                win = await store.window(f"w{i}", max_tokens=10_000)
                for n in range(i + 2):
                    await win.add(f"message {n}", type="text")
                await win.build()

            loop.run_until_complete(fill())
        stores.append(store)
    if close_index is not None:
        closing = stores[close_index]
        if isinstance(closing, cs.AsyncContextStore):
            loop.run_until_complete(closing.close())
        else:
            closing.close()
    out = points_by_window(reader)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
