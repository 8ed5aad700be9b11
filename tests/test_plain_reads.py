"""Whole-window reads with plain commands (one MULTI/EXEC; plans/reads.py ``plain_whole``): the same
answers as the scripts' paged reads, for windows whose config keeps them within one page."""

from __future__ import annotations

import random
from typing import Any

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


def _never_plain(*args: Any) -> Any:
    """``plain_ok`` (False) for a store that always reads with scripts (a plan that makes no call)."""
    return False
    yield


@pytest.mark.parametrize("seed", range(6))
def test_plain_reads_answer_as_the_scripts_do(make_store, redis_url, monkeypatch, seed):
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts")
    rng = random.Random(seed)
    writer = make_store()
    _fill(writer.window(f"pr{seed}", max_tokens=20_000), rng)
    plain = _reads(make_store(), f"pr{seed}")  # a fresh store: nothing cached
    monkeypatch.setattr(reads, "plain_ok", _never_plain)
    scripted = _reads(make_store(), f"pr{seed}")
    assert plain == scripted


def test_a_cold_read_is_one_transaction_without_a_script(redis_url, prefix):
    """The meta, :items, :attrs and :pinned, as stored: the client puts the arrival and the build
    order together from the attrs, so neither :fifo nor :order is sent."""
    if on_cluster(redis_url):
        pytest.skip("counts one server's commands")
    r = redis.Redis.from_url(redis_url)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("plain", max_tokens=10_000)
        w.add_many([{"content": f"message {n}", "priority": n % 7, "type": ("code", "text", "instruction")[n % 3]}
                    for n in range(50)])  # fmt: skip
        w.update_priority("ctx-5", 99)
    for read in (lambda w: w.items(), lambda w: w.ordered_items()):
        with cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:  # nothing cached
            r.config_resetstat()
            got = read(fresh.window("plain"))
            stats = r.info("commandstats")
        assert len(got) == 50
        assert stats["cmdstat_exec"]["calls"] == 1 and stats["cmdstat_hgetall"]["calls"] == 3, stats
        assert "cmdstat_zrange" not in stats and "cmdstat_lrange" not in stats, stats
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:
        w = fresh.window("plain")
        assert [i.id for i in w.items()] == [x.decode() for x in r.lrange(w._state.keys.fifo, 0, -1)]
        assert [i.id for i in w.ordered_items()] == [x.decode() for x in r.zrange(w._state.keys.order, 0, -1)]
    r.close()


def test_a_plain_read_of_an_item_without_attrs_reports_the_window_corrupt(redis_url, prefix):
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts")
    r = redis.Redis.from_url(redis_url)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("torn", max_tokens=10_000)
        w.add_many(["one", "two", "three"])
        r.hdel(w._state.keys.attrs, "ctx-2")
    fresh = cs.ContextStore.from_url(redis_url, prefix=prefix)
    with fresh, pytest.raises(cs.CorruptWindowError, match="ctx-2"):
        fresh.window("torn").items()
    r.close()


def _script_calls(stats: dict[str, Any]) -> int:
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "fcall", "fcall_ro"))


def test_a_window_its_config_does_not_bound_is_asked_its_size_then_read_plainly(redis_url, prefix, monkeypatch):
    """No ``max_tokens`` (the default): the read asks the stored tokens and item count (one
    HMGET of :meta) and reads plainly while they are within one page, with scripts beyond."""
    if on_cluster(redis_url):
        pytest.skip("counts one server's commands")
    r = redis.Redis.from_url(redis_url)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        unbounded = store.window("unbounded", max_items=100)
        unbounded.add_many([f"message {n}" for n in range(5)])
        store.load_scripts()  # counted calls find every script loaded, whatever ran before (NOSCRIPT)
    for page_ids, plain in ((5, True), (4, False)):  # 5 items: within a page of 5 ids, not of 4
        monkeypatch.setattr(reads, "PAGE_IDS", page_ids)
        with cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:  # nothing cached
            w = fresh.handle("unbounded")
            r.config_resetstat()
            assert [i.content for i in w.items()] == [f"message {n}" for n in range(5)]
            stats = r.info("commandstats")
            assert stats["cmdstat_exec"]["calls"] == (2 if plain else 1), stats  # the size, then the read if plain
            assert (_script_calls(stats) == 0) is plain, stats  # beyond a page: read in pages by list.lua
            r.config_resetstat()
            built = w.build_messages_structured(cs.BuildOptions(max_tokens=10_000, reserve_for_response=0))
            assert len(built.included_item_ids) == 5
            stats = r.info("commandstats")
            assert _script_calls(stats) == 1, stats  # the built event: a build reads its facts and bodies plainly
    r.close()


def test_a_script_read_of_most_of_a_small_hash_reads_it_whole(redis_url, prefix, monkeypatch):
    """A small hash of short values is a listpack, where HMGET finds each field by a scan (n^2 for
    most of its fields): the read scripts read :items and :attrs of such a window with one HGETALL each."""
    if on_cluster(redis_url):
        pytest.skip("counts one server's commands")
    r = redis.Redis.from_url(redis_url)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        store.window("small", max_items=100).add_many([f"message {n}" for n in range(40)])
    monkeypatch.setattr(reads, "plain_ok", _never_plain)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:
        r.config_resetstat()
        assert [i.content for i in fresh.handle("small").items()] == [f"message {n}" for n in range(40)]
    stats = r.info("commandstats")
    assert stats["cmdstat_hgetall"]["calls"] == 3, stats  # :meta, :items, :attrs
    assert "cmdstat_hmget" not in stats, stats
    r.close()


def test_a_clusters_plain_read_in_commands_lua_answers_as_the_transaction_does(r, prefix):
    """A cluster's client runs a plain read as one call of commands.lua (``scripted_read``):
    every command a plan sends answers as in the MULTI/EXEC, an HMGET of more fields than
    Lua's unpack takes too, and a key of another type reports the window corrupt."""
    from contextstore.drivers.plain_reads import plain_read, scripted_read
    from contextstore.drivers.scripts import ScriptRegistry

    h, s, z, lst = (f"{prefix}:{{cmd}}:{n}" for n in ("h", "s", "z", "l"))
    r.hset(h, mapping={f"f{n}": f"v{n}" for n in range(2500)})
    r.sadd(s, "a", "b")
    r.zadd(z, {"x": 1, "y": 5})
    r.rpush(lst, *range(50))
    fields = [f"f{n}" for n in range(0, 18_000, 2)]  # 9000, over what unpack takes; most missing
    commands = (
        ("HGETALL", h), ("SMEMBERS", s), ("HSCAN", h, 0, "COUNT", 10), ("HMGET", h, *fields),
        ("LRANGE", lst, -7, -1), ("ZRANGEBYSCORE", z, "-inf", "(5"),
    )  # fmt: skip
    scripts = ScriptRegistry(r)
    expected = plain_read(r, commands)
    got = scripted_read(commands, None, scripts)
    cursor, scanned = got[2]  # where a scan stands may differ between two calls (rehashing)
    assert isinstance(cursor, int) and cursor > 0 and scanned and scanned.items() <= expected[0].items()
    assert got[:2] == expected[:2] and got[3:] == expected[3:]
    assert got[3].count(None) == 9000 - 1250
    r.set(f"{prefix}:{{cmd}}:str", "x")
    with pytest.raises(cs.CorruptWindowError) as caught:
        scripted_read((("SMEMBERS", s), ("HGETALL", f"{prefix}:{{cmd}}:str")), None, scripts)
    assert caught.value.key.endswith(":str")
