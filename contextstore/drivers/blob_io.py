"""The I/O of blobs (``core/blobs.py``): the payloads a reply refers to, put back before its plan
reads it, and the sweep of the prefix's blobs that every store which stored or read one runs in
the background while it is open (a thread; a task of the loop on the asyncio store), one sweep
at a time per prefix (``blobs.sweep_lock``), every ``SWEEP_EVERY_S``."""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from typing import Any

from ..core import blobs
from ..errors import ContextStoreError
from ..plans import blobs as blob_plans
from ..plans.base import PlainRead, ScriptCall
from .redis_failures import REDIS_EXCEPTIONS, from_redis
from .store import StoreDriver

log = logging.getLogger("contextstore")
_LOCK_MS = int(blobs.SWEEP_EVERY_S * 1000)


def _wanted(driver: StoreDriver, sweeper: Sweeper | AsyncSweeper, request: ScriptCall | PlainRead, reply: Any) -> Any:
    """The payloads ``reply`` refers to that the store holds, and the shas it must read (None:
    it refers to none); starts the store's sweeper when it stores or reads a blob."""
    shas = blobs.wanted(reply)
    if shas or (isinstance(request, ScriptCall) and request.name == "blob_put"):
        sweeper.start()
    if not shas:
        return None
    have = driver.settings.blob_cache.held(shas)
    return have, sorted(shas - have.keys())


def _gets(driver: StoreDriver, client: Any, missing: list[str]) -> Any:
    pipe = client.pipeline(transaction=False)
    for sha in missing:
        pipe.get(blobs.blob_keys(driver.settings.prefix, sha).data)
    return pipe


def _inlined(driver: StoreDriver, reply: Any, have: dict[str, str], missing: list[str], raws: list[Any]) -> Any:
    settings = driver.settings
    for sha, raw in zip(missing, raws, strict=True):
        have[sha] = blobs.checked_payload(settings.prefix, sha, raw)
        settings.blob_cache.put(sha, have[sha])
    return blobs.inlined(reply, have)


def inline(driver: StoreDriver, sweeper: Sweeper, request: ScriptCall | PlainRead, reply: Any) -> Any:
    """``reply`` with the payloads of the blobs it refers to put back: the store's cache, then
    one pipeline of ``GET``."""
    found = _wanted(driver, sweeper, request, reply)
    if found is None:
        return reply
    have, missing = found
    try:
        raws = _gets(driver, driver.client(), missing).execute() if missing else []
    except REDIS_EXCEPTIONS as exc:
        raise from_redis(exc, driver.where) from exc
    return _inlined(driver, reply, have, missing, raws)


async def ainline(
    driver: StoreDriver, sweeper: AsyncSweeper, request: ScriptCall | PlainRead, reply: Any, client: Any
) -> Any:
    """``inline`` on the asyncio store (``client``: the current loop's)."""
    found = _wanted(driver, sweeper, request, reply)
    if found is None:
        return reply
    have, missing = found
    try:
        raws = (await _gets(driver, client, missing).execute()) if missing else []
    except REDIS_EXCEPTIONS as exc:
        raise from_redis(exc, driver.where) from exc
    return _inlined(driver, reply, have, missing, raws)


class Sweeper:
    """The background sweep of a blocking store: a daemon thread, stopped by ``stop``."""

    def __init__(self, driver: StoreDriver) -> None:
        self._driver, self._stop = driver, threading.Event()
        self._thread: threading.Thread | None = None
        self._token = secrets.token_hex(8)

    def start(self) -> None:
        """Start sweeping (once)."""
        if self._thread is None:
            thread = threading.Thread(target=self._loop, name="contextstore-blob-sweep", daemon=True)
            self._thread = thread
            thread.start()

    def _loop(self) -> None:
        driver, settings = self._driver, self._driver.settings
        lock = blobs.sweep_lock(settings.prefix)
        while not self._stop.wait(blobs.SWEEP_EVERY_S):
            try:
                if driver.client().set(lock, self._token, nx=True, px=_LOCK_MS):
                    driver.run(blob_plans.sweep(settings))
            except (ContextStoreError, *REDIS_EXCEPTIONS) as exc:
                log.debug("blob sweep of prefix %s failed: %s", settings.prefix, exc)

    def stop(self) -> None:
        """Stop sweeping (the thread ends within a second)."""
        self._stop.set()


class AsyncSweeper:
    """The background sweep of an asyncio store: a task of the loop it was started on."""

    def __init__(self, driver: StoreDriver) -> None:
        self._driver = driver
        self._task: asyncio.Task[None] | None = None
        self._token = secrets.token_hex(8)

    def start(self) -> None:
        """Start sweeping on the running loop (once)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        driver, settings = self._driver, self._driver.settings
        lock = blobs.sweep_lock(settings.prefix)
        while True:
            await asyncio.sleep(blobs.SWEEP_EVERY_S)
            try:
                if await (await driver.client()).set(lock, self._token, nx=True, px=_LOCK_MS):
                    await driver.run(blob_plans.sweep(settings))
            except (ContextStoreError, *REDIS_EXCEPTIONS) as exc:
                log.debug("blob sweep of prefix %s failed: %s", settings.prefix, exc)

    def stop(self) -> None:
        """Stop sweeping."""
        if self._task is not None:
            self._task.cancel()
