"""An extractive summary: the most informative sentences of the items, quoted verbatim.

No model is involved, so the result is deterministic and free, and it is honest about what it
is: a header says the sentences are quoted and the rest left out. A sentence scores for what
usually carries a fact in an agent's conversation: numbers, identifiers (``payments-db``,
``v2.3.1``, ``ORD-48213``), names, words of obligation or decision ("must", "never",
"decided"), and words the conversation keeps coming back to; greetings and thanks score low,
and a sentence that repeats one already chosen is skipped.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from ..core.parts import text_of
from ..core.tokens import TokenCounter, resolve_counter
from ..errors import InvalidOptionsError
from ..types import ContextItem
from .transcript import calls_text, speaker

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])|\n+")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-./:@#]*[A-Za-z0-9]|[A-Za-z0-9]")
_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    let me more most my myself no nor not now of off on once or other our ours ourselves out over
    own same she so some such than that the their theirs them themselves then there these they this
    those through to too under until up very was we were what when where which while who whom why
    will with would you your yours yourself yourselves also get got like one two yes ok okay""".split()
)
_CUES = frozenset(
    """must never always required require requires mandatory decided decision agreed agree deadline
    due important remember note only cannot can't don't won't shouldn't should blocked blocker
    failed failing error broke broken because confirmed approved limit budget password key secret
    prefer preferred allergic owner responsible until before risk risky warning check ensure""".split()
)
_CHATTER = frozenset(
    """thanks thank great sure hello hi hey cool awesome perfect welcome sounds glad happy nice
    appreciate wonderful good morning afternoon evening bye cheers""".split()
)


class _Sentence:
    __slots__ = ("item", "order", "score", "text", "who", "words")

    def __init__(self, order: int, item: int, who: str, text: str) -> None:
        self.order, self.item, self.who, self.text = order, item, who, text
        self.words = [w.lower() for w in _WORD.findall(text)]
        self.score = 0.0


def _specific(text: str, first: str) -> float:
    """Points for numbers, identifiers and names (capitalised words past the first)."""
    points = 0.0
    for word in set(_WORD.findall(text)):
        if any(c.isdigit() for c in word):
            points += 2.0
        elif any(c in "_-./:@#" for c in word[1:-1]) or (word.isupper() and len(word) > 1):
            points += 1.5
        elif word[0].isupper() and word != first and word.lower() not in _STOPWORDS:
            points += 1.0
    return min(points, 8.0)


def _score(s: _Sentence, frequency: Counter[str]) -> float:
    content = [w for w in s.words if w not in _STOPWORDS]
    if not content:
        return -10.0
    words = _WORD.findall(s.text)
    central = sum(math.log1p(frequency[w] - 1) for w in set(content)) / math.sqrt(len(content))
    cue = 2.0 if _CUES.intersection(s.words) else 0.0
    chatter = -3.0 if sum(w in _CHATTER for w in content) * 2 >= len(content) else 0.0
    short = -1.5 if len(content) < 3 else 0.0
    return central + _specific(s.text, words[0] if words else "") + cue + chatter + short


def _overlap(a: _Sentence, b: _Sentence) -> float:
    x, y = set(a.words) - _STOPWORDS, set(b.words) - _STOPWORDS
    return len(x & y) / max(1, min(len(x), len(y)))


class ExtractiveSummarizer:
    """Summarizes by quoting the items' most informative sentences, within a token budget:
    ``min(max_tokens, ratio * the items' tokens)``, so a summary is always smaller than what it
    replaces. Offline and deterministic."""

    def __init__(self, max_tokens: int = 400, *, ratio: float = 0.3, token_counter: object = None) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 16:
            raise InvalidOptionsError(f"max_tokens must be an int >= 16, not {max_tokens!r}")
        if not isinstance(ratio, (int, float)) or not 0 < ratio < 1:
            raise InvalidOptionsError(f"ratio must be between 0 and 1, not {ratio!r}")
        self.max_tokens = max_tokens
        self.ratio = float(ratio)
        self.counter: TokenCounter = resolve_counter(token_counter)

    def budget(self, items: Sequence[ContextItem]) -> int:
        """The token budget of the summary of ``items``."""
        total = sum(i.token_count or self.counter.count(text_of(i.content)) for i in items)
        return max(1, min(self.max_tokens, int(total * self.ratio)))

    def summarize(self, items: Sequence[ContextItem]) -> str:
        """The items' most informative sentences, verbatim, in their original order, under a
        header that says how many were quoted from how many items."""
        sentences = _sentences(items)
        frequency = Counter(w for s in sentences for w in set(s.words) - _STOPWORDS)
        for s in sentences:
            s.score = _score(s, frequency)
        room = self.budget(items) - self.counter.count(_header(len(items), len(sentences), len(sentences)))
        chosen = self._choose(sorted(sentences, key=lambda s: (-s.score, s.order)), room)
        lines = [_line(s) for s in sorted(chosen, key=lambda s: s.order)]
        return "\n".join([_header(len(items), len(chosen), len(sentences)), *lines])

    def _choose(self, ranked: list[_Sentence], budget: int) -> list[_Sentence]:
        chosen: list[_Sentence] = []
        used = 0
        for s in ranked:
            if s.score <= 0 and chosen:
                break
            cost = self.counter.count(_line(s) + "\n")
            if used + cost > budget or any(_overlap(s, c) > 0.7 for c in chosen):
                continue
            chosen.append(s)
            used += cost
        return chosen


def _header(items: int, chosen: int, sentences: int) -> str:
    return f"Summary of {items} earlier items, extractive ({chosen} of {sentences} sentences quoted verbatim):"


def _line(s: _Sentence) -> str:
    return f"- {s.who}: {s.text}"


def _sentences(items: Sequence[ContextItem]) -> list[_Sentence]:
    out: list[_Sentence] = []
    for n, item in enumerate(items):
        who = speaker(item)
        calls = calls_text(item)
        texts = [p.strip() for p in _SENTENCE_END.split(text_of(item.content)) if p.strip()]
        if calls:
            texts.append(f"Called {calls}.")
        out += [_Sentence(len(out) + k, n, who, t) for k, t in enumerate(texts)]
    return out
