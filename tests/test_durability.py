"""``durability="replicated"`` (WAIT after every write, on the connection that wrote), the retry
policy's deadline, and ``from_url(...?cluster=true)``, on servers the tests start themselves."""

from __future__ import annotations

import logging
import pickle
import time
from collections.abc import Iterator

import pytest
import redis
from cluster_support import LocalCluster

import contextstore as cs
from contextstore.core.retry import RetryPolicy

from support import RedisProcess, key, open_store


@pytest.fixture
def replicated(redis_binary: str) -> Iterator[tuple[RedisProcess, RedisProcess]]:
    """A primary and one replica of it, in sync: the replica has acknowledged a write."""
    primary = RedisProcess(binary=redis_binary).start()
    replica = RedisProcess("--replicaof", "127.0.0.1", str(primary.port), binary=redis_binary).start()
    with redis.Redis(port=primary.port) as c:
        deadline = time.monotonic() + 20
        c.set("replica-probe", 1)  # a WAIT with nothing written counts a replica still syncing
        while c.execute_command("WAIT", 1, 50) != 1:
            assert time.monotonic() < deadline, "replica did not sync"
        c.delete("replica-probe")
    yield primary, replica
    replica.stop()
    primary.stop()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_replicated_write_is_on_the_replica_when_acknowledged(replicated, kind):
    primary, replica = replicated
    with open_store(kind, url=primary.url, prefix="dur", durability="replicated", timeout_ms=5000) as store:
        w = store.window("w", max_items=100)
        items = [w.add(f"message {i}", type="user_message", role="user") for i in range(20)]
        with redis.Redis(port=replica.port) as r:  # read right away: WAIT already saw it there
            assert r.hlen(key("dur", "w", "items")) == 20
            assert r.hget(key("dur", "w", "items"), items[-1].id)
        assert w.pin(items[0].id or "") is True and w.remove(items[1].id or "") is True
        assert w.build()  # reads do not wait


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_write_no_replica_confirms_raises_but_is_applied_once(replicated, kind):
    primary, replica = replicated
    with open_store(kind, url=primary.url, prefix="dur", durability="replicated", timeout_ms=5000) as first:
        first.window("w", max_items=100).add("before")  # loads the scripts: the replica may take >300 ms
    with open_store(kind, url=primary.url, prefix="dur", durability="replicated", timeout_ms=300) as store:
        w = store.window("w", max_items=100)
        replica.stop()
        with pytest.raises(cs.ReplicationTimeoutError) as info:
            w.add("after")
        err = info.value
        assert (err.acknowledged_by, err.required, err.timeout_ms) == (0, 1, 300)
        again = pickle.loads(pickle.dumps(err))
        assert (again.acknowledged_by, again.required, again.timeout_ms, str(again)) == (0, 1, 300, str(err))
        assert [i.content for i in w.items()] == ["before", "after"]  # applied, once
        assert w.verify().ok


@pytest.mark.parametrize("functions", [None, False], ids=["default", "functions=False"])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_read_only_replica_serves_the_reads(replicated, kind, functions):
    """The reads are read-only calls (``FCALL_RO`` where the server has functions, plain reads, an
    ``EVALSHA`` of a script that writes nothing), so a store pointed at a replica reads what the
    primary's store wrote."""
    primary, replica = replicated
    options = {} if functions is None else {"functions": functions}
    with open_store(kind, url=primary.url, prefix="ro", **options) as writer:
        w = writer.window("w", max_tokens=2000)
        w.add("You are terse.", type="system_prompt", pinned=True)
        written = [w.add(f"message {i}", type="user_message", role="user") for i in range(5)]
        want = [(i.id, i.content) for i in w.items()]
    with redis.Redis(port=primary.port) as p:
        offset = p.info("replication")["master_repl_offset"]
    with redis.Redis(port=replica.port) as r:
        deadline = time.monotonic() + 20
        while r.info("replication").get("slave_repl_offset", -1) < offset:
            assert time.monotonic() < deadline, "the replica did not catch up"
            time.sleep(0.05)
        r.config_resetstat()
        with open_store(kind, url=replica.url, prefix="ro", **options) as reader:
            h = reader.handle("w")  # no I/O; window() would create a missing window, a write
            assert reader.window("w", create=False, max_tokens=2000).stats().total_items == 6  # a read
            with pytest.raises(cs.WindowNotFoundError):
                reader.window("missing", create=False)
            assert [(i.id, i.content) for i in h.items()] == want
            assert h.get(written[-1].id or "").content == "message 4"
            assert h.stats().total_items == 6
            assert h.ordered_items()[0].id == want[0][0]  # the pinned system prompt first
            assert [i.id for i in h.snapshot().items] == [i for i, _ in want]
            assert [i.id for i in h.items(limit=2)] == [i for i, _ in want[-2:]]
        calls = {k.removeprefix("cmdstat_") for k, v in r.info("commandstats").items() if v["calls"]}
        old_server = str(r.info("server")["redis_version"]).startswith("6.")
    read_by = "evalsha" if old_server or functions is False else "fcall_ro"
    assert calls & {"fcall", "fcall_ro", "evalsha", "evalsha_ro"} == {read_by}


