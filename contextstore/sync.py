"""The synchronous API: ContextStore and ContextWindow (thin shells over ``ops``)."""

from __future__ import annotations

import inspect
import time
from types import TracebackType
from typing import Any, TypeVar

import redis
import redis.retry

from . import ops
from ._base import REDIS_ERRORS, StoreBase, helper_failed, store_error
from ._direct import DirectEvalsha
from .errors import InvalidOptionsError
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


class ContextStore(StoreBase):
    """Shared context windows in one Redis (or Redis Cluster).

    ``ContextStore(client)`` uses a ``redis.Redis`` / ``RedisCluster`` the caller brought (and
    does not close it); ``from_url``, ``embedded`` and ``from_env`` make their own. Constructors do
    no I/O: an unreachable Redis is reported by the first operation.
    """

    _redis_class = redis.Redis
    _retry_class = redis.retry.Retry

    @property
    def _direct(self) -> DirectEvalsha | None:
        """The lean EVALSHA path, for a plain ``redis.Redis`` this store made itself."""
        d: DirectEvalsha | None | bool = self.__dict__.get("_direct_cache", False)
        if d is False:
            d = DirectEvalsha(self._client) if self._owns_client and type(self._client) is redis.Redis else None
            self.__dict__["_direct_cache"] = d
        return d  # type: ignore[return-value]

    # -- running plans ---------------------------------------------------------------------

    def _run(self, plan: ops.Plan[T]) -> T:
        self._ensure_server()
        try:
            request = next(plan)
            while True:
                request = plan.send(self._execute(request))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    def _execute(self, request: ops.ScriptCall | ops.External) -> Any:
        if isinstance(request, ops.External):
            try:
                result = request.fn(*request.args)
            except Exception as exc:
                raise helper_failed(exc) from exc
            if inspect.isawaitable(result):
                getattr(result, "close", lambda: None)()
                raise InvalidOptionsError("an async summarizer/scorer needs AsyncContextStore")
            return result
        keys, argv, attempt = list(request.keys), request.argv(), 0
        direct = self._direct
        while True:
            try:
                if direct is not None:
                    return direct.evalsha(self._scripts[request.name], keys, argv)
                return self._scripts[request.name](keys=keys, args=argv)
            except REDIS_ERRORS as exc:
                attempt += 1
                delay = self._retry_delay(exc, attempt, request)
            time.sleep(delay)

    # -- API -------------------------------------------------------------------------------

    def window(self, window_id: str, *, create: bool = True, **config: Any) -> ContextWindow:
        """Attach to ``window_id``, creating it with ``config`` if it does not exist; with
        ``create=False`` a missing window raises ``WindowNotFoundError`` instead.

        Passed values that differ from the stored config raise ``ConfigConflictError``.
        Options: ``max_tokens``, ``max_items``, ``compaction_threshold``, ``default_strategy``,
        ``ttl_seconds``.
        """
        state = self._run(ops.open_window(self._settings, window_id, config, create))
        return ContextWindow(self, state)

    def windows(self) -> list[str]:
        """Sorted ids of every window under this store's prefix (every primary of a cluster)."""
        found: set[str] = set()
        self._ensure_server()
        try:
            for key in self._client.scan_iter(match=meta_pattern(self._settings.prefix), count=1000):
                wid = self._window_id(key)
                if wid is not None:
                    found.add(wid)
        except REDIS_ERRORS as exc:
            raise store_error(exc, self._where) from exc
        return sorted(found)

    def close(self) -> None:
        """Close the client if this store made it (a caller's client stays open)."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> ContextStore:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()



class ContextWindow:
    """One shared context window. Every method is one atomic step on the Redis server."""

    def __init__(self, store: ContextStore, state: ops.WindowState) -> None:
        self._store = store
        self._state = state
        self._settings = store._settings

    def _run(self, plan: ops.Plan[T]) -> T:
        return self._store._run(plan)

    # items
    def add(self, content_or_item: str | ContextItem, *, type: ItemType | str = ItemType.CODE,  # noqa: A002
            priority: int = 50, pinned: bool = False, role: str | None = None,
            source_ref: str | None = None, metadata: dict[str, Any] | None = None,
            token_count: int | None = None, id: str | None = None,  # noqa: A002
            request_id: str | None = None) -> ContextItem:
        """Add one item; returns it as stored (id, seq, added_at, token_count filled in).

        Evicts the oldest unpinned item at ``max_items`` and compacts at the token threshold;
        raises ``ContextWindowFullError`` (window unchanged) if it still cannot fit.
        """
        kw = dict(type=type, priority=priority, pinned=pinned, role=role, source_ref=source_ref,
                  metadata=metadata, token_count=token_count, id=id)
        return self._run(ops.add(self._settings, self._state, [(content_or_item, kw)], request_id))[1][0]

    def add_many(self, items: list[str | ContextItem | dict[str, Any]], *, request_id: str | None = None) -> int:
        """Add several items all-or-nothing; returns how many were added."""
        entries = ops.entries(items)
        if not entries:
            return 0
        return self._run(ops.add(self._settings, self._state, entries, request_id))[0]

    def get(self, item_id: str) -> ContextItem | None:
        return self._run(ops.get(self._state, item_id))

    def remove(self, item_id: str, *, request_id: str | None = None) -> bool:
        return self._run(ops.remove(self._state, item_id, request_id))

    def pin(self, item_id: str, *, request_id: str | None = None) -> bool:
        return self._run(ops.set_pinned(self._state, item_id, True, request_id))

    def unpin(self, item_id: str, *, request_id: str | None = None) -> bool:
        return self._run(ops.set_pinned(self._state, item_id, False, request_id))

    def update_priority(self, item_id: str, priority: int, *, request_id: str | None = None) -> bool:
        return self._run(ops.update_priority(self._state, item_id, priority, request_id))

    def items(self, types: Any = None, limit: int | None = None) -> list[ContextItem]:
        """Items in arrival order; ``limit`` keeps the most recent N after filtering."""
        return self._run(ops.items(self._state, types, limit))

    def ordered_items(self, types: Any = None) -> list[ContextItem]:
        """Items in build order: type rank, priority desc, arrival."""
        return self._run(ops.ordered_items(self._state, types))

    def pinned_items(self) -> list[ContextItem]:
        return self._run(ops.ordered_items(self._state, None, pinned_only=True))

    def clear(self, include_pinned: bool = False, *, request_id: str | None = None) -> int:
        return self._run(ops.clear(self._state, include_pinned, request_id))

    def compact(self, strategy: CompactionStrategy | str | None = None, target_percent: float = 70.0,
                *, query: str | None = None, request_id: str | None = None) -> int:
        """Remove (or summarize) unpinned items until usage <= target_percent; tokens freed."""
        return self._run(ops.compact(self._settings, self._state, strategy, target_percent, query, request_id))

    def build(self, options: BuildOptions | None = None) -> str:
        return self.build_structured(options).content

    def build_structured(self, options: BuildOptions | None = None) -> BuiltContext:
        return self._run(ops.build(self._settings, self._state, options))

    def to_markdown(self, types: Any = None, limit: int | None = None, language: str | None = None) -> str:
        return self._run(ops.to_markdown(self._state, types, limit, language))

    def snapshot(self) -> ContextSnapshot:
        return self._run(ops.snapshot(self._state))

    def restore(self, snapshot: ContextSnapshot, *, request_id: str | None = None) -> None:
        self._run(ops.restore(self._settings, self._state, snapshot, request_id))

    def verify(self) -> VerifyReport:
        """Read every key of the window and report each broken invariant (never writes)."""
        return self._run(ops.verify(self._state))

    def stats(self) -> ContextWindowStats:
        return self._run(ops.stats(self._state))

    def configure(self, *, request_id: str | None = None, **changes: Any) -> WindowConfig:
        """Change the stored config for every worker, atomically."""
        return self._run(ops.configure(self._settings, self._state, changes, request_id))

    def delete(self, *, request_id: str | None = None) -> bool:
        return self._run(ops.delete(self._state, request_id))

    # properties: each reads Redis
    @property
    def window_id(self) -> str:
        return self._state.window_id

    @property
    def max_tokens(self) -> int | None:
        return self.stats().max_tokens

    @property
    def max_items(self) -> int:
        return self.stats().max_items

    @property
    def current_tokens(self) -> int:
        return self.stats().current_tokens

    @property
    def available_tokens(self) -> int | None:
        return self.stats().available_tokens

    @property
    def usage_percent(self) -> float:
        return self.stats().usage_percent

    @property
    def item_count(self) -> int:
        return self.stats().total_items

    @property
    def compaction_threshold(self) -> float:
        return self.stats().compaction_threshold

    @property
    def default_strategy(self) -> CompactionStrategy:
        return self.stats().default_strategy

    def __repr__(self) -> str:
        return f"ContextWindow({self._state.window_id!r})"
