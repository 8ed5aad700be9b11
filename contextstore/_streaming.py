"""Driving the stream plans of ``streams.py`` (following a window, consumer groups) over a
store's client: the blocking loop for ``ContextStore``, the awaited one for
``AsyncContextStore``. Retries and error mapping are the store's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

from . import streams
from ._loops import LoopClients, loop_error
from .plans.base import Plan, Settings
from .redis_failures import REDIS_EXCEPTIONS
from .streams import Deliver, EventBatch, Sleep, StreamCall, StreamPlan

T = TypeVar("T")


class Driver(Protocol):
    """What the loops that drive plans outside a store's own ``_run`` (this module,
    ``_listing``, ``_compacting``, and a turn) use of it: ``ContextStore`` and
    ``AsyncContextStore`` both are one, and these modules import neither."""

    _reached: bool

    @property
    def _settings(self) -> Settings: ...
    @property
    def _metrics(self) -> Any: ...
    @property
    def _cluster(self) -> bool: ...
    @property
    def _where(self) -> str: ...
    @property
    def _meta_match(self) -> str: ...
    def _check_open(self) -> None: ...
    def _ensure_server(self) -> None: ...
    def _retry_delay(self, exc: Exception, attempt: int, call: Any, started: float) -> float: ...
    def _window_ids(self, keys: Iterable[bytes | str]) -> set[str]: ...


class SyncDriver(Driver, Protocol):
    """A sync store: its client, and its plans run blocking."""

    @property
    def _client(self) -> Any: ...
    def _run(self, plan: Plan[T]) -> T: ...
    def windows(self) -> list[str]:
        """The window ids under the store's prefix."""


class AsyncDriver(Driver, Protocol):
    """An asyncio store: one client per event loop, and its plans awaited."""

    @property
    def _loops(self) -> LoopClients: ...
    async def _run(self, plan: Plan[T]) -> T: ...
    async def windows(self) -> list[str]:
        """The window ids under the store's prefix."""


def _ignored(exc: Exception, call: StreamCall) -> bool:
    return any(str(exc).startswith(prefix) for prefix in call.ignore)


def retried(store: SyncDriver, call: StreamCall, run: Callable[[], Any]) -> Any:
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


def _call(store: SyncDriver, call: StreamCall) -> Any:
    return retried(store, call, lambda: getattr(store._client, call.method)(*call.args, **call.kwargs))


def values(store: SyncDriver, plan: StreamPlan) -> Iterator[Any]:
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


async def _acall(store: AsyncDriver, call: StreamCall) -> Any:
    client = (await store._loops.current()).client
    return await aretried(store, call, lambda: getattr(client, call.method)(*call.args, **call.kwargs))


async def aretried(store: AsyncDriver, call: StreamCall, run: Callable[[], Awaitable[Any]]) -> Any:
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


async def avalues(store: AsyncDriver, plan: StreamPlan) -> AsyncIterator[Any]:
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


def run(store: SyncDriver, calls: list[StreamCall]) -> None:
    """Run calls (acknowledgements) on the sync store."""
    for call in calls:
        _call(store, call)


async def arun(store: AsyncDriver, calls: list[StreamCall]) -> None:
    """Run calls (acknowledgements) on the asyncio store."""
    for call in calls:
        await _acall(store, call)


def batches(store: SyncDriver, group: str, plan: StreamPlan) -> Iterator[EventBatch]:
    """A consumer group's deliveries as batches whose ``ack()`` acknowledges them."""
    for delivery in values(store, plan):
        calls = streams.acknowledge(group, delivery.pending)
        yield EventBatch(delivery.events, lambda calls=calls: run(store, calls))


async def abatches(store: AsyncDriver, group: str, plan: StreamPlan) -> AsyncIterator[EventBatch]:
    """The awaited twin of ``batches``."""
    async for delivery in avalues(store, plan):
        calls = streams.acknowledge(group, delivery.pending)
        yield EventBatch(delivery.events, lambda calls=calls: arun(store, calls))
