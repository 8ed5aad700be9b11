"""Relevance as the cosine similarity of embeddings, from any ``embed(texts) -> vectors``.

Used by a store, an item's vector is computed once and cached in the window's ``:vectors`` hash
(``<tag>|<sha1 of the content>|<base64 float32>``), removed with the item; a cached vector of
other content, or of another ``tag`` (another model), is never used. Query vectors are kept in
a small in-process cache.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import math
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from ..core.parts import text_of
from ..errors import HelperError, InvalidOptionsError
from ..types import ContextItem

Vector = list[float]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity (0 when either vector is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def content_sha(text: str) -> str:
    """What a cached vector is checked against: the sha1 of the content it embeds."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class EmbeddingScorer:
    """Scores items by the cosine similarity of their embedding to the query's.

    ``embed(texts)`` returns one vector (a sequence of floats) per text; a coroutine function
    works on ``AsyncContextStore``. ``tag`` names the model, so that vectors cached by another
    one are not mixed in (change it when you change ``embed``).
    """

    def __init__(self, embed: Callable[[list[str]], Any], *, tag: str = "default", query_cache: int = 256) -> None:
        if not callable(embed):
            raise InvalidOptionsError("embed must be callable: texts -> one vector per text")
        if not tag or "|" in tag:
            raise InvalidOptionsError("tag must be a non-empty str without '|'")
        self.embed, self.tag = embed, tag
        self.is_async = inspect.iscoroutinefunction(embed)
        self._queries: OrderedDict[str, Vector] = OrderedDict()
        self._query_cache = query_cache

    def checked(self, vectors: Any, n: int) -> list[Vector]:
        """``embed``'s answer as ``n`` float vectors of one length, or ``HelperError``."""
        try:
            out = [[float(x) for x in v] for v in vectors]
        except (TypeError, ValueError) as exc:
            raise HelperError(f"embed must return sequences of numbers: {exc}") from exc
        if len(out) != n or len({len(v) for v in out}) > 1 or any(not all(map(math.isfinite, v)) for v in out):
            raise HelperError(f"embed must return {n} finite vectors of one length")
        return out

    def encode(self, vector: Vector, content: str) -> str:
        """A vector as cached in Redis."""
        packed = base64.b64encode(array("f", vector).tobytes()).decode("ascii")
        return f"{self.tag}|{content_sha(content)}|{packed}"

    def decode(self, value: Any, content: str) -> Vector | None:
        """A cached vector, or None when there is none, or it is another tag's or content's."""
        if not value:
            return None
        text = value.decode("ascii") if isinstance(value, bytes) else str(value)
        tag, sha, packed = [*text.split("|", 2), "", ""][:3]
        if tag != self.tag or sha != content_sha(content):
            return None
        return list(array("f", base64.b64decode(packed)))

    def query_vector(self, query: str) -> Vector | None:
        """The cached vector of ``query``, if any."""
        return self._queries.get(query)

    def remember_query(self, query: str, vector: Vector) -> None:
        """Keep ``query``'s vector (the newest ``query_cache`` queries are kept)."""
        self._queries[query] = vector
        self._queries.move_to_end(query)
        while len(self._queries) > self._query_cache:
            self._queries.popitem(last=False)

    def score(self, query: str | None, items: Sequence[ContextItem]) -> list[float]:
        """Cosine similarity of each item to ``query``, embedding everything (no cache: the
        store caches item vectors in Redis instead of calling this)."""
        if not items or not query:
            return [0.0] * len(items)
        if self.is_async:
            raise InvalidOptionsError("an async embed needs AsyncContextStore")
        vectors = self.checked(self.embed([query, *(text_of(i.content) for i in items)]), len(items) + 1)
        return [cosine(vectors[0], v) for v in vectors[1:]]

    def __repr__(self) -> str:
        return f"EmbeddingScorer({getattr(self.embed, '__name__', self.embed)!r}, tag={self.tag!r})"
