"""Every input of a turn gets an answer, and waiting inputs are bounded.

An input whose turn ended without an answer (an error ended it, its worker died and its lease ran
out, another turn interrupted it) is handed to the next turn, in its ``pending`` ahead of the
queued inputs, and ``turn_status().unanswered`` lists it meanwhile. Inputs wait for a turn in a
queue of at most ``PENDING_MAX_INPUTS`` inputs and ``PENDING_MAX_BYTES`` bytes, each in a field of
its own: past the bound an input is refused (``TurnBusyError``, nothing written). A turn whose
body failed because Redis went away ends with one attempt, not a second wait of the retry policy."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

import contextstore as cs
from contextstore.core.layout import PENDING_MAX_BYTES, PENDING_MAX_INPUTS

from support import RedisProcess, dump_window


def user(text: str) -> dict[str, Any]:
    return {"content": text, "role": "user"}


@pytest.fixture
def store(redis_url: str, prefix: str) -> Any:
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as s:
        yield s


def _crashed_turn(w: Any, question: str) -> Any:
    """A turn whose worker died after its input was stored: its lease (200 ms) runs out."""
    turn = w.turn(input=user(question), lease_ms=200)
    turn.__enter__()
    turn._stop.set()
    turn._renewer.join()
    return turn


def test_the_input_of_a_turn_that_failed_goes_to_the_next_turn(store):
    w = store.window("in-err")
    with pytest.raises(RuntimeError), w.turn(input=user("q1")):
        raise RuntimeError("the model call failed")
    [q1] = [i.id for i in w.items()]
    assert w.turn_status().unanswered == [q1]
    with w.turn(input=user("q2")) as turn:
        assert [i.content for i in turn.pending] == ["q1"]
        turn.add("answers q1 and q2", role="assistant")
    assert w.turn_status().unanswered == []
    with w.turn(input=user("q3")) as turn:
        assert turn.pending == []  # taken over once


def test_the_input_of_a_turn_whose_lease_ran_out_goes_to_the_next_turn(store):
    w = store.window("in-expired")
    _crashed_turn(w, "lost question")
    time.sleep(0.4)
    assert [w.get(i).content for i in w.turn_status().unanswered] == ["lost question"]
    with w.turn(input=user("next question")) as turn:
        assert [i.content for i in turn.pending] == ["lost question"]


def test_inputs_taken_by_a_turn_that_then_failed_go_to_the_next_turn(store):
    w = store.window("in-taken")
    with pytest.raises(RuntimeError), w.turn(input=user("first")) as turn:
        with pytest.raises(cs.TurnQueuedError), w.turn(input=user("meanwhile"), policy="enqueue"):
            pass
        assert [i.content for i in turn.take_pending()] == ["meanwhile"]
        raise RuntimeError("died before answering")
    with w.turn(input=user("later")) as turn:
        assert [i.content for i in turn.pending] == ["first", "meanwhile"]


def test_an_interrupting_turn_takes_over_the_input_and_a_rollback_does_not(store):
    w = store.window("in-int")
    first = w.turn(input=user("q1"), lease_ms=30_000)
    first.__enter__()
    with w.turn(input=user("q2"), policy="interrupt") as second:
        assert [i.content for i in second.pending] == ["q1"]
    first.__exit__(None, None, None)
    w2 = store.window("in-rb")
    first = w2.turn(input=user("q1"), lease_ms=30_000)
    first.__enter__()
    with w2.turn(input=user("q2"), policy="rollback") as second:
        assert second.pending == [] and [i.content for i in w2.items()] == ["q2"]
    first.__exit__(None, None, None)


def test_the_queue_of_waiting_inputs_is_bounded_and_each_waits_in_a_field_of_its_own(store, r, prefix):
    w = store.window("in-queue")
    holder = w.turn(input=user("running"), lease_ms=60_000)
    holder.__enter__()
    try:
        for n in range(PENDING_MAX_INPUTS):
            with pytest.raises(cs.TurnQueuedError), w.turn(input=user(f"input {n}"), policy="enqueue"):
                pass
        key = f"{prefix}:{{in-queue}}:turn"
        sizes = [len(v) for f, v in r.hgetall(key).items() if f.startswith(b"p:")]
        assert len(sizes) == PENDING_MAX_INPUTS and max(sizes) < 300  # no field grows with the queue
        before = dump_window(r, prefix, "in-queue")
        with pytest.raises(cs.TurnBusyError) as ei, w.turn(input=user("one too many"), policy="enqueue"):
            pass
        assert not isinstance(ei.value, cs.TurnQueuedError) and "not stored" in str(ei.value)
        assert dump_window(r, prefix, "in-queue") == before
        assert len(holder.take_pending()) == PENDING_MAX_INPUTS
    finally:
        holder.__exit__(None, None, None)
    big = "x" * 1_000_000  # 8 such inputs fit the queue's bytes, a ninth would not
    holder = w.turn(input=user("running"), lease_ms=60_000)
    holder.__enter__()
    try:
        outcomes = []
        for _ in range(9):
            try:
                with w.turn(input=user(big), policy="enqueue"):
                    pass
            except cs.TurnBusyError as exc:
                outcomes.append(type(exc).__name__)
        assert outcomes == ["TurnQueuedError"] * 8 + ["TurnBusyError"]
        queued = w.turn_status().pending
        assert len(queued) == PENDING_MAX_BYTES // 1_000_000
    finally:
        holder.__exit__(None, None, None)


def test_a_turn_that_failed_on_an_outage_ends_with_one_attempt(redis_binary, caplog):
    server = RedisProcess(binary=redis_binary).start()
    policy = cs.RetryPolicy(attempts=100, base=0.01, cap=0.05, deadline_s=1.0)
    try:
        with cs.ContextStore.from_url(server.url, prefix="out", retry=policy) as store:
            w = store.window("w")
            with (
                caplog.at_level(logging.DEBUG, logger="contextstore"),
                pytest.raises(cs.StoreUnavailableError),
                w.turn(input=user("q"), lease_ms=30_000) as turn,
            ):
                server.stop()
                caplog.clear()
                turn.add("the answer", role="assistant")  # waits out the policy: 1 s
            retried = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retrying ")]
            assert retried and not [m for m in retried if m.startswith("retrying turn ")], retried
    finally:
        server.stop()
