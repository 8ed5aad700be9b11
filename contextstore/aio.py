"""The asyncio API: AsyncContextStore and AsyncContextWindow, driving the same plans as the
sync API (``ops``); only the I/O is awaited."""

from __future__ import annotations

import asyncio
import inspect
from types import TracebackType
from typing import Any, TypeVar

import redis.asyncio
import redis.asyncio.retry

from . import ops
from ._base import REDIS_ERRORS, ScriptRegistry, StoreBase, helper_failed, store_error
from ._loops import LoopClients
from .errors import ContextStoreError
from .keys import meta_pattern
from .types import (
    BuildOptions,
    BuiltContext,
    CompactionStrategy,
    ContextItem,
    ContextSnapshot,
    ContextWindowStats,
    ItemType,
    WindowConfig,
)
from .verify import VerifyReport

T = TypeVar("T")


class AsyncContextStore(StoreBase):
    """The asyncio twin of :class:`contextstore.ContextStore`: same names, awaitable."""

    _redis_class = redis.asyncio.Redis
    _retry_class = redis.asyncio.retry.Retry

    def __init__(self, client: Any, **options: Any) -> None:
        super().__init__(client, **options)
        self._loops = LoopClients(client, self._owns_client, ScriptRegistry)

    async def _run(self, plan: ops.Plan[T]) -> T:
        self._ensure_server()
        try:
            request = next(plan)
            while True:
                request = plan.send(await self._execute(request))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def _execute(self, request: ops.ScriptCall | ops.External) -> Any:
        if isinstance(request, ops.External):
            try:
                result = request.fn(*request.args)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                raise helper_failed(exc) from exc
            return result
        keys, argv, attempt = list(request.keys), request.argv(), 0
        scripts = (await self._loops.current()).scripts
        while True:
            try:
                return await scripts[request.name](keys=keys, args=argv)
            except REDIS_ERRORS as exc:
                attempt += 1
                delay = self._retry_delay(exc, attempt, request)
            except RuntimeError as exc:  # a caller's client bound to another (or a closed) loop
                raise self._loop_error(exc) from exc
            await asyncio.sleep(delay)

    def _loop_error(self, exc: RuntimeError) -> ContextStoreError:
        return ContextStoreError(f"the Redis client for {self._where} cannot be used from this event "
                                 f"loop ({exc}); give the store a client made on this loop, or use "
                                 "AsyncContextStore.from_url(...), which keeps one client per loop")

    async def window(self, window_id: str, *, create: bool = True, **config: Any) -> AsyncContextWindow:
        """Attach to ``window_id``, creating it with ``config`` if it does not exist; with
        ``create=False`` a missing window raises ``WindowNotFoundError`` instead."""
        state = await self._run(ops.open_window(self._settings, window_id, config, create))
        return AsyncContextWindow(self, state)

    async def windows(self) -> list[str]:
        """Sorted ids of every window under this store's prefix (every primary of a cluster)."""
        found: set[str] = set()
        self._ensure_server()
        client = (await self._loops.current()).client
        try:
            async for key in client.scan_iter(match=meta_pattern(self._settings.prefix), count=1000):
                wid = self._window_id(key)
                if wid is not None:
                    found.add(wid)
        except REDIS_ERRORS as exc:
            raise store_error(exc, self._where) from exc
        except RuntimeError as exc:
            raise self._loop_error(exc) from exc
        return sorted(found)

    async def close(self) -> None:
        """Close the clients this store made (one per event loop that used it); a client the
        caller brought stays open."""
        await self._loops.close()

    async def __aenter__(self) -> AsyncContextStore:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()



