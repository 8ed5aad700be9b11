"""Chat builds: the window as the messages an OpenAI- or Anthropic-style chat API takes, within
the token budget (content plus a per-message overhead), whole units, pinned first, every tool
result right after its call.

A build chooses from the window's facts (``build_read.read_facts``: ``:meta``, ``:attrs`` and
their letters, ``:pinned``) and reads the bodies of the items it takes only, those the store's
item cache lacks (``build_read.build_read``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from .. import logs
from ..core import native, wire
from ..core.itemcache import Derived, MessageUnits
from ..core.layout import MESSAGE_OVERHEAD, REPLY_PRIMING, window_version
from ..errors import BudgetTooSmallError, InvalidOptionsError, NoConversationError
from ..render import gemini, messages, prompt, responses
from ..render.select import (
    Choice,
    Unit,
    all_compete,
    choose,
    history_read,
    members,
    newest_with,
    ranked_key,
    room_before,
    units_for,
)
from ..types import CHAT_FORMATS, BuildOptions, BuiltMessages, ChatFormat, ContextItem, WindowConfig
from .base import Plan, Settings, WindowState
from .budget import budget_in, budget_of
from .build import built_event, compact_first, dropped_newest, seq_lookup
from .build_read import Bodies, Recipe, build_read
from .facts_reach import Budgeted
from .relevance import BuildScores

#: the key of items' message costs among a cached window's cost memos (what every format pays)
MESSAGE_COSTS = ("messages", "", "", 0)


def _message_units(items: list[ContextItem], memo: Derived | None) -> tuple[list[ContextItem], list[str]]:
    """The items of complete units (``items`` itself when every unit is complete), and the ids
    of incomplete tool-call groups (left out); kept in ``memo`` while builds get this list."""
    held = memo.message_units if memo is not None else None
    if held is not None and held.items is items:
        return held.usable, held.left_out
    units = units_for(items, memo).all
    # most units are one plain message, complete: only the others are looked into
    broken = {id(u) for u in units if (len(u.items) > 1 or u.items[0].metadata) and not messages.complete(u)}
    ok = [i for u in units if id(u) not in broken for i in u.items] if broken else items
    left_out = [i for u in units if id(u) in broken for i in u.ids()] if broken else []
    if memo is not None:
        memo.message_units = MessageUnits(items, ok, left_out)
    return ok, left_out


def _check_format(format: object) -> ChatFormat:
    for fmt in CHAT_FORMATS:
        if format == fmt:
            return fmt
    raise InvalidOptionsError(f"format must be one of {', '.join(map(repr, CHAT_FORMATS))}, not {format!r}")


def build_messages(
    settings: Settings, state: WindowState, options: object = None, format: object = "openai"
) -> Plan[BuiltMessages]:
    """Chat messages within the budget (content plus a per-message overhead): whole units,
    pinned first; every tool result right after its call. Appends a ``built`` event."""
    opts, fmt = prompt.validate_options(options), _check_format(format)
    ranks = BuildScores.for_build(settings, state, opts)  # relevance scores need the texts they score
    run = partial(_build_messages, settings, state, opts, fmt, ranks)
    room, budget = partial(_room, settings, state, opts, fmt, ranks), partial(budget_in, state, opts)
    recipe = Recipe(
        opts,
        partial(_settled, opts),
        chooses=True,
        whole=BuildScores.wanted if ranks is not None else None,
        fresh=opts.compact or ranks is not None,
        all_compete=all_compete(opts, state.config.max_items),
        budgeted=Budgeted(room, MESSAGE_OVERHEAD, opts.max_history_items, budget, scores=ranks),
    )
    return (yield from build_read(settings, state, recipe, run))


def _settled(options: BuildOptions, items: list[ContextItem], oldest: int) -> bool:
    """Whether ``items`` (a facts read so far: every unit whose newest member's seq is at least
    ``oldest``, whole, and every pinned or non-conversation item) decide this build as the
    whole window would: the conversation units ``max_history_items`` lets compete (newest first,
    while they fit the count) are all there, and the newest user message's unit (``_question``)
    among them is the window's, or one no build offers. Older units are then not offered."""
    memo = Derived()  # the units of ``items``, worked out once
    usable, _ = _message_units(items, memo)
    if not history_read(units_for(usable, memo), oldest, options):
        return False
    # a context item in the user's role, older than the read, is the question here; a newer
    # user message may lie in what is not read yet
    question = _question(usable, memo, options)
    return question is None or question.messages > 0 or question.newest >= oldest


