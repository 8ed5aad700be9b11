"""Choosing what a build includes: whole units, pinned first, then candidates while they fit.

A unit is a group (a tool call and its results, kept or dropped together) or one ungrouped item.
A unit with a pinned member is pinned as a whole. The options decide which other units are
candidates; candidates are offered the budget in build order, the conversation newest first; a
unit that does not fit is skipped whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec

from ..types import HISTORY_TYPES, BuildOptions, ContextItem, ItemType

#: the conversation (user and assistant messages) renders as one group at this rank
CONVERSATION_RANK = 5


class Unit:
    """Items that go in or stay out together (a group's members, or one ungrouped item)."""

    __slots__ = ("items", "messages", "newest", "pinned")

    def __init__(self, items: list[ContextItem]) -> None:
        self.items = items
        if len(items) == 1:  # most units: one ungrouped item
            only = items[0]
            self.pinned, self.messages, self.newest = only.pinned, int(only.type in HISTORY_TYPES), only.seq
            return
        #: True when any member is pinned (then the whole unit is)
        self.pinned = any(i.pinned for i in items)
        #: how many user and assistant messages it holds (what max_history_items counts)
        self.messages = sum(1 for i in items if i.type in HISTORY_TYPES)
        #: the seq of its newest member
        self.newest = max(i.seq for i in items)

    def ids(self) -> list[str]:
        """Its members' ids, in arrival order."""
        if len(self.items) == 1:
            return [self.items[0].id or ""]
        return [i.id or "" for i in sorted(self.items, key=lambda i: i.seq)]


def units_of(items: Sequence[ContextItem]) -> list[Unit]:
    """``items`` as units (a group's members together), in order of first appearance."""
    groups: dict[str, list[ContextItem]] = {}
    order: list[Unit | list[ContextItem]] = []
    for item in items:
        group = item.group
        if group is None:
            order.append(Unit([item]))
        elif group in groups:
            groups[group].append(item)
        else:
            groups[group] = members_ = [item]
            order.append(members_)
    if not groups:
        return order  # type: ignore[return-value]
    return [u if isinstance(u, Unit) else Unit(u) for u in order]


#: the types a build with a query ranks by relevance (what ``include_relevant_memory`` governs)
RELEVANT_TYPES = frozenset({ItemType.RETRIEVED_DOCUMENT, ItemType.WORKING_MEMORY})
Key = Callable[[ContextItem], tuple[float, ...]]


def build_key(item: ContextItem) -> tuple[float, ...]:
    """Build order: type rank, priority desc, arrival."""
    return (item.type.rank, -item.priority, item.seq)


def ranked_key(relevance: Mapping[str, float] | None) -> Key:
    """Build order with relevance: type rank, priority desc, then (for the items scored) the
    score desc, then arrival; plain ``build_key`` without scores."""
    if not relevance:
        return build_key

    def key(item: ContextItem) -> tuple[float, ...]:
        score = relevance.get(item.id or "")
        return (item.type.rank, -item.priority, -score if score is not None else float("inf"), item.seq)

    return key


def _allowed(item_type: ItemType, options: BuildOptions) -> bool:
    if item_type is ItemType.SYSTEM_PROMPT:
        return options.include_system_prompt
    if item_type is ItemType.INSTRUCTION:
        return options.include_instructions
    if item_type in (ItemType.RETRIEVED_DOCUMENT, ItemType.WORKING_MEMORY):
        return options.include_relevant_memory
    return True


def _offer_key(unit: Unit, key: Key) -> tuple[float, ...]:
    """The order candidates are offered the budget: build order, the conversation newest first."""
    if unit.messages:
        return (CONVERSATION_RANK, 0, -unit.newest, 0)
    return min(key(i) for i in unit.items)


def candidates(units: Sequence[Unit], options: BuildOptions, key: Key = build_key) -> tuple[list[Unit], list[str]]:
    """The unpinned units the options let compete for the budget (in the order they are offered
    it), and the ids the options leave out, in arrival order."""
    offered: list[Unit] = []
    history = sorted((u for u in units if u.messages), key=lambda u: -u.newest)
    taken = 0
    for unit in history:
        if options.include_recent_history and taken + unit.messages <= options.max_history_items:
            offered.append(unit)
            taken += unit.messages
    offered += [u for u in units if not u.messages and all(_allowed(i.type, options) for i in u.items)]
    kept = {id(u) for u in offered}
    omitted = [i for u in units if id(u) not in kept for i in u.items]
    ordered = sorted(offered, key=lambda u: _offer_key(u, key))
    return ordered, [i.id or "" for i in sorted(omitted, key=lambda i: i.seq)]


class Choice(msgspec.Struct):
    """What a build takes: pinned units, chosen units (in the order chosen), excluded ids."""

    pinned: list[Unit]
    chosen: list[Unit]
    excluded: list[str]
    omitted: list[str]
    used: int


def choose(
    items: Sequence[ContextItem],
    options: BuildOptions,
    budget: int | None,
    cost: Callable[[Unit], int],
    base: int = 0,
    key: Key = build_key,
) -> Choice:
    """Pinned units first (their cost counted in ``used``), then candidates (in ``key`` order)
    while ``cost`` fits the budget; ``base`` is what the build costs before any unit."""
    units = units_of(items)
    pinned = [u for u in units if u.pinned]
    offered, omitted = candidates([u for u in units if not u.pinned], options, key)
    used = base + sum(cost(u) for u in pinned)
    chosen: list[Unit] = []
    excluded: list[str] = []
    for unit in offered:
        c = cost(unit)
        if budget is None or used + c <= budget:
            chosen.append(unit)
            used += c
        else:
            excluded += unit.ids()
    return Choice(pinned, chosen, excluded, omitted, used)


def members(units: Iterable[Unit]) -> list[ContextItem]:
    """Every item of ``units``."""
    return [i for u in units for i in u.items]
