"""The prompt within a token budget: which items go in, in what order, and what it costs.

Stored token counts are reused, never re-tokenized: only the short joints between contents
(separator, message-format prefix and suffix) are counted, see ``JointCosts``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from itertools import pairwise
from typing import Any

import msgspec

from ..core.config import checked
from ..core.itemcache import Derived
from ..core.parts import text_of
from ..core.tokens import TokenCounter
from ..core.validate import text
from ..errors import BudgetTooSmallError, InvalidOptionsError
from ..types import HISTORY_TYPES, BuildOptions, ContextItem, ItemType
from .select import CONVERSATION_RANK, Key, build_key, choose, members, ranked_key, units_for

DEFAULT_MESSAGE_FORMAT = "[{role}]: {content}"
#: characters of content on each side of a joint that the joint is counted with
EDGE = 32


def validate_options(options: object) -> BuildOptions:
    """``options`` checked field by field (``InvalidOptionsError``); None gives the defaults."""
    if options is None:
        return BuildOptions()
    if not isinstance(options, BuildOptions):
        raise InvalidOptionsError(f"options must be BuildOptions, not {type(options).__name__}")
    checked(BuildOptions, msgspec.structs.asdict(options), "build option")
    for name in ("section_separator", "message_format", "query", "model"):
        value = getattr(options, name)
        if isinstance(value, str):
            text(name, value)
    fmt = options.message_format
    if fmt is not None and fmt.count("{content}") != 1:
        raise InvalidOptionsError("message_format must contain '{content}' exactly once")
    return options


def section_key(item: ContextItem, key: Key = build_key) -> tuple[float, ...]:
    """Sections: rank groups (in ``key`` order); the conversation is one chronological group."""
    if item.type in HISTORY_TYPES:
        return (CONVERSATION_RANK, 0, item.seq)
    return key(item)


def arrival_key(item: ContextItem) -> tuple[float, ...]:
    """Arrival: system and instruction items first, then everything in arrival order (a window
    that only grew renders the previous prompt first)."""
    if item.type in (ItemType.SYSTEM_PROMPT, ItemType.INSTRUCTION):
        return (0, item.type.rank, item.seq)
    return (1, 0, item.seq)


def render_key(order: str, relevance: Mapping[str, float] | None = None) -> Key:
    """The order a prompt renders in: ``sections``, ``priority`` or ``arrival``; with relevance
    scores, the scored items of a section (or of a priority) go best first."""
    ranked = ranked_key(relevance)
    if order == "sections":
        return lambda item: section_key(item, ranked)
    return ranked if order == "priority" else arrival_key


class JointCosts:
    """Token costs of a prompt from the stored counts, without re-tokenizing the contents.

    tiktoken splits text into regex chunks and encodes each chunk on its own, so joining texts
    only changes tokens near each joint. The rendered prompt is content_1 J_1 content_2 ... where
    each joint J is the text between two contents (message-format suffix, separator, prefix). A
    joint costs ``count(tail + J + head) - count(tail) - count(head)`` with up to ``EDGE``
    characters of the neighbouring contents, plus 1 token of slack (unless ``tight``). The total
    (stored counts + joints) is then never below the exact count and at most about one token
    per item above it; ``BuildOptions(exact_tokens=True)`` counts the output instead.
    """

    def __init__(
        self,
        count: Callable[[str], int],
        options: BuildOptions,
        tight: bool = False,
        memos: dict[Any, dict[Any, int]] | None = None,
    ) -> None:
        self.sep = options.section_separator
        self.pre, self.post = (options.message_format or DEFAULT_MESSAGE_FORMAT).split("{content}")
        self.slack = 0 if tight else 1
        #: role -> its prefix and suffix
        self.by_role: dict[str, tuple[str, str]] = {}
        self.count = count  # memoised per store: joints repeat from build to build
        #: item seq -> cost and (seq, seq) -> the joint between two items, for this format; kept
        #: in ``memos`` (the store's item cache, per format) while the window's epoch stays
        #: what the costs depend on besides the items
        self.fmt = fmt = (self.sep, self.pre, self.post, self.slack)
        self.memo: dict[Any, int] = {} if memos is None else memos.setdefault(fmt, {})

    def _affixes(self, role: str) -> tuple[str, str]:
        """The prefix and suffix of a role's items."""
        got = self.by_role.get(role)
        if got is None:
            got = self.by_role[role] = (self.pre.replace("{role}", role), self.post.replace("{role}", role))
        return got

    def _pre(self, item: ContextItem | None) -> str:
        return "" if item is None or item.role is None else self._affixes(item.role)[0]

    def _post(self, item: ContextItem | None) -> str:
        return "" if item is None or item.role is None else self._affixes(item.role)[1]

    def render(self, item: ContextItem) -> str:
        """The item as it appears in the prompt (with its role's prefix and suffix)."""
        if item.role is None:
            return text_of(item.content)
        pre, post = self._affixes(item.role)
        return pre + text_of(item.content) + post

    def joint(self, left: ContextItem | None, text: str, right: ContextItem | None) -> int:
        """Tokens that ``text`` between ``left`` and ``right`` adds to their stored counts."""
        tail = text_of(left.content)[-EDGE:] if left is not None else ""
        head = text_of(right.content)[:EDGE] if right is not None else ""
        if not text and not (tail and head):
            return 0
        n: int = self.count(tail + text + head)
        if tail:
            n -= self.count(tail)
        if head:
            n -= self.count(head)
        return n + self.slack

    def cost(self, item: ContextItem) -> int:
        """What adding ``item`` anywhere in a prompt may cost (used to choose, before ordering):
        never below its stored tokens (a joint that merges tokens counts 0 here, so a build's walk
        may pass over what cannot fit by stored tokens alone: ``plans/facts_reach.py``)."""
        n = self.memo.get(item.seq)
        if n is None:
            n = (
                item.token_count
                + max(0, self.joint(None, self.sep + self._pre(item), item))
                + max(0, self.joint(item, self._post(item), None))
            )
            self.memo[item.seq] = n
        return n

    def total(self, ordered: Sequence[ContextItem]) -> int:
        """The token count of ``ordered`` rendered in that order (never below the exact one)."""
        if not ordered:
            return 0
        n = sum(i.token_count for i in ordered) + self.joint(None, self._pre(ordered[0]), ordered[0])
        memo = self.memo
        for a, b in pairwise(ordered):
            pair = (a.seq, b.seq)
            j = memo.get(pair)
            if j is None:
                j = memo[pair] = self.joint(a, self._post(a) + self.sep + self._pre(b), b)
            n += j
        return n + self.joint(ordered[-1], self._post(ordered[-1]), None)


