"""Choosing what a build includes: whole units, pinned first, then candidates while they fit.

A unit is a group (a tool call and its results, kept or dropped together) or one ungrouped item.
A unit with a pinned member is pinned as a whole. The options decide which other units are
candidates; candidates are offered the budget in build order, the conversation newest first; a
unit that does not fit is skipped whole.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from ..core.itemcache import Derived
from ..types import HISTORY_TYPES, BuildOptions, ContextItem, ItemType

#: the conversation (user and assistant messages) renders as one group at this rank
CONVERSATION_RANK = 5


class Unit(msgspec.Struct, frozen=True, eq=False, gc=False):
    """Items that go in or stay out together (a group's members, or one ungrouped item); made by
    ``Unit.of``. Not tracked by the garbage collector (nor are ``ContextItem``s, nor a tuple of
    them once a collection has seen it): a store's item cache keeps the units of the windows it
    holds, and a collector walking them all took ~7% of a caching fleet worker's time."""

    #: its members, in the order they came
    items: tuple[ContextItem, ...]
    #: True when any member is pinned (then the whole unit is)
    pinned: bool
    #: how many user and assistant messages it holds (what max_history_items counts)
    messages: int
    #: the seq of its newest member
    newest: int

    @classmethod
    def of(cls, items: Sequence[ContextItem]) -> Unit:
        """The unit of ``items``."""
        if len(items) == 1:  # most units: one ungrouped item
            only = items[0]
            return cls((only,), only.pinned, int(only.type in HISTORY_TYPES), only.seq)
        pinned = any(i.pinned for i in items)
        return cls(tuple(items), pinned, sum(1 for i in items if i.type in HISTORY_TYPES), max(i.seq for i in items))

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
            order.append(Unit.of((item,)))
        elif group in groups:
            groups[group].append(item)
        else:
            groups[group] = members_ = [item]
            order.append(members_)
    if not groups:
        return order  # type: ignore[return-value]
    return [u if isinstance(u, Unit) else Unit.of(u) for u in order]


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


def offer_key(unit: Unit, key: Key) -> tuple[float, ...]:
    """The order candidates are offered the budget: build order, the conversation newest first."""
    if unit.messages:
        return (CONVERSATION_RANK, 0, -unit.newest, 0)
    return min(key(i) for i in unit.items)


def offer_order(units: Iterable[Unit], key: Key = build_key) -> list[Unit]:
    """``units`` in the order they are offered the budget."""
    return sorted(units, key=lambda u: offer_key(u, key))


class Units:
    """What a build chooses from, worked out once per listing of a window's items: its units,
    the pinned ones, and the others in build-order offer order."""

    __slots__ = ("all", "by_group", "costs", "items", "messages", "offers", "pinned", "tables")

    def __init__(self, items: Sequence[ContextItem], units: list[Unit] | None = None) -> None:
        #: the items these units were made of
        self.items = items
        #: every unit (``units_of``, unless given)
        self.all = units_of(items) if units is None else units
        #: group -> its unit
        self.by_group = {u.items[0].group: u for u in self.all if u.items[0].group is not None}
        #: the pinned units (in every build)
        self.pinned = [u for u in self.all if u.pinned]
        #: the other units, in the order ``build_key`` offers them the budget
        self.offers = offer_order((u for u in self.all if not u.pinned), build_key)
        #: how many messages the unpinned units hold
        self.messages = sum(u.messages for u in self.offers)
        #: a cost format's key -> unit -> its cost (``choose``'s ``cost_key``)
        self.costs: dict[Any, dict[Unit, int]] = {}
        #: a cost format's key -> the ``OfferTable`` of ``offers`` under it
        self.tables: dict[Any, OfferTable] = {}

    def grown(self, items: Sequence[ContextItem], added: Sequence[ContextItem], removed: set[str]) -> Units:
        """The units of ``items``: these units' items but the ``removed`` ids, and ``added`` (in
        arrival order). A unit that lost a member is made anew of the others (or goes); an added
        item makes a new unit or joins its group's (which is then made anew); every other unit,
        and its memoised costs, carries over."""
        by_group = dict(self.by_group)
        gone: dict[int, Unit] = {}  # the units made anew, by id()
        new: list[Unit] = []
        for unit in self.all if removed else ():
            left = [i for i in unit.items if i.id not in removed]
            if len(left) < len(unit.items):
                gone[id(unit)] = unit
                group = unit.items[0].group
                if left:
                    new.append(Unit.of(left))
                if group is not None and left:
                    by_group[group] = new[-1]
                elif group is not None:
                    del by_group[group]
        for item in added:
            old = by_group.get(item.group) if item.group is not None else None
            unit = Unit.of((item,)) if old is None else Unit.of((*old.items, item))
            if old is not None:
                gone[id(old)] = old
            if item.group is not None:
                by_group[item.group] = unit
            new.append(unit)
        grown = object.__new__(Units)
        grown.items, grown.by_group = items, by_group
        new = [u for u in new if id(u) not in gone]

        def kept(units: Iterable[Unit]) -> list[Unit]:
            return [u for u in units if id(u) not in gone] if gone else list(units)

        grown.all, grown.pinned, grown.offers = kept(self.all) + new, kept(self.pinned), kept(self.offers)
        for unit in new:
            if unit.pinned:
                grown.pinned.append(unit)
            else:
                bisect.insort(grown.offers, unit, key=lambda u: offer_key(u, build_key))
        grown.messages = sum(u.messages for u in grown.offers)
        for known in self.costs.values():  # shared with these units: a unit's cost stays
            for unit in gone.values():
                known.pop(unit, None)
        grown.costs = self.costs
        grown.tables = {}
        return grown


def units_for(items: Sequence[ContextItem], memo: Derived | None) -> Units:
    """The ``Units`` of ``items``, kept in ``memo`` (the item cache's memo of a listing) and
    reused while builds are given this very list (a listing, or the part of it that chat
    messages can use: two lists at most)."""
    if memo is None:
        return Units(items)
    kept: dict[int, Units] = memo.units
    held = kept.get(id(items))
    if held is None or held.items is not items:
        if len(kept) >= 2:
            kept.clear()
        held = kept[id(items)] = _grown(items, memo) or Units(items)
    return held


def _grown(items: Sequence[ContextItem], memo: Derived) -> Units | None:
    """The units of ``items`` grown from an earlier list's (``memo.grown_from``, left by
    ``itemcache.ItemCache.keep_facts``), when ``items`` is the list that grew; else None."""
    grew = memo.grown_from
    if grew is None or grew.items is not items:
        return None
    memo.grown_from = None
    prev = grew.previous_memo.units.get(id(grew.previous))
    return prev.grown(items, grew.added, grew.removed) if prev is not None and prev.items is grew.previous else None


def all_compete(options: BuildOptions, messages: int) -> bool:
    """True when the options let every unit of a window holding ``messages`` conversation
    messages (or fewer) compete."""
    every_type = options.include_system_prompt and options.include_instructions and options.include_relevant_memory
    if not every_type or not options.include_recent_history:
        return False
    return options.max_history_items >= messages


def candidates(units: Units, options: BuildOptions, key: Key = build_key) -> tuple[list[Unit], list[str]]:
    """The unpinned units the options let compete for the budget (in the order they are offered
    it: the conversation newest first, up to ``max_history_items`` messages), and the ids the
    options leave out, in arrival order."""
    if key is build_key and all_compete(options, units.messages):
        return units.offers, []
    order = units.offers if key is build_key else offer_order((u for u in units.all if not u.pinned), key)
    offered: list[Unit] = []
    left: list[ContextItem] = []
    history, most = options.include_recent_history, options.max_history_items
    taken = 0
    for unit in order:
        if unit.messages:
            fits = history and takes_history(unit.messages, taken, most)
            taken += unit.messages if fits else 0
        else:
            fits = all(_allowed(i.type, options) for i in unit.items)
        if fits:
            offered.append(unit)
        else:
            left += unit.items
    return offered, [i.id or "" for i in sorted(left, key=lambda i: i.seq)]


def takes_history(messages: int, taken: int, most: int) -> bool:
    """Whether a conversation unit of ``messages`` messages competes for the budget after newer
    ones holding ``taken`` (``max_history_items``: ``most``): while the count fits."""
    return taken + messages <= most


def history_read(units: Units, oldest: int, options: BuildOptions) -> bool:
    """Whether the conversation units that compete for a build's budget (newest first, while
    ``takes_history`` lets them ``max_history_items``) are all among ``units`` whose newest
    member's seq is at least ``oldest``: a read of a window's newest items that got that far back
    holds every one a whole read would offer. True when ``options`` offer no conversation."""
    most = options.max_history_items
    if not options.include_recent_history or most < 1:
        return True
    taken = 0
    for unit in (u for u in units.offers if u.messages and u.newest >= oldest):  # offered newest first
        if takes_history(unit.messages, taken, most):
            taken += unit.messages
    return taken == most


class OfferTable:
    """The offered units' costs laid out for one pass of ``choose``: ``costs[i]`` is unit i's
    cost; what excluding needs (``excluding``) is laid out the first time a unit does not fit."""

    __slots__ = ("_excluding", "costs", "offered")

    def __init__(self, offered: Sequence[Unit], known: dict[Unit, int], cost: Callable[[Unit], int]) -> None:
        self.offered = offered
        self.costs = [known[u] if u in known else known.setdefault(u, cost(u)) for u in offered]
        self._excluding: tuple[list[int], list[str], list[int]] | None = None

    def excluding(self) -> tuple[list[int], list[str], list[int]]:
        """(floor, ids, starts): ``floor[i]`` the cheapest cost from unit i on (once the room left
        is below it, every later unit is excluded at once), ``ids[starts[i]:]`` the ids of unit i
        onwards."""
        if self._excluding is None:
            floor = [0] * (len(self.costs) + 1)
            floor[-1] = sys.maxsize
            for i in range(len(self.costs) - 1, -1, -1):
                floor[i] = min(self.costs[i], floor[i + 1])
            ids: list[str] = []
            starts: list[int] = []
            for unit in self.offered:
                starts.append(len(ids))
                ids += unit.ids()
            starts.append(len(ids))
            self._excluding = (floor, ids, starts)
        return self._excluding


def _table(units: Units, offered: list[Unit], cost_key: Any, cost: Callable[[Unit], int]) -> OfferTable:
    """The ``OfferTable`` of ``offered``, kept with ``units`` when it is their every unpinned unit
    (the usual build) and ``cost_key`` names the costs."""
    known: dict[Unit, int] = units.costs.setdefault(cost_key, {}) if cost_key is not None else {}
    if cost_key is None or offered is not units.offers:
        return OfferTable(offered, known, cost)
    table = units.tables.get(cost_key)
    if table is None:
        table = units.tables[cost_key] = OfferTable(offered, known, cost)
    return table


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
    memo: Derived | None = None,
    cost_key: Any = None,
    required: Unit | None = None,
) -> Choice:
    """Pinned units first (their cost counted in ``used``), then candidates (in ``key`` order)
    while ``cost`` fits the budget; ``base`` is what the build costs before any unit; ``memo``
    keeps the units of ``items`` for the next build (``units_for``), and with them the units'
    costs under ``cost_key`` (a key naming everything ``cost`` depends on besides the unit).
    ``required``: an offered unit taken right after the pinned ones, as if it were pinned."""
    units = units_for(items, memo)
    pinned = units.pinned
    offered, omitted = candidates(units, options, key)
    if required is not None and required in offered:
        pinned, offered = [*pinned, required], [u for u in offered if u is not required]
    used = base + sum(cost(u) for u in pinned)
    table = _table(units, offered, cost_key, cost)
    costs = table.costs
    if budget is None:
        return Choice(pinned, list(offered), [], omitted, used + sum(costs))
    chosen: list[Unit] = []
    excluded: list[str] = []
    for i, c in enumerate(costs):
        if used + c <= budget:
            chosen.append(offered[i])
            used += c
            continue
        floor, ids, starts = table.excluding()
        if budget - used < floor[i + 1]:  # no later unit fits either
            excluded += ids[starts[i] :]
            break
        excluded += ids[starts[i] : starts[i + 1]]
    return Choice(pinned, chosen, excluded, omitted, used)


