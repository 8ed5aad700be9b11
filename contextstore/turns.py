"""Turns: one worker at a time answers a window's conversation (``docs/turns.md``).

``win.turn(...)`` takes the window's turn lease with its first call: an add (add.lua) that
starts the turn, takes the inputs enqueued for it and adds the turn's own input, all in one
step, or (another turn running) rejects, enqueues the input, or fences the running turn off
(interrupt, rollback). Every write through the turn carries its fencing token: the script
refuses it (``TurnLostError``, nothing stored) once the lease ran out or was taken over, and
renews the lease otherwise. A renewer thread (task) keeps the lease while the turn waits on
a model; leaving the ``with`` block ends the turn (turn.lua), a crash ends it by expiry.

May import: ``core``, ``plans`` (the driver interface, never a driver), ``types``, ``errors``.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from .core import validate, wire
from .errors import (
    ContextStoreError,
    InvalidOptionsError,
    StoreUnavailableError,
    TurnBusyError,
    TurnLostError,
    TurnQueuedError,
    corrupt_value,
    raise_for_reply,
)
from .plans import items as item_plans
from .plans import rewind as rewind_plans
from .plans.base import Plan, ScriptCall, WindowState
from .plans.driver import AsyncDriver, SyncDriver
from .types import Content, ContextItem


class _NamedWindow(Protocol):
    """What both turns use of their window besides its builds: its id (this module imports no
    window class)."""

    @property
    def window_id(self) -> str:
        """The window's id."""


class TurnWindow(_NamedWindow, Protocol):
    """What a ``Turn`` uses of its ``ContextWindow``."""

    def build(self, *args: Any, **kwargs: Any) -> Any:
        """The window's ``build``."""

    def build_messages(self, *args: Any, **kwargs: Any) -> Any:
        """The window's ``build_messages``."""


class AsyncTurnWindow(_NamedWindow, Protocol):
    """What an ``AsyncTurn`` uses of its ``AsyncContextWindow``."""

    async def build(self, *args: Any, **kwargs: Any) -> Any:
        """The window's ``build``."""

    async def build_messages(self, *args: Any, **kwargs: Any) -> Any:
        """The window's ``build_messages``."""


#: what ``policy`` may be: what a turn does when another one holds the window
POLICIES = ("reject", "enqueue", "interrupt", "rollback")
_CONFLICTS = {TurnLostError: "lost", TurnQueuedError: "enqueued", TurnBusyError: "rejected"}


def default_owner() -> str:
    """``<host>:<pid>``, in the window-id alphabet (events and the CLI name a turn's worker by it)."""
    host = "".join(c if c.isalnum() or c in ".-_" else "-" for c in socket.gethostname())[:100] or "host"
    return f"{host}:{os.getpid()}"


class TurnCore:
    """What a sync and an asyncio turn share: the checked arguments, the plans of its calls
    and what it learned (no I/O here)."""

    def __init__(
        self, window: TurnWindow | AsyncTurnWindow, driver: SyncDriver | AsyncDriver, state: WindowState,
        policy: str, lease_ms: int, input: Any, owner: str | None,
    ) -> None:  # fmt: skip
        if policy not in POLICIES:
            raise InvalidOptionsError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
        self.lease_ms = validate.int_in("lease_ms", lease_ms, 100, 86_400_000)
        self.owner = validate.request_id(default_owner() if owner is None else owner)
        self.policy, self._window, self._driver, self._state = policy, window, driver, state
        self._input = [] if input is None else item_plans.entries(input if isinstance(input, list) else [input])
        #: the turn's fencing token (its writes carry it)
        self.token = secrets.token_hex(16)
        #: the inputs this turn answers besides its own (they are in the window now): those of
        #: turns that ended without an answer, taken over, then those other callers enqueued
        self.pending: list[ContextItem] = []
        #: what this turn wrote, oldest first (its input first)
        self.items: list[ContextItem] = []
        #: the lease was lost (ran out, or another turn took over); set by a refused write or renewal
        self.lost = False
        #: inputs left waiting when the turn ended (start another turn for them)
        self.pending_left = 0
        self._started = 0.0

    def _begin(self) -> Plan[Any]:
        condition = f"b={self.token},{self.policy},{self.lease_ms},{self.owner}"
        return item_plans.add(self._driver.settings, self._state, self._input, turn=condition)

    def _write(self, batch: list[Any], take: bool = False, **kw: Any) -> Plan[Any]:
        self._check()
        condition = f"t={self.token}" + (" p=1" if take else "")
        return item_plans.add(self._driver.settings, self._state, batch, turn=condition, **kw)

    def _rewind(self, to: str) -> Plan[str]:
        self._check()
        return rewind_plans.rewind(self._state, to, turn=f"t={self.token}")

    def _took(self, reply: Any, own: int) -> list[ContextItem]:
        """Split an add's items into the pending inputs it took and the call's own."""
        taken = reply.items[: len(reply.items) - own]
        self.pending += taken
        self.items += reply.items
        return reply.items[len(taken) :]  # type: ignore[no-any-return]

    def _renew_call(self) -> ScriptCall:
        return ScriptCall("turn", self._state.keys, ["renew", self.token, str(self.lease_ms)])

    def _end_call(self, failed: BaseException | None) -> ScriptCall:
        """The end of the turn: after a body that failed because Redis went away (and waited out
        the retry policy already), one attempt; the lease runs out by itself if that fails too."""
        outcome = "error" if failed is not None else "ok"
        retries = not isinstance(failed, StoreUnavailableError)
        return ScriptCall("turn", self._state.keys, ["end", self.token, outcome], retries=retries)

    def _check(self) -> None:
        if self.lost:
            raise TurnLostError("the turn lost its lease: nothing was stored", "lost")

    def _ended(self, reply: Any) -> None:
        held, self.pending_left = (int(x) for x in reply)
        self.lost = self.lost or not held

    def _metric(self, outcome: str) -> None:
        self._driver.metrics.turn_ended(self._window.window_id, (time.monotonic() - self._started) * 1000, outcome)

    def _conflict(self, exc: ContextStoreError) -> None:
        """Count a turn conflict (the scripts sent its event); a lost lease is remembered."""
        outcome = _CONFLICTS.get(type(exc))
        self.lost = self.lost or outcome == "lost"
        if outcome:
            self._driver.metrics.turn_conflict(self._window.window_id, outcome)


