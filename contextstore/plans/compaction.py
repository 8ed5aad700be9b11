"""Plans for compaction: the server-side strategies run inside Redis in bounded parts; SUMMARIZE
and SELECTIVE decide outside Redis and commit only if the items they read are unchanged."""

from __future__ import annotations

import logging
import math

from .. import logs
from ..core import validate, wire
from ..core.layout import Meta, calibrated, calibration_of
from ..core.parts import text_of
from ..core.stored import Entry, entry_digest
from ..errors import HelperError, InvalidOptionsError, StrategyUnavailableError, VersionConflictError, raise_for_reply
from ..types import HISTORY_TYPES, CompactionPlan, CompactionStrategy, ContextItem, ItemType, PlannedItem
from .base import Plan, ScriptCall, Settings, WindowState, helper_call, new_request
from .reads import read
from .relevance import scores

log = logging.getLogger("contextstore")

#: most items one compact script call removes; compact() calls it again until the target. ~20 ms
#: per call at 100,000 items (benchmarks/bounds.py)
COMPACT_CHUNK = 300
#: times an outside-Redis compaction decides again after another worker changed the window
COMMIT_ATTEMPTS = 3

Candidate = tuple[ContextItem, Entry]  # an item and its entry, as read


def strategy_of(value: object) -> CompactionStrategy | None:
    """A strategy argument: None (the window's default) or a ``CompactionStrategy`` value."""
    if value is None:
        return None
    try:
        return CompactionStrategy(value)
    except ValueError:
        raise InvalidOptionsError(f"unknown compaction strategy {value!r}") from None


def has_helper(settings: Settings, strategy: CompactionStrategy) -> bool:
    """True when the store can run ``strategy`` (server-side, or its helper is configured)."""
    if strategy is CompactionStrategy.SUMMARIZE:
        return settings.summarizer is not None
    if strategy is CompactionStrategy.SELECTIVE:
        return settings.relevance_scorer is not None
    return strategy.server_side


def require_helper(settings: Settings, strategy: CompactionStrategy) -> None:
    """``StrategyUnavailableError`` when ``strategy`` needs a helper the store lacks."""
    if not has_helper(settings, strategy):
        helper = "summarizer" if strategy is CompactionStrategy.SUMMARIZE else "relevance_scorer"
        raise StrategyUnavailableError(
            f"{strategy.name} needs a {helper.replace('_', ' ')}: ContextStore(..., {helper}=...)"
        )


def compact(
    settings: Settings,
    state: WindowState,
    strategy: object = None,
    target_percent: object = 70.0,
    query: object = None,
    request_id: object = None,
) -> Plan[int]:
    """Remove (or summarize) unpinned items until usage <= ``target_percent``; tokens freed."""
    request = new_request("compact", request_id)
    chosen = strategy_of(strategy)
    target = validate.number_in("target_percent", target_percent, 0, 100)
    if query is not None and not isinstance(query, str):
        raise InvalidOptionsError("query must be a str or None")
    if chosen is not None:
        require_helper(settings, chosen)
    else:
        found = yield from read(state, "meta")
        chosen = found.config(state.config).default_strategy
        require_helper(settings, chosen)
    if chosen.server_side:
        freed = yield from _compact_inside(settings, state, chosen, target, request)
    else:
        freed = yield from _compact_outside(settings, state, chosen, target, query, request)
    if freed:
        logs.compacted(state.window_id, chosen.value, freed)
    return freed


def _compact_inside(
    settings: Settings,
    state: WindowState,
    strategy: CompactionStrategy,
    target: float,
    request: str,
    earlier: int = 0,
) -> Plan[int]:
    """compact.lua in parts of at most COMPACT_CHUNK removals, so one script stays short;
    ``earlier``: tokens already freed by this compaction (they count toward clear_at_least)."""
    freed, part, more = 0, 0, True
    while more:
        args = wire.compact_args(
            strategy,
            target,
            COMPACT_CHUNK,
            continued=part > 0,
            placeholder_tokens=settings.placeholder_tokens,
            earlier=earlier + freed,
        )
        reply = raise_for_reply(
            (yield ScriptCall("compact", state.keys, args, f"{request}/{part}" if part else request))
        )
        got, more = wire.decode_compact(reply)
        freed, part = freed + got, part + 1
    return freed


