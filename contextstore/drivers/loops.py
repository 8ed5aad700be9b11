"""One Redis client per event loop, for the asyncio store.

redis-py's asyncio connections and pool locks belong to the event loop that first used them:
from another loop they raise ``RuntimeError`` or hang. ``AsyncContextStore`` therefore keeps a
client per running loop. The first loop that uses the store gets the client the store was made
with; every later loop gets a copy with the same connection settings, owned by the store. A
loop's client is closed on that loop when the loop shuts down (``asyncio.run`` and
``asyncio.Runner`` finalize async generators, which is the hook used here), or by
``AsyncContextStore.close()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ContextStoreError

#: seconds ``close()`` waits for a loop running in another thread to close its client
CLOSE_TIMEOUT = 10.0


@dataclass(eq=False, slots=True)
class LoopClient:
    """The client (and its registered scripts) that one event loop uses."""

    loop: asyncio.AbstractEventLoop
    client: Any
    scripts: Any
    owned: bool
    closer: AsyncGenerator[None, None] | None = field(default=None)


def copy_client(client: Any) -> Any:
    """A new ``redis.asyncio.Redis`` with ``client``'s connection settings and its own pool."""
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        raise ContextStoreError(
            f"this AsyncContextStore was given a {type(client).__name__} that belongs to another "
            "event loop, and such a client cannot be copied for this one: give each event loop "
            "its own store, or make the store with AsyncContextStore.from_url(...)"
        )
    clone = type(pool)(
        connection_class=pool.connection_class, max_connections=pool.max_connections, **pool.connection_kwargs
    )
    return type(client).from_pool(clone)


class LoopClients:
    """The clients of one asyncio store, one per event loop that has used it."""

    def __init__(
        self, first: Any, first_owned: bool, registry: Callable[[Any], Any], factory: Callable[[], Any] | None = None
    ) -> None:
        self._template = first  # its settings are copied for every later loop (or factory() made)
        self._factory = factory
        self._unused: Any = first  # handed to the first loop that asks
        self._unused_owned = first_owned
        self._registry = registry
        self._by_loop: dict[asyncio.AbstractEventLoop, LoopClient] = {}
        self._lock = threading.Lock()  # loops in several threads may share the store

    async def current(self) -> LoopClient:
        """The running loop's client, made (and armed to close with the loop) on first use."""
        loop = asyncio.get_running_loop()
        entry = self._by_loop.get(loop)
        if entry is None:
            with self._lock:
                entry = self._by_loop.get(loop)
                if entry is None:
                    entry = self._by_loop[loop] = self._new_entry(loop)
        if entry.closer is None:  # only this loop's thread gets here for this entry
            entry.closer = self._close_with_loop(entry)
            await entry.closer.__anext__()  # the loop now finalizes it when it shuts down
        return entry

    def _new_entry(self, loop: asyncio.AbstractEventLoop) -> LoopClient:
        for old in [lp for lp in self._by_loop if lp.is_closed()]:
            del self._by_loop[old]  # closed without finalizing async generators: nothing to run on
        if self._unused is not None:
            client, owned, self._unused = self._unused, self._unused_owned, None
        else:
            client, owned = self._factory() if self._factory else copy_client(self._template), True
        return LoopClient(loop, client, self._registry(client), owned)

    async def _close_with_loop(self, entry: LoopClient) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            with self._lock:
                if self._by_loop.get(entry.loop) is entry:
                    del self._by_loop[entry.loop]
            if entry.owned:
                await entry.client.aclose()

    async def close(self) -> None:
        """Close every client the store owns, each on its own loop (loops in other threads
        are asked to; a loop that is not running can run nothing and is skipped)."""
        here = asyncio.get_running_loop()
        with self._lock:
            entries = list(self._by_loop.values())
            self._by_loop.clear()
            unused, self._unused = self._unused, None
        for entry in entries:
            if entry.closer is None:
                continue
            if entry.loop is here:
                await entry.closer.aclose()
            elif entry.loop.is_running():
                fut = asyncio.run_coroutine_threadsafe(entry.closer.aclose(), entry.loop)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.wrap_future(fut), CLOSE_TIMEOUT)
        if unused is not None and self._unused_owned:
            await unused.aclose()


def loop_error(where: str, exc: RuntimeError) -> ContextStoreError:
    """The error for a client used from an event loop it is not bound to (``exc``: asyncio's)."""
    return ContextStoreError(
        f"the Redis client for {where} cannot be used from this event loop ({exc}); give the store a client "
        "made on this loop, or use AsyncContextStore.from_url(...), which keeps one client per loop"
    )
