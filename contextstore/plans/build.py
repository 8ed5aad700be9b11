"""Plans that render a window: the prompt within a token budget, and markdown."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal, TypeVar

from .. import logs
from ..core import wire
from ..core.layout import Meta, window_version
from ..errors import BudgetTooSmallError, InvalidOptionsError, NoConversationError, raise_for_reply
from ..render import markdown, messages, prompt
from ..render.select import RELEVANT_TYPES, Choice, Unit, choose, members, newest_with, ranked_key, units_for
from ..types import BuildOptions, BuiltContext, BuiltMessages, CompactionStrategy, ContextItem, WindowConfig
from .base import Plan, ScriptCall, Settings, WindowState
from .compaction import compact, has_helper
from .items import items
from .reads import cached_for_build, read_for_build
from .relevance import scores

log = logging.getLogger("contextstore")
T = TypeVar("T")

#: compact=True compacts down to this share of max_tokens
COMPACT_ON_BUILD_PERCENT = 70.0


def budget_of(options: BuildOptions, cfg: WindowConfig, window_id: str) -> int | None:
    """Tokens the prompt may take: the limit (this build's, else the window's) minus the
    reserve; None without a limit. A reserve that leaves no room at all is an error naming
    both options, not an empty prompt."""
    limit = options.max_tokens if options.max_tokens is not None else cfg.max_tokens
    if limit is None:
        return None
    if options.reserve_for_response >= limit:
        whose = (
            "BuildOptions.max_tokens" if options.max_tokens is not None else f"the max_tokens of window {window_id!r}"
        )
        raise InvalidOptionsError(
            f"reserve_for_response={options.reserve_for_response} leaves no room for a prompt: {whose} "
            f"is {limit}; pass BuildOptions(reserve_for_response=N) with N < {limit} "
            f"(tokens kept free for the model's answer), or a larger max_tokens"
        )
    return limit - options.reserve_for_response


def _compact_first(
    settings: Settings,
    state: WindowState,
    found: wire.ReadReply,
    decoded: list[ContextItem],
    budget: int | None,
    options: BuildOptions,
) -> Plan[tuple[int, list[ContextItem]]]:
    """``compact=True``: when the stored tokens exceed the budget, compact with the default
    strategy (a server-side one if its helper is missing), then read again."""
    if not options.compact or budget is None or found.counter(Meta.TOKENS) <= budget:
        return 0, decoded
    default = found.config(state.config).default_strategy
    strategy = default if has_helper(settings, default) else CompactionStrategy.REMOVE_LOW_PRIORITY
    freed = yield from compact(settings, state, strategy, COMPACT_ON_BUILD_PERCENT, options.query)
    if not freed:
        return 0, decoded
    again = yield from read_for_build(settings, state)
    return freed, again.items()


def _relevance(
    settings: Settings, state: WindowState, options: BuildOptions, window_items: list[ContextItem]
) -> Plan[dict[str, float] | None]:
    """With a query and a relevance scorer: the scores of the retrieved documents and working
    memory (item id -> score); else None (build order by priority alone)."""
    if not options.query or settings.relevance_scorer is None or not options.include_relevant_memory:
        return None
    relevant = [i for i in window_items if i.type in RELEVANT_TYPES]
    got = yield from scores(settings, state, options.query, relevant)
    return {i.id or "": s for i, s in zip(relevant, got, strict=True)}


#: what a build from the cache alone gives up on: errors its cached view may have caused wrongly
_MAYBE_STALE = (BudgetTooSmallError, InvalidOptionsError, NoConversationError)


def _cache_first(
    settings: Settings,
    state: WindowState,
    options: BuildOptions,
    run: Callable[[wire.ReadReply, dict[str, str] | None], Plan[T | None]],
) -> Plan[T]:
    """``run`` a build from the store's cached window with no read first, when the options ask
    for no compaction and no relevance scores: its ``built`` event, written only if the window
    still holds what the build used, is then its one call. Else, or when the window moved on (then
    ``run`` answers None, having written nothing, and builds read first until a read finds the
    window unchanged: ``ItemCache.moving``), ``run`` on a read."""
    scored = bool(options.query) and settings.relevance_scorer is not None
    cached = cached_for_build(settings, state) if not options.compact and not scored else None
    if cached is not None:
        try:
            done = yield from run(*cached)
        except _MAYBE_STALE:
            pass  # the read below decides
        else:
            if done is not None:
                return done
            settings.item_cache.moving(state.keys.meta, True)
    found = yield from read_for_build(settings, state)
    done = yield from run(found, None)
    assert done is not None  # a build on a read needs nothing to hold
    return done


def _built_event(state: WindowState, fields: dict[str, str], held: dict[str, str] | None) -> Plan[bool]:
    """Append the ``built`` event (no request id: a retry may log a second one, which is
    harmless); False when the window no longer holds ``held`` (nothing written)."""
    reply = raise_for_reply((yield ScriptCall("event", state.keys, wire.event_args("built", fields, held))))
    return held is None or reply == 1


def build(settings: Settings, state: WindowState, options: object = None) -> Plan[BuiltContext]:
    """The prompt within the budget: pinned items first, then candidates in build order while
    they fit. Deletes nothing unless ``compact=True``; appends a ``built`` event."""
    opts = prompt.validate_options(options)
    return (yield from _cache_first(settings, state, opts, partial(_build, settings, state, opts, time.perf_counter())))


def _build(
    settings: Settings,
    state: WindowState,
    opts: BuildOptions,
    started: float,
    found: wire.ReadReply,
    held: dict[str, str] | None,
) -> Plan[BuiltContext | None]:
    """``build`` from ``found``; None when ``held`` no longer holds (``_cache_first``)."""
    cfg = found.config(state.config)
    budget = budget_of(opts, cfg, state.window_id)
    decoded = found.items()
    memo = found.cached.derived if found.cached is not None else None
    prompt.check_pinned(decoded, opts, budget, settings.joint_count, memo)
    freed, window_items = yield from _compact_first(settings, state, found, decoded, budget, opts)
    relevance = yield from _relevance(settings, state, opts, window_items)
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
    }
    if not (yield from _built_event(state, fields, held)):
        return None
    logs.built(state.window_id, len(built.included), built.total_tokens)
    dropped = _dropped_newest(state.window_id, window_items, built.included, built.excluded, budget)
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


FORMATS = ("openai", "anthropic")
#: the key of message costs among a cached window's cost memos
MESSAGE_COSTS = ("messages", "", "", 0)


def _message_units(items: list[ContextItem], memo: dict[str, Any] | None) -> tuple[list[ContextItem], list[str]]:
    """The items of complete units (``items`` itself when every unit is complete), and the ids
    of incomplete tool-call groups (left out); kept in ``memo`` while builds get this list."""
    held = memo.get("message_units") if memo is not None else None
    if held is not None and held[0] is items:
        return held[1], held[2]
    units = units_for(items, memo).all
    complete = [messages.complete(u) for u in units]
    ok = items if all(complete) else [i for u, c in zip(units, complete, strict=True) if c for i in u.items]
    left_out = [i for u, c in zip(units, complete, strict=True) if not c for i in u.ids()]
    if memo is not None:
        memo["message_units"] = (items, ok, left_out)
    return ok, left_out


def _check_format(format: object) -> Literal["openai", "anthropic"]:
    if format == "openai":
        return "openai"
    if format == "anthropic":
        return "anthropic"
    raise InvalidOptionsError(f"format must be 'openai' or 'anthropic', not {format!r}")


def build_messages(
    settings: Settings, state: WindowState, options: object = None, format: object = "openai"
) -> Plan[BuiltMessages]:
    """Chat messages within the budget (content plus a per-message overhead): whole units,
    pinned first; every tool result right after its call. Appends a ``built`` event."""
    opts, fmt = prompt.validate_options(options), _check_format(format)
    return (yield from _cache_first(settings, state, opts, partial(_build_messages, settings, state, opts, fmt)))


def _build_messages(
    settings: Settings,
    state: WindowState,
    opts: BuildOptions,
    fmt: Literal["openai", "anthropic"],
    found: wire.ReadReply,
    held: dict[str, str] | None,
) -> Plan[BuiltMessages | None]:
    """``build_messages`` from ``found``; None when ``held`` no longer holds (``_cache_first``)."""
    budget = budget_of(opts, found.config(state.config), state.window_id)
    decoded = found.items()

    cost = _message_cost(settings, found)
    derived = found.cached.derived if found.cached is not None else None
    pinned_need = messages.REPLY_PRIMING + sum(cost(u) for u in units_for(decoded, derived).pinned)
    if budget is not None and pinned_need > budget:
        raise BudgetTooSmallError(pinned_need, budget)
    freed, window_items = yield from _compact_first(settings, state, found, decoded, budget, opts)
    usable, incomplete = _message_units(window_items, derived)
    relevance = yield from _relevance(settings, state, opts, usable)

    def pick(required: Unit | None = None) -> Choice:
        key = ranked_key(relevance)
        return choose(usable, opts, budget, cost, messages.REPLY_PRIMING, key, derived, MESSAGE_COSTS, required)

    choice = _with_question(pick, _question(usable, derived, opts), pinned_need, budget, cost)
    ordered = messages.arrange(members(choice.pinned + choice.chosen), opts.order, relevance)
    payload = _payload(ordered, fmt, opts, state.window_id)
    omitted = sorted(choice.omitted + incomplete, key=_seq_of(window_items))
    if not (yield from _built_event(state, {
        "format": fmt, "items_included": str(len(ordered)), "items_excluded": str(len(choice.excluded)),
        "items_omitted": str(len(omitted)), "total_tokens": str(choice.used), "was_compacted": "1" if freed else "0",
    }, held)):  # fmt: skip
        return None
    logs.built(state.window_id, len(ordered), choice.used)
    dropped = _dropped_newest(state.window_id, window_items, ordered, choice.excluded, budget)
    return BuiltMessages(
        messages=payload,
        format=fmt,
        total_tokens=choice.used,
        included_item_ids=[i.id or "" for i in ordered],
        excluded_item_ids=choice.excluded,
        omitted_item_ids=omitted,
        was_compacted=freed > 0,
        tokens_freed_by_compaction=freed,
        dropped_newest=dropped,
        version=window_version(found.meta),
    )


def _with_question(
    pick: Callable[..., Choice],
    question: Unit | None,
    pinned_need: int,
    budget: int | None,
    cost: Callable[[Unit], int],
) -> Choice:
    """``pick()``, or when it leaves ``question`` out, ``pick(question)``: the question taken
    right after the pins (``BudgetTooSmallError`` when they cannot fit together)."""
    choice = pick()
    if question is None or any(u is question for u in choice.chosen):
        return choice
    need = pinned_need + cost(question)
    if budget is not None and need > budget:
        raise BudgetTooSmallError(
            need, budget, f"the pinned items and the newest user message ({', '.join(question.ids())})"
        )
    return pick(question)


def _question(usable: list[ContextItem], memo: dict[str, Any] | None, options: BuildOptions) -> Unit | None:
    """The unit of the newest user message, which a chat build always includes (unless the
    options leave the conversation out, or it is pinned and so included anyway)."""
    if not options.include_recent_history or options.max_history_items < 1:
        return None
    return newest_with(units_for(usable, memo), lambda i: messages.role_of(i) == "user")


def _dropped_newest(
    window_id: str, items: list[ContextItem], included: Sequence[ContextItem], excluded: list[str], budget: int | None
) -> list[str]:
    """The excluded ids newer than every unpinned item included, in arrival order (logged)."""
    if not excluded:
        return []
    newest = max((i.seq for i in included if not i.pinned), default=0)
    seq = _seq_of(items)
    dropped = sorted((x for x in excluded if seq(x) > newest), key=seq)
    if dropped:
        logs.dropped_newest(window_id, dropped, budget)
    return dropped


def _message_cost(settings: Settings, found: wire.ReadReply) -> Callable[[Unit], int]:
    """What a unit costs as chat messages, memoised per item while the window's epoch stays."""
    memo: dict[Any, int] = found.cached.costs.setdefault(MESSAGE_COSTS, {}) if found.cached is not None else {}

    def cost(unit: Unit) -> int:
        if len(unit.items) == 1:  # most units
            item = unit.items[0]
            n = memo.get(item.seq)
            if n is None:
                n = memo[item.seq] = messages.item_cost(item, settings.joint_count)
            return n
        return messages.unit_cost(unit, settings.joint_count)

    return cost


def _payload(
    ordered: list[ContextItem], fmt: str, options: BuildOptions, window_id: str
) -> list[dict[str, Any]] | dict[str, Any]:
    """The messages in the format asked for; an Anthropic build with none raises."""
    if fmt == "openai":
        return messages.openai(ordered)
    payload = messages.anthropic(ordered, options)
    if not payload["messages"]:
        raise NoConversationError(
            f"an Anthropic build of window {window_id!r} has no message to send: no user or assistant "
            "message of the window is in it (none there, none the options let in, or none fits the budget)"
        )
    return payload


def _seq_of(items: list[ContextItem]) -> Callable[[str], int]:
    seqs = {i.id: i.seq for i in items}
    return lambda item_id: seqs.get(item_id, 0)


def to_markdown(state: WindowState, types: object = None, limit: object = None, language: object = None) -> Plan[str]:
    """The window as markdown: ``## Context``, then a fenced block per item in arrival order."""
    if language is not None and not isinstance(language, str):
        raise InvalidOptionsError("language must be a str or None")
    got = yield from items(state, types, limit)
    return markdown.render(got, language)
