"""Rendering: seed 003's markdown and the token-budgeted prompt. Pure functions, no I/O."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any

from .errors import BudgetTooSmallError, InvalidOptionsError
from .tokens import TokenCounter
from .types import HISTORY_TYPES, BuildOptions, ContextItem, ItemType

DEFAULT_MESSAGE_FORMAT = "[{role}]: {content}"
_BACKTICKS = re.compile(r"`+")

# -- markdown (seed 003) ---------------------------------------------------------------------


def heading(item_type: ItemType) -> str:
    """``repl_history`` -> ``Repl-History`` (seed 003's capitalised, hyphenated type name)."""
    return "-".join(part.capitalize() for part in item_type.value.split("_"))


def fence(content: str) -> str:
    """A backtick fence longer than the longest backtick run inside ``content`` (at least 3)."""
    longest = max((len(m) for m in _BACKTICKS.findall(content)), default=0)
    return "`" * max(3, longest + 1)


def _meta(md: dict[str, Any], key: str) -> Any:
    value = md.get(key)
    return md.get(key.replace("_", "-")) if value is None else value


def source_note(item: ContextItem) -> str:
    md = item.metadata or {}
    filename = md.get("filename")
    if not filename:
        return ""
    start, end = _meta(md, "start_line"), _meta(md, "end_line")
    lines = f":{start}-{end}" if start is not None and end is not None else ""
    return f" (from {filename}{lines})"


def language_of(item: ContextItem, language: str | None) -> str:
    if language is not None:
        return language
    md = item.metadata or {}
    lang = md.get("language")
    if isinstance(lang, str) and lang:
        return lang
    filename = md.get("filename")
    if isinstance(filename, str):
        return PurePosixPath(filename).suffix.lstrip(".")
    return ""


def to_markdown(items: Sequence[ContextItem], language: str | None = None) -> str:
    if language is not None and (not isinstance(language, str) or re.search(r"[\s`]", language)):
        raise InvalidOptionsError(f"language must be a word without spaces or backticks: {language!r}")
    parts = ["## Context\n\n"]
    for item in items:
        f = fence(item.content)
        parts.append(
            f"### {heading(item.type)}{source_note(item)}\n"
            f"{f}{language_of(item, language)}\n{item.content}\n{f}\n\n"
        )
    return "".join(parts)


# -- prompt building (seed 001 BuildAsync, contract §6) --------------------------------------


def validate_options(options: object) -> BuildOptions:
    if options is None:
        return BuildOptions()
    if not isinstance(options, BuildOptions):
        raise InvalidOptionsError(f"options must be BuildOptions, not {type(options).__name__}")
    o = options
    for name in ("max_history_items", "reserve_for_response"):
        v = getattr(o, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InvalidOptionsError(f"{name} must be an int >= 0, not {v!r}")
    if o.max_tokens is not None and (
        isinstance(o.max_tokens, bool) or not isinstance(o.max_tokens, int) or o.max_tokens < 1
    ):
        raise InvalidOptionsError(f"max_tokens must be None or an int >= 1, not {o.max_tokens!r}")
    if o.order not in ("sections", "priority"):
        raise InvalidOptionsError(f"order must be 'sections' or 'priority', not {o.order!r}")
    if not isinstance(o.section_separator, str):
        raise InvalidOptionsError("section_separator must be a str")
    fmt = o.message_format
    if fmt is not None and (not isinstance(fmt, str) or fmt.count("{content}") != 1):
        raise InvalidOptionsError("message_format must contain '{content}' exactly once")
    if o.query is not None and not isinstance(o.query, str):
        raise InvalidOptionsError("query must be a str or None")
    return o


def _build_key(item: ContextItem) -> tuple[int, int, int]:
    """Seed 001's key: type rank, priority desc, arrival."""
    return (item.type.rank, -item.priority, item.seq)


def _section_key(item: ContextItem) -> tuple[int, int, int]:
    """Sections: rank groups; user+assistant messages are one chronological group at rank 5."""
    if item.type in HISTORY_TYPES:
        return (5, 0, item.seq)
    return _build_key(item)


def _selection_key(item: ContextItem) -> tuple[int, int, int]:
    """Order in which candidates are offered the budget: history newest first."""
    if item.type in HISTORY_TYPES:
        return (5, 0, -item.seq)
    return _build_key(item)


def _allowed(t: ItemType, o: BuildOptions) -> bool:
    if t is ItemType.SYSTEM_PROMPT:
        return o.include_system_prompt
    if t is ItemType.INSTRUCTION:
        return o.include_instructions
    if t in (ItemType.RETRIEVED_DOCUMENT, ItemType.WORKING_MEMORY):
        return o.include_relevant_memory
    return True


EDGE = 32  # characters of content on each side of a joint that the joint is counted with


class _Costs:
    """Token costs of a prompt from the stored counts, without re-tokenizing the contents.

    tiktoken splits text into regex chunks and encodes each chunk on its own, so joining texts
    only changes tokens near each joint. The rendered prompt is content_1 J_1 content_2 ... where
    each joint J is the text between two contents (message-format suffix, separator, prefix). A
    joint costs ``count(tail + J + head) - count(tail) - count(head)`` with up to ``EDGE``
    characters of the neighbouring contents, plus 1 token of slack (unless ``tight``). The total
    (stored counts + joints) is then never below the exact count and at most about one token
    per item above it; ``BuildOptions(exact_tokens=True)`` counts the output instead.
    """

    def __init__(self, count: Callable[[str], int], o: BuildOptions, tight: bool = False) -> None:
        self.sep = o.section_separator
        fmt = o.message_format or DEFAULT_MESSAGE_FORMAT
        self.pre, self.post = fmt.split("{content}")
        self.slack = 0 if tight else 1
        self.count = count  # memoised per store: joints repeat from build to build

    def _pre(self, item: ContextItem | None) -> str:
        return "" if item is None or item.role is None else self.pre.replace("{role}", item.role)

    def _post(self, item: ContextItem | None) -> str:
        return "" if item is None or item.role is None else self.post.replace("{role}", item.role)

    def render(self, item: ContextItem) -> str:
        return self._pre(item) + item.content + self._post(item)

    def joint(self, left: ContextItem | None, text: str, right: ContextItem | None) -> int:
        tail = left.content[-EDGE:] if left is not None else ""
        head = right.content[:EDGE] if right is not None else ""
        if not text and not (tail and head):
            return 0
        n: int = self.count(tail + text + head)
        if tail:
            n -= self.count(tail)
        if head:
            n -= self.count(head)
        return n + self.slack

    def cost(self, item: ContextItem) -> int:
        """What adding ``item`` anywhere in a prompt may cost (used to choose, before ordering)."""
        return (item.token_count + self.joint(None, self.sep + self._pre(item), item)
                + self.joint(item, self._post(item), None))

    def total(self, ordered: Sequence[ContextItem]) -> int:
        if not ordered:
            return 0
        n = sum(i.token_count for i in ordered) + self.joint(None, self._pre(ordered[0]), ordered[0])
        for a, b in zip(ordered, ordered[1:]):
            n += self.joint(a, self._post(a) + self.sep + self._pre(b), b)
        return n + self.joint(ordered[-1], self._post(ordered[-1]), None)


def cached_count(counter: TokenCounter, size: int = 65536) -> Callable[[str], int]:
    """A memoised ``counter.count`` for the short strings joints are made of (one per store)."""
    return lru_cache(maxsize=size)(counter.count)


def check_pinned(items: Sequence[ContextItem], o: BuildOptions, budget: int | None,
                 count: Callable[[str], int]) -> None:
    """BudgetTooSmallError if the pinned items alone cannot fit (checked before anything else)."""
    if budget is None:
        return
    pinned = sorted((i for i in items if i.pinned), key=_section_key)
    need = _Costs(count, o).total(pinned)
    if need > budget:
        raise BudgetTooSmallError(need, budget)


def _candidates(loose: Sequence[ContextItem], o: BuildOptions) -> tuple[list[ContextItem], list[str]]:
    """The unpinned items the options let compete for the budget (in the order they are
    offered it), and the ids of the others in arrival order (omitted by the options)."""
    history: list[ContextItem] = []
    if o.include_recent_history:
        history = sorted((i for i in loose if i.type in HISTORY_TYPES), key=lambda i: -i.seq)
        history = history[: o.max_history_items]
    others = [i for i in loose if i.type not in HISTORY_TYPES and _allowed(i.type, o)]
    candidates = sorted(others + history, key=_selection_key)
    taken = {id(i) for i in candidates}
    omitted = [i.id or "" for i in sorted(loose, key=lambda i: i.seq) if id(i) not in taken]
    return candidates, omitted


def build(
    items: Sequence[ContextItem], o: BuildOptions, budget: int | None, counter: TokenCounter,
    count: Callable[[str], int],
) -> tuple[str, int, list[ContextItem], list[str], list[str]]:
    """Select and render. Returns (content, total_tokens, included items, excluded ids,
    omitted ids). ``count`` is the store's memoised ``counter.count``; ``counter`` counts
    exact totals."""
    costs = _Costs(count, o, tight=o.exact_tokens)
    pinned = [i for i in items if i.pinned]
    candidates, omitted = _candidates([i for i in items if not i.pinned], o)

    used = costs.total(sorted(pinned, key=_section_key))
    chosen: list[ContextItem] = []
    excluded: list[str] = []
    for cand in candidates:
        c = costs.cost(cand)
        if budget is None or used + c <= budget:
            chosen.append(cand)
            used += c
        else:
            excluded.append(cand.id or "")

    key = _section_key if o.order == "sections" else _build_key
    while True:
        ordered = sorted(pinned + chosen, key=key)
        content = o.section_separator.join(costs.render(i) for i in ordered)
        total = counter.count(content) if o.exact_tokens else costs.total(ordered)
        if budget is None or total <= budget:
            return content, total, ordered, excluded, omitted
        if not chosen:  # counted exactly, the pinned items alone do not fit
            raise BudgetTooSmallError(total, budget)
        excluded.append(chosen.pop().id or "")  # the estimate used to choose was short: drop one
