"""Plans that render a window: the prompt within a token budget, and markdown."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TypeVar

from .. import logs
from ..core import validate, wire
from ..core.layout import Meta, window_version
from ..errors import InvalidOptionsError, raise_for_reply
from ..render import markdown, prompt
from ..render.select import Unit, all_compete, choose, history_read, ranked_key, room_before, units_for
from ..types import BuildOptions, BuiltContext, CompactionStrategy, ContextItem
from .base import Plan, ScriptCall, Settings, WindowState
from .budget import budget_in, budget_of
from .build_read import Bodies, Recipe, build_read
from .compaction import compact, has_helper
from .facts_reach import Budgeted
from .items import items
from .reads import read
from .relevance import BuildScores

log = logging.getLogger("contextstore")
T = TypeVar("T")

#: compact=True compacts down to this share of max_tokens
COMPACT_ON_BUILD_PERCENT = 70.0


def compact_first(
    settings: Settings,
    state: WindowState,
    found: wire.ReadReply,
    decoded: list[ContextItem],
    budget: int | None,
    options: BuildOptions,
) -> Plan[tuple[int, list[ContextItem]]]:
    """``compact=True``: when the stored tokens exceed the budget, compact with the default
    strategy (a server-side one if its helper is missing), then read again, whole (the build
    then holds nothing: it is on a read taken after the compaction)."""
    if not options.compact or budget is None or found.counter(Meta.TOKENS) <= budget:
        return 0, decoded
    default = found.config(state.config).default_strategy
    strategy = default if has_helper(settings, default) else CompactionStrategy.REMOVE_LOW_PRIORITY
    freed = yield from compact(settings, state, strategy, COMPACT_ON_BUILD_PERCENT, options.query)
    if not freed:
        return 0, decoded
    again = yield from read(state, "order")
    return freed, again.items()


def built_event(state: WindowState, fields: dict[str, str], held: dict[str, str] | None) -> Plan[bool]:
    """Append the ``built`` event (no request id: a retry may log a second one, which is
    harmless); False when the window no longer holds ``held`` (nothing written)."""
    reply = raise_for_reply((yield ScriptCall("event", state.keys, wire.event_args("built", fields, held))))
    return held is None or reply == 1


def build(settings: Settings, state: WindowState, options: object = None) -> Plan[BuiltContext]:
    """The prompt within the budget: pinned items first, then candidates in build order while
    they fit. Deletes nothing unless ``compact=True``; appends a ``built`` event."""
    opts = prompt.validate_options(options)
    ranks = BuildScores.for_build(settings, state, opts)
    run = partial(_build, settings, state, opts, time.perf_counter(), ranks)
    room, budget = partial(_room, settings, state, opts, ranks), partial(budget_in, state, opts)
    recipe = Recipe(
        opts,
        partial(_history_read, opts),
        chooses=True,  # by its budget, as its walk reads
        whole=_every,  # a prompt counts its joints from each item's edges: every item whole
        fresh=opts.compact or ranks is not None,
        all_compete=all_compete(opts, state.config.max_items),
        budgeted=Budgeted(room, 0, opts.max_history_items, budget, bodies=True, scores=ranks),
    )
    return (yield from build_read(settings, state, recipe, run))


def _room(
    settings: Settings, state: WindowState, options: BuildOptions, ranks: BuildScores | None,
    stubs: list[ContextItem], frontier: int, meta: dict[str, str], relevance: Mapping[str, float] | None,
) -> int | None:  # fmt: skip
    """The most tokens a conversation unit older than ``frontier`` could find free when this text
    build offers it (``facts_reach.Room``): the budget less what the units offered before it cost
    (``stubs`` whole: the walk reads their bodies, ``Budgeted.bodies``), offered in the order their
    ``relevance`` scores give (``ranks``: a build with a query). None without a budget, without the
    scores a build with a query orders by, before the budget left a unit out, or when a stub has
    no body (facts a chat build read: read items always carry ``added_at``, stubs do not)."""
    budget = budget_in(state, options, meta)
    if budget is None or any(i.added_at is None for i in stubs):  # a stub: its edges are unknown
        return None
    if ranks is not None and relevance is None:
        return None
    costs = prompt.JointCosts(settings.joint_count, options, tight=options.exact_tokens)
    cost: Callable[[Unit], int] = lambda u: sum(map(costs.cost, u.items))  # noqa: E731
    choice = choose(stubs, options, budget, cost, key=ranked_key(relevance))
    return room_before(choice, budget, cost, frontier)


def _every(_: ContextItem) -> bool:
    return True


def _history_read(options: BuildOptions, items: list[ContextItem], oldest: int) -> bool:
    """Whether ``items`` (a facts read so far, ``build_read.read_facts``) hold every conversation unit
    a text build with ``options`` offers (``select.history_read``)."""
    return history_read(units_for(items, None), oldest, options)


def _build(
    settings: Settings,
    state: WindowState,
    opts: BuildOptions,
    started: float,
    ranks: BuildScores | None,
    found: wire.ReadReply,
    held: dict[str, str] | None,
    _bodies: Bodies | None = None,
) -> Plan[BuiltContext | None]:
    """``build`` from ``found`` (its items whole: ``build_read`` read them), its scored items
    ordered by ``ranks`` (a build with a query); None when ``held`` no longer holds (nothing
    written)."""
    cfg = found.config(state.config)
    budget = budget_of(opts, found, cfg, state.window_id)
    decoded = found.items()
    memo = found.cached.derived if found.cached is not None else None
    prompt.check_pinned(decoded, opts, budget, settings.joint_count, memo)
    freed, window_items = yield from compact_first(settings, state, found, decoded, budget, opts)
    held = None if freed else held  # built on the read after the compaction
    relevance = (yield from ranks.of(window_items)) if ranks is not None else None
    memos = found.cached.costs if found.cached is not None and not freed else None
    built = prompt.build(window_items, opts, budget, settings.counter, settings.joint_count, relevance, memos, memo)
    ms = (time.perf_counter() - started) * 1000
    fields = {
        "items_included": str(len(built.included)),
        "items_excluded": str(len(built.excluded)),
        "items_omitted": str(len(built.omitted)),
        "total_tokens": str(built.total_tokens),
        "was_compacted": "1" if freed else "0",
        "build_time_ms": f"{ms:.3f}",
        "version": window_version(found.meta),
    }
    if not (yield from built_event(state, fields, held)):
        return None
    logs.built(state.window_id, len(built.included), built.total_tokens)
    dropped = dropped_newest(
        state.window_id, window_items, built.included, built.excluded, budget, opts.max_tokens is None
    )
    return BuiltContext(
        content=built.content,
        total_tokens=built.total_tokens,
        included_item_ids=[i.id or "" for i in built.included],
        excluded_item_ids=built.excluded,
        was_compacted=freed > 0,
        tokens_freed_by_compaction=freed,
        omitted_item_ids=built.omitted,
        dropped_newest=dropped,
        version=window_version(found.meta),
    )


def dropped_newest(
    window_id: str, items: list[ContextItem], included: Sequence[ContextItem], excluded: list[str], budget: int | None,
    own_budget: bool = True,
) -> list[str]:  # fmt: skip
    """The excluded ids newer than every unpinned item included, in arrival order. Logged: a
    WARNING for those, else (a build within the window's ``own_budget``, not a ``max_tokens`` of
    the call's) one for every item left out."""
    if not excluded:
        return []
    newest = max((i.seq for i in included if not i.pinned), default=0)
    seq = seq_lookup(items)
    dropped = sorted((x for x in excluded if seq(x) > newest), key=seq)
    if dropped:
        logs.dropped_newest(window_id, dropped, budget)
    elif own_budget:
        logs.left_out(window_id, sorted(excluded, key=seq), budget)
    return dropped


def seq_lookup(items: list[ContextItem]) -> Callable[[str], int]:
    """Item id -> its seq among ``items`` (0 for an id not among them)."""
    seqs = {i.id: i.seq for i in items}
    return lambda item_id: seqs.get(item_id, 0)


def to_markdown(state: WindowState, types: object = None, limit: object = None, language: object = None) -> Plan[str]:
    """The window as markdown: ``## Context``, then a fenced block per item in arrival order."""
    if language is not None and not isinstance(language, str):
        raise InvalidOptionsError("language must be a str or None")
    if language is not None:
        validate.text("language", language)
    got = yield from items(state, types, limit)
    return markdown.render(got, language)
