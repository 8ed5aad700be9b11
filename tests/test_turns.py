"""Turn leases (§17): ``win.turn(...)`` takes the window's lease with its input in one call;
writes through the turn carry its fencing token and are refused (``TurnLostError``, nothing
stored) once the lease ran out or was taken over; a second turn is rejected, enqueued,
interrupts or rolls back the first; compaction never touches a running turn's items. Each test
runs the sync API and the asyncio one against every server of the matrix."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest

import contextstore as cs

from support import dump_window

USER = {"type": "user_message", "role": "user"}
ASSISTANT = {"type": "assistant_message", "role": "assistant"}


def user(text: str) -> dict[str, Any]:
    return {"content": text, **USER}


def kinds(w: Any) -> list[str]:
    return [e.kind for e in w.events("0") if e.kind.startswith("turn_")]


def contents(w: Any) -> list[str]:
    return [i.content for i in w.items()]


@pytest.fixture
def sync_store(redis_url: str, prefix: str) -> Any:
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as s:
        yield s


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_turn_starts_with_its_input_writes_and_ends(sync_store):
    w = sync_store.window("t", max_tokens=10_000)
    with w.turn(input=user("hi"), owner="worker-1") as turn:
        assert [i.content for i in turn.items] == ["hi"] and turn.pending == []
        answer = turn.add("hello", **ASSISTANT)
        assert w._store._client.hget(w._state.keys.turn, "token").decode() == turn.token
    assert contents(w) == ["hi", "hello"] and answer.id == turn.items[-1].id
    assert kinds(w) == ["turn_started", "turn_ended"]
    ended = next(e for e in w.events("0") if e.kind == "turn_ended")
    assert (ended.owner, ended.outcome, ended.item_ids) == ("worker-1", "ok", f"{turn.items[0].id} {answer.id}")
    assert w._store._client.hget(w._state.keys.turn, "token") is None
    with w.turn(input="next") as again:  # the lease is free again
        assert again.token != turn.token
    assert w.verify().ok


def _items_and_lease(r: Any, prefix: str) -> dict[bytes, Any]:
    """The window's keys but the event stream and the request log (a conflict is an event)."""
    return {
        k: v for k, v in dump_window(r, prefix, "t").items() if not k.endswith((b":events", b":requests", b":replies"))
    }


def test_reject_raises_busy_and_writes_nothing_but_its_event(sync_store, r, prefix):
    w = sync_store.window("t")
    with w.turn(input=user("first"), owner="a"):
        before = _items_and_lease(r, prefix)
        with pytest.raises(cs.TurnBusyError) as info, w.turn(input=user("second"), owner="b"):
            pytest.fail("a rejected turn's body must not run")
        assert (info.value.owner, 0 < info.value.retry_after_ms <= 30_000) == ("a", True)
        assert _items_and_lease(r, prefix) == before
    conflict = [e for e in w.events("0") if e.kind == "turn_conflict"]
    assert [(e.outcome, e.holder) for e in conflict] == [("rejected", "a")]


def test_enqueued_inputs_are_taken_once_by_the_running_turn_or_the_next(sync_store):
    w = sync_store.window("t")
    with w.turn(input=user("q1"), owner="a") as turn:
        for text in ("q2", "q3"):
            with pytest.raises(cs.TurnQueuedError) as info, w.turn(policy="enqueue", input=user(text)):
                pytest.fail("an enqueued caller has no turn to run")
        assert info.value.pending == 2 and contents(w) == ["q1"]
        assert [i.content for i in turn.take_pending()] == ["q2", "q3"]
        assert turn.take_pending() == []  # each is taken once
        turn.add("a1-3", **ASSISTANT)
        with pytest.raises(cs.TurnQueuedError), w.turn(policy="enqueue", input=user("q4")):
            pass
    assert turn.pending_left == 1
    with w.turn(input=user("q5")) as nxt:  # the next turn takes what waits, ahead of its own input
        assert [i.content for i in nxt.pending] == ["q4"]
    assert contents(w) == ["q1", "q2", "q3", "a1-3", "q4", "q5"]


def test_interrupt_fences_the_running_turn_off_and_keeps_what_it_wrote(sync_store):
    w = sync_store.window("t")
    with w.turn(input=user("q1"), owner="slow") as slow:
        slow.add("partial", **ASSISTANT)
        with w.turn(policy="interrupt", input=user("q2"), owner="fast") as fast:
            with pytest.raises(cs.TurnLostError) as info:
                slow.add("too late", **ASSISTANT)
            assert info.value.reason == "taken over" and slow.lost
            fast.add("a2", **ASSISTANT)
    assert contents(w) == ["q1", "partial", "q2", "a2"]
    interrupted = next(e for e in w.events("0") if e.kind == "turn_interrupted")
    assert (interrupted.owner, interrupted.by) == ("slow", "fast")
    assert interrupted.item_ids.split() == [i.id for i in slow.items]
    assert [e.outcome for e in w.events("0") if e.kind == "turn_conflict"] == ["lost"]


