"""Retries of failures whose outcome is unknown (the connection broke, the reply timed out).

Every mutating script carries a request id that the server records with its reply, so running
the same request twice applies it once: retrying is safe, and on by default. Which failures are
retried is decided in ``drivers/redis_failures.py`` (``is_retryable``), with the other mappings of failures.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

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
