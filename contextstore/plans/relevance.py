"""Relevance scores for SELECTIVE and for builds with a query: the store's scorer, with the
item vectors of an ``EmbeddingScorer`` cached in the window's ``:vectors`` hash; a build's scores
worked out once (``BuildScores``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..core.parts import text_of
from ..errors import HelperError
from ..relevance.embedding import EmbeddingScorer, Vector, cosine
from ..render.select import RELEVANT_TYPES
from ..types import BuildOptions, ContextItem
from .base import External, Plan, ScriptCall, Settings, WindowState, helper_call


class BuildScores:
    """The relevance scores of one build with a query (``for_build``): the retrieved documents'
    and working memory's (``wanted``), worked out once for each list of them. The walk that reads
    the build's facts asks first (``plans/facts_reach.py``: the room its budget leaves the
    conversation follows from them), the build again for what it chooses from; the scorer runs
    again only when those items differ (another worker's add between the two)."""

    __slots__ = ("_asked", "_got", "_query", "_settings", "_state")

    def __init__(self, settings: Settings, state: WindowState, query: str | None) -> None:
        self._settings, self._state, self._query = settings, state, query
        self._asked: list[tuple[str | None, int, Any]] | None = None
        self._got: dict[str, float] = {}

    @classmethod
    def for_build(cls, settings: Settings, state: WindowState, options: BuildOptions) -> BuildScores | None:
        """The scores of a build with ``options``: with a query, a relevance scorer and
        ``include_relevant_memory``; else None (build order by priority alone)."""
        if not (options.query and settings.relevance_scorer is not None and options.include_relevant_memory):
            return None
        return cls(settings, state, options.query)

    @staticmethod
    def wanted(item: ContextItem) -> bool:
        """Whether the build scores ``item`` (whose text it then needs whole)."""
        return item.type in RELEVANT_TYPES

    def of(self, items: Sequence[ContextItem]) -> Plan[dict[str, float]]:
        """Item id -> score for the scored items among ``items`` (whole), as the last call
        answered when it was asked of the very same items (id, seq and content)."""
        relevant = [i for i in items if self.wanted(i)]
        asked = [(i.id, i.seq, i.content) for i in relevant]
        if asked != self._asked:
            got = yield from scores(self._settings, self._state, self._query, relevant)
            self._asked, self._got = asked, {i.id or "": s for i, s in zip(relevant, got, strict=True)}
        return self._got


def scores(
    settings: Settings, state: WindowState, query: str | None, items: Sequence[ContextItem]
) -> Plan[list[float]]:
    """One finite score per item (higher: more relevant to ``query``)."""
    scorer = settings.relevance_scorer
    if not items:
        return []
    if isinstance(scorer, EmbeddingScorer):
        return (yield from _embedding_scores(scorer, state, query, items))
    got = yield helper_call(scorer, "score", (query, list(items)), "relevance scorer")
    return _checked(got, len(items))


def _checked(got: Any, n: int) -> list[float]:
    try:
        values = list(got)
    except TypeError:
        values = []
    ok = len(values) == n and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in values
    )
    if not ok:
        raise HelperError(f"the relevance scorer must return {n} finite numbers, one per item")
    return [float(x) for x in values]


def _embedding_scores(
    scorer: EmbeddingScorer, state: WindowState, query: str | None, items: Sequence[ContextItem]
) -> Plan[list[float]]:
    """Cosine similarities; item vectors come from the window's cache, the missing ones are
    embedded (with the query, in one call) and cached."""
    if not query:
        return [0.0] * len(items)
    ids = [i.id or "" for i in items]
    cached = yield ScriptCall("vectors", state.keys, ["get", *ids])
    vectors: list[Vector | None] = [scorer.decode(v, text_of(i.content)) for v, i in zip(cached, items, strict=True)]
    missing = [n for n, v in enumerate(vectors) if v is None]
    query_vector = scorer.query_vector(query)
    texts = ([query] if query_vector is None else []) + [text_of(items[n].content) for n in missing]
    if texts:
        async_embed = scorer.embed if scorer.is_async else None
        got = scorer.checked((yield External(scorer.embed, (texts,), "relevance scorer", async_embed)), len(texts))
        if query_vector is None:
            query_vector = got.pop(0)
            scorer.remember_query(query, query_vector)
        pairs: list[str] = []
        for n, vector in zip(missing, got, strict=True):
            vectors[n] = vector
            pairs += [ids[n], scorer.encode(vector, text_of(items[n].content))]
        if pairs:
            yield ScriptCall("vectors", state.keys, ["put", *pairs])
    if query_vector is None or any(v is None or len(v) != len(query_vector) for v in vectors):
        raise HelperError(
            "cached vectors and the query's differ in length: give EmbeddingScorer another tag for another model"
        )
    return [cosine(query_vector, v) for v in vectors if v is not None]
