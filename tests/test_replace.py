"""replace(): the newest items (or all) swapped for others in one atomic step."""

from __future__ import annotations

import pytest

import contextstore as cs

from support import dump_window, events
from test_conversations import call, turn


def test_replace_everything(store, r, prefix):
    w = store.window("rep-all", max_tokens=4000)
    w.add("pinned rule", type="instruction", pinned=True)
    turn(w, 1)
    added = w.replace([{"content": "fresh start", "type": "user_message"}, "second"])
    assert added == 2 and [i.content for i in w.items()] == ["fresh start", "second"]
    reasons = [e["reason"] for e in events(r, prefix, "rep-all") if e["event"] == "item_removed"]
    assert reasons == ["replace"] * 5
    assert w.stats().current_tokens == sum(i.token_count for i in w.items()) and w.verify().ok


def test_replace_the_newest_items_reuses_their_ids_and_tool_calls(store):
    w = store.window("rep-suffix", max_tokens=4000)
    w.add("keep me", type="user_message", id="first")
    turn(w, 1)  # question, call call_1_0, its result, an answer
    w.add("last", type="user_message", id="tail")
    # the same call id and caller id again: they are being replaced, so they are free
    w.replace(
        [
            {"content": "", "type": "assistant_message", "metadata": {"tool_calls": [call("call_1_0")]}},
            {"content": "new result", "type": "tool_result", "metadata": {"tool_call_id": "call_1_0"}},
            {"content": "last, reworded", "type": "user_message", "id": "tail"},
        ],
        last=4,
    )
    got = w.items()
    assert [i.content for i in got] == ["keep me", "question 1?", "", "new result", "last, reworded"]
    assert got[2].group == got[3].group == "call_1_0" and got[4].id == "tail"
    assert [i.seq for i in got] == sorted(i.seq for i in got) and w.verify().ok


def test_a_replace_that_does_not_fit_changes_nothing(store, r, prefix):
    w = store.window("rep-full", max_tokens=100, compaction_threshold=100)
    w.add("pinned", type="instruction", pinned=True, token_count=50)
    w.add("other", type="user_message", token_count=30)
    before = dump_window(r, prefix, "rep-full")
    with pytest.raises(cs.ContextWindowFullError):
        w.replace([{"content": "big", "token_count": 60}], last=1)
    with pytest.raises(cs.InvalidItemError):  # a result whose call goes away with the replace
        w.replace([{"content": "r", "type": "tool_result", "metadata": {"tool_call_id": "nope"}}])
    with pytest.raises(cs.InvalidOptionsError):
        w.replace(["x"], last=0)
    assert dump_window(r, prefix, "rep-full") == before


def test_replace_with_nothing_empties_the_newest(store):
    w = store.window("rep-none")
    for n in range(4):
        w.add(f"m{n}", type="user_message")
    assert w.replace([], last=2) == 0
    assert [i.content for i in w.items()] == ["m0", "m1"]


def test_replace_is_exactly_once(store):
    w = store.window("rep-once")
    w.add("a", type="user_message")
    w.replace(["b"], request_id="rq")
    w.add("c", type="user_message")
    assert w.replace(["b"], request_id="rq") == 1  # the recorded answer: nothing replaced again
    assert [i.content for i in w.items()] == ["b", "c"]


def test_replace_of_expected_items_refuses_when_the_window_moved_on(store, r, prefix):
    w = store.window("rep-expect", max_tokens=4000)
    for n in range(4):
        w.add(f"m{n}", type="user_message", role="user")
    ids = [i.id for i in w.items()[2:]]
    w.add("another writer's", type="user_message", role="user")  # the newest items are others now
    before = dump_window(r, prefix, "rep-expect")
    with pytest.raises(cs.VersionConflictError):
        w.replace(["x"], expect_ids=ids)
    with pytest.raises(cs.VersionConflictError):  # the right ids in the wrong order
        w.replace(["x"], expect_ids=[i.id for i in w.items()[-2:]][::-1])
    with pytest.raises(cs.InvalidOptionsError):
        w.replace(["x"], expect_ids=[])
    with pytest.raises(cs.InvalidOptionsError):
        w.replace(["x"], last=1, expect_ids=ids)
    assert dump_window(r, prefix, "rep-expect") == before
    newest = [i.id for i in w.items()[-2:]]
    assert w.replace(["x", "y"], expect_ids=newest) == 2
    assert [i.content for i in w.items()] == ["m0", "m1", "m2", "x", "y"]
    with pytest.raises(cs.VersionConflictError):  # more expected than the window holds
        w.replace(["z"], expect_ids=[i.id for i in w.items()] + ["ctx-99"])
    with pytest.raises(cs.VersionConflictError):  # an empty window holds none of them
        store.window("rep-expect-empty").replace(["z"], expect_ids=["ctx-1"])