class Turn(TurnCore):
    """A running turn of a ``ContextWindow`` (``with win.turn(...) as turn``): ``token``, the
    ``pending`` inputs it took, the ``items`` it wrote; writes and builds go through it."""

    _window: TurnWindow
    _driver: SyncDriver

    def _call(self, plan: Plan[Any]) -> Any:
        try:
            return self._driver.run(plan)
        except ContextStoreError as exc:
            self._conflict(exc)
            raise

    def __enter__(self) -> Turn:
        self._started = time.monotonic()
        self._took(self._call(self._begin()), len(self._input))
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._keep, name=f"turn-{self.token[:8]}", daemon=True)
        self._renewer.start()
        return self

    def _keep(self) -> None:
        while not self._stop.wait(self.lease_ms / 3000):
            try:
                raise_for_reply(self._driver.run(_plan(self._renew_call())))
            except TurnLostError as exc:
                self._conflict(exc)
                return
            except ContextStoreError:
                continue  # unreachable for now: the next renewal tries again, writes are fenced anyway

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        self._stop.set()
        self._renewer.join()
        try:
            self._ended(raise_for_reply(self._driver.run(_plan(self._end_call(ev)))))
        except ContextStoreError:
            if et is None:
                raise
        self._metric("lost" if self.lost else "error" if et else "ok")

    def add(self, content_or_item: Content | ContextItem | None = None, **fields: Any) -> ContextItem:
        """Add one item as this turn (``TurnLostError`` once the lease is lost); renews the lease."""
        return self._took(self._call(self._write([(content_or_item, fields)])), 1)[0]

    def add_many(
        self, items: list[Any], *, format: str = "openai", model: str | None = None, expect_version: str | None = None
    ) -> int:
        """Add several items all-or-nothing as this turn (``format``, ``model``: as
        ``ContextWindow.add_many``); how many were added."""
        batch = item_plans.entries(items, format, model)
        return len(self._took(self._call(self._write(batch, expect_version=expect_version)), len(batch)))

    def take_pending(self) -> list[ContextItem]:
        """Add the inputs enqueued since the turn began to the window, as this turn's (one
        atomic step: each is taken once); the items added, oldest first."""
        reply = self._call(self._write([], take=True))
        self._took(reply, 0)
        return list(reply.items)

    def rewind(self, to: str) -> str:
        """``win.rewind(to)`` as this turn (a rewind by anyone else waits for the turn to end)."""
        return str(self._call(self._rewind(to)))

    def build(self, *args: Any, **kwargs: Any) -> Any:
        """``win.build(...)`` while the turn holds the lease (``TurnLostError`` once it knows it lost it)."""
        self._check()
        return self._window.build(*args, **kwargs)

    def build_messages(self, *args: Any, **kwargs: Any) -> Any:
        """``win.build_messages(...)`` while the turn holds the lease."""
        self._check()
        return self._window.build_messages(*args, **kwargs)


