"""BM25 relevance through the ``bm25s`` package (extra ``contextstore[bm25]``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.parts import text_of
from ..errors import InvalidOptionsError
from ..types import ContextItem


def _imports() -> tuple[Any, Any]:
    try:
        import bm25s
    except ImportError:
        raise InvalidOptionsError("BM25Scorer needs the bm25s package: pip install 'contextstore[bm25]'") from None
    try:
        import Stemmer
    except ImportError:  # PyStemmer is optional: without it words are matched as written
        Stemmer = None
    return bm25s, Stemmer


class BM25Scorer:
    """Scores items by BM25 against the query (``bm25s``), English stopwords removed and words
    stemmed when PyStemmer is installed (the ``bm25`` extra installs it). The corpus is the items
    scored in one call (their content and ``source_ref``), so the scores are relative to them."""

    def __init__(self, *, k1: float = 1.5, b: float = 0.75, stopwords: str | list[str] = "en", stem: bool = True):
        self._bm25s, stemmer_module = _imports()
        self.k1, self.b, self.stopwords = k1, b, stopwords
        self._stemmer = stemmer_module.Stemmer("english") if stem and stemmer_module is not None else None

    def _tokens(self, texts: list[str], ids: bool) -> Any:
        return self._bm25s.tokenize(
            texts, stopwords=self.stopwords, stemmer=self._stemmer, show_progress=False, return_ids=ids
        )

    def score(self, query: str | None, items: Sequence[ContextItem]) -> list[float]:
        """BM25 of each item against ``query`` (0 for every item without a query)."""
        if not items or not query or not query.strip():
            return [0.0] * len(items)
        retriever = self._bm25s.BM25(k1=self.k1, b=self.b)
        retriever.index(
            self._tokens([f"{i.source_ref or ''} {text_of(i.content)}" for i in items], True), show_progress=False
        )
        known = [t for t in self._tokens([query], False)[0] if t in retriever.vocab_dict]
        if not known:
            return [0.0] * len(items)
        return [float(x) for x in retriever.get_scores(known)]

    def __repr__(self) -> str:
        return f"BM25Scorer(k1={self.k1}, b={self.b}, stemmed={self._stemmer is not None})"
