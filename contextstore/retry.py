"""Retries of failures whose outcome is unknown (the connection broke, the reply timed out).

Every mutating script carries a request id that the server records with its reply, so running
the same request twice applies it once: retrying is safe, and on by default. Which failures are
retried is decided in ``errors.py`` (``is_retryable``), with every other mapping of failures.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .validate import int_in, number_in


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a store retries a request after a retryable failure: at most ``attempts`` tries in
    all, sleeping a random time up to ``base * 2**n`` seconds (capped at ``cap``) before the
    n-th retry ("full jitter"). ``RetryPolicy(attempts=1)`` (or ``retry=None``) never retries."""

    attempts: int = 6
    base: float = 0.05
    cap: float = 2.0

    def __post_init__(self) -> None:
        int_in("attempts", self.attempts, 1, 100)
        number_in("base", self.base, 0, 60)
        number_in("cap", self.cap, 0, 60)

    def delay(self, retry: int) -> float:
        """Seconds to sleep before retry number ``retry`` (1 for the first retry)."""
        return random.uniform(0, min(self.cap, self.base * 2 ** (retry - 1)))
