"""Plans that render a window: the prompt within a token budget, and markdown."""

from __future__ import annotations

import logging
import time

from .. import wire
from ..errors import InvalidOptionsError
from ..layout import Meta
from ..render import markdown, prompt
from ..types import BuildOptions, BuiltContext, CompactionStrategy, ContextItem, WindowConfig
from .base import Plan, ScriptCall, Settings, WindowState, read
from .compaction import compact, has_helper
from .items import items

log = logging.getLogger("contextstore")

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
    again = yield from read(state, "order")
    return freed, again.items()


def build(settings: Settings, state: WindowState, options: object = None) -> Plan[BuiltContext]:
    """The prompt within the budget: pinned items first, then candidates in build order while
    they fit. Deletes nothing unless ``compact=True``; appends a ``built`` event."""
    opts = prompt.validate_options(options)
    started = time.perf_counter()
    found = yield from read(state, "order")
    cfg = found.config(state.config)
    budget = budget_of(opts, cfg, state.window_id)
    decoded = found.items()
    prompt.check_pinned(decoded, opts, budget, settings.joint_count)
    freed, window_items = yield from _compact_first(settings, state, found, decoded, budget, opts)
    built = prompt.build(window_items, opts, budget, settings.counter, settings.joint_count)
    ms = (time.perf_counter() - started) * 1000
    log.debug(
        "built context for window %s: %d items, %d tokens", state.window_id, len(built.included), built.total_tokens
    )
    yield ScriptCall(
        "event",
        state.keys,
        wire.event_args(
            "built",
            {
                "items_included": str(len(built.included)),
                "items_excluded": str(len(built.excluded)),
                "items_omitted": str(len(built.omitted)),
                "total_tokens": str(built.total_tokens),
                "was_compacted": "1" if freed else "0",
                "build_time_ms": f"{ms:.3f}",
            },
        ),
    )  # no request id: a retry may log a second `built` event, which is harmless
    return BuiltContext(
        content=built.content,
        total_tokens=built.total_tokens,
        included_item_ids=[i.id or "" for i in built.included],
        excluded_item_ids=built.excluded,
        was_compacted=freed > 0,
        tokens_freed_by_compaction=freed,
        omitted_item_ids=built.omitted,
    )


def to_markdown(state: WindowState, types: object = None, limit: object = None, language: object = None) -> Plan[str]:
    """The window as markdown: ``## Context``, then a fenced block per item in arrival order."""
    if language is not None and not isinstance(language, str):
        raise InvalidOptionsError("language must be a str or None")
    got = yield from items(state, types, limit)
    return markdown.render(got, language)
