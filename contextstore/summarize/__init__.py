"""Summarizers for ``CompactionStrategy.SUMMARIZE``: ``ExtractiveSummarizer`` (offline,
deterministic, no model) and ``OpenAISummarizer`` (any OpenAI-compatible chat endpoint, extra
``contextstore[openai]``). Anything with ``summarize(items) -> str`` (or an async one) works.

May import: ``core``, ``types``, ``errors``; ``OpenAISummarizer`` calls an HTTP endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..types import ContextItem
from .extractive import ExtractiveSummarizer
from .openai_chat import DEFAULT_PROMPT, OpenAISummarizer


@runtime_checkable
class Summarizer(Protocol):
    """What SUMMARIZE needs: the text of one summary of ``items`` (a coroutine function works
    on ``AsyncContextStore``). It should be shorter than the items: a summary that is not is
    not committed. A summarizer may also have ``budget(items) -> int``, the most tokens its
    summary of ``items`` takes: compaction then replaces enough items to reach its target with
    the summary in (without it, the summary's tokens come on top of the target)."""

    def summarize(self, items: Sequence[ContextItem]) -> str:
        """One summary of ``items`` (given in arrival order)."""
        ...


__all__ = ["DEFAULT_PROMPT", "ExtractiveSummarizer", "OpenAISummarizer", "Summarizer"]
