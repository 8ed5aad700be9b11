"""Relevance scorers for ``CompactionStrategy.SELECTIVE`` and ``BuildOptions(query=...)``:
``BM25Scorer`` (extra ``contextstore[bm25]``) and ``EmbeddingScorer(embed)`` (any embedding
function; vectors cached in Redis per item). Anything with ``score(query, items) -> list[float]``
(or an async one) works.

May import: ``core``, ``types``, ``errors``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..types import ContextItem
from .bm25 import BM25Scorer
from .embedding import EmbeddingScorer


@runtime_checkable
class RelevanceScorer(Protocol):
    """What SELECTIVE and query builds need: one finite score per item, higher is more relevant
    to ``query`` (a coroutine function works on ``AsyncContextStore``)."""

    def score(self, query: str | None, items: Sequence[ContextItem]) -> list[float]:
        """A score per item, in the order given."""
        ...


__all__ = ["BM25Scorer", "EmbeddingScorer", "RelevanceScorer"]