def room_before(choice: Choice, budget: int, cost: Callable[[Unit], int], frontier: int) -> int | None:
    """The tokens ``choice`` leaves free where a conversation unit whose newest member is older than
    ``frontier`` would be offered: the budget less what the units offered before it take (its
    pinned and required units, the units before the conversation, the conversation from
    ``frontier`` on). None when the budget left nothing out: the walk reads on instead
    (``plans/facts_reach.py``)."""
    if not choice.excluded:
        return None
    after = sum(cost(u) for u in choice.chosen if offer_key(u, build_key) > (CONVERSATION_RANK, 0, -frontier, 0))
    return budget - choice.used + after


def newest_with(units: Units, wanted: Callable[[ContextItem], bool]) -> Unit | None:
    """The unpinned unit whose newest member is newest among those holding a ``wanted`` item.
    The conversation's units are offered newest first: past the first of them that holds one,
    none is newer, so only the other units are looked into."""
    best: Unit | None = None
    conversation_found = False
    for unit in units.offers:
        if unit.messages and conversation_found:
            continue
        if any(wanted(i) for i in unit.items):
            conversation_found = conversation_found or bool(unit.messages)
            best = unit if best is None or unit.newest > best.newest else best
    return best


def members(units: Iterable[Unit]) -> list[ContextItem]:
    """Every item of ``units``."""
    return [i for u in units for i in u.items]