class AsyncContextWindow:
    """The asyncio twin of :class:`contextstore.ContextWindow`; read its numbers from
    ``await win.stats()``."""

    def __init__(self, store: AsyncContextStore, state: ops.WindowState) -> None:
        self._store = store
        self._state = state
        self._settings = store._settings

    @property
    def window_id(self) -> str:
        return self._state.window_id

    async def add(self, content_or_item: str | ContextItem, *, type: ItemType | str = ItemType.CODE,  # noqa: A002
                  priority: int = 50, pinned: bool = False, role: str | None = None,
                  source_ref: str | None = None, metadata: dict[str, Any] | None = None,
                  token_count: int | None = None, id: str | None = None,  # noqa: A002
            request_id: str | None = None) -> ContextItem:
        kw = dict(type=type, priority=priority, pinned=pinned, role=role, source_ref=source_ref,
                  metadata=metadata, token_count=token_count, id=id)
        return (await self._store._run(ops.add(self._settings, self._state, [(content_or_item, kw)], request_id)))[1][0]

    async def add_many(self, items: list[str | ContextItem | dict[str, Any]], *, request_id: str | None = None) -> int:
        entries = ops.entries(items)
        if not entries:
            return 0
        return (await self._store._run(ops.add(self._settings, self._state, entries, request_id)))[0]

    async def get(self, item_id: str) -> ContextItem | None:
        return await self._store._run(ops.get(self._state, item_id))

    async def remove(self, item_id: str, *, request_id: str | None = None) -> bool:
        return await self._store._run(ops.remove(self._state, item_id, request_id))

    async def pin(self, item_id: str, *, request_id: str | None = None) -> bool:
        return await self._store._run(ops.set_pinned(self._state, item_id, True, request_id))

    async def unpin(self, item_id: str, *, request_id: str | None = None) -> bool:
        return await self._store._run(ops.set_pinned(self._state, item_id, False, request_id))

    async def update_priority(self, item_id: str, priority: int, *, request_id: str | None = None) -> bool:
        return await self._store._run(ops.update_priority(self._state, item_id, priority, request_id))

    async def items(self, types: Any = None, limit: int | None = None) -> list[ContextItem]:
        return await self._store._run(ops.items(self._state, types, limit))

    async def ordered_items(self, types: Any = None) -> list[ContextItem]:
        return await self._store._run(ops.ordered_items(self._state, types))

    async def pinned_items(self) -> list[ContextItem]:
        return await self._store._run(ops.ordered_items(self._state, None, pinned_only=True))

    async def clear(self, include_pinned: bool = False, *, request_id: str | None = None) -> int:
        return await self._store._run(ops.clear(self._state, include_pinned, request_id))

    async def compact(self, strategy: CompactionStrategy | str | None = None, target_percent: float = 70.0,
                      *, query: str | None = None, request_id: str | None = None) -> int:
        return await self._store._run(ops.compact(self._settings, self._state, strategy, target_percent, query, request_id))

    async def build(self, options: BuildOptions | None = None) -> str:
        return (await self.build_structured(options)).content

    async def build_structured(self, options: BuildOptions | None = None) -> BuiltContext:
        return await self._store._run(ops.build(self._settings, self._state, options))

    async def to_markdown(self, types: Any = None, limit: int | None = None, language: str | None = None) -> str:
        return await self._store._run(ops.to_markdown(self._state, types, limit, language))

    async def snapshot(self) -> ContextSnapshot:
        return await self._store._run(ops.snapshot(self._state))

    async def restore(self, snapshot: ContextSnapshot, *, request_id: str | None = None) -> None:
        await self._store._run(ops.restore(self._settings, self._state, snapshot, request_id))

    async def verify(self) -> VerifyReport:
        return await self._store._run(ops.verify(self._state))

    async def stats(self) -> ContextWindowStats:
        return await self._store._run(ops.stats(self._state))

    async def configure(self, *, request_id: str | None = None, **changes: Any) -> WindowConfig:
        return await self._store._run(ops.configure(self._settings, self._state, changes, request_id))

    async def delete(self, *, request_id: str | None = None) -> bool:
        return await self._store._run(ops.delete(self._state, request_id))

    def __repr__(self) -> str:
        return f"AsyncContextWindow({self._state.window_id!r})"
