"""Driving the background compactor of ``compactor.py`` on a driver: the blocking loop of
``ContextStore.run_compactor`` and the awaited one of ``AsyncContextStore.run_compactor``."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from .. import compactor
from ..core import streams
from ..errors import ContextStoreError
from ..plans.driver import AsyncDriver, SyncDriver
from . import listing, streaming

#: with ``windows=None``, how often the compactor looks for new windows while busy
REDISCOVER_S = 5.0


def run(driver: SyncDriver, job: compactor.CompactorJob, stop: threading.Event | None) -> None:
    """Compact the job's windows as their events come, until ``stop`` is set."""
    while stop is None or not stop.is_set():
        ids = job.windows or listing.windows(driver)
        if not ids:
            stop.wait(job.block_ms / 1000) if stop else time.sleep(job.block_ms / 1000)
            continue
        began = time.monotonic()
        for delivery in streaming.values(driver, job.consumer_plan(driver.settings.prefix, driver.cluster, ids)):
            for window_id, pending in compactor.by_window(delivery).items():
                if _tend(driver, job, window_id):
                    streaming.run(driver, streams.acknowledge(job.group, pending))
            if (stop is not None and stop.is_set()) or _rediscover(job, began):
                break


def _tend(driver: SyncDriver, job: compactor.CompactorJob, window_id: str) -> bool:
    if not job.due(window_id, time.monotonic()):
        return False
    try:
        outcome: str | BaseException = driver.run(compactor.tend(driver.settings, job, window_id))
    except ContextStoreError as exc:
        outcome = exc
        with contextlib.suppress(ContextStoreError):  # else the lease expires by itself
            driver.run(compactor.release(driver.settings, window_id, job.token))
    return job.handled(window_id, outcome, time.monotonic())


async def arun(driver: AsyncDriver, job: compactor.CompactorJob, stop: asyncio.Event | None) -> None:
    """The awaited twin of ``run``."""
    while stop is None or not stop.is_set():
        ids = job.windows or await listing.awindows(driver)
        if not ids:
            await _await_stop(stop, job.block_ms / 1000)
            continue
        began = time.monotonic()
        plan = job.consumer_plan(driver.settings.prefix, driver.cluster, ids)
        async for delivery in streaming.avalues(driver, plan):
            for window_id, pending in compactor.by_window(delivery).items():
                if await _atend(driver, job, window_id):
                    await streaming.arun(driver, streams.acknowledge(job.group, pending))
            if (stop is not None and stop.is_set()) or _rediscover(job, began):
                break


async def _atend(driver: AsyncDriver, job: compactor.CompactorJob, window_id: str) -> bool:
    if not job.due(window_id, time.monotonic()):
        return False
    try:
        outcome: str | BaseException = await driver.run(compactor.tend(driver.settings, job, window_id))
    except ContextStoreError as exc:
        outcome = exc
        with contextlib.suppress(ContextStoreError):  # else the lease expires by itself
            await driver.run(compactor.release(driver.settings, window_id, job.token))
    return job.handled(window_id, outcome, time.monotonic())


async def _await_stop(stop: asyncio.Event | None, seconds: float) -> None:
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def _rediscover(job: compactor.CompactorJob, began: float) -> bool:
    """True when a compactor of every window should look for new windows now."""
    return job.windows is None and time.monotonic() - began > REDISCOVER_S