def test_rollback_removes_what_the_running_turn_wrote_tool_calls_with_their_results(sync_store):
    w = sync_store.window("t")
    w.add("before", **USER)
    with w.turn(input=user("q1"), owner="slow") as slow:
        calls = [{"id": "call-1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
        slow.add("", **ASSISTANT, metadata={"tool_calls": calls})
        slow.add("result", type="tool_result", role="tool", metadata={"tool_call_id": "call-1"})
        with w.turn(policy="rollback", input=user("q1 again"), owner="fast"):
            assert contents(w) == ["before", "q1 again"]
            with pytest.raises(cs.TurnLostError):
                slow.add("late", **ASSISTANT)
    rolled = next(e for e in w.events("0") if e.kind == "turn_rolled_back")
    assert sorted(rolled.item_ids.split()) == sorted(i.id for i in slow.items)
    assert {e.reason for e in w.events("0") if e.kind == "item_removed"} == {"rollback"}
    assert w.verify().ok and w.build_messages()[-1]["content"] == "q1 again"


def test_a_turn_past_its_lease_cannot_write_after_it_wakes(sync_store):
    w = sync_store.window("t")
    turn = w.turn(input=user("q1"), lease_ms=300, owner="paused")
    turn.__enter__()
    turn._stop.set()  # what a SIGSTOP does to the renewer: the lease runs out
    time.sleep(0.5)
    with w.turn(input=user("q2"), owner="next"):
        pass
    with pytest.raises(cs.TurnLostError) as info:
        turn.add("stale answer", **ASSISTANT)
    assert info.value.reason == "expired"
    turn.__exit__(None, None, None)
    assert turn.lost and "stale answer" not in contents(w)


def test_the_renewer_keeps_a_long_turn_and_writes_renew_the_lease(sync_store):
    w = sync_store.window("t")
    with w.turn(input=user("q"), lease_ms=300) as turn:
        time.sleep(1.0)  # three leases long: renewed meanwhile
        turn.add("answer", **ASSISTANT)
        with pytest.raises(cs.TurnBusyError), w.turn(input=user("other")):
            pass
    assert not turn.lost and contents(w) == ["q", "answer"]


def test_compaction_never_touches_a_running_turns_items(sync_store):
    w = sync_store.window("t", max_tokens=1000, default_strategy="remove_oldest")
    w.add_many([{"content": f"old {i}", **USER} for i in range(5)])
    with w.turn(input=user("mine " * 40)) as turn:
        turn.add("my answer " * 40, **ASSISTANT)
        w.compact(target_percent=0)
        assert [i.content for i in w.items()] == [i.content for i in turn.items]
    w.compact(target_percent=0)  # ended: compaction may take them now
    assert w.items() == []


def test_an_error_in_the_body_ends_the_turn_with_outcome_error(sync_store):
    w = sync_store.window("t")
    with pytest.raises(RuntimeError), w.turn(input=user("q")):
        raise RuntimeError("model failed")
    assert [e.outcome for e in w.events("0") if e.kind == "turn_ended"] == ["error"]
    with w.turn(input=user("retry")):
        pass


def test_bad_turn_arguments_are_refused_before_any_call(sync_store, r, prefix):
    w = sync_store.window("t")
    for bad in ({"policy": "queue"}, {"lease_ms": 10}, {"owner": "has space"}, {"owner": "a,b"}):
        with pytest.raises(cs.InvalidOptionsError):
            w.turn(**bad)
    assert kinds(w) == []


def test_the_asyncio_turn_does_the_same(redis_url, prefix):
    async def go() -> None:
        store = cs.AsyncContextStore.from_url(redis_url, prefix=prefix)
        try:
            w = await store.window("t")
            async with w.turn(input=user("q1"), owner="a") as turn:
                with pytest.raises(cs.TurnBusyError):
                    async with w.turn(input=user("x"), owner="b"):
                        pass
                with pytest.raises(cs.TurnQueuedError):
                    async with w.turn(policy="enqueue", input=user("q2")):
                        pass
                assert [i.content for i in await turn.take_pending()] == ["q2"]
                await turn.add("a", **ASSISTANT)
                async with w.turn(policy="rollback", input=user("q3"), owner="c"):
                    with pytest.raises(cs.TurnLostError):
                        await turn.add("late", **ASSISTANT)
            assert [i.content for i in await w.items()] == ["q3"]
            assert (await w.verify()).ok
        finally:
            await store.close()

    run(go())


def test_show_prints_the_running_turn_and_the_inputs_waiting(sync_store, redis_url, prefix, capsys):
    from test_cli import run as run_cli

    w = sync_store.window("t")
    code, out, _ = run_cli(capsys, "--url", redis_url, "--prefix", prefix, "show", "t")
    assert code == 0 and "turn running" not in out and "pending input" not in out
    with w.turn(input=user("q1"), owner="worker-7"):
        with pytest.raises(cs.TurnQueuedError), w.turn(policy="enqueue", input=user("and another thing\nmore")):
            pass
        code, out, _ = run_cli(capsys, "--url", redis_url, "--prefix", prefix, "show", "t")
    assert code == 0
    assert re.search(r"turn running for \d+\.\d s by worker-7 \(policy reject, lease \d+\.\d s left, 1 items", out)
    assert "pending input: 'and another thing'" in out


def test_turn_status_names_the_running_turn_and_the_inputs_waiting(sync_store, redis_url, prefix):
    w = sync_store.window("t")
    assert w.turn_status().owner == "" and w.turn_status().pending == []
    with w.turn(input=user("q1"), owner="worker-7", lease_ms=20_000) as turn:
        with pytest.raises(cs.TurnQueuedError), w.turn(policy="enqueue", input=user("q2")):
            pass
        status = w.turn_status()
        assert (status.owner, status.policy, status.item_ids, status.pending) == (
            "worker-7",
            "reject",
            [turn.items[0].id],
            ["q2"],
        )
        assert 0 < status.lease_left_ms <= 20_000 and status.started_ms_ago >= 0

    async def go() -> None:
        store = cs.AsyncContextStore.from_url(redis_url, prefix=prefix)
        try:
            aw = await store.window("t")
            assert (await aw.turn_status()).owner == ""
            async with aw.turn(owner="worker-8"):
                assert (await aw.turn_status()).owner == "worker-8"
        finally:
            await store.close()

    run(go())
