"""Turns under faults (§17): three worker processes answer four conversations whose users send
bursts of two or three messages within one model call, through a fake chat model of random
latency (local HTTP), while one worker is SIGSTOPped past its lease and resumed and another is
SIGKILLed mid-turn (its job handed to a new worker). For each policy, at the end: every
conversation builds a valid OpenAI and Anthropic message list, no user message is lost (a
rolled-back turn's input is gone by design, and named by its event) or answered twice, no
write of a turn that had lost its lease is stored, and ``verify()`` is clean. The same run
without turns shows the anomalies turns prevent, counted and printed."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from typing import Any

import pytest
import redis
from _turn_workers import worker

import contextstore as cs

from _openai_server import FakeChatServer
from chat_rules import check_anthropic, check_openai
from support import PROCESSES

pytestmark = pytest.mark.slow
CONVERSATIONS, WORKERS, LEASE_MS, FEED_S = 4, 3, 1000, 6.0


class Fleet:
    """The worker processes of one run, by name."""

    def __init__(self, redis_url: str, prefix: str, model_url: str, policy: str) -> None:
        self.args = (redis_url, prefix, model_url, policy, LEASE_MS)
        self.procs: dict[str, Any] = {}
        for n in range(WORKERS):
            self.start(f"w{n}")

    def start(self, wid: str) -> None:
        self.procs[wid] = PROCESSES.Process(target=worker, args=(*self.args, wid), daemon=True)
        self.procs[wid].start()

    def stop(self) -> None:
        for p in self.procs.values():
            p.join(30)
            if p.is_alive():
                p.kill()


def _feed(r: redis.Redis, prefix: str, fleet: Fleet, rng: random.Random) -> list[str]:
    """Bursts of user messages for FEED_S seconds; a SIGSTOP past the lease at 2 s, a SIGKILL
    at 4 s (its job back on the list, a new worker in its place). The message ids sent."""
    sent: list[str] = []
    started, stopped, killed = time.monotonic(), False, False
    burst = 0
    while time.monotonic() - started < FEED_S:
        conv, burst = f"c{(burst + rng.randrange(2)) % CONVERSATIONS}", burst + 1  # each gets its bursts
        for _ in range(rng.choice((2, 3))):
            sent.append(f"{conv}-m{len(sent)}")
            r.rpush(f"{prefix}:jobs", f"{conv}|{sent[-1]}")
            time.sleep(rng.uniform(0.03, 0.12))
        elapsed = time.monotonic() - started
        if elapsed > 2 and not stopped:
            stopped = True
            pid = fleet.procs["w0"].pid
            os.kill(pid, signal.SIGSTOP)
            time.sleep(LEASE_MS * 1.6 / 1000)
            os.kill(pid, signal.SIGCONT)
        if elapsed > 4 and not killed:
            killed = True
            fleet.procs["w1"].kill()
            fleet.procs["w1"].join()
            while r.lmove(f"{prefix}:inflight:w1", f"{prefix}:jobs", "LEFT", "RIGHT"):
                pass
            fleet.start("w1b")
        time.sleep(rng.uniform(0.1, 0.4))
    return sent


def _drain(r: redis.Redis, prefix: str) -> None:
    deadline = time.monotonic() + 60
    while r.llen(f"{prefix}:jobs") or any(r.llen(k) for k in r.keys(f"{prefix}:inflight:*")):
        assert time.monotonic() < deadline, "the workers did not finish"
        time.sleep(0.1)


def _sweep(store: cs.ContextStore, policy: str, url: str) -> None:
    """What a next turn does for inputs left waiting: one turn per conversation without input."""
    from _turn_workers import answer

    for n in range(CONVERSATIONS):
        w = store.window(f"c{n}")
        while True:
            try:
                with w.turn(policy="reject", owner="sweeper") as turn:
                    answer(turn, w, url, turn.token, 1)
                break
            except cs.TurnBusyError:
                time.sleep(0.2)


def _run(redis_url: str, prefix: str, policy: str) -> tuple[cs.ContextStore, list[str], list[bytes]]:
    server = FakeChatServer()
    server.mode, server.delay = "jitter", 0.5
    server.start()
    r = redis.Redis.from_url(redis_url)
    store = cs.ContextStore.from_url(redis_url, prefix=prefix)
    for n in range(CONVERSATIONS):
        store.window(f"c{n}", max_items=1000)
    fleet = Fleet(redis_url, prefix, server.base_url, policy)
    try:
        sent = _feed(r, prefix, fleet, random.Random(policy))
        _drain(r, prefix)
        if policy != "none":
            _sweep(store, policy, server.base_url)
    finally:
        r.set(f"{prefix}:stop", 1)
        fleet.stop()
        server.stop()
    return store, sent, r.lrange(f"{prefix}:errors", 0, -1)


def _answers(items: list[Any]) -> Counter[str]:
    return Counter(a for i in items if i.role == "assistant" for a in (i.metadata or {}).get("answers", []))


def _check_fencing(w: Any, items: list[Any]) -> int:
    """Every item a turn wrote was added while that turn held the lease (its item_added event
    comes between its turn_started and the next turn's start or its end); how many checked."""
    turn_of = {i.id: (i.metadata or {}).get("turn") for i in items}
    holder, checked = None, 0
    for e in w.events("0"):
        if e.kind == "turn_started":
            holder = e.token
        elif e.kind == "turn_ended" and e.token == holder:
            holder = None
        elif e.kind == "item_added" and turn_of.get(e.item_id):
            assert turn_of[e.item_id] == holder, f"{e.item_id} written by {turn_of[e.item_id]} while {holder} ran"
            checked += 1
    return checked


@pytest.mark.parametrize("policy", ["reject", "enqueue", "interrupt", "rollback"])
def test_turns_under_faults_keep_every_conversation_whole(redis_url, prefix, policy, one_server):
    store, sent, errors = _run(redis_url, prefix, policy)
    assert errors == []
    checked = 0
    for n in range(CONVERSATIONS):
        w = store.window(f"c{n}")
        check_openai(w.build_messages())
        check_anthropic(w.build_messages(format="anthropic"))
        items = w.items()
        rolled = {i for e in w.events("0") if e.kind == "turn_rolled_back" for i in e.item_ids.split()}
        mine = {m for m in sent if m.startswith(f"c{n}-")}
        stored = {i.id for i in items if i.role == "user"}
        assert mine - stored - rolled == set(), "user messages lost"
        answered = _answers(items)
        assert max(answered.values(), default=1) == 1, "a user message answered twice"
        assert stored - set(answered) == set(), "user messages never answered"
        written = sum(1 for i in items if (i.metadata or {}).get("turn"))
        assert _check_fencing(w, items) == written  # each stored write of a turn was checked
        checked += written
        assert w.verify().ok
    assert checked >= CONVERSATIONS  # every conversation got answers through turns
    if policy == "rollback":
        windows = [store.window(f"c{n}") for n in range(CONVERSATIONS)]
        assert any(e.kind == "turn_rolled_back" for w in windows for e in w.events("0"))
    store.close()


def test_without_turns_the_same_run_shows_the_anomalies(redis_url, prefix, capsys, one_server):
    store, sent, errors = _run(redis_url, prefix, "none")
    twice = unanswered = invalid = 0
    for n in range(CONVERSATIONS):
        w = store.window(f"c{n}")
        items = w.items()
        answered = _answers(items)
        twice += sum(1 for c in answered.values() if c > 1)
        unanswered += sum(1 for i in items if i.role == "user" and i.id not in answered)
        try:
            check_openai(w.build_messages())
        except AssertionError:
            invalid += 1
    with capsys.disabled():
        print(f"\nwithout turns: {len(sent)} user messages, {twice} answered twice, {unanswered} never answered, "
              f"{invalid} of {CONVERSATIONS} conversations invalid for OpenAI, {len(errors)} errors")  # fmt: skip
    assert twice + unanswered + invalid > 0, "the run shows no anomaly: it would not detect what turns prevent"
    store.close()
