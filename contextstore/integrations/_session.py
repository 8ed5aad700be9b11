"""What every integration shares: a session's window, with explicit limits, reachable from
sync and async code whichever store (``ContextStore`` or ``AsyncContextStore``) it is on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..aio import AsyncContextStore, AsyncContextWindow
from ..errors import InvalidOptionsError, ToolCallLinkError
from ..sync import ContextStore, ContextWindow
from ..types import ContextItem

T = TypeVar("T")

#: the window config an integration creates a session's window with, unless given other values:
#: a token budget (the oldest turns go first, whole tool calls at a time, past the threshold),
#: the store's item_limit as the item cap, and the newest 4 conversation units never compacted.
#: Evictions and compactions are events (``win.events()``) and log lines, never silent.
SESSION_DEFAULTS: dict[str, Any] = {
    "max_tokens": 128_000,
    "default_strategy": "remove_oldest",
    "compaction_threshold": 90.0,
    "keep_recent": 4,
}


def run_in_thread(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion on a loop of its own (sync access to an async store)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(make())
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target, name="contextstore-sync-bridge")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


class SessionWindow:
    """A session's window on a sync or async store, with sync (``call``) and async (``acall``)
    access to its methods. Constructing it does no I/O; the first write creates the window with
    ``SESSION_DEFAULTS`` overlaid by ``window_config``."""

    def __init__(self, session_id: str, store: ContextStore | AsyncContextStore, **window_config: Any) -> None:
        if not isinstance(store, (ContextStore, AsyncContextStore)):
            raise InvalidOptionsError(f"store must be a ContextStore or AsyncContextStore, not {type(store).__name__}")
        self.session_id, self.store = session_id, store
        self.config = {**SESSION_DEFAULTS, **window_config}
        self.window: ContextWindow | AsyncContextWindow = store.handle(session_id, **self.config)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``window.<method>(...)`` from sync code."""
        fn = getattr(self.window, method)
        if isinstance(self.window, ContextWindow):
            return fn(*args, **kwargs)
        return run_in_thread(lambda: fn(*args, **kwargs))

    async def acall(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``window.<method>(...)`` from async code (a sync store's call runs in a thread)."""
        fn = getattr(self.window, method)
        if isinstance(self.window, AsyncContextWindow):
            return await fn(*args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    def add(self, entries: Callable[[bool], list[dict[str, Any]]], method: str = "add_many") -> None:
        """``add_many(entries(True))`` (or ``replace``) in one atomic step; when a tool call id
        is already in the window or a result's call is not, ``entries(False)`` (tool calls not
        paired) instead."""
        try:
            self.call(method, entries(True))
        except ToolCallLinkError:
            self.call(method, entries(False))

    async def aadd(self, entries: Callable[[bool], list[dict[str, Any]]]) -> None:
        """The async form of ``add``."""
        try:
            await self.acall("add_many", entries(True))
        except ToolCallLinkError:
            await self.acall("add_many", entries(False))

    def items(self, limit: int | None = None) -> list[ContextItem]:
        """The session's items in arrival order (the newest ``limit``; [] for ``limit <= 0``)."""
        return [] if limit is not None and limit <= 0 else list(self.call("items", limit=limit))

    async def aitems(self, limit: int | None = None) -> list[ContextItem]:
        """The async form of ``items``."""
        return [] if limit is not None and limit <= 0 else list(await self.acall("items", limit=limit))
