"""Whole-window reads with plain commands (one MULTI/EXEC; plans/reads.py ``_plain``): the same
answers as the scripts' paged reads, for windows whose config keeps them within one page."""

from __future__ import annotations

import random

import pytest
import redis

import contextstore as cs
from contextstore.plans import reads

from support import on_cluster
from test_conversations import turn


def _fill(w, rng: random.Random) -> None:
    for n in range(rng.randint(5, 40)):
        kind = rng.random()
        if kind < 0.2:
            turn(w, n)
        elif kind < 0.3:
            w.add(f"doc {n} " * rng.randint(1, 30), type="retrieved_document", pinned=rng.random() < 0.3)
        else:
            w.add(f"note {n} [x] " * rng.randint(1, 20), type=rng.choice(["code", "text", "user_message"]),
                  priority=rng.randint(0, 100), group=rng.choice([None, None, f"g{n % 3}"]))  # fmt: skip
    if rng.random() < 0.5:
        w.update_priority(w.items()[0].id, 7)
        w.pin(w.items()[-1].id)


def _reads(store, wid):
    w = store.window(wid)
    opts = cs.BuildOptions(max_tokens=400, reserve_for_response=0)
    return (
        w.items(),
        w.ordered_items(),
        w.snapshot().items,
        w.build_structured(opts),
        w.build_messages_structured(opts),
    )


@pytest.mark.parametrize("seed", range(6))
def test_plain_reads_answer_as_the_scripts_do(make_store, redis_url, monkeypatch, seed):
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts")
    rng = random.Random(seed)
    writer = make_store()
    _fill(writer.window(f"pr{seed}", max_tokens=20_000), rng)
    plain = _reads(make_store(), f"pr{seed}")  # a fresh store: nothing cached
    monkeypatch.setattr(reads, "_plain_fits", lambda state: False)
    scripted = _reads(make_store(), f"pr{seed}")
    assert plain == scripted


def test_a_cold_read_is_one_transaction_without_a_script(redis_url, prefix):
    if on_cluster(redis_url):
        pytest.skip("counts one server's commands")
    r = redis.Redis.from_url(redis_url)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("plain", max_tokens=10_000)
        w.add_many([f"message {n}" for n in range(50)])
        r.config_resetstat()
        assert len(store.window("plain").items()) == 50
        stats = r.info("commandstats")
        scripts = sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "fcall", "fcall_ro"))
        assert stats["cmdstat_exec"]["calls"] == 1 and stats["cmdstat_hgetall"]["calls"] == 3
        assert scripts == 1  # window(): the ensure script; the read itself ran none
        unbounded = store.window("unbounded", max_items=100)  # no max_tokens: no bound on its size
        unbounded.add("x")
        r.config_resetstat()
        unbounded.items()
        assert "cmdstat_exec" not in r.info("commandstats")
    r.close()
