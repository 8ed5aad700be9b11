"""Reported usage and what it cost: the totals ``stats().usage`` gives (``UsageTotals``) and a
model's prices (``Prices``), the caller's table.

May import: ``errors`` (to refuse a bad price with its typed error); no I/O (no redis, asyncio,
subprocess or HTTP).
"""

from __future__ import annotations

import math

import msgspec

from .errors import InvalidOptionsError


class Prices(msgspec.Struct, frozen=True, kw_only=True):
    """A model's prices in money per million tokens (the caller's table: contextstore knows no
    provider's prices), one per kind of token ``record_usage`` keeps apart: e.g. Anthropic's
    ``Prices(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)``."""

    input: float
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0

    def __post_init__(self) -> None:
        for name in ("input", "output", "cache_read", "cache_write"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise InvalidOptionsError(f"the {name} price must be a finite number of at least 0, not {value!r}")


class UsageTotals(msgspec.Struct, frozen=True, kw_only=True):
    """What the provider reported for a window's builds (``record_usage``), summed: its token
    counts, each kept apart (``input_tokens`` excludes the cached ones, as Anthropic reports them),
    and how many reports made them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    records: int = 0

    @property
    def cache_read_share(self) -> float:
        """The share of the prompt tokens sent that the provider read from its cache (0.0-1.0;
        0.0 before any report)."""
        prompt = self.input_tokens + self.cache_read_tokens + self.cache_write_tokens
        return self.cache_read_tokens / prompt if prompt else 0.0

    def cost(self, prices: Prices) -> float:
        """What these tokens cost at ``prices`` (in its money, per million tokens)."""
        if not isinstance(prices, Prices):
            raise InvalidOptionsError(f"prices must be a Prices, not {type(prices).__name__}")
        spent = (
            self.input_tokens * prices.input
            + self.output_tokens * prices.output
            + self.cache_read_tokens * prices.cache_read
            + self.cache_write_tokens * prices.cache_write
        )
        return spent / 1_000_000