class AsyncTurn(TurnCore):
    """``Turn`` for an ``AsyncContextWindow`` (``async with win.turn(...) as turn``)."""

    _window: AsyncTurnWindow
    _driver: AsyncDriver

    async def _call(self, plan: Plan[Any]) -> Any:
        try:
            return await self._driver.run(plan)
        except ContextStoreError as exc:
            self._conflict(exc)
            raise

    async def __aenter__(self) -> AsyncTurn:
        self._started = time.monotonic()
        self._took(await self._call(self._begin()), len(self._input))
        self._renewer = asyncio.get_running_loop().create_task(self._keep())
        return self

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            try:
                raise_for_reply(await self._driver.run(_plan(self._renew_call())))
            except TurnLostError as exc:
                self._conflict(exc)
                return
            except ContextStoreError:
                continue

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        self._renewer.cancel()
        try:
            self._ended(raise_for_reply(await self._driver.run(_plan(self._end_call(ev)))))
        except ContextStoreError:
            if et is None:
                raise
        self._metric("lost" if self.lost else "error" if et else "ok")

    async def add(self, content_or_item: Content | ContextItem | None = None, **fields: Any) -> ContextItem:
        """``Turn.add``."""
        return self._took(await self._call(self._write([(content_or_item, fields)])), 1)[0]

    async def add_many(
        self, items: list[Any], *, format: str = "openai", model: str | None = None, expect_version: str | None = None
    ) -> int:
        """``Turn.add_many``."""
        batch = item_plans.entries(items, format, model)
        return len(self._took(await self._call(self._write(batch, expect_version=expect_version)), len(batch)))

    async def take_pending(self) -> list[ContextItem]:
        """``Turn.take_pending``."""
        reply = await self._call(self._write([], take=True))
        self._took(reply, 0)
        return list(reply.items)

    async def rewind(self, to: str) -> str:
        """``Turn.rewind``."""
        return str(await self._call(self._rewind(to)))

    async def build(self, *args: Any, **kwargs: Any) -> Any:
        """``Turn.build``."""
        self._check()
        return await self._window.build(*args, **kwargs)

    async def build_messages(self, *args: Any, **kwargs: Any) -> Any:
        """``Turn.build_messages``."""
        self._check()
        return await self._window.build_messages(*args, **kwargs)


@dataclass(frozen=True)
class TurnStatus:
    """What ``status()`` reads: the running turn (``owner`` "" when none holds the lease), the
    inputs waiting for a turn (``pending``, their contents, oldest first) and the ids of inputs
    stored by turns that ended without an answer (``unanswered``: an error ended the turn, or its
    lease ran out), which the next turn takes over into its ``pending``."""

    owner: str
    policy: str
    started_ms_ago: int
    lease_left_ms: int
    item_ids: list[str]
    pending: list[str]
    unanswered: list[str] = field(default_factory=list)


def status_plan(state: Any) -> Plan[TurnStatus]:
    """One read (peek.lua, ``turn``) of a window's turn lease and pending inputs."""
    reply = raise_for_reply((yield ScriptCall("peek", state.keys, ["turn"])))
    try:
        return _status(reply)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
        raise corrupt_value(":turn", "", f"{type(exc).__name__}: {str(exc)[:200]}") from exc


def pending_groups(fields: dict[str, str]) -> list[list[str]]:
    """The inputs waiting for a turn in a ``:turn`` hash (field -> value), oldest first: each
    add.lua's item group (lib/turns.lua: a field ``p:<n>`` each; ``pending``, all in one array, as
    an earlier version kept them, first)."""
    numbered = sorted((int(f[2:]), v) for f, v in fields.items() if f.startswith("p:") and f[2:].isdigit())
    return [*json.loads(fields.get("pending", "[]")), *(json.loads(v) for _, v in numbered)]


def _status(reply: Any) -> TurnStatus:
    fields = {wire.text(k): wire.text(v) for k, v in zip(reply[2][::2], reply[2][1::2], strict=True)}
    now = int(reply[3]) if len(reply) > 3 else 0
    pending = [json.loads(group[1]).get("content", "") for group in pending_groups(fields)]
    running = "token" in fields and int(fields.get("until", 0)) > now
    unanswered = fields.get("unanswered", "").split()
    if not running:
        expired = fields.get("inputs", "").split() if "token" in fields else []
        return TurnStatus("", "", 0, 0, [], pending, list(dict.fromkeys(unanswered + expired)))
    started, until = int(fields["started"]), int(fields["until"])
    ids = fields["ids"].split()
    return TurnStatus(fields["owner"], fields["policy"], now - started, until - now, ids, pending, unanswered)


def _plan(call: ScriptCall) -> Plan[Any]:
    """A plan of one script call whose reply is returned as it is."""
    return (yield call)