def compact_for_add(settings: Settings, state: WindowState, ask: wire.CompactFirst) -> Plan[tuple[int, int]]:
    """The compaction an add asked for before it goes in (add.lua's ``compact`` answer, when the
    compaction inside the add would act on more than ``COMPACT_CHUNK`` items): the add's strategy
    in parts, then after clear_tool_results remove_low_priority to the same target, as the add
    falls back. Returns the compactions that freed something and the tokens they freed."""
    chosen = CompactionStrategy(ask.strategy)
    runs, freed = 0, 0
    for strategy in (chosen, CompactionStrategy.REMOVE_LOW_PRIORITY):
        request = new_request("compact", None)
        got = yield from _compact_inside(settings, state, strategy, ask.target_percent, request, freed)
        runs, freed = runs + (got > 0), freed + got
        if chosen is not CompactionStrategy.CLEAR_TOOL_RESULTS:
            break
    return runs, freed


def _units(pairs: list[Candidate], every: list[ContextItem], keep_recent: int) -> list[list[Candidate]]:
    """The candidates as whole units (a group, or one ungrouped item) that compaction may
    take: no member pinned, not among the ``keep_recent`` newest conversation units."""
    pinned_groups = {it.group for it in every if it.pinned and it.group}
    units: dict[str, list[Candidate]] = {}
    for it, raw in pairs:
        if not it.pinned and it.group not in pinned_groups:
            units.setdefault(f"g{it.group}" if it.group else f"i{it.id}", []).append((it, raw))
    talk = [u for u in units.values() if u[0][0].group or u[0][0].type in HISTORY_TYPES]
    kept = {id(u) for u in sorted(talk, key=lambda u: -max(c[0].seq for c in u))[:keep_recent]}
    return [u for u in units.values() if id(u) not in kept]


def _by_relevance(
    settings: Settings, state: WindowState, units: list[list[Candidate]], every: list[ContextItem], query: str | None
) -> Plan[list[list[Candidate]]]:
    """SELECTIVE's order: lowest score first (a unit scores as its best member), ties oldest
    first. The query defaults to the most recent user message."""
    if query is None:
        users = [it for it in every if it.type is ItemType.USER_MESSAGE]
        query = text_of(users[-1].content) if users else None
    flat = [c[0] for u in units for c in u]
    got = yield from scores(settings, state, query, flat)
    by_id = dict(zip((it.id for it in flat), got, strict=True))
    return sorted(units, key=lambda u: (max(by_id[c[0].id] for c in u), min(c[0].seq for c in u)))


def _is_conversation(item: ContextItem) -> bool:
    return item.group is not None or item.type in HISTORY_TYPES


def _summary(settings: Settings, chosen: list[Candidate]) -> Plan[validate.NewItem]:
    """The summary of ``chosen`` (given to the summarizer in arrival order): a working_memory
    item with their highest priority and ``metadata["summary_of"]``; when they are all
    conversation (messages and tool calls), it speaks as the user, so that chat messages show
    it where the turns it replaces were."""
    items = sorted((c[0] for c in chosen), key=lambda i: i.seq)
    text = yield helper_call(settings.summarizer, "summarize", (items,), "summarizer")
    if not isinstance(text, str) or not text.strip():
        raise HelperError(f"the summarizer must return a non-empty str, not {text!r:.60}")
    summary = validate.new_item(
        text.strip(),
        limits=settings.item_limits(),
        type=ItemType.WORKING_MEMORY,
        role="user" if all(_is_conversation(i) for i in items) else None,
        priority=max(i.priority for i in items),
        metadata={"summary_of": [i.id for i in items]},
    )
    summary.token_count = max(1, settings.counter.count(text_of(summary.content)))
    return summary


def _choose(
    settings: Settings, state: WindowState, strategy: CompactionStrategy, target_percent: float, query: str | None
) -> Plan[tuple[list[Candidate], int] | None]:
    """Read the window and choose what to replace; None when nothing needs to go."""
    found = yield from read(state, "fifo")
    cfg = found.config(state.config)
    if not found.exists or cfg.max_tokens is None:
        return None
    limit = calibrated(cfg.max_tokens, calibration_of(found.meta))
    tokens, target = found.counter(Meta.TOKENS), math.floor(limit * target_percent / 100)
    if tokens <= target:
        return None
    every = found.items()
    units = _units(list(zip(every, found.raw, strict=True)), every, cfg.keep_recent)
    if strategy is CompactionStrategy.SUMMARIZE:
        units.sort(key=lambda u: (max(c[0].priority for c in u), min(c[0].seq for c in u)))
    else:
        units = yield from _by_relevance(settings, state, units, every, query)
    chosen: list[Candidate] = []
    freed = 0
    for unit in units:
        if chosen and _enough(settings, strategy, chosen, tokens - target, freed, cfg.clear_at_least):
            break
        chosen += sorted(unit, key=lambda c: c[0].seq)
        freed += sum(c[0].token_count for c in unit)
    return (chosen, freed) if chosen else None


