"""Relevance scores for SELECTIVE and for builds with a query: the store's scorer, with the
item vectors of an ``EmbeddingScorer`` cached in the window's ``:vectors`` hash."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..core.parts import text_of
from ..errors import HelperError
from ..relevance.embedding import EmbeddingScorer, Vector, cosine
from ..types import ContextItem
from .base import External, Plan, ScriptCall, Settings, WindowState, helper_call


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
