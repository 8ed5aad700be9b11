"""What redis-py raises, mapped to the exception tree of ``errors.py``: ``REDIS_ERRORS`` (each
failure, whether a retry may help, and the exception to raise when giving up), ``is_refusal``
(nothing listens there) and ``from_redis``."""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable

import redis.exceptions as rx

from ..errors import (
    ContextStoreError,
    PermissionDeniedError,
    StoreOutOfMemoryError,
    StoreUnavailableError,
    UnsupportedServerError,
)

#: the error a script answers on a server below the floor (``scripts.FLOOR_CHECK``), then its version
BELOW_FLOOR = "UNSUPPORTED_SERVER"
#: the floor, in words
FLOOR = "Redis >= 7.0 or Valkey >= 7.2"


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` says the server is at maxmemory with nothing to evict."""
    return isinstance(exc, rx.OutOfMemoryError) or str(exc).startswith("OOM ")


def _is_denied(exc: BaseException) -> bool:
    denied = (rx.NoPermissionError, rx.AuthenticationError, rx.AuthorizationError)
    return isinstance(exc, denied) or "NOPERM" in str(exc)


def _below_floor(exc: BaseException) -> bool:
    return isinstance(exc, rx.ResponseError) and str(exc).startswith(BELOW_FLOOR)


def below_floor(exc: BaseException, where: str) -> UnsupportedServerError:
    """The refusal of a server older than the floor (its version as the script found it)."""
    version = str(exc).removeprefix(BELOW_FLOOR).strip() or "unknown"
    return UnsupportedServerError(
        f"contextstore needs {FLOOR}; the server at {where} runs Redis {version}; nothing was written "
        "(upgrade it: Redis 7 and Valkey load an older server's RDB and AOF files)"
    )


def _is_cluster_unreachable(exc: BaseException) -> bool:
    # no node answered while the cluster client re-read the slot map (a failover, a restart);
    # its other RedisClusterExceptions (cross-slot keys, ...) are mistakes that retrying repeats
    return isinstance(exc, rx.RedisClusterException) and "cannot be connected" in str(exc)


def _is_busy(exc: BaseException) -> bool:
    # a script running too long elsewhere answers BUSY; it ends (or is killed) on its own
    return isinstance(exc, rx.ResponseError) and str(exc).startswith("BUSY")


#: the outcome is unknown, or the server asked us to come back: retry (by request id, safely)
_COME_BACK = (
    rx.ConnectionError,
    rx.TimeoutError,
    rx.ReadOnlyError,
    rx.TryAgainError,
    rx.ClusterDownError,
    rx.NoScriptError,
    OSError,
    # a cluster client gave up following redirections (TTL exhausted: the slot is migrating or
    # failing over) or found a slot no node serves yet: the command did not run
    rx.ClusterError,
    rx.SlotNotCoveredError,
    # MOVED / ASK reached us: only from the node a replicated write talks to directly
    rx.AskError,
)

#: redis-py exception (by predicate) -> (retryable, the exception to raise when giving up),
#: first match wins; the factory gets the exception and a password-free name of the server
REDIS_ERRORS: list[tuple[Callable[[BaseException], bool], bool, Callable[[BaseException, str], ContextStoreError]]] = [
    (
        is_oom,
        False,
        lambda e, where: StoreOutOfMemoryError(
            f"Redis at {where} is out of memory (maxmemory reached, nothing evictable); nothing was changed: {e}"
        ),
    ),
    (_below_floor, False, below_floor),
    (_is_denied, False, lambda e, where: PermissionDeniedError(f"Redis at {where} denied access: {e}")),
    (_is_busy, True, lambda e, where: ContextStoreError(f"Redis at {where} is busy running a script: {e}")),
    (
        lambda e: isinstance(e, _COME_BACK) or _is_cluster_unreachable(e),
        True,
        lambda e, where: StoreUnavailableError(f"Redis at {where} is unavailable: {e}"),
    ),
    (lambda e: True, False, lambda e, where: ContextStoreError(f"Redis at {where} answered with an error: {e}")),
]

#: what redis-py raises (the shells catch these and map them with ``from_redis``)
REDIS_EXCEPTIONS = (rx.RedisError, rx.RedisClusterException, OSError)


def _entry(exc: BaseException) -> tuple[bool, Callable[[BaseException, str], ContextStoreError]]:
    for matches, retry, factory in REDIS_ERRORS:
        if matches(exc):
            return retry, factory
    raise AssertionError("REDIS_ERRORS ends with a catch-all")  # pragma: no cover


#: what the operating system says when nothing listens where a client connects: a first contact
#: that fails so is reported at once (retries are for a server that was reached and went away)
_REFUSALS = {errno.ECONNREFUSED, errno.ENOENT, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL}


def is_refusal(exc: BaseException | None, cluster: bool = False) -> bool:
    """True when ``exc`` (or its cause) says nothing listens there (refused, no socket, unknown host or
    network); on a cluster only "no node reachable" does: a node in the slot map is failing over."""
    if cluster and not isinstance(exc, rx.RedisClusterException):
        return False
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, socket.gaierror) or (isinstance(exc, OSError) and exc.errno in _REFUSALS):
            return True
        if isinstance(exc, rx.ConnectionError) and any(f"Error {n} " in str(exc) for n in _REFUSALS):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def is_retryable(exc: BaseException) -> bool:
    """True when sending the same request again may succeed (its outcome is unknown, or the
    server asked to come back later)."""
    return _entry(exc)[0]


def from_redis(exc: BaseException, where: str) -> ContextStoreError:
    """The contextstore exception for a redis-py one (the caller raises it ``from exc``)."""
    return _entry(exc)[1](exc, where)
