"""Retries of failures whose outcome is unknown (the connection broke, the reply timed out).

Every mutating script carries a request id that the server records with its reply, so running
the same request twice applies it once: retrying is safe, and on by default.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import redis.exceptions as rx

from .errors import InvalidOptionsError

#: Errors after which the request is sent again: the outcome is unknown, or the server asked us
#: to come back (loading its data set, a cluster failover, a read-only replica after failover).
RETRYABLE: tuple[type[BaseException], ...] = (
    rx.ConnectionError,  # includes BusyLoadingError (server loading) and a dropped connection
    rx.TimeoutError,
    rx.ReadOnlyError,
    rx.TryAgainError,
    rx.ClusterDownError,  # includes MasterDownError
    rx.NoScriptError,  # the script cache was flushed between redis-py's SCRIPT LOAD and EVALSHA
    OSError,
)
#: Never retried, even though redis-py files them under ConnectionError: they will not heal.
NOT_RETRYABLE: tuple[type[BaseException], ...] = (
    rx.AuthenticationError,
    rx.AuthorizationError,
)


def retryable(exc: BaseException) -> bool:
    if isinstance(exc, NOT_RETRYABLE):
        return False
    if isinstance(exc, RETRYABLE):
        return True
    # a script running too long elsewhere answers BUSY; it ends (or is killed) on its own
    return isinstance(exc, rx.ResponseError) and str(exc).startswith("BUSY")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a store retries a request after a retryable failure: at most ``attempts`` tries in
    all, sleeping a random time up to ``base * 2**n`` seconds (capped at ``cap``) before the
    n-th retry ("full jitter"). ``RetryPolicy(attempts=1)`` (or ``retry=None``) never retries."""

    attempts: int = 6
    base: float = 0.05
    cap: float = 2.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or not 1 <= self.attempts <= 100:
            raise InvalidOptionsError(f"attempts must be an int from 1 to 100, not {self.attempts!r}")
        for name in ("base", "cap"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 60:
                raise InvalidOptionsError(f"{name} must be a number of seconds from 0 to 60, not {v!r}")

    def delay(self, retry: int) -> float:
        """Seconds to sleep before retry number ``retry`` (1 for the first retry)."""
        return random.uniform(0, min(self.cap, self.base * 2 ** (retry - 1)))
