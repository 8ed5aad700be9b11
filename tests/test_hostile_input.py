"""Hostile input at every public entry: lone surrogates (which no UTF-8 encoder takes), metadata
nested deeper than the documented bound or larger than the item's size limit, control
characters in the ids, groups and roles that reach terminals and logs. Each is refused with a
typed error (a ``ContextStoreError``, also a ``ValueError``) and the window's keys stay byte for
byte as they were."""

from __future__ import annotations

from typing import Any

import pytest

import contextstore as cs
from contextstore.core.validate import MAX_METADATA_DEPTH

from support import dump_window

SURROGATE = "\ud800"
ESC = "a\x1b]52;c;ZXZpbA==\x07b"


def nested(depth: int) -> dict[str, Any]:
    """A dict ``depth`` levels deep."""
    d: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        d = {"a": d}
    return d


def calls(w: Any) -> dict[str, Any]:
    """Each public call with one hostile argument."""
    return {
        "remove": lambda: w.remove(SURROGATE),
        "pin": lambda: w.pin(SURROGATE),
        "unpin": lambda: w.unpin(SURROGATE),
        "get": lambda: w.get(SURROGATE),
        "update_priority": lambda: w.update_priority(SURROGATE, 5),
        "archived": lambda: w.archived(SURROGATE),
        "undo_summary": lambda: w.undo_summary(SURROGATE),
        "replace expect_ids": lambda: w.replace(["new"], expect_ids=[SURROGATE]),
        "add content": lambda: w.add("x" + SURROGATE),
        "add id": lambda: w.add("x", id=SURROGATE),
        "add group": lambda: w.add("x", group=SURROGATE),
        "add metadata": lambda: w.add("x", metadata={SURROGATE: 1}),
        "add metadata 990 deep": lambda: w.add("x", metadata=nested(990)),
        "add metadata 3000 deep": lambda: w.add("x", metadata=nested(3000)),
        "add metadata one level too deep": lambda: w.add("x", metadata=nested(MAX_METADATA_DEPTH + 1)),
        "add_many metadata 990 deep": lambda: w.add_many([{"content": "x", "metadata": nested(990)}]),
        "add metadata 60 MB": lambda: w.add("small", metadata={"blob": "x" * 60_000_000}),
        "add metadata over the size limit": lambda: w.add("x" * 1000, metadata={"b": "y" * 1_048_000}),
        "add source_ref over the size limit": lambda: w.add("x" * 1_048_000, source_ref="s" * 1000),
        "add id with ESC": lambda: w.add("x", id=ESC),
        "add id with C1": lambda: w.add("x", id="a\x9bb"),
        "add group with ESC": lambda: w.add("x", group=ESC),
        "add role with ESC": lambda: w.add("x", role="user\x1b[2J"),
        "build query": lambda: w.build(cs.BuildOptions(query=SURROGATE)),
        "build separator": lambda: w.build(cs.BuildOptions(section_separator=SURROGATE)),
        "build message_format": lambda: w.build(cs.BuildOptions(message_format="{content}" + SURROGATE)),
        "to_markdown language": lambda: w.to_markdown(language=SURROGATE),
    }


CASES = list(calls(None))


@pytest.mark.parametrize("case", CASES)
def test_hostile_input_is_refused_typed_and_changes_nothing(store, r, prefix, case):
    w = store.window("hostile", max_tokens=100_000)
    w.add_many(["one", {"content": "two", "role": "user"}])
    before = dump_window(r, prefix, "hostile")
    with pytest.raises(cs.ContextStoreError) as ei:
        calls(w)[case]()
    assert isinstance(ei.value, ValueError), ei.value  # an input error
    assert dump_window(r, prefix, "hostile") == before


def test_metadata_at_the_depth_bound_and_within_the_size_limit_is_stored(store):
    w = store.window("hostile-ok", max_tokens=1_000_000)
    deep = nested(MAX_METADATA_DEPTH)
    assert w.add("x", metadata=deep).metadata == deep
    assert w.add("x" * 1000, metadata={"b": "y" * 1_047_000}).token_count > 0
    assert w.add("x" * 1_048_576).token_count > 0  # content alone may still take the whole limit