def test_durability_options_are_checked(redis_url):
    for bad in (
        {"durability": "sync"},
        {"durability": "replicated", "replicas": 0},
        {"durability": "replicated", "timeout_ms": 0},
        {"replicas": 2},
    ):
        with pytest.raises(cs.InvalidOptionsError):
            cs.ContextStore.from_url(redis_url, **bad)
    with pytest.raises(cs.InvalidOptionsError, match="cluster"):
        cs.ContextStore.from_url(redis_url + "?cluster=maybe")


def test_retry_policy_deadline():
    policy = RetryPolicy(attempts=50, base=1.0, cap=1.0, deadline_s=0.5)
    started = time.monotonic()
    assert policy.next_delay(50, started) is None  # attempts spent
    assert 0 <= (policy.next_delay(1, started) or 0) <= 0.5  # never sleeps past the deadline
    assert policy.next_delay(1, started - 0.6) is None  # time spent
    for bad in ({"deadline_s": -1}, {"attempts": 0}, {"deadline_s": True}):
        with pytest.raises(cs.InvalidOptionsError):
            RetryPolicy(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_retries_stop_at_the_deadline(kind, caplog):
    policy = RetryPolicy(attempts=10_000, base=0.01, cap=0.02, deadline_s=0.6)
    server = RedisProcess().start()
    with open_store(kind, url=server.url, retry=policy) as store:
        store.window("w")  # reached: from now on a refused connection is a server that went away
        server.stop()
        with caplog.at_level(logging.DEBUG, logger="contextstore"), pytest.raises(cs.StoreUnavailableError):
            store.window("w")
    retries = [r for r in caplog.records if r.getMessage().startswith("retrying")]
    gave_up = [r.getMessage() for r in caplog.records if r.getMessage().startswith("gave up")]
    assert len(retries) > 5 and len(gave_up) == 1  # many tries, then one give-up
    attempts = int(gave_up[0].split(" after ")[1].split(" attempts")[0])
    assert attempts == len(retries) + 1 < policy.attempts  # the deadline ended them, not the count


@pytest.mark.cluster
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_from_url_with_cluster_true_makes_a_cluster_client(redis_binary, kind):
    cluster = LocalCluster(primaries=3, binary=redis_binary).start()
    try:
        with open_store(kind, url=cluster.url(), prefix="u") as store:
            ids = [f"agent-{i}" for i in range(9)]
            for wid in ids:
                store.window(wid).add(f"hello from {wid}")
            assert store.windows() == sorted(ids)
            assert "Cluster" in type(getattr(store, "_store", store)._client).__name__
        with open_store(kind, url=cluster.url(), prefix="u", durability="replicated", timeout_ms=200) as store:
            with pytest.raises(cs.ReplicationTimeoutError):  # this cluster has no replicas
                store.window("agent-0").add("unreplicated")
            assert [i.content for i in store.window("agent-0").items()][-1] == "unreplicated"
    finally:
        cluster.stop()
