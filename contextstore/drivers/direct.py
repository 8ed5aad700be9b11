"""A lean script call (``FCALL`` or ``EVALSHA``) for clients the store made itself
(``from_url`` / ``embedded``), sync and asyncio.

redis-py's ``execute_command`` does argument encoding, command parsing, response callbacks and
its own retry wrapper, about 35-55 µs per call on the benchmark machine (benchmarks/peers.py). A
script call needs none of that: the request is an array of bulk strings, written here in one
buffer on a pooled connection, and the reply is read with the connection's own parser. Errors are
redis-py's own exceptions, so the store's retry policy and error mapping see exactly what they see
on the other path; a connection that failed mid-call is disconnected before it goes back to the
pool. What to send, and what to load when the server lacks it, is the ``ScriptRegistry``'s.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio

from .redis_failures import is_oom


def pack(args: list[Any]) -> bytes:
    """RESP: ``*<n>`` then ``$<len>`` + bytes for each argument (str as UTF-8)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else (a.encode() if isinstance(a, str) else str(a).encode())
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def conn_args(pool: Any) -> tuple[str, ...]:
    """redis-py 5.0 requires a command name for ``get_connection``; later versions deprecate it."""
    param = inspect.signature(pool.get_connection).parameters.get("command_name")
    return ("EVALSHA",) if param is not None and param.default is inspect.Parameter.empty else ()


class DirectCall:
    """A script call on a pooled connection of a ``redis.Redis`` the store made, without
    redis-py's command machinery; errors are redis-py's own, so retries and mapping are unchanged."""

    def __init__(self, client: redis.Redis, scripts: Any) -> None:
        self._client, self._scripts = client, scripts
        self._pool = client.connection_pool
        self._conn_args = conn_args(self._pool)

    def _call(self, words: list[Any]) -> Any:
        conn: Any = self._pool.get_connection(*self._conn_args)  # untyped in redis-py
        try:
            conn.send_packed_command([pack(words)])
            return conn.read_response()
        except redis.exceptions.ResponseError:
            raise  # a whole reply was read: the connection is fine
        except BaseException:
            conn.disconnect()
            raise
        finally:
            self._pool.release(conn)

    @classmethod
    def of(cls, client: Any, owned: bool, scripts: Any) -> DirectCall | None:
        """The lean path for ``client`` when it is a plain ``redis.Redis`` the store made, else None."""
        return cls(client, scripts) if owned and type(client) is redis.Redis else None

    def run(self, name: str, keys: list[str], argv: list[Any]) -> Any:
        """Run script ``name`` of the ``ScriptRegistry``; load it if the server lacks it."""
        return self._scripts.calling(self._call, self._client, name, keys, argv)


class AsyncDirectCall:
    """``DirectCall`` for a ``redis.asyncio.Redis`` the store made (one per event loop)."""

    def __init__(self, client: redis.asyncio.Redis, scripts: Any) -> None:
        self._client, self._scripts = client, scripts
        self._pool: Any = client.connection_pool
        self._conn_args = conn_args(self._pool)

    async def _call(self, words: list[Any]) -> Any:
        conn: Any = await self._pool.get_connection(*self._conn_args)
        try:
            await conn.send_packed_command(pack(words))
            return await conn.read_response()
        except redis.exceptions.ResponseError:
            raise
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            released = self._pool.release(conn)
            if inspect.isawaitable(released):  # a coroutine from redis-py 5.0.1 on
                await released

    async def arun(self, name: str, keys: list[str], argv: list[Any]) -> Any:
        """Run script ``name`` of the ``ScriptRegistry``; load it if the server lacks it."""
        return await self._scripts.acalling(self._call, self._client, name, keys, argv)


def _queued(pipe: Any, commands: Sequence[Sequence[Any]], then: Any, scripts: Any) -> Any:
    """``pipe`` with ``commands`` and, last, the script call ``then`` (if any) queued."""
    for words in commands:
        pipe.execute_command(*words)
    if then is not None:
        pipe.execute_command(*scripts.words(then.name, list(then.keys), then.argv()))
    return pipe


def _refused(exc: redis.exceptions.ResponseError, then: Any, scripts: Any) -> bool:
    """After the transaction raised ``exc``: False when the server is at maxmemory (it refuses
    every queued command, reads too: the plan reads with scripts instead); True when it refused
    ``then`` as it was queued (an ``FCALL`` it does not know: run each alone); else ``exc``."""
    if is_oom(exc):
        return False
    if then is None or not scripts.missing(exc):
        raise exc
    return True


def _lacks(replies: list[Any], then: Any, scripts: Any) -> bool:
    """Whether the last reply says the server lacks the script ``then`` (run it alone, loading it)."""
    return then is not None and isinstance(replies[-1], Exception) and bool(scripts.missing(replies[-1]))


def _raised(replies: list[Any]) -> list[Any]:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def plain_read(
    client: Any, commands: Sequence[Sequence[Any]], then: Any = None, scripts: Any = None
) -> list[Any] | None:
    """``commands`` in one MULTI/EXEC on ``client``; their replies, or None when the server is at
    maxmemory: Redis then refuses every command queued in a MULTI, reads too, while a read script
    still runs, so the plan reads with scripts instead (``PlainRead``). ``then``: a script call
    (a ``ScriptCall`` without request) queued last in the same transaction, its reply last; when
    the server lacks it (``scripts``: the ``ScriptRegistry``), it is loaded and run alone after."""
    try:
        replies: list[Any] = _queued(client.pipeline(transaction=True), commands, then, scripts).execute(
            raise_on_error=False
        )
    except redis.exceptions.ResponseError as exc:
        if not _refused(exc, then, scripts):
            return None
        alone = plain_read(client, commands)
        if alone is None:
            return None
        replies = [*alone, exc]
    if _lacks(replies, then, scripts):
        replies[-1] = scripts.run(then.name, list(then.keys), then.argv())
    return _raised(replies)


async def aplain_read(
    client: Any, commands: Sequence[Sequence[Any]], then: Any = None, scripts: Any = None
) -> list[Any] | None:
    """``plain_read`` for an asyncio client."""
    try:
        replies: list[Any] = await _queued(client.pipeline(transaction=True), commands, then, scripts).execute(
            raise_on_error=False
        )
    except redis.exceptions.ResponseError as exc:
        if not _refused(exc, then, scripts):
            return None
        alone = await aplain_read(client, commands)
        if alone is None:
            return None
        replies = [*alone, exc]
    if _lacks(replies, then, scripts):
        replies[-1] = await scripts.arun(then.name, list(then.keys), then.argv())
    return _raised(replies)
