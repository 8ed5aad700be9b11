"""Turn leases for the framework integrations (``docs/turns.md``): inside ``session.turn(...)``
(openai-agents) or ``history.turn(...)`` / ``history.aturn(...)`` (LangChain), every write a
session of the same window makes from the same context (thread, asyncio task and the tasks it
starts) goes through the window's turn: fenced by its token, refused with ``TurnLostError`` and
nothing stored once another turn took over or the lease ran out. Outside a turn nothing changes:
turns are off unless a caller opens one.

The running turn is kept in a context variable, keyed by the store and the session id, so that
the history objects a framework makes anew for every run (LangChain's ``get_session_history``)
find the turn their caller opened.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from .. import AsyncContextWindow, ContextWindow
from ..errors import InvalidOptionsError, TurnLostError
from ..turns import AsyncTurn, Turn


class Session(Protocol):
    """What a turn needs of a framework's session (``_session.SessionWindow`` is one): the store
    (matched by identity), the session id and the window its writes go to."""

    store: Any
    session_id: str
    window: ContextWindow | AsyncContextWindow


class _Running:
    """A turn this context runs on a session's window, and whether a write of it was refused
    (``TurnLostError``: a framework that only logs its history's errors may not raise it)."""

    def __init__(self, turn: Turn | AsyncTurn) -> None:
        self.turn, self.refused = turn, False

    def raise_refused(self) -> None:
        """At the end of the turn: ``TurnLostError`` if a write was refused (the framework may
        have swallowed it: LangChain logs the errors of its history callbacks and goes on)."""
        if self.refused:
            raise TurnLostError("the turn lost its lease: a write of it was refused, nothing of it stored", "lost")


#: (id of the store, session id) -> the turn running in this context (never changed in place:
#: a context that opens a turn sets a new mapping, so the contexts copied from it are unaffected)
_RUNNING: ContextVar[dict[tuple[int, str], _Running] | None] = ContextVar("contextstore_turns", default=None)


def _key(session: Session) -> tuple[int, str]:
    return (id(session.store), session.session_id)


def running_turn(session: Session) -> Turn | AsyncTurn | None:
    """The turn this context opened on ``session``'s window (None: writes are plain)."""
    running = (_RUNNING.get() or {}).get(_key(session))
    return running.turn if running else None


def refused(session: Session) -> None:
    """Note that a write of the turn this context runs on ``session``'s window was refused."""
    running = (_RUNNING.get() or {}).get(_key(session))
    if running:
        running.refused = True


@contextmanager
def _running(session: Session, turn: Turn | AsyncTurn) -> Iterator[_Running]:
    running = _Running(turn)
    token = _RUNNING.set({**(_RUNNING.get() or {}), _key(session): running})
    try:
        yield running
    finally:
        _RUNNING.reset(token)


@contextmanager
def session_turn(session: Session, swallows: bool = False, **turn_args: Any) -> Iterator[Turn]:
    """``with``: the window's turn (``win.turn(**turn_args)``) for the session's writes in this
    context; a sync store only (an asyncio store's turn renews on its event loop: ``aturn``).
    ``swallows``: the framework only logs a write's error, so a write refused after the turn
    lost its lease raises ``TurnLostError`` here, as the turn ends."""
    if not isinstance(session.window, ContextWindow):
        raise InvalidOptionsError("a turn in sync code needs a ContextStore: use `async with ... aturn()` instead")
    with session.window.turn(**turn_args) as turn, _running(session, turn) as running:
        yield turn
    if swallows:
        running.raise_refused()


@asynccontextmanager
async def asession_turn(session: Session, swallows: bool = False, **turn_args: Any) -> AsyncIterator[Turn | AsyncTurn]:
    """``async with``: the window's turn for the session's writes in this task (and the tasks it
    starts), on an asyncio store or a sync one (its calls then run in a worker thread);
    ``swallows`` as for ``session_turn``."""
    if isinstance(session.window, AsyncContextWindow):
        async with session.window.turn(**turn_args) as aturn:
            with _running(session, aturn) as running:
                yield aturn
        if swallows:
            running.raise_refused()
        return
    turn = session.window.turn(**turn_args)
    await asyncio.to_thread(turn.__enter__)
    try:
        with _running(session, turn) as running:
            yield turn
    except BaseException as exc:
        await asyncio.to_thread(turn.__exit__, type(exc), exc, exc.__traceback__)
        raise
    await asyncio.to_thread(turn.__exit__, None, None, None)
    if swallows:
        running.raise_refused()
