"""What every integration shares: a session's window, with explicit limits, reachable from
sync and async code whichever store (``ContextStore`` or ``AsyncContextStore``) it is on."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from .. import AsyncContextStore, AsyncContextWindow, ContextStore, ContextWindow
from ..core.keys import MAX_WINDOW_ID, is_window_id
from ..core.layout import CLEARED_KEY
from ..core.retry import RetryPolicy
from ..core.validate import is_generated_id, is_model_name, is_request_id, item_keywords
from ..errors import InvalidOptionsError, ToolCallLinkError, TurnLostError, VersionConflictError
from ..turns import Turn
from ..types import ContextItem
from ._turns import refused, running_turn

T = TypeVar("T")

#: how a conditional replace (an insertion) reads again after another writer moved the window
#: on: a random wait first (full jitter, 1 ms doubling up to 50 ms), so that writers racing for
#: the same suffix spread out instead of colliding on every attempt; it gives up with
#: ``VersionConflictError`` after 100 attempts or 10 s (20 attempts, ~0.5 s, starved an insert
#: among four busy writers on a loaded 2-core machine)
REPLACE_BACKOFF = RetryPolicy(attempts=100, base=0.001, cap=0.05, deadline_s=10.0)

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


@contextlib.contextmanager
def _recorded_already() -> Iterator[None]:
    """Passes over the refusal of a usage report whose request id was recorded already."""
    try:
        yield
    except InvalidOptionsError as exc:
        if exc.code != "REUSED":
            raise


def usage_report(
    prompt_tokens: object,
    output_tokens: object,
    cache_read: object,
    cache_write: object,
    model: object,
    request_id: object,
) -> dict[str, Any]:
    """``record_usage``'s keywords for what a framework's usage object reported: ``prompt_tokens``
    is every input token (as OpenAI, LangChain and openai-agents count them), of which the
    cache's reads and writes are told apart; a model name or request id ``record_usage`` would
    refuse is left out, and a count that is not a whole number is 0 (the reply it came with is
    stored already)."""
    counts = [n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0 for n in (
        prompt_tokens, output_tokens, cache_read, cache_write)]  # fmt: skip
    return {
        "input_tokens": max(0, counts[0] - counts[2] - counts[3]),
        "output_tokens": counts[1],
        "cache_read_tokens": counts[2],
        "cache_write_tokens": counts[3],
        "model": model if is_model_name(model) else None,
        "request_id": request_id if is_request_id(request_id) else None,
    }


def stored_as_entry(item: ContextItem) -> dict[str, Any]:
    """``add_many`` keywords that store ``item`` again as it is (its caller id kept, a generated
    id made anew; a cleared tool result keeps its placeholder, without the store's mark)."""
    meta = {k: v for k, v in (item.metadata or {}).items() if k != CLEARED_KEY} or None
    entry = {**item_keywords(item), "metadata": meta}
    if not item.id or is_generated_id(item.id):
        del entry["id"]
    return entry


def insertion_point(items: list[ContextItem], idx: int) -> int:
    """Where ``list.insert(idx, x)`` puts x among ``items``, moved back to the start of a group
    that it would split (a tool call and its results stay together)."""
    at = max(0, len(items) + idx) if idx < 0 else min(idx, len(items))
    while 0 < at < len(items) and items[at].group and items[at].group == items[at - 1].group:
        at -= 1
    return at


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


#: the head of a window id that holds a session id which is no window id itself (``window_for``)
ENCODED = "sid64."
#: the head of a window id named by the SHA-256 of a session id too long to hold (``window_for``)
HASHED = "sidh."
#: where each item of a ``HASHED`` session's window keeps the session id (``metadata``)
SESSION_KEY = "contextstore_session_id"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def window_for(session_id: object) -> str:
    """The window of a framework's session id, which frameworks treat as opaque: the id itself
    when it is a window id (1-200 characters of ``A-Z a-z 0-9 . _ - : @ / + =``) that does not
    start with ``ENCODED`` or ``HASHED``; else ``ENCODED`` and its UTF-8 in unpadded URL-safe
    base64 while that fits a window id (up to 145 bytes of UTF-8 always do), so that
    ``session_for`` gives it back; else ``HASHED`` and its SHA-256 in the same base64 (each item
    of the window then keeps the id in ``metadata[SESSION_KEY]``, readable with redis-cli)."""
    if not isinstance(session_id, str) or not session_id:
        raise InvalidOptionsError(f"a session id must be a non-empty str, not {session_id!r}")
    if is_window_id(session_id) and not session_id.startswith((ENCODED, HASHED)):
        return session_id
    try:
        data = session_id.encode()
    except UnicodeEncodeError:
        raise InvalidOptionsError(f"session id {session_id[:60]!r} is not UTF-8 text") from None
    encoded = ENCODED + _b64(data)
    return encoded if len(encoded) <= MAX_WINDOW_ID else HASHED + _b64(hashlib.sha256(data).digest())


def session_for(window_id: str, newest: Callable[[], list[ContextItem]] = list) -> str | None:
    """The session id whose window is ``window_id`` (``window_for`` undone): for a ``HASHED``
    window, the id its newest item keeps (``newest()``: its newest item; None when it has none)."""
    if window_id.startswith(HASHED):
        kept = [(i.metadata or {}).get(SESSION_KEY) for i in newest()]
        return kept[0] if kept and isinstance(kept[0], str) else None
    if not window_id.startswith(ENCODED):
        return window_id
    data = window_id[len(ENCODED) :]
    return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)).decode()


