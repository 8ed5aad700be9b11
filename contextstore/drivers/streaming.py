"""Driving the stream plans of ``core.streams`` (following a window, consumer groups) over a
driver (``plans.driver``): the blocking loop for ``ContextStore``, the awaited one for
``AsyncContextStore``. Retries and error mapping are the store's, through its driver."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from ..core import streams
from ..core.retry import Attempts
from ..core.streams import Deliver, EventBatch, Sleep, StreamCall, StreamPlan
from ..plans.driver import AsyncDriver, SyncDriver
from .loops import loop_error
from .redis_failures import REDIS_EXCEPTIONS


def _ignored(exc: Exception, call: StreamCall) -> bool:
    return any(str(exc).startswith(prefix) for prefix in call.ignore)


def retried(driver: SyncDriver, call: StreamCall, run: Callable[[], Any]) -> Any:
    """``run()`` under the store's retry policy (``call`` names it and lists the error texts
    that answer None)."""
    driver.check_open()
    tries = Attempts(driver.retry_delay, call)
    while True:
        try:
            reply = run()
            driver.reached()
            return reply
        except REDIS_EXCEPTIONS as exc:
            if _ignored(exc, call):
                return None
            delay = tries.failed(exc)
        time.sleep(delay)


def _call(driver: SyncDriver, call: StreamCall) -> Any:
    return retried(driver, call, lambda: getattr(driver.client(), call.method)(*call.args, **call.kwargs))


def values(driver: SyncDriver, plan: StreamPlan) -> Iterator[Any]:
    """What ``plan`` delivers, running its calls on the sync store."""
    driver.start()
    request = next(plan, None)
    while request is not None:
        reply = None
        if isinstance(request, Deliver):
            yield request.value
        elif isinstance(request, Sleep):
            time.sleep(request.seconds)
        else:
            reply = _call(driver, request)
        request = _next(plan, reply)


async def _acall(driver: AsyncDriver, call: StreamCall) -> Any:
    client = await driver.client()
    return await aretried(driver, call, lambda: getattr(client, call.method)(*call.args, **call.kwargs))


async def aretried(driver: AsyncDriver, call: StreamCall, run: Callable[[], Awaitable[Any]]) -> Any:
    """``retried`` for the asyncio store; a client bound to another loop is a ContextStoreError."""
    driver.check_open()
    tries = Attempts(driver.retry_delay, call)
    while True:
        try:
            reply = await run()
            driver.reached()
            return reply
        except REDIS_EXCEPTIONS as exc:
            if _ignored(exc, call):
                return None
            delay = tries.failed(exc)
        except RuntimeError as exc:
            raise loop_error(driver.where, exc) from exc
        await asyncio.sleep(delay)


async def avalues(driver: AsyncDriver, plan: StreamPlan) -> AsyncIterator[Any]:
    """What ``plan`` delivers, running its calls on the asyncio store."""
    driver.start()
    request = next(plan, None)
    while request is not None:
        reply = None
        if isinstance(request, Deliver):
            yield request.value
        elif isinstance(request, Sleep):
            await asyncio.sleep(request.seconds)
        else:
            reply = await _acall(driver, request)
        request = _next(plan, reply)


def _next(plan: StreamPlan, reply: Any) -> StreamCall | Sleep | Deliver | None:
    try:
        return plan.send(reply)
    except StopIteration:
        return None


def run(driver: SyncDriver, calls: list[StreamCall]) -> None:
    """Run calls (acknowledgements) on the sync store."""
    for call in calls:
        _call(driver, call)


async def arun(driver: AsyncDriver, calls: list[StreamCall]) -> None:
    """Run calls (acknowledgements) on the asyncio store."""
    for call in calls:
        await _acall(driver, call)


def batches(driver: SyncDriver, group: str, plan: StreamPlan) -> Iterator[EventBatch]:
    """A consumer group's deliveries as batches whose ``ack()`` acknowledges them."""
    for delivery in values(driver, plan):
        calls = streams.acknowledge(group, delivery.pending)
        yield EventBatch(delivery.events, lambda calls=calls: run(driver, calls))


async def abatches(driver: AsyncDriver, group: str, plan: StreamPlan) -> AsyncIterator[EventBatch]:
    """The awaited twin of ``batches``."""
    async for delivery in avalues(driver, plan):
        calls = streams.acknowledge(group, delivery.pending)
        yield EventBatch(delivery.events, lambda calls=calls: arun(driver, calls))
