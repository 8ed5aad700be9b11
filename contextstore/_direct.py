"""A lean EVALSHA for clients the store made itself (``ContextStore.from_url`` / ``embedded``).

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


def pack(args: list[Any]) -> bytes:
    """RESP: ``*<n>`` then ``$<len>`` + bytes for each argument (str as UTF-8)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else (a.encode() if isinstance(a, str) else str(a).encode())
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class DirectEvalsha:
    """EVALSHA on a pooled connection of a ``redis.Redis`` the store made, without redis-py's
    command machinery; errors are redis-py's own, so retries and mapping are unchanged."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._pool = client.connection_pool
        # redis-py 5.0 requires a command name; later versions deprecate passing one
        param = inspect.signature(self._pool.get_connection).parameters.get("command_name")
        self._conn_args: tuple[str, ...] = (
            ("EVALSHA",) if param is not None and param.default is inspect.Parameter.empty else ()
        )

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