class SessionWindow:
    """A session's window on a sync or async store, with sync (``call``) and async (``acall``)
    access to its methods. Constructing it does no I/O; the first write creates the window with
    ``SESSION_DEFAULTS`` overlaid by ``window_config``."""

    def __init__(self, session_id: str, store: ContextStore | AsyncContextStore, **window_config: Any) -> None:
        if not isinstance(store, (ContextStore, AsyncContextStore)):
            raise InvalidOptionsError(f"store must be a ContextStore or AsyncContextStore, not {type(store).__name__}")
        self.session_id, self.store = session_id, store
        self.config = {**SESSION_DEFAULTS, **window_config}
        self.window: ContextWindow | AsyncContextWindow = store.handle(window_for(session_id), **self.config)
        #: what each item written keeps in its metadata (the session id of a ``HASHED`` window)
        self._kept = {SESSION_KEY: session_id} if self.window.window_id.startswith(HASHED) else {}

    def call(self, method: str, *args: Any, _on: Any = None, **kwargs: Any) -> Any:
        """``window.<method>(...)`` (or ``_on``'s: the window's turn) from sync code."""
        target = self.window if _on is None else _on
        fn = getattr(target, method)
        if isinstance(target, (ContextWindow, Turn)):
            return fn(*args, **kwargs)
        return run_in_thread(lambda: fn(*args, **kwargs))

    async def acall(self, method: str, *args: Any, _on: Any = None, **kwargs: Any) -> Any:
        """``window.<method>(...)`` (or ``_on``'s) from async code (a sync store's call runs in a thread)."""
        target = self.window if _on is None else _on
        fn = getattr(target, method)
        if not isinstance(target, (ContextWindow, Turn)):
            return await fn(*args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    def _write(self, method: str, batch: list[dict[str, Any]], **kw: Any) -> Any:
        """``add_many`` through the turn this context runs on the window (``_turns``), else the
        window's ``method``; a refused write of the turn is noted (``_turns.refused``)."""
        on = running_turn(self) if method == "add_many" else None
        try:
            return self.call(method, self._keeping(batch), _on=on, **kw)
        except TurnLostError:
            refused(self)
            raise

    async def _awrite(self, method: str, batch: list[dict[str, Any]], **kw: Any) -> Any:
        """The async form of ``_write``."""
        on = running_turn(self) if method == "add_many" else None
        try:
            return await self.acall(method, self._keeping(batch), _on=on, **kw)
        except TurnLostError:
            refused(self)
            raise

    def _keeping(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``batch`` with the session id in each entry's metadata, for a ``HASHED`` window."""
        if not self._kept:
            return batch
        return [{**entry, "metadata": {**(entry.get("metadata") or {}), **self._kept}} for entry in batch]

    def add(self, entries: Callable[[bool], list[dict[str, Any]]], method: str = "add_many", **kw: Any) -> None:
        """``add_many(entries(True))`` (or ``replace``, with ``kw``) in one atomic step, fenced by
        the turn this context runs on the window, if any; when a tool call id is already in the
        window or a result's call is not, ``entries(False)`` (tool calls not paired) instead."""
        try:
            self._write(method, entries(True), **kw)
        except ToolCallLinkError:
            self._write(method, entries(False), **kw)

    async def aadd(self, entries: Callable[[bool], list[dict[str, Any]]], method: str = "add_many", **kw: Any) -> None:
        """The async form of ``add``."""
        try:
            await self._awrite(method, entries(True), **kw)
        except ToolCallLinkError:
            await self._awrite(method, entries(False), **kw)

    def insert(self, idx: int, entry: Callable[[bool], dict[str, Any]], again: Callable[[ContextItem], Any]) -> None:
        """Insert ``entry(linked)`` where ``list.insert(idx, ...)`` would (``insertion_point``), in
        one atomic step: the items from there on are stored again after it (``again(item)``: their
        ``add_many`` keywords) by a replace that expects exactly them, so an insertion racing other
        writers reads again instead of losing what they wrote."""
        started, attempt = time.monotonic(), 0
        while True:
            attempt += 1
            items = self.items()
            at = insertion_point(items, idx)
            suffix = items[at:]
            if not suffix:
                self.add(lambda linked: [entry(linked)])
                return
            ids, moved = [i.id for i in suffix], [again(i) for i in suffix]

            def batch(linked: bool, moved: list[dict[str, Any]] = moved) -> list[dict[str, Any]]:
                return [entry(linked), *moved]

            try:
                self.add(batch, "replace", expect_ids=ids)
                return
            except VersionConflictError:
                wait = REPLACE_BACKOFF.next_delay(attempt, started)
                if wait is None:
                    raise VersionConflictError(f"insert into {self.session_id!r}: the window kept moving on") from None
                time.sleep(wait)

    def version(self) -> str:
        """The window's version now ("" while it does not exist): one ``stats()`` read."""
        return str(self.call("stats").version)

    async def aversion(self) -> str:
        """The async form of ``version``."""
        return str((await self.acall("stats")).version)

    def record_usage(self, reports: list[dict[str, Any]], version: str = "") -> None:
        """``record_usage(version, **report)`` for each of ``reports`` (``usage_report``'s): the
        usage the provider reported for the window of ``version`` ("": the window's version now).
        A report whose request id was recorded already (a step done again, after the window moved
        on) is not recorded again."""
        if reports:
            version = version or self.version()
            for report in reports:
                with _recorded_already():
                    self.call("record_usage", version, **report)

    async def arecord_usage(self, reports: list[dict[str, Any]], version: str = "") -> None:
        """The async form of ``record_usage``."""
        if reports:
            version = version or await self.aversion()
            for report in reports:
                with _recorded_already():
                    await self.acall("record_usage", version, **report)

    def items(self, limit: int | None = None) -> list[ContextItem]:
        """The session's items in arrival order (the newest ``limit``; [] for ``limit <= 0``)."""
        return [] if limit is not None and limit <= 0 else list(self.call("items", limit=limit))

    async def aitems(self, limit: int | None = None) -> list[ContextItem]:
        """The async form of ``items``."""
        return [] if limit is not None and limit <= 0 else list(await self.acall("items", limit=limit))
