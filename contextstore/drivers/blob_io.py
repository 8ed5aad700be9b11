"""The I/O of blobs (``core/blobs.py``): the payloads a reply refers to, put back before its plan
reads it, and the sweep of the blobs of each scope (a tenant's: ``blobs.scope_of``) in which a
store stored or read one, run in the background while the store is open (a thread; a task of the
loop on the asyncio store), one sweep at a time per scope (``blobs.sweep_lock``), every
``SWEEP_EVERY_S``."""

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


def _scope(request: ScriptCall | PlainRead) -> str:
    """The blob scope of the window (or blob) ``request`` reads or writes: its first key's."""
    return blobs.scope_of_key(request.keys[0] if isinstance(request, ScriptCall) else request.commands[0][1])


def _wanted(driver: StoreDriver, sweeper: Sweeper | AsyncSweeper, request: ScriptCall | PlainRead, reply: Any) -> Any:
    """The payloads ``reply`` refers to that the store holds, the keys of those it must read,
    by sha (None: it refers to none); starts the store's sweep of the request's scope when it
    stores or reads a blob there."""
    if isinstance(request, ScriptCall) and not request.inline:
        return None
    shas = blobs.wanted(reply)
    if not shas and not (isinstance(request, ScriptCall) and request.name == "blob_put"):
        return None
    scope = _scope(request)
    sweeper.start(scope)
    if not shas:
        return None
    have = driver.settings.blob_cache.held(shas)
    return have, {sha: blobs.blob_keys(driver.settings.prefix, scope, sha).data for sha in sorted(shas - have.keys())}


def _gets(client: Any, missing: dict[str, str]) -> Any:
    pipe = client.pipeline(transaction=False)
    for key in missing.values():
        pipe.get(key)
    return pipe


def _inlined(driver: StoreDriver, reply: Any, have: dict[str, str], missing: dict[str, str], raws: list[Any]) -> Any:
    settings = driver.settings
    for (sha, key), raw in zip(missing.items(), raws, strict=True):
        have[sha] = blobs.checked_payload(key, sha, raw)
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
        raws = _gets(driver.client(), missing).execute() if missing else []
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
        raws = (await _gets(client, missing).execute()) if missing else []
    except REDIS_EXCEPTIONS as exc:
        raise from_redis(exc, driver.where) from exc
    return _inlined(driver, reply, have, missing, raws)


class Sweeper:
    """The background sweep of a blocking store: a daemon thread, stopped by ``stop``, that
    sweeps each scope the store stored or read a blob in."""

    def __init__(self, driver: StoreDriver) -> None:
        self._driver, self._stop = driver, threading.Event()
        self._thread: threading.Thread | None = None
        self._token = secrets.token_hex(8)
        self._scopes: set[str] = set()

    def start(self, scope: str) -> None:
        """Sweep ``scope`` too (the thread starts once)."""
        self._scopes.add(scope)
        if self._thread is None:
            thread = threading.Thread(target=self._loop, name="contextstore-blob-sweep", daemon=True)
            self._thread = thread
            thread.start()

    def _loop(self) -> None:
        driver, settings = self._driver, self._driver.settings
        while not self._stop.wait(blobs.SWEEP_EVERY_S):
            for scope in sorted(self._scopes):
                try:
                    if driver.client().set(blobs.sweep_lock(settings.prefix, scope), self._token, nx=True, px=_LOCK_MS):
                        driver.run(blob_plans.sweep(settings, scope))
                except (ContextStoreError, *REDIS_EXCEPTIONS) as exc:
                    log.debug("blob sweep of prefix %s scope %r failed: %s", settings.prefix, scope, exc)

    def stop(self) -> None:
        """Stop sweeping (the thread ends within a second)."""
        self._stop.set()


class AsyncSweeper:
    """The background sweep of an asyncio store: a task of the loop it was started on, that
    sweeps each scope the store stored or read a blob in."""

    def __init__(self, driver: StoreDriver) -> None:
        self._driver = driver
        self._task: asyncio.Task[None] | None = None
        self._token = secrets.token_hex(8)
        self._scopes: set[str] = set()

    def start(self, scope: str) -> None:
        """Sweep ``scope`` too (the task starts once, on the running loop)."""
        self._scopes.add(scope)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        driver, settings = self._driver, self._driver.settings
        while True:
            await asyncio.sleep(blobs.SWEEP_EVERY_S)
            for scope in sorted(self._scopes):
                try:
                    client = await driver.client()
                    if await client.set(blobs.sweep_lock(settings.prefix, scope), self._token, nx=True, px=_LOCK_MS):
                        await driver.run(blob_plans.sweep(settings, scope))
                except (ContextStoreError, *REDIS_EXCEPTIONS) as exc:
                    log.debug("blob sweep of prefix %s scope %r failed: %s", settings.prefix, scope, exc)

    def stop(self) -> None:
        """Stop sweeping."""
        if self._task is not None:
            self._task.cancel()
