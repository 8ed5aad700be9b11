"""Fault tests against real redis-server processes that the tests start and stop themselves:
replies cut after the server ran the request, kill -9 of the server under load, a worker killed
mid-write, the script cache flushed under load, and a stress run of every operation."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter

import pytest
import redis

import contextstore as cs

from _fault_workers import big_adds_forever, journal_adds, payload, stress
from _proxy import CuttingProxy
from _workers import add_sync
from support import PROCESSES, RedisProcess, events, open_store, raw_client

pytestmark = pytest.mark.slow


def _server(binary: str, *extra: str, port: int | None = None, dir: str | None = None) -> RedisProcess:
    return RedisProcess(*extra, binary=binary, port=port, dir=dir).start()


def _items_by_content(client: redis.Redis, prefix: str, wid: str) -> Counter[str]:
    with cs.ContextStore(client, prefix=prefix) as store:
        return Counter(i.content for i in store.window(wid).items())


# -- lost replies ----------------------------------------------------------------------------

N_CUT = 150


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_cut_replies_apply_each_add_exactly_once(redis_binary, kind, prefix):
    """The proxy forwards each request and cuts 25% of the connections before the reply: the
    server ran the script, the client saw a ConnectionError and retried with the same request."""
    server = _server(redis_binary)
    try:
        with CuttingProxy(server.port, cut_probability=0.25, seed=7) as proxy:
            acked, unknown = [], []
            policy = cs.RetryPolicy(attempts=12, base=0.001, cap=0.01)
            with open_store(kind, url=proxy.url, prefix=prefix, retry=policy) as store:
                w = store.window("cut", max_items=1000)
                for i in range(N_CUT):
                    try:
                        acked.append(w.add(f"message {i}", type="user_message", role="user"))
                    except cs.StoreUnavailableError:
                        unknown.append(f"message {i}")
            cuts = proxy.cuts
        client = redis.Redis(port=server.port)
        got = _items_by_content(client, prefix, "cut")
        ev = events(client, prefix, "cut")
        with cs.ContextStore(client, prefix=prefix) as s:
            assert s.window("cut").verify().ok
        client.close()
    finally:
        server.stop()
    print(
        f"\n[{kind}] cut replies: {N_CUT} adds, {cuts} connections cut after the server ran the "
        f"request, {len(acked)} acknowledged, {len(unknown)} gave up, duplicates: "
        f"{sum(n - 1 for n in got.values())}"
    )
    assert cuts >= N_CUT * 0.15  # the fault really happened, often
    assert all(got[a.content] == 1 for a in acked)  # every acknowledged add exactly once
    assert all(got[c] <= 1 for c in unknown)  # a call that gave up applied at most once
    assert set(got) <= {a.content for a in acked} | set(unknown)  # nothing from nowhere
    assert sum(e["event"] == "item_added" for e in ev) == sum(got.values())


def test_the_same_faults_duplicate_a_script_without_request_ids(redis_binary):
    """Control: through the same proxy, redis-py's own retries re-run a plain non-idempotent
    script whose reply was lost, so the fault the test above survives is real."""
    server = _server(redis_binary)
    try:
        with CuttingProxy(server.port, cut_probability=0.25, seed=7) as proxy:
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            client = redis.Redis(port=proxy.port, retry=Retry(NoBackoff(), 10))
            push = client.register_script("return redis.call('RPUSH', KEYS[1], ARGV[1])")
            for i in range(N_CUT):
                with contextlib.suppress(redis.ConnectionError):
                    push(keys=["plain"], args=[f"m{i}"])
            client.close()
        direct = redis.Redis(port=server.port)
        values = direct.lrange("plain", 0, -1)
        direct.close()
    finally:
        server.stop()
    assert len(values) > len(set(values))  # applied twice or more


# -- the server killed ----------------------------------------------------------------------


def test_kill_9_of_the_server_loses_no_acknowledged_write(redis_binary, prefix, tmp_path):
    """4 processes add while the server (appendfsync always) is killed with SIGKILL and
    restarted on the same port and data; afterwards each acknowledged add is in the window or
    its removal (eviction) is in the event stream, nothing is there twice, verify() is clean."""
    data = tmp_path / "data"
    data.mkdir()
    aof = ("--appendonly", "yes", "--appendfsync", "always")
    server = _server(redis_binary, *aof, dir=str(data))
    port = server.port
    client = redis.Redis(port=port)
    with cs.ContextStore(client, prefix=prefix) as store:
        store.window("crash", max_items=60)
    client.close()
    journals = [tmp_path / f"w{w}.log" for w in range(4)]
    procs = [
        PROCESSES.Process(target=journal_adds, args=(server.url, prefix, "crash", w, 250, str(journals[w])))
        for w in range(4)
    ]
    for p in procs:
        p.start()
    try:
        deadline = time.monotonic() + 60
        while sum(len(j.read_text().splitlines()) for j in journals if j.exists()) < 200:
            assert time.monotonic() < deadline, "workers made no progress"
            time.sleep(0.05)
        assert server.proc is not None
        at_kill = sum(len(j.read_text().splitlines()) for j in journals)
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(10)
        time.sleep(0.5)
        server = _server(redis_binary, *aof, port=port, dir=str(data))
        for p in procs:
            p.join(120)
            assert p.exitcode == 0
        client = redis.Redis(port=port)
        with cs.ContextStore(client, prefix=prefix) as store:
            w = store.window("crash")
            report = w.verify()
            present = {i.id: i.content for i in w.items()}
        ev = events(client, prefix, "crash")
        client.close()
    finally:
        server.stop()
    lines = [ln.split() for j in journals for ln in j.read_text().splitlines()]
    acked = {ln[2]: ln[1] for ln in lines if ln[0] == "ack"}
    unknown = [ln[1] for ln in lines if ln[0] == "unknown"]
    removed = {e["item_id"]: e["reason"] for e in ev if e["event"] == "item_removed"}
    added = [e["item_id"] for e in ev if e["event"] == "item_added"]
    print(
        f"\nkill -9 after {at_kill} adds: {len(lines)} adds by 4 processes, {len(acked)} acknowledged, {len(unknown)} "
        f"gave up, {len(present)} in the window, {len(removed)} evicted; lost: "
        f"{sum(1 for i in acked if i not in present and i not in removed)}"
    )
    assert report.ok, report.problems
    assert len(lines) == 4 * 250
    for item_id, content in acked.items():
        assert present.get(item_id) == content or removed.get(item_id) == "eviction", item_id
    assert len(added) == len(set(added)) and len(set(present.values())) == len(present)
    assert len(added) <= len(lines)  # nothing applied twice: at most one item per call
    assert set(present) | set(removed) == set(added)  # every departure is accounted for


# -- a worker killed ------------------------------------------------------------------------


def test_a_worker_killed_mid_write_leaves_no_half_written_item(redis_binary, prefix):
    server = _server(redis_binary)
    try:
        procs = [PROCESSES.Process(target=big_adds_forever, args=(server.url, prefix, "killed", w)) for w in range(2)]
        client = redis.Redis(port=server.port)
        with cs.ContextStore(client, prefix=prefix) as store:
            w = store.window("killed", max_items=40)
            for p in procs:
                p.start()
            deadline = time.monotonic() + 60
            while w.stats().total_items < 20:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            time.sleep(0.3)
            for p in procs:
                assert p.pid is not None
                os.kill(p.pid, signal.SIGKILL)
                p.join(10)
            report = w.verify()
            items = w.items()
        client.close()
    finally:
        server.stop()
    assert report.ok, report.problems
    assert items
    for it in items:
        body, digest = payload(it.content.split(":", 1)[0], len(it.content))
        assert it.content == body and (it.metadata or {}).get("sha256") == digest


# -- the script cache flushed ---------------------------------------------------------------


def test_script_flush_under_load_loses_nothing(redis_url, r, prefix):
    stop = threading.Event()
    flushes = 0

    def flusher() -> None:
        nonlocal flushes
        other = raw_client(redis_url)
        while not stop.is_set():
            other.script_flush()
            flushes += 1
            time.sleep(0.005)
        other.close()

    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        store.window("flush", max_items=1000)
        t = threading.Thread(target=flusher)
        t.start()
        try:
            with PROCESSES.Pool(3) as pool:
                acked = pool.starmap(add_sync, [(redis_url, prefix, "flush", w, 120) for w in range(3)])
        finally:
            stop.set()
            t.join()
        w = store.window("flush")
        report = w.verify()
        n = w.stats().total_items
        present = {i.id for i in w.items()}
    print(f"\nSCRIPT FLUSH under load: {flushes} flushes during {sum(map(len, acked))} adds; items: {n}")
    assert flushes > 10
    assert report.ok, report.problems
    assert n == sum(len(a) for a in acked) == 3 * 120  # nothing lost, nothing twice
    single = {i for worker in acked for i, s in worker if s > 0}
    assert single <= present


# -- stress ---------------------------------------------------------------------------------

STRESS_SECONDS = float(os.environ.get("CONTEXTSTORE_STRESS_SECONDS", "8"))


def test_stress_8_processes_every_operation(redis_url, r, prefix, one_server):
    wids = ["s-a", "s-b", "s-c"]
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        store.window("s-a", max_tokens=3000, max_items=60)
        store.window("s-b", max_items=30)
        store.window("s-c", max_tokens=8000, max_items=200, default_strategy="remove_oldest")
        with PROCESSES.Pool(8) as pool:
            results = pool.starmap(stress, [(redis_url, prefix, wids, w, STRESS_SECONDS) for w in range(8)])
        reports = [store.window(wid).verify() for wid in wids]
    total: Counter[str] = Counter()
    for ops, _ in results:
        total.update(ops)
    unexpected = [u for _, errs in results for u in errs]
    print(f"\nstress: 8 processes x {STRESS_SECONDS:.0f}s on 3 windows, {sum(total.values())} operations:")
    for op, n in sorted(total.items()):
        print(f"  {op:<28}{n:>7}")
    print(
        f"  unexpected exceptions: {len(unexpected)}; verify(): "
        f"{'clean' if all(rep.ok for rep in reports) else 'BROKEN'}"
    )
    assert not unexpected, unexpected[:10]
    assert all(rep.ok for rep in reports), [rep.problems for rep in reports]
    assert sum(total.values()) > 500
    for op in ("add", "remove", "pin", "compact", "build", "snapshot_restore", "replay", "clear"):
        assert total[op] > 0, op
