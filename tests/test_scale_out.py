"""Redis Cluster under load: a slow slot migration and a kill -9 failover while four writer
processes (two sync, two asyncio, the default retry policy) add to busy windows. No error may
reach a caller, no acknowledged write may be lost or applied twice, and ``verify()`` stays
clean. Each test starts its own cluster on 127.0.0.1 from the bundled redis-server and stops it."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from _cluster_workers import read_journals, writer
from cluster_support import LocalCluster, slot_of_window

import contextstore as cs

from support import PROCESSES, key

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
APIS = ("sync", "async", "sync", "async")


@pytest.fixture
def cluster(redis_binary: str) -> Iterator[LocalCluster]:
    c = LocalCluster(primaries=3, replicas=1, node_timeout_ms=2000, binary=redis_binary).start()
    yield c
    c.stop()


class Writers:
    """Four writer processes adding to ``window_ids`` until stopped."""

    def __init__(self, url: str, prefix: str, window_ids: list[str], tmp: Any, **options: Any) -> None:
        self.stop = PROCESSES.Event()
        first = len(os.listdir(tmp))  # writers of a later batch add other contents
        self.journals = [str(tmp / f"journal-{first + w}.txt") for w in range(len(APIS))]
        self.procs = [
            PROCESSES.Process(
                target=writer, args=(url, prefix, window_ids, first + w, api, self.journals[w], self.stop, options)
            )
            for w, api in enumerate(APIS)
        ]

    def __enter__(self) -> Writers:
        for p in self.procs:
            p.start()
        deadline = time.monotonic() + 60
        while sum(self._lines(j) for j in self.journals if os.path.exists(j)) < 40:  # all under way
            assert time.monotonic() < deadline, "writers did not start"
            time.sleep(0.05)
        return self

    @staticmethod
    def _lines(path: str) -> int:
        with open(path) as fh:
            return sum(1 for _ in fh)

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        for p in self.procs:
            p.join(120)
            if p.is_alive():
                p.kill()
        assert all(p.exitcode == 0 for p in self.procs), [p.exitcode for p in self.procs]

    def outcomes(self) -> dict[str, list[tuple[str, ...]]]:
        return read_journals(self.journals)


def _check_windows(store: cs.ContextStore, acked: list[tuple[str, ...]], window_ids: list[str]) -> None:
    """Every acknowledged add is in its window exactly once; ``verify()`` is clean."""
    for wid in window_ids:
        w = store.window(wid)
        contents = Counter(i.content for i in w.items())
        twice = [c for c, n in contents.items() if n > 1]
        assert not twice, f"{wid}: applied twice: {twice[:5]}"
        lost = [c for w_id, c, _ in acked if w_id == wid and c not in contents]
        assert not lost, f"{wid}: acknowledged but lost: {lost[:5]}"
        report = w.verify()
        assert report.ok, report.problems


def test_slow_slot_migration_under_load_reaches_no_caller(cluster: LocalCluster, tmp_path: Any) -> None:
    prefix, ids = "mig", ["busy-pinned", "busy-plain", "was-idle"]
    with cs.ContextStore.from_url(cluster.url(), prefix=prefix) as store:
        for wid in ids:
            store.window(wid, max_items=1000).add(f"{wid} starts", pinned=wid == "busy-pinned")
        raw = store._client
        # what 15 idle minutes do to a window: its request log expires (see docs/scaling.md)
        raw.delete(key(prefix, "was-idle", "requests"), key(prefix, "was-idle", "replies"))
        assert not raw.exists(key(prefix, "busy-plain", "pinned"))
        with Writers(cluster.url(), prefix, ids, tmp_path) as writers:
            moved = 0
            for wid in ids:
                slot = slot_of_window(prefix, wid)
                target = next(p for p in cluster.primary_ports if p != cluster.owner(slot))
                moved += cluster.migrate_slot(slot, target, key_delay=0.15)  # ~1.5 s per slot
            time.sleep(0.5)
        outcomes = writers.outcomes()
        assert moved >= 3 * 7, moved  # every window's keys moved, one MIGRATE each
        assert outcomes["error"] == [], outcomes["error"][:5]
        assert len(outcomes["ack"]) > 100
        _check_windows(store, outcomes["ack"], ids)


def _promoted(cluster: LocalCluster, slot: int, dead: int) -> int:
    deadline = time.monotonic() + 45  # each election that fails is retried 4 node timeouts later
    while True:
        try:
            owner = cluster.owner(slot)
            if owner != dead:
                return owner
        except Exception:
            pass
        assert time.monotonic() < deadline, "no replica took over\n" + cluster.logs()
        time.sleep(0.1)


def _fail_over(cluster: LocalCluster, slot: int) -> None:
    """kill -9 the primary of ``slot``, wait for its replica to take over, start the killed
    node again (it rejoins as a replica) and wait until the cluster is whole."""
    dead = cluster.owner(slot)
    cluster.kill(dead)
    _promoted(cluster, slot, dead)
    time.sleep(0.5)
    cluster.restart(dead)
    cluster._wait(cluster.healthy, "the restarted node to sync", timeout=60)


def test_failover_under_load_reaches_no_caller_and_replicated_writes_survive(
    one_server: None, cluster: LocalCluster, tmp_path: Any
) -> None:
    """(On one server of the matrix: its subject is the client's handling of a failover; the
    scripts it drives run on a cluster of each server in the other tests of this module.)"""
    prefix, ids = "fo", ["busy", "busy-too"]
    slot = slot_of_window(prefix, "busy")
    with cs.ContextStore.from_url(cluster.url(), prefix=prefix) as store:
        for wid in ids:
            store.window(wid, max_items=1000)
        with Writers(cluster.url(), prefix, ids, tmp_path) as writers:
            _fail_over(cluster, slot)
            time.sleep(0.5)
        first = writers.outcomes()
        assert first["error"] == [], first["error"][:5]  # the default policy rides the failover out
        for wid in ids:
            assert store.window(wid).verify().ok

        durable = {"durability": "replicated", "replicas": 1, "timeout_ms": 2000}
        with Writers(cluster.url(), prefix, ids, tmp_path, **durable) as writers:
            _fail_over(cluster, slot)
        second = writers.outcomes()
        assert second["error"] == [], second["error"][:5]
        # replicated writes survive the promotion: every one acknowledged is there, once
        _check_windows(store, second["ack"], ids)


def test_a_primary_killed_before_a_stores_first_call_is_waited_for(cluster: LocalCluster) -> None:
    """A fresh store (sync and asyncio) whose first call meets a primary that the slot map names
    but that is down rides the failover out like a store that had been reached: only a cluster
    with no reachable node at all is reported at once."""
    prefix, wid = "first", "w"
    slot = slot_of_window(prefix, wid)
    dead = cluster.owner(slot)
    live = next(p for p in cluster.primary_ports if p != dead)
    url = f"redis://127.0.0.1:{live}/0?cluster=true"
    store, astore = cs.ContextStore.from_url(url, prefix=prefix), cs.AsyncContextStore.from_url(url, prefix=prefix)
    cluster.kill(dead)
    added: dict[str, Any] = {}
    sync_add = threading.Thread(target=lambda: added.update(sync=store.window(wid).add("from sync")))
    sync_add.start()

    async def async_add() -> None:
        try:
            added["async"] = await (await astore.window(wid)).add("from async")
        finally:
            await astore.close()

    asyncio.run(async_add())
    sync_add.join(60)
    assert cluster.owner(slot) != dead  # the replica took over
    assert sorted(i.content for i in store.window(wid).items()) == ["from async", "from sync"]
    assert set(added) == {"sync", "async"}
    store.close()


def test_windows_misses_nothing_while_slots_move(cluster: LocalCluster) -> None:
    prefix = "ls"
    ids = [f"w{i}" for i in range(60)]
    with cs.ContextStore.from_url(cluster.url(), prefix=prefix) as store:
        for wid in ids:
            store.window(wid).add("x")
        stop = threading.Event()

        def reshard() -> None:
            k = 0
            while not stop.is_set():
                wid = ids[k % len(ids)]
                slot = slot_of_window(prefix, wid)
                target = next(p for p in cluster.primary_ports if p != cluster.owner(slot))
                cluster.migrate_slot(slot, target)
                k += 1

        mover = threading.Thread(target=reshard)
        mover.start()
        try:
            listings = [store.windows() for _ in range(300)]
        finally:
            stop.set()
            mover.join(60)
        wrong = [found for found in listings if found != sorted(ids)]
        assert wrong == [], [sorted(set(ids) - set(found)) for found in wrong[:3]]