def cached_count(counter: TokenCounter, size: int = 65536) -> Callable[[str], int]:
    """A memoised ``counter.count`` for the short strings joints are made of (one per store)."""
    return lru_cache(maxsize=size)(counter.count)


def check_pinned(
    items: Sequence[ContextItem],
    options: BuildOptions,
    budget: int | None,
    count: Callable[[str], int],
    memo: Derived | None = None,
) -> None:
    """``BudgetTooSmallError`` if the pinned units alone cannot fit (checked before anything
    else); ``memo`` as for ``select.units_for``."""
    units = units_for(items, memo)
    if budget is None or not units.pinned:
        return
    pinned = members(units.pinned)
    need = JointCosts(count, options).total(sorted(pinned, key=section_key))
    if need > budget:
        raise BudgetTooSmallError(need, budget)


class Built(msgspec.Struct):
    """A rendered prompt and what went into it."""

    content: str
    total_tokens: int
    included: list[ContextItem]
    excluded: list[str]
    omitted: list[str]


def build(
    items: Sequence[ContextItem],
    options: BuildOptions,
    budget: int | None,
    counter: TokenCounter,
    count: Callable[[str], int],
    relevance: Mapping[str, float] | None = None,
    memos: dict[Any, dict[Any, int]] | None = None,
    memo: Derived | None = None,
) -> Built:
    """Select whole units (pinned ones always, then candidates while they fit the budget) and
    render. ``count`` is the store's memoised ``counter.count``; ``counter`` counts exact totals;
    ``relevance`` (item id -> score, for a query) ranks the scored items; ``memos`` keep costs
    and ``memo`` the units (``select.units_for``) for the next build."""
    costs = JointCosts(count, options, tight=options.exact_tokens, memos=memos)
    ranked = ranked_key(relevance)
    cost = lambda u: sum(map(costs.cost, u.items))  # noqa: E731
    choice = choose(items, options, budget, cost, key=ranked, memo=memo, cost_key=costs.fmt)
    pinned = members(choice.pinned)
    chosen, excluded = list(choice.chosen), list(choice.excluded)
    key = render_key(options.order, relevance)
    while True:
        ordered = sorted(pinned + members(chosen), key=key)
        content = options.section_separator.join([costs.render(i) for i in ordered])
        total = counter.count(content) if options.exact_tokens else costs.total(ordered)
        if budget is None or total <= budget:
            return Built(content, total, ordered, excluded, choice.omitted)
        if not chosen:  # counted exactly, the pinned items alone do not fit
            raise BudgetTooSmallError(total, budget)
        excluded += chosen.pop().ids()  # the estimate used to choose was short: drop one unit
