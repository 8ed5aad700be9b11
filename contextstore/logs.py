"""The library's log messages, on ``logging.getLogger("contextstore")``, as the original
specification words them (the agent id is the window id). Item contents and credentials never
appear in them.

May import: ``types``.
"""

from __future__ import annotations

import logging

from .types import ContextItem

log = logging.getLogger("contextstore")


def item_added(window_id: str, item: ContextItem) -> None:
    """DEBUG, per added item."""
    log.debug(
        "Added context item %s type=%s tokens=%d for agent %s", item.id, item.type.value, item.token_count, window_id
    )


def item_removed(window_id: str, item_id: str, reason: str) -> None:
    """DEBUG, per item removed by ``remove()`` (evictions, compactions and clears are events)."""
    log.debug("Removed context item %s reason=%s for agent %s", item_id, reason, window_id)


def rewound(window_id: str, item_id: str, rewind_id: str) -> None:
    """INFO, per rewind (what it took waits in the archive under ``rewind_id``)."""
    log.info("Rewound context for agent %s to item %s (%s)", window_id, item_id, rewind_id)


def usage_recorded(window_id: str, version: str, calibration: float) -> None:
    """DEBUG, per report of usage."""
    log.debug("Recorded usage for agent %s at version %s: calibration %.4f", window_id, version, calibration)


def built(window_id: str, items: int, tokens: int) -> None:
    """DEBUG, per build."""
    log.debug("Built context: %d items, %d tokens for agent %s", items, tokens, window_id)


def dropped_newest(window_id: str, ids: list[str], budget: int | None) -> None:
    """WARNING, when a build left out items newer than all it took: the window holds more than
    the build budget lets in."""
    log.warning(
        "Build for agent %s left out its %d newest items (%s): the budget of %s tokens is below what the window "
        "keeps; lower reserve_for_response or compaction_threshold, or raise max_tokens",
        window_id,
        len(ids),
        " ".join(ids[:5]) + (" ..." if len(ids) > 5 else ""),
        budget,
    )


def left_out(window_id: str, ids: list[str], budget: int | None) -> None:
    """WARNING, when a build within the window's own budget left out items that did not fit
    (none of them its newest: ``dropped_newest`` says that): the conversation it sends has gaps,
    and a prompt cache's prefix breaks."""
    log.warning(
        "Build for agent %s left out %d items that did not fit (%s): the budget of %s tokens is below what the "
        "window keeps under its compaction threshold; lower reserve_for_response or compaction_threshold, or "
        "raise max_tokens",
        window_id,
        len(ids),
        " ".join(ids[:5]) + (" ..." if len(ids) > 5 else ""),
        budget,
    )


def initialized(window_id: str, max_tokens: int | None) -> None:
    """INFO, when ``window()`` creates a window."""
    log.info("Context window initialized for agent %s, max=%s tokens", window_id, max_tokens)


def compacted(window_id: str, strategy: str, freed: int) -> None:
    """INFO, per compaction that freed something."""
    log.info("Compacted context for agent %s: strategy=%s, freed=%dtokens", window_id, strategy, freed)


def compaction_triggered(window_id: str, percent: float) -> None:
    """WARNING, when an add has to compact the window to make room."""
    log.warning("Context usage at %.1f%% for agent %s, triggering compaction", percent, window_id)


def window_full(window_id: str, current: int, maximum: int, requested: int) -> None:
    """ERROR, when an add cannot fit."""
    log.error(
        "Context window full for agent %s: current=%d, max=%d, requested=%d", window_id, current, maximum, requested
    )
