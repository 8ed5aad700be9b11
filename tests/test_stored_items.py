"""What ``:items`` stores: only what no other key of the window holds (no field twice across
``:items``, ``:attrs``, ``:order`` and ``:pinned``); and a window written by 0.1, which spelled
every field in the item JSON, reads the same and stays true under every kind of write."""

from __future__ import annotations

import json

import redis

import contextstore as cs
from contextstore.core.layout import STORED_HEAD

from support import (
    as_plain,
    check_invariants,
    compact_and_copy_a_fixture_window,
    edit_a_fixture_window,
    key,
    load_window_keys,
    window_fixture,
)

FIXTURE = window_fixture("window_0_1")
BODY_FIELDS = {"added_at_us", "content", "role", "source_ref", "metadata"}
CALL = {"id": "call_9", "type": "function", "function": {"name": "grep", "arguments": "{}"}}


def test_a_stored_item_holds_only_what_no_other_key_holds(store, r, prefix):
    w = store.window("lean", max_tokens=1000)
    w.add("You are terse.", type="system_prompt", pinned=True, priority=90)
    w.add("look this up", type="user_message", role="user", source_ref="chat/1", metadata={"lang": "en"})
    w.add_many(
        [
            {"content": "", "type": "assistant_message", "role": "assistant", "metadata": {"tool_calls": [CALL]}},
            {"content": "found " * 50, "type": "tool_result", "role": "tool", "metadata": {"tool_call_id": "call_9"}},
        ]
    )
    w.add("x = 1", type="code", group="g/1", id="code-1")
    w.update_priority("code-1", 7)
    w.compact("clear_tool_results", target_percent=1.0)
    stored = {k.decode(): v for k, v in r.hgetall(key(prefix, "lean", "items")).items()}
    assert len(stored) == 5
    for iid, raw in stored.items():
        assert raw.startswith(STORED_HEAD.encode()), raw
        assert set(json.loads(raw)) <= BODY_FIELDS, (iid, raw)  # no id, seq, type, tokens, priority, pin, group
    items = {i.id: i for i in w.items()}
    assert items["ctx-1"].pinned and items["ctx-1"].priority == 90 and items["ctx-1"].type is cs.ItemType.SYSTEM_PROMPT
    assert items["ctx-2"].source_ref == "chat/1" and items["ctx-2"].metadata == {"lang": "en"}
    assert items["ctx-3"].group == items["ctx-4"].group == "call_9"
    assert items["ctx-4"].content == "[tool result cleared to save context]" and items["ctx-4"].token_count < 50
    assert items["code-1"].group == "g/1" and items["code-1"].priority == 7 and items["code-1"].seq == 5
    check_invariants(r, prefix, "lean")


def _load_0_1_window(r: redis.Redis, prefix: str, wid: str) -> None:
    """The fixture's keys, as 0.1 wrote them, under this test's prefix."""
    load_window_keys(r, FIXTURE, prefix, wid)


def test_a_window_written_by_0_1_reads_the_same(store, r, prefix):
    _load_0_1_window(r, prefix, "w01")
    w = store.window("w01")
    assert any('"group":null' in v for v in FIXTURE["keys"]["items"]["value"].values())  # the oldest spelling too
    assert as_plain(w.items()) == FIXTURE["items"]
    assert w.build(cs.BuildOptions(max_tokens=3000)) == FIXTURE["build"]
    for sid in FIXTURE["summaries"]:
        assert as_plain(w.archived(sid)) == FIXTURE["archived"][sid]
    assert w.get("ctx-6") is not None and w.get("ctx-6").group == 'g/"q"'
    check_invariants(r, prefix, "w01")


def test_every_write_keeps_a_0_1_window_true(store, r, prefix):
    _load_0_1_window(r, prefix, "w01")
    w = store.window("w01")
    edit_a_fixture_window(w, FIXTURE, pin="ctx-9", unpin="ctx-2", reprioritise="doc/1")
    check_invariants(r, prefix, "w01")
    w.compact("clear_tool_results", target_percent=1.0)
    number = w.stats().compaction_count  # the fixture's compactions, and this one
    assert w.get("ctx-12").metadata["context_cleared"] == {"tokens": 45, "compaction": number}  # a 0.1 result
    popped = w.pop(2)
    assert [p.type for p in popped] == [cs.ItemType.TOOL_RESULT, cs.ItemType.ASSISTANT_MESSAGE]
    assert popped[0].metadata and "context_cleared" in popped[0].metadata
    compact_and_copy_a_fixture_window(store, w, r, prefix, "w01")
