"""Retries of failures whose outcome is unknown (the connection broke, the reply timed out).

Every mutating script carries a request id that the server records with its reply, so running
the same request twice applies it once: retrying is safe, and on by default. Which failures are
retried is decided in ``drivers/redis_failures.py`` (``is_retryable``), with the other mappings of failures.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .validate import int_in, number_in


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a store retries a request after a retryable failure: at most ``attempts`` tries in
    all and no retry that would start more than ``deadline_s`` seconds after the first try,
    sleeping a random time up to ``base * 2**n`` seconds (capped at ``cap``) before the n-th
    retry ("full jitter"). ``RetryPolicy(attempts=1)`` (or ``retry=None``) never retries.

    The defaults ride out a Redis Cluster failover (a primary is declared failed after the
    cluster's ``cluster-node-timeout``, 15 s by default, then a replica takes over) and a slot
    migration: up to 20 s of retries, at most 0.5 s apart."""

    attempts: int = 100
    base: float = 0.05
    cap: float = 0.5
    deadline_s: float = 20.0

    def __post_init__(self) -> None:
        int_in("attempts", self.attempts, 1, 10_000)
        number_in("base", self.base, 0, 60)
        number_in("cap", self.cap, 0, 60)
        number_in("deadline_s", self.deadline_s, 0, 3600)

    def delay(self, retry: int) -> float:
        """Seconds to sleep before retry number ``retry`` (1 for the first retry)."""
        return random.uniform(0, min(self.cap, self.base * 2 ** (retry - 1)))

    def next_delay(self, retry: int, started: float) -> float | None:
        """Seconds to sleep before retry number ``retry`` of a request first tried at
        ``started`` (``time.monotonic()``), or None when the attempts or the deadline are spent."""
        if retry >= self.attempts:
            return None
        left = started + self.deadline_s - time.monotonic()
        if left <= 0:
            return None
        return min(self.delay(retry), left)


class Attempts:
    """One call's attempts under the store's retry policy, the one retry loop of every shell
    (sans-I/O: the shell sends, sleeps and sends again): ``failed(exc)`` counts a failure and
    gives the seconds to wait before the next attempt, from ``delay_of`` (the store's
    ``retry_delay``: it raises the mapped error when no retry is left)."""

    __slots__ = ("_call", "_delay_of", "attempt", "started")

    def __init__(self, delay_of: Callable[[Exception, int, Any, float], float], call: Any) -> None:
        self._delay_of, self._call = delay_of, call
        self.attempt, self.started = 0, 0.0

    def failed(self, exc: Exception) -> float:
        """Seconds to wait after this failure (the first one starts the policy's deadline)."""
        self.attempt += 1
        if self.attempt == 1:
            self.started = time.monotonic()
        return self._delay_of(exc, self.attempt, self._call, self.started)
