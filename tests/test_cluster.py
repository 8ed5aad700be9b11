"""Redis Cluster: every key of a window is in one slot, so every script runs on one node;
``windows()`` scans every primary. The test builds a 3-primary cluster on 127.0.0.1 from the
bundled redis-server binary and stops it afterwards."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest
import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.crc import key_slot

import contextstore as cs
from contextstore.embedded import find_redis_server

from support import key, open_store

pytestmark = pytest.mark.cluster


def _ports(n: int) -> list[int]:
    """n ports p whose cluster bus port p + 10000 is free too."""
    found: list[int] = []
    while len(found) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p + 10000 > 65535 or p in found:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 10000))
            except OSError:
                continue
        found.append(p)
    return found


@pytest.fixture(scope="module")
def cluster_port() -> Iterator[int]:
    d = tempfile.mkdtemp(prefix="cs-cluster-")
    ports = _ports(3)
    procs = [
        subprocess.Popen(
            [
                find_redis_server(),
                "--port",
                str(p),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                f"nodes-{p}.conf",
                "--dir",
                d,
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for p in ports
    ]
    nodes = [redis.Redis(port=p) for p in ports]
    try:
        deadline = time.monotonic() + 15
        for n in nodes:
            while True:
                try:
                    n.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
        bounds = [0, 5461, 10923, 16384]
        for i, n in enumerate(nodes):
            n.execute_command("CLUSTER", "ADDSLOTS", *range(bounds[i], bounds[i + 1]))
        for p in ports[1:]:
            nodes[0].execute_command("CLUSTER", "MEET", "127.0.0.1", p)
        while not all(n.execute_command("CLUSTER", "INFO").decode().find("cluster_state:ok") >= 0 for n in nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("test cluster did not converge")
            time.sleep(0.05)
        yield ports[0]
    finally:
        for n in nodes:
            n.close()
        for p in procs:
            p.terminate()
            p.wait(10)
        shutil.rmtree(d, ignore_errors=True)


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
