"""Driving the stream plans of ``streams.py`` (following a window, consumer groups) over a
store's client: the blocking loop for ``ContextStore``, the awaited one for
``AsyncContextStore``. Retries and error mapping are the store's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from . import streams
from ._loops import loop_error
from .redis_failures import REDIS_EXCEPTIONS
from .streams import Deliver, EventBatch, Sleep, StreamCall, StreamPlan

if TYPE_CHECKING:
    from .aio import AsyncContextStore
    from .sync import ContextStore


def _ignored(exc: Exception, call: StreamCall) -> bool:
    return any(str(exc).startswith(prefix) for prefix in call.ignore)


def retried(store: ContextStore, call: StreamCall, run: Callable[[], Any]) -> Any:
    """``run()`` under the store's retry policy (``call`` names it and lists the error texts
    that answer None)."""
    store._check_open()
    attempt, started = 0, 0.0
    while True:
        try:
            reply = run()
            store._reached = True
            return reply
        except REDIS_EXCEPTIONS as exc:
            if _ignored(exc, call):
                return None
            attempt += 1
            started = time.monotonic() if attempt == 1 else started
            delay = store._retry_delay(exc, attempt, call, started)
        time.sleep(delay)


def _call(store: ContextStore, call: StreamCall) -> Any:
    return retried(store, call, lambda: getattr(store._client, call.method)(*call.args, **call.kwargs))


def values(store: ContextStore, plan: StreamPlan) -> Iterator[Any]:
    """What ``plan`` delivers, running its calls on the sync store."""
    store._ensure_server()
    request = next(plan, None)
    while request is not None:
        reply = None
        if isinstance(request, Deliver):
            yield request.value
        elif isinstance(request, Sleep):
            time.sleep(request.seconds)
        else:
            reply = _call(store, request)
        request = _next(plan, reply)


async def _acall(store: AsyncContextStore, call: StreamCall) -> Any:
    client = (await store._loops.current()).client
    return await aretried(store, call, lambda: getattr(client, call.method)(*call.args, **call.kwargs))


async def aretried(store: AsyncContextStore, call: StreamCall, run: Callable[[], Awaitable[Any]]) -> Any:
    """``retried`` for the asyncio store; a client bound to another loop is a ContextStoreError."""
    store._check_open()
    attempt, started = 0, 0.0
    while True:
        try:
            reply = await run()
            store._reached = True
            return reply
        except REDIS_EXCEPTIONS as exc:
            if _ignored(exc, call):
                return None
            attempt += 1
            started = time.monotonic() if attempt == 1 else started
            delay = store._retry_delay(exc, attempt, call, started)
        except RuntimeError as exc:
            raise loop_error(store._where, exc) from exc
        await asyncio.sleep(delay)


async def avalues(store: AsyncContextStore, plan: StreamPlan) -> AsyncIterator[Any]:
    """What ``plan`` delivers, running its calls on the asyncio store."""
    store._ensure_server()
    request = next(plan, None)
    while request is not None:
        reply = None
        if isinstance(request, Deliver):
            yield request.value
        elif isinstance(request, Sleep):
            await asyncio.sleep(request.seconds)
        else:
            reply = await _acall(store, request)
        request = _next(plan, reply)


def _next(plan: StreamPlan, reply: Any) -> StreamCall | Sleep | Deliver | None:
    try:
        return plan.send(reply)
    except StopIteration:
        return None


def run(store: ContextStore, calls: list[StreamCall]) -> None:
    """Run calls (acknowledgements) on the sync store."""
    for call in calls:
        _call(store, call)


async def arun(store: AsyncContextStore, calls: list[StreamCall]) -> None:
    """Run calls (acknowledgements) on the asyncio store."""
    for call in calls:
        await _acall(store, call)


def batches(store: ContextStore, group: str, plan: StreamPlan) -> Iterator[EventBatch]:
    """A consumer group's deliveries as batches whose ``ack()`` acknowledges them."""
    for delivery in values(store, plan):
        calls = streams.acknowledge(group, delivery.pending)
        yield EventBatch(delivery.events, lambda calls=calls: run(store, calls))


async def abatches(store: AsyncContextStore, group: str, plan: StreamPlan) -> AsyncIterator[EventBatch]:
    """The awaited twin of ``batches``."""
    async for delivery in avalues(store, plan):
        calls = streams.acknowledge(group, delivery.pending)
        yield EventBatch(delivery.events, lambda calls=calls: arun(store, calls))