def _enough(
    settings: Settings, strategy: CompactionStrategy, chosen: list[Candidate], over: int, freed: int, least: int
) -> bool:
    """Whether replacing ``chosen`` (``freed`` tokens) brings usage down by ``over`` and frees at
    least ``least`` (clear_at_least), net of the summary's room. The room can only matter once
    the items alone get there (it is >= 0): the summarizer's budget() is not asked for every unit."""
    need = max(over, least)
    return freed >= need and freed - _summary_room(settings, strategy, chosen) >= need


def _summary_room(settings: Settings, strategy: CompactionStrategy, chosen: list[Candidate]) -> int:
    """The tokens the summary of ``chosen`` may take (SUMMARIZE with a summarizer that says, by
    a ``budget(items)`` method), so that usage reaches the target with the summary in."""
    budget = getattr(settings.summarizer, "budget", None)
    if strategy is not CompactionStrategy.SUMMARIZE or not callable(budget):
        return 0
    try:
        return max(0, int(budget([c[0] for c in chosen])))
    except Exception as exc:
        raise HelperError(f"the summarizer's budget() failed: {exc!r:.200}") from exc


def _compact_outside(
    settings: Settings,
    state: WindowState,
    strategy: CompactionStrategy,
    target_percent: float,
    query: str | None,
    request: str,
) -> Plan[int]:
    """SUMMARIZE / SELECTIVE: read, decide outside Redis, commit only if nothing changed.

    Every commit attempt carries the call's request: only a successful commit is recorded, so a
    repeated call returns that commit's result even though it would now choose other items
    (hence ``same_args=False``)."""
    for _ in range(COMMIT_ATTEMPTS):
        choice = yield from _choose(settings, state, strategy, target_percent, query)
        if choice is None:
            return 0
        chosen, freed = choice
        summary = None
        if strategy is CompactionStrategy.SUMMARIZE:
            summary = yield from _summary(settings, chosen)
            if summary.token_count >= freed:
                log.warning(
                    "summary of %d items is not smaller than them; window %s left as it was",
                    len(chosen),
                    state.window_id,
                )
                return 0
        read_as = [(c[0].id or "", entry_digest(c[1], settings.blob_cache)) for c in chosen]
        args = wire.commit_args(strategy, read_as, summary)
        try:
            reply = raise_for_reply((yield ScriptCall("commit", state.keys, args, request, same_args=False)))
        except VersionConflictError:
            continue  # another worker changed the window meanwhile: decide again
        freed, summary_id = wire.decode_commit(reply)
        if summary_id:
            log.debug("summary %s replaces %d items of window %s", summary_id, len(chosen), state.window_id)
        return freed
    log.warning("compaction of window %s gave up after %d conflicting attempts", state.window_id, COMMIT_ATTEMPTS)
    return 0


#: a dry run plans every item at once (compact() does the same in parts of COMPACT_CHUNK)
DRY_RUN_MOST = 10**6


def plan_compaction(
    settings: Settings, state: WindowState, strategy: object = None, target_percent: object = 70.0, query: object = None
) -> Plan[CompactionPlan]:
    """What ``compact()`` would do now, changing nothing: the items it would remove, clear or
    summarize, and the tokens that frees (for SUMMARIZE, before the summary's own tokens)."""
    chosen = strategy_of(strategy)
    target = validate.number_in("target_percent", target_percent, 0, 100)
    if query is not None and not isinstance(query, str):
        raise InvalidOptionsError("query must be a str or None")
    found = yield from read(state, "meta")
    cfg = found.config(state.config)
    chosen = chosen or cfg.default_strategy
    require_helper(settings, chosen)
    tokens, freed = found.counter(Meta.TOKENS), 0
    items: list[PlannedItem] = []
    if found.exists and cfg.max_tokens is not None and chosen.server_side:
        args = wire.compact_args(chosen, target, DRY_RUN_MOST, False, settings.placeholder_tokens, True)
        freed, items = wire.decode_dry_run(raise_for_reply((yield ScriptCall("compact", state.keys, args))))
    elif found.exists and cfg.max_tokens is not None:
        choice = yield from _choose(settings, state, chosen, target, query)
        action = "summarize" if chosen is CompactionStrategy.SUMMARIZE else "remove"
        for it, _ in choice[0] if choice else []:
            items.append(
                PlannedItem(
                    id=it.id or "",
                    type=it.type,
                    tokens=it.token_count,
                    action=action,
                    tokens_freed=it.token_count,
                    group=it.group,
                )
            )
        freed = choice[1] if choice else 0
    limit = calibrated(cfg.max_tokens, calibration_of(found.meta)) if cfg.max_tokens else 0
    after = 0.0 if not limit else (tokens - freed) * 100.0 / limit
    return CompactionPlan(strategy=chosen, items=items, tokens_freed=freed, usage_percent_after=after)
