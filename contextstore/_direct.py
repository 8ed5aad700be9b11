"""A lean EVALSHA for clients the store made itself (``from_url`` / ``embedded``), sync and asyncio.

redis-py's ``Script.__call__`` goes through ``execute_command``: argument encoding, command
parsing, response callbacks and its own retry wrapper, about 35-55 µs per call on the
benchmark machine (benchmarks/peers.py). A script call needs none of that: the request is an
array of bulk strings, written here in one buffer on a pooled connection, and the reply is read
with the connection's own parser. Errors are redis-py's own exceptions, so the store's retry
policy and error mapping see exactly what they see on the ``Script`` path; a connection that
failed mid-call is disconnected before it goes back to the pool.
"""

from __future__ import annotations

import inspect
from typing import Any

import redis
import redis.asyncio


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


class DirectEvalsha:
    """EVALSHA on a pooled connection of a ``redis.Redis`` the store made, without redis-py's
    command machinery; errors are redis-py's own, so retries and mapping are unchanged."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._pool = client.connection_pool
        self._conn_args = conn_args(self._pool)

    def _call(self, sha: str, keys: list[str], argv: list[Any]) -> Any:
        conn: Any = self._pool.get_connection(*self._conn_args)  # untyped in redis-py
        try:
            conn.send_packed_command([pack(["EVALSHA", sha, len(keys), *keys, *argv])])
            return conn.read_response()
        except redis.exceptions.ResponseError:
            raise  # a whole reply was read: the connection is fine
        except BaseException:
            conn.disconnect()
            raise
        finally:
            self._pool.release(conn)

    def evalsha(self, script: Any, keys: list[str], argv: list[Any]) -> Any:
        """Run a ``register_script`` object; load it once if the server does not know it."""
        try:
            return self._call(script.sha, keys, argv)
        except redis.exceptions.NoScriptError:
            self._client.script_load(script.script)
            return self._call(script.sha, keys, argv)


class AsyncDirectEvalsha:
    """``DirectEvalsha`` for a ``redis.asyncio.Redis`` the store made (one per event loop)."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._client = client
        self._pool: Any = client.connection_pool
        self._conn_args = conn_args(self._pool)

    async def _call(self, sha: str, keys: list[str], argv: list[Any]) -> Any:
        conn: Any = await self._pool.get_connection(*self._conn_args)
        try:
            await conn.send_packed_command(pack(["EVALSHA", sha, len(keys), *keys, *argv]))
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

    async def evalsha(self, script: Any, keys: list[str], argv: list[Any]) -> Any:
        """Run a ``register_script`` object; load it once if the server does not know it."""
        try:
            return await self._call(script.sha, keys, argv)
        except redis.exceptions.NoScriptError:
            await self._client.script_load(script.script)
            return await self._call(script.sha, keys, argv)
