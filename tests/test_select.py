"""The budget pass of a build (``render.select.choose``) against the rule it implements, written
the plain way: offer each candidate unit in turn, take it if it fits, else exclude it. ``choose``
stops early once nothing later can fit and keeps its cost table between builds; neither may change
what is chosen or excluded. Pure: no store is involved."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore import BuildOptions, ContextItem, ItemType
from contextstore.core.itemcache import Derived
from contextstore.render.select import (
    Unit,
    Units,
    candidates,
    choose,
    history_read,
    newest_with,
    takes_history,
    units_for,
)

TYPES = [ItemType.USER_MESSAGE, ItemType.ASSISTANT_MESSAGE, ItemType.RETRIEVED_DOCUMENT, ItemType.CODE]


@st.composite
def windows(draw: st.DrawFn) -> tuple[list[ContextItem], dict[int, int]]:
    """Items (some pinned, some in groups of several) and a token cost per item seq."""
    n = draw(st.integers(0, 40))
    items, costs = [], {}
    for seq in range(1, n + 1):
        group = draw(st.sampled_from([None, None, None, "g1", "g2", "g3"]))
        items.append(
            ContextItem(
                content=f"item {seq}",
                type=draw(st.sampled_from(TYPES)),
                priority=draw(st.integers(0, 100)),
                pinned=draw(st.booleans()) and draw(st.booleans()),
                group=group,
                id=f"ctx-{seq}",
                seq=seq,
            )
        )
        costs[seq] = draw(st.integers(1, 60))
    return items, costs


def _plain(offered: list[Unit], budget: int | None, cost: Any, used: int) -> tuple[list[Unit], list[str], int]:
    chosen: list[Unit] = []
    excluded: list[str] = []
    for unit in offered:
        c = cost(unit)
        if budget is None or used + c <= budget:
            chosen.append(unit)
            used += c
        else:
            excluded += unit.ids()
    return chosen, excluded, used


@settings(max_examples=300, deadline=None)
@given(
    window=windows(),
    budgets=st.lists(st.one_of(st.none(), st.integers(0, 1500)), min_size=1, max_size=4),
    history=st.integers(0, 40),
)
def test_choose_takes_and_excludes_exactly_what_offering_each_unit_in_turn_does(
    window: tuple[list[ContextItem], dict[int, int]], budgets: list[int | None], history: int
) -> None:
    items, costs = window
    options = BuildOptions(max_history_items=history)

    def cost(unit: Unit) -> int:
        return sum(costs[i.seq] for i in unit.items)

    memo = Derived()  # one listing built several times, as the item cache does
    for budget in budgets:
        got = choose(items, options, budget, cost, base=3, memo=memo, cost_key="costs")
        units = units_for(items, memo)
        offered, omitted = candidates(units, options)
        chosen, excluded, used = _plain(offered, budget, cost, 3 + sum(cost(u) for u in units.pinned))
        assert [u.ids() for u in got.chosen] == [u.ids() for u in chosen]
        assert got.excluded == excluded
        assert got.omitted == omitted
        assert got.used == used
        assert got.pinned == units.pinned


@given(windows(), st.data())
@settings(max_examples=50, deadline=None)
def test_units_grown_by_adds_and_removals_are_the_units_made_afresh(window, data) -> None:
    """``Units.grown`` (what a store's next build starts from after other stores' adds and
    evictions) equals ``Units`` made afresh of the items now: every unit, pinned or offered in
    the same order, whichever members went (a group that lost some, all, or none)."""
    items, _ = window
    split = data.draw(st.integers(0, len(items)))
    before, added = items[:split], items[split:]
    removed = {i.id for i in before if data.draw(st.booleans())}
    now = [i for i in before if i.id not in removed] + added
    grown, fresh = Units(before).grown(now, added, removed), Units(now)
    assert [u.ids() for u in grown.offers] == [u.ids() for u in fresh.offers]
    assert sorted(u.ids() for u in grown.pinned) == sorted(u.ids() for u in fresh.pinned)
    assert grown.messages == fresh.messages and grown.by_group.keys() == fresh.by_group.keys()
    assert all(grown.by_group[g].ids() == fresh.by_group[g].ids() for g in fresh.by_group)


@given(windows(), st.data())
@settings(max_examples=200, deadline=None)
def test_newest_with_and_history_read_answer_as_a_scan_of_every_unit_would(window, data) -> None:
    """``newest_with`` stops at the first conversation unit holding a wanted item, and
    ``history_read`` takes the conversation as offered: both rely on the conversation's units
    being offered newest first, in units made afresh or grown."""
    items, _ = window
    split = data.draw(st.integers(0, len(items)))
    units = Units(items) if data.draw(st.booleans()) else Units(items[:split]).grown(items, items[split:], set())
    wanted_types = data.draw(st.sets(st.sampled_from(TYPES), min_size=1))
    wanted = lambda i: i.type in wanted_types  # noqa: E731
    found = [u for u in units.offers if any(wanted(i) for i in u.items)]
    assert newest_with(units, wanted) is (max(found, key=lambda u: u.newest) if found else None)
    oldest, most = data.draw(st.integers(0, len(items) + 1)), data.draw(st.integers(0, 12))
    options = BuildOptions(max_history_items=most)
    taken = 0
    for unit in sorted((u for u in units.offers if u.messages and u.newest >= oldest), key=lambda u: -u.newest):
        taken += unit.messages if takes_history(unit.messages, taken, most) else 0
    assert history_read(units, oldest, options) is (most < 1 or taken == most)