def _room(
    settings: Settings, state: WindowState, options: BuildOptions, fmt: ChatFormat, ranks: BuildScores | None,
    stubs: list[ContextItem], frontier: int, meta: dict[str, str], relevance: Mapping[str, float] | None,
) -> int | None:  # fmt: skip
    """The most tokens a conversation unit older than ``frontier`` could find free when this build
    offers it (``facts_reach.Room``): the budget less what the units offered before it take, as
    the build chooses from ``stubs`` (its scored items in the order their ``relevance`` gives:
    ``ranks``, a build with a query). None when they do not decide it: no budget, no scores for a
    build with a query, the newest user message not among them, or nothing left out by the
    budget yet."""
    found, budget = wire.ReadReply(meta, 0, []), budget_in(state, options, meta)
    memo = Derived()
    usable, _ = _message_units(stubs, memo)
    question = _question(usable, memo, options)
    if budget is None or question is None or question.newest < frontier or (ranks is not None and relevance is None):
        return None
    cost = MessageCost(settings, found, fmt, options, stubs)
    pinned_need = REPLY_PRIMING + sum(cost(u) for u in units_for(stubs, memo).pinned)
    try:
        choice = _chosen(options, budget, usable, memo, relevance, cost, pinned_need)
    except BudgetTooSmallError:
        return None
    return room_before(choice, budget, cost, frontier)


def _build_messages(
    settings: Settings, state: WindowState, opts: BuildOptions, fmt: ChatFormat, ranks: BuildScores | None,
    found: wire.ReadReply, held: dict[str, str] | None, bodies: Bodies | None = None,
) -> Plan[BuiltMessages | None]:  # fmt: skip
    """``build_messages`` from ``found``; None when ``held`` no longer holds (``cache_first``)
    or ``bodies`` cannot read the chosen items (``_from_facts``: ``found`` holds their facts)."""
    budget = budget_of(opts, found, found.config(state.config), state.window_id)
    decoded = found.items()
    cost = MessageCost(settings, found, fmt, opts, decoded)  # what each unit costs in this format
    # one memo for this build at least: the question's unit must be the very unit choosing offers
    derived = found.cached.derived if found.cached is not None else Derived()
    pinned_need = REPLY_PRIMING + sum(cost(u) for u in units_for(decoded, derived).pinned)
    if budget is not None and pinned_need > budget:
        raise BudgetTooSmallError(pinned_need, budget)
    freed, window_items = yield from compact_first(settings, state, found, decoded, budget, opts)
    if freed:  # built on the read after the compaction, whole
        held, bodies = None, None
    usable, incomplete = _message_units(window_items, derived)
    relevance = (yield from ranks.of(window_items)) if ranks is not None else None
    choice = _chosen(opts, budget, usable, derived, relevance, cost, pinned_need)
    ordered, roles = messages.arrange(members(choice.pinned + choice.chosen), opts.order, relevance)
    omitted = sorted(choice.omitted + incomplete, key=seq_lookup(window_items)) if choice.omitted or incomplete else []
    clears = _clears(settings, found.config(state.config)) if fmt == "anthropic" and opts.cache_control else None
    delivered = yield from _delivered(state, ordered, (fmt, opts, clears, roles), held, bodies, {
        "format": fmt, "items_included": str(len(ordered)), "items_excluded": str(len(choice.excluded)),
        "items_omitted": str(len(omitted)), "total_tokens": str(choice.used), "was_compacted": "1" if freed else "0",
        "version": window_version(found.meta),
    })  # fmt: skip
    if delivered is None:
        return None
    ordered, payload = delivered
    logs.built(state.window_id, len(ordered), choice.used)
    dropped = dropped_newest(state.window_id, window_items, ordered, choice.excluded, budget, opts.max_tokens is None)
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


def _clears(settings: Settings, cfg: WindowConfig) -> messages.Clears:
    """Which tool results the window's compaction may clear: not pinned, larger than the
    placeholder, of a tool ``clear_exclude_tools`` does not name."""
    excluded, least = frozenset(cfg.clear_exclude_tools), settings.placeholder_tokens
    return lambda item, tool: not item.pinned and item.token_count > least and tool not in excluded


