"""The ``:sizes`` index of a window: each user and assistant message by its size class and seq
(``layout.size_score``, which the scripts write: ``size_score()`` of ``lua/lib/items.lua``), where
a build's walk finds the older messages that may still fit its budget (``plans/facts_reach.py``),
and what ``verify()`` checks of it."""

from __future__ import annotations

from typing import Any

from .layout import SIZED_TYPES, size_score


def problems(sizes: dict[str, Any], items: dict[str, dict[str, Any]]) -> list[str]:
    """What is wrong with ``sizes`` (member -> score, as read) given the window's ``items`` (id ->
    decoded fields): an entry that is not a user or assistant message, or a score its tokens and
    seq do not give. A build trusts it to pass over the older messages that cannot fit. Messages
    it lacks are not a problem (a window written before it was kept, or before an upgrade:
    builds read such a window's conversation in pages, its count tells)."""
    out = []
    for iid, raw in sizes.items():
        it, got = items.get(iid), float(raw)
        if it is None:
            out.append(f":sizes holds {iid!r}, which is not an item")
        elif it["type"] not in SIZED_TYPES:
            out.append(f":sizes holds {iid!r}, a {it['type']}: it holds user and assistant messages only")
        elif got != float(want := size_score(it["token_count"], it["seq"])):
            out.append(f":sizes score of {iid!r} is {got:.0f}, its tokens and seq give {want}")
    return out
