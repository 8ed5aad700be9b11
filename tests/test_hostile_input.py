"""Hostile input at every public entry: lone surrogates (which no UTF-8 encoder takes), metadata
nested deeper than the documented bound or larger than the item's size limit, control
characters in the ids, groups and roles that reach terminals and logs. Each is refused with a
typed error (a ``ContextStoreError``, also a ``ValueError``) and the window's keys stay byte for
byte as they were."""

from __future__ import annotations

from typing import Any

import msgspec
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
        "build order": lambda: w.build(cs.BuildOptions(order=SURROGATE)),  # type: ignore[arg-type]
        "configure": lambda: w.configure(default_strategy=SURROGATE),
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


# -- snapshots that would break a window later: refused whole, nothing written ----------------------

CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _snapshot_of(store: Any) -> cs.ContextSnapshot:
    w = store.window("snap-src", max_tokens=100_000)
    w.add_many(
        [
            {"content": "q", "role": "user"},
            {"content": "", "role": "assistant", "metadata": {"tool_calls": [CALL]}},
            {"content": "r", "role": "tool", "metadata": {"tool_call_id": "call_1"}},
            {"content": "mine", "id": "caller-1"},
        ]
    )
    return w.snapshot()


def _with_item(snap: cs.ContextSnapshot, index: int, **changes: Any) -> cs.ContextSnapshot:
    items = list(snap.items)
    items[index] = msgspec.structs.replace(items[index], **changes)
    return msgspec.structs.replace(snap, items=items)


def _bad_snapshots(snap: cs.ContextSnapshot) -> dict[str, cs.ContextSnapshot]:
    second_call = msgspec.structs.replace(snap.items[1], id="ctx-9", seq=9)
    return {
        "a generated id that is not its seq": _with_item(snap, 0, id="ctx-7"),
        "a summary id that is not its seq": _with_item(snap, 0, id="ctx-4.1"),
        "a seq past the score's range": _with_item(snap, 3, seq=10**13),
        "a caller id with ESC": _with_item(snap, 3, id="a\x1bb"),
        "a caller id with a space": _with_item(snap, 3, id="a b"),
        "a tool call id twice": msgspec.structs.replace(snap, items=[*snap.items, second_call]),
        "a result without its call": msgspec.structs.replace(snap, items=[snap.items[0], *snap.items[2:]]),
        "a result in another group": _with_item(snap, 2, group="elsewhere"),
        "metadata over the size limit": _with_item(snap, 3, metadata={"b": "x" * 1_100_000}),
        "a config out of range": msgspec.structs.replace(snap, max_tokens=0),
    }


BAD_SNAPSHOTS = [
    "a generated id that is not its seq", "a summary id that is not its seq", "a seq past the score's range",
    "a caller id with ESC", "a caller id with a space", "a tool call id twice", "a result without its call",
    "a result in another group", "metadata over the size limit", "a config out of range",
]  # fmt: skip


@pytest.mark.parametrize("case", BAD_SNAPSHOTS)
def test_a_restore_that_would_break_the_window_is_refused_and_writes_nothing(store, r, prefix, case):
    bad = _bad_snapshots(_snapshot_of(store))[case]
    w = store.window("snap-dst", max_tokens=100_000)
    w.add("already here")
    before = dump_window(r, prefix, "snap-dst")
    with pytest.raises(cs.ContextStoreError) as ei:
        w.restore(bad)
    assert isinstance(ei.value, ValueError), ei.value
    assert dump_window(r, prefix, "snap-dst") == before


def test_a_restored_window_keeps_taking_adds(store):
    snap = _snapshot_of(store)
    w = store.window("snap-ok")
    w.restore(snap)
    ids = [w.add(f"new {i}").id for i in range(6)]
    assert not {i.id for i in snap.items} & set(ids)  # no add lands on a restored id
    assert w.verify().ok and len(w.items()) == len(snap.items) + 6


def test_import_checks_every_file_before_writing_any(redis_url, prefix, r, tmp_path):
    from contextstore import cli

    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        snap = _snapshot_of(store)
    good = msgspec.structs.replace(snap, window_id="imp-a")
    bad_files = {
        "an invalid window id": msgspec.structs.replace(snap, window_id="imp{b}"),
        "2 MB of content": _with_item(msgspec.structs.replace(snap, window_id="imp-b"), 3, content="x" * 2_000_000),
        "max_tokens 0": msgspec.structs.replace(snap, window_id="imp-b", max_tokens=0),
        "a tool call twice": msgspec.structs.replace(
            snap, window_id="imp-b", items=[*snap.items, msgspec.structs.replace(snap.items[1], id="ctx-9", seq=9)]
        ),
    }
    for name, bad in bad_files.items():
        folder = tmp_path / name.replace(" ", "-")
        folder.mkdir()
        (folder / "1.json").write_bytes(msgspec.json.encode(good))
        (folder / "2.json").write_bytes(msgspec.json.encode(bad))
        assert cli.main(["--url", redis_url, "--prefix", prefix, "import", str(folder)]) == 2, name
        assert not r.exists(f"{prefix}:{{imp-a}}:meta"), f"{name}: imp-a was written"


def _packed_restore_args(store, w, snap) -> tuple[list, int]:
    """The arguments restore() sends for ``snap`` and where its packed item rows are."""
    from contextstore.core import layout
    from contextstore.plans import snapshot as snapshot_plans

    plan = snapshot_plans.restore(store._settings, w._state, snap)
    call = next(plan)
    plan.close()
    assert call.name == "restore"
    return list(call.args), 2 * len(layout.Meta.CONFIG) + 2  # after both configs, the staged count, the count


@pytest.mark.parametrize(
    "packed",
    [b'{"a": 1}', b"[]", b'[["only", "two"]]', b"[[1,2,3,4,5,6,7,8,9,10]]", b"not json", None],
    ids=["an object", "no rows", "a short row", "numbers", "not JSON", "rows missing"],
)
def test_the_restore_script_refuses_packed_rows_no_client_sends(store, r, prefix, packed):
    """The server checks the packed rows itself (a foreign or corrupt caller), before any write."""
    from contextstore.plans.base import ScriptCall

    w = store.window("snap-raw", max_tokens=100_000)
    w.add("already here")
    args, at = _packed_restore_args(store, w, _snapshot_of(store))
    args = args[:at] + args[at + 1 :] if packed is None else [*args[:at], packed, *args[at + 1 :]]
    before = dump_window(r, prefix, "snap-raw")

    def raw() -> Any:
        return (yield ScriptCall("restore", w._state.keys, args, "restore:raw"))

    reply = store._run(raw())
    assert reply[0] in (b"!", "!") and reply[1] in (b"BADARG", "BADARG"), reply
    assert dump_window(r, prefix, "snap-raw") == before