def _delivered(
    state: WindowState,
    ordered: list[ContextItem],
    rendering: tuple[ChatFormat, BuildOptions, messages.Clears | None, list[str]],
    held: dict[str, str] | None,
    bodies: Bodies | None,
    fields: dict[str, str],
) -> Plan[tuple[list[ContextItem], Any] | None]:
    """The chosen items and their payload (``rendering``: its format, the options, which results
    compaction may clear, the items' roles), with the ``built`` event written (``fields``, only while the window
    holds ``held``); from the facts, the bodies are read in the event's round trip (``bodies``).
    None when the window moved on: nothing was written."""
    fmt, opts, clears, roles = rendering
    _check_conversation(ordered, fmt, opts, state.window_id)  # before anything is written
    if bodies is not None:
        read = yield from bodies(ordered, wire.event_args("built", fields, held))
        return None if read is None else (read, _payload(read, roles, fmt, opts, clears))
    payload = _payload(ordered, roles, fmt, opts, clears)
    if not (yield from built_event(state, fields, held)):
        return None
    return ordered, payload


def _chosen(
    opts: BuildOptions,
    budget: int | None,
    usable: list[ContextItem],
    derived: Derived,
    relevance: Mapping[str, float] | None,
    cost: MessageCost,
    pinned_need: int,
) -> Choice:
    """What a chat build takes of ``usable`` (its complete units): the pinned units, the newest
    user message's (``_with_question``), then the other candidates while they fit."""

    def pick(required: Unit | None = None) -> Choice:
        key = ranked_key(relevance)
        return choose(usable, opts, budget, cost, REPLY_PRIMING, key, derived, cost.key, required)

    return _with_question(pick, _question(usable, derived, opts), pinned_need, budget, cost)


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


def _question(usable: list[ContextItem], memo: Derived | None, options: BuildOptions) -> Unit | None:
    """The unit of the newest user message, which a chat build always includes (unless the
    options leave the conversation out, or it is pinned and so included anyway)."""
    if not options.include_recent_history or options.max_history_items < 1:
        return None
    return newest_with(units_for(usable, memo), lambda i: messages.role_of(i) == "user")


class MessageCost:
    """What a unit costs as chat messages in one build: what every format pays (memoised per
    item while the window's epoch stays) and what the provider's own parts add in the build's
    format (``native.cost``: in every turn, or with ``reasoning_context="current_turn"`` only
    after the newest user message of ``items``). ``key`` names the costs among a cached
    window's memos."""

    __slots__ = ("_count", "_fmt", "_memo", "_model", "_since", "key")

    def __init__(
        self, settings: Settings, found: wire.ReadReply, fmt: ChatFormat, options: BuildOptions,
        items: Sequence[ContextItem],
    ) -> None:  # fmt: skip
        cached = found.cached
        self._memo: dict[Any, int] = cached.costs.setdefault(MESSAGE_COSTS, {}) if cached is not None else {}
        self._count, self._fmt, self._model = settings.joint_count, fmt, options.model
        self._since = _turn_start(items) if options.reasoning_context == "current_turn" else 0
        self.key = ("messages", fmt, options.model or "", self._since)

    def __call__(self, unit: Unit) -> int:
        if len(unit.items) == 1:  # most units
            item = unit.items[0]
            n = self._memo.get(item.seq)
            if n is None:
                n = self._memo[item.seq] = messages.item_cost(item, self._count)
            return n if type(item.content) is str else n + self._own(item)
        return messages.unit_cost(unit, self._count) + sum(self._own(i) for i in unit.items)

    def _own(self, item: ContextItem) -> int:
        if type(item.content) is str:
            return 0
        return native.cost(item.content, self._fmt, self._model, earlier=item.seq <= self._since)


def _turn_start(items: Sequence[ContextItem]) -> int:
    """The seq of the newest user message among ``items`` (0 when none): the current turn
    comes after it."""
    return max((i.seq for i in items if messages.role_of(i) == "user"), default=0)


def _check_conversation(ordered: list[ContextItem], fmt: str, options: BuildOptions, window_id: str) -> None:
    """``NoConversationError`` for an Anthropic build with no message to send (its roles say so,
    so items without their bodies, chosen from the facts, tell it as well as the items)."""
    if fmt in ("anthropic", "gemini") and not messages.has_conversation(ordered, options):
        raise NoConversationError(
            f"an {fmt.title()} build of window {window_id!r} has no message to send: no user or assistant "
            "message of the window is in it (none there, none the options let in, or none fits the budget)"
        )


def _payload(
    ordered: list[ContextItem], roles: list[str], fmt: str, options: BuildOptions, clears: messages.Clears | None
) -> list[dict[str, Any]] | dict[str, Any]:
    """The messages in the format asked for (``_check_conversation`` passed); ``roles``: the
    items' (``messages.arrange``)."""
    if fmt == "openai":
        return messages.openai(ordered, roles, options.model)
    if fmt == "responses":
        return responses.responses(ordered, roles, options.model)
    if fmt == "gemini":
        return gemini.gemini(ordered, roles, options)
    return messages.anthropic(ordered, roles, options, clears)
