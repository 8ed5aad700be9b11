"""Rendering: seed 003's markdown and the token-budgeted prompt. Pure functions, no I/O."""

from __future__ import annotations

import re
from collections.abc import Sequence
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


class _Costs:
    """Token costs of items in a prompt, from their stored counts plus the counted overhead.

    An item's cost is its stored ``token_count`` + the tokens of the text around it (separator
    and message-format prefix counted as one string, suffix) + 1 for each boundary where the
    tokenizer may join across pieces (content starting with a non-alphanumeric character or
    ending in whitespace). The sum is an upper bound of the exact count of the rendered prompt.
    """

    def __init__(self, counter: TokenCounter, o: BuildOptions, tight: bool = False) -> None:
        self.counter = counter
        self.sep = o.section_separator
        fmt = o.message_format or DEFAULT_MESSAGE_FORMAT
        self.pre, self.post = fmt.split("{content}")
        self.tight = tight
        self._cache: dict[tuple[str, bool], int] = {}

    def render(self, item: ContextItem) -> str:
        if item.role is None:
            return item.content
        return self.pre.replace("{role}", item.role) + item.content + self.post.replace(
            "{role}", item.role
        )

    def _overhead(self, role: str | None, first: bool) -> int:
        key = (role or "\0", first)
        if key not in self._cache:
            lead = "" if first else self.sep
            if role is None:
                n = self.counter.count(lead) if lead else 0
            else:
                n = self.counter.count(lead + self.pre.replace("{role}", role))
                post = self.post.replace("{role}", role)
                n += self.counter.count(post) if post else 0
            self._cache[key] = n
        return self._cache[key]

    def cost(self, item: ContextItem, first: bool = False) -> int:
        c = item.token_count + self._overhead(item.role, first)
        if not self.tight:
            text = item.content
            c += (not text[0].isalnum()) + text[-1].isspace()
        return c

    def total(self, ordered: Sequence[ContextItem]) -> int:
        return sum(self.cost(it, first=(i == 0)) for i, it in enumerate(ordered))


def check_pinned(items: Sequence[ContextItem], o: BuildOptions, budget: int | None,
                 counter: TokenCounter) -> None:
    """BudgetTooSmallError if the pinned items alone cannot fit (checked before anything else)."""
    if budget is None:
        return
    costs = _Costs(counter, o)
    pinned = [i for i in items if i.pinned]
    need = costs.total(sorted(pinned, key=_section_key))
    if need > budget:
        raise BudgetTooSmallError(need, budget)


def build(
    items: Sequence[ContextItem], o: BuildOptions, budget: int | None, counter: TokenCounter
) -> tuple[str, int, list[ContextItem], list[str]]:
    """Select and render. Returns (content, total_tokens, included items, excluded ids)."""
    costs = _Costs(counter, o, tight=o.exact_tokens)
    pinned = [i for i in items if i.pinned]
    loose = [i for i in items if not i.pinned]
    history: list[ContextItem] = []
    if o.include_recent_history:
        history = sorted((i for i in loose if i.type in HISTORY_TYPES), key=lambda i: -i.seq)
        history = history[: o.max_history_items]
    others = [i for i in loose if i.type not in HISTORY_TYPES and _allowed(i.type, o)]
    candidates = sorted(others + history, key=_selection_key)

    used = sum(costs.cost(i) for i in pinned)
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
        if not o.exact_tokens:
            return content, _Costs(counter, o).total(ordered), ordered, excluded
        total = counter.count(content)
        if budget is None or total <= budget or not chosen:
            return content, total, ordered, excluded
        excluded.append(chosen.pop().id or "")  # the tight estimate overshot: drop the last pick
