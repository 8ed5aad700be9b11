"""Credentials, TLS, password redaction, and a Redis ACL user confined to one tenant's windows."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from pathlib import Path

import pytest
import redis

import contextstore as cs

from support import RedisProcess, dump_window, free_port

SECRET = "s3cret-Pa55"
NO_RETRY = cs.RetryPolicy(attempts=2, base=0)


@pytest.fixture
def acl_server(redis_binary):
    server = RedisProcess("--requirepass", SECRET, binary=redis_binary).start(password=SECRET)
    yield server
    server.stop()


def _no_secret(text: str) -> None:
    assert SECRET not in text and "Pa55" not in text


def test_no_password_in_errors_reprs_or_logs(caplog):
    url = f"redis://admin:{SECRET}@127.0.0.1:{free_port()}/0"  # nothing listens there
    store = cs.ContextStore.from_url(url, retry=NO_RETRY)
    _no_secret(repr(store))
    with caplog.at_level(logging.DEBUG, logger="contextstore"), pytest.raises(cs.StoreUnavailableError) as ei:
        store.window("w")
    _no_secret(str(ei.value))
    _no_secret(str(ei.value.__cause__))
    _no_secret(caplog.text)
    assert "admin:***@127.0.0.1" in str(ei.value)
    store.close()
    with pytest.raises(cs.InvalidOptionsError) as bad:
        cs.ContextStore.from_url(f"redis://u:{SECRET}@127.0.0.1:notaport/0")
    _no_secret(str(bad.value))


# Every form a password can take in a URL, for a server at {port} whose password is SECRET.
SECRET_URLS = [
    "redis://default:{secret}@127.0.0.1:{port}/0",
    "redis://127.0.0.1:{port}/0?password={secret}",
    "redis://127.0.0.1:{port}/0?username=default&password={secret}",
    "redis://:{secret}@127.0.0.1:{port}/0?socket_timeout=5",
    "redis://127.0.0.1:{port}/0?password={secret}&cluster=false",
    "redis://{secret}@127.0.0.1:{port}/0",  # a password written where the user goes
]
# URLs that do not parse, each hiding SECRET (or a piece of it) where a parser trips
MALFORMED_URLS = [
    "redis://u:ab/{secret}@127.0.0.1:1/0",
    "redis://u:{secret}#x@127.0.0.1:1/0",
    "redis://u:{secret}?x@127.0.0.1:1/0",
    "redis://u:{secret}@127.0.0.1:notaport/0",
    "redis://u:{secret}@127.0.0.1:1/0?socket_timout=1",
    "redis://127.0.0.1:1/0?password={secret}&socket_timout=1",
    "redis://127.0.0.1:1/0?password={secret}&cluster=maybe",
]


@pytest.mark.parametrize("form", MALFORMED_URLS)
@pytest.mark.parametrize("kind", [cs.ContextStore, cs.AsyncContextStore])
def test_a_malformed_url_never_shows_its_password(kind, form):
    url = form.format(secret=SECRET)
    with pytest.raises(cs.InvalidOptionsError) as ei:
        kind.from_url(url)
    _no_secret(str(ei.value))
    assert "invalid Redis URL redis://" in str(ei.value)


def test_an_unknown_url_option_is_refused_with_the_valid_names():
    for url in ("redis://127.0.0.1:1/0?socket_timout=1", "redis://u:pw@127.0.0.1:1/0?socket_timout=1"):
        with pytest.raises(cs.InvalidOptionsError, match=r"unknown URL option 'socket_timout'.*socket_timeout"):
            cs.ContextStore.from_url(url)
    with pytest.raises(cs.InvalidOptionsError, match="ssl_ca_certs"):
        cs.ContextStore.from_url("redis://127.0.0.1:1/0?ssl_ca_certs=/ca.pem")  # TLS options need rediss://
    assert repr(cs.ContextStore.from_url("rediss://127.0.0.1:1/0?ssl_ca_certs=/ca.pem&ssl_password=x"))


@pytest.mark.parametrize("form", SECRET_URLS)
def test_no_output_shows_a_password_in_any_url_form(acl_server, form, caplog, capsys, monkeypatch):
    """repr, errors (denied, unreachable), the retry log lines, the CLI's stderr (by --url and by
    CONTEXTSTORE_URL), sync and asyncio: none holds the password."""
    from contextstore import cli

    url = form.format(secret=SECRET, port=acl_server.port)
    quick = cs.RetryPolicy(attempts=3, base=0.01, deadline_s=0.3)
    seen: list[str] = []
    with caplog.at_level(logging.DEBUG, logger="contextstore"):
        for kind in (cs.ContextStore, cs.AsyncContextStore):
            store = kind.from_url(url, retry=quick, prefix="sec")
            seen.append(repr(store))
            try:
                if kind is cs.ContextStore:
                    store.window("w").add("hello")
                else:
                    asyncio.run(_async_add(store))
            except cs.ContextStoreError as exc:  # the user-only form is refused: denied
                assert isinstance(exc, cs.PermissionDeniedError), exc
                seen.append(str(exc))
            if kind is cs.ContextStore:
                store.close()
        wrong = url.replace(SECRET, "wrong-" + SECRET.upper())
        with cs.ContextStore.from_url(wrong, retry=quick) as denied, pytest.raises(cs.PermissionDeniedError) as ei:
            denied.window("w")
        seen += [str(ei.value), repr(denied)]
        # a server that was reached and went away: the retry log lines, then giving up
        store = cs.ContextStore.from_url(url.replace(str(acl_server.port), str(free_port())), retry=quick)
        store._reached = True  # as after a first call: failures are retried and logged
        with pytest.raises(cs.ContextStoreError) as gone:
            store.window("w")
        seen.append(str(gone.value))
        store.close()
    seen.append(caplog.text)
    assert "waiting for Redis at" in caplog.text
    for argv in (["--url", url, "stats", "nope"], ["--url", url.replace(SECRET, "bad"), "windows"]):
        cli.main(argv)
        seen += list(capsys.readouterr())
    monkeypatch.setenv("CONTEXTSTORE_URL", wrong)
    assert cli.main(["stats", "w"]) == 1
    seen += list(capsys.readouterr())
    for text in seen:
        _no_secret(text)


async def _async_add(store):
    try:
        await (await store.window("w")).add("hello")
    finally:
        await store.close()


def test_credentials_from_the_url(acl_server):
    good = f"redis://default:{SECRET}@127.0.0.1:{acl_server.port}/0"
    with cs.ContextStore.from_url(good) as store:
        assert store.window("cred").add("hello").content == "hello"
    with (
        cs.ContextStore.from_url(
            f"redis://default:wrong-{SECRET}@127.0.0.1:{acl_server.port}/0", retry=NO_RETRY
        ) as store,
        pytest.raises(cs.PermissionDeniedError) as ei,
    ):
        store.window("cred")
    _no_secret(str(ei.value))


def test_acl_tenant_is_confined_to_its_windows(acl_server):
    """The tenant set up as docs/reliability.md says: the operator loads the scripts, the tenant's
    user gets ``tenant_acl``'s rules (tests/test_tenants.py tries what such a tenant may not do)."""
    admin = redis.Redis(port=acl_server.port, password=SECRET)
    with cs.ContextStore(admin) as store:
        store.load_scripts()
        admin.execute_command("ACL", "SETUSER", "tenant-a", "reset", "on", f">{SECRET}", *store.tenant_acl("tenant-a"))
        store.window("tenant-b:chat").add("tenant B's secret plan")
    before_b = dump_window(admin, "ctx", "tenant-b:chat")
    url = f"redis://tenant-a:{SECRET}@127.0.0.1:{acl_server.port}/0"
    with cs.ContextStore.from_url(url, retry=NO_RETRY) as a:
        w = a.window("tenant-a:chat", max_tokens=5000)
        w.add("tenant A's message", type="user_message", role="user")
        assert "tenant A's message" in w.build()
        assert w.verify().ok
        for attempt in (lambda: a.window("tenant-b:chat"), lambda: a.window("tenant-b:new")):
            with pytest.raises(cs.PermissionDeniedError) as ei:
                attempt()
            assert "permission" in str(ei.value).lower() or "noperm" in str(ei.value).lower()
        with pytest.raises(cs.PermissionDeniedError):
            a.windows()  # SCAN is not granted: it would list every tenant's window ids
    assert dump_window(admin, "ctx", "tenant-b:chat") == before_b
    assert not admin.exists("ctx:{tenant-b:new}:meta")
    admin.close()


def _tls_files(tmp: Path) -> tuple[Path, Path] | None:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    res = subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        capture_output=True,
        timeout=60,
    )
    return (cert, key) if res.returncode == 0 else None


def test_tls_with_rediss_url(redis_binary, tmp_path):
    files = _tls_files(tmp_path)
    if files is None:
        pytest.skip("openssl could not make a test certificate")
    cert, key = files
    port = free_port()
    server = RedisProcess(
        "--tls-port",
        str(port),
        "--tls-cert-file",
        str(cert),
        "--tls-key-file",
        str(key),
        "--tls-ca-cert-file",
        str(cert),
        "--tls-auth-clients",
        "no",
        "--requirepass",
        SECRET,
        binary=redis_binary,
        port=port,
    )
    try:
        server.start(password=SECRET, tls_ca=str(cert))
    except RuntimeError as exc:
        server.stop()
        if "tls" in str(exc).lower():
            pytest.skip(f"{redis_binary} was built without TLS")
        raise
    try:
        url = f"rediss://default:{SECRET}@127.0.0.1:{port}/0?ssl_ca_certs={cert}"
        with cs.ContextStore.from_url(url) as store:
            w = store.window("tls")
            assert w.add("over TLS").content == "over TLS"
            assert w.verify().ok
        plain = f"redis://default:{SECRET}@127.0.0.1:{port}/0"  # no TLS to a TLS port
        with cs.ContextStore.from_url(plain, retry=NO_RETRY) as store, pytest.raises(cs.ContextStoreError) as ei:
            store.window("tls")
        _no_secret(str(ei.value))
    finally:
        server.stop()


def test_an_asyncio_store_reads_cold_at_maxmemory(redis_binary):
    """At maxmemory Redis refuses commands queued in a MULTI, reads too: an asyncio store's cold
    read (nothing cached, so plain commands first) reads with scripts instead."""
    server = RedisProcess("--maxmemory", "3mb", "--maxmemory-policy", "noeviction", binary=redis_binary).start()
    client = redis.Redis(port=server.port)
    try:
        with cs.ContextStore(client, prefix="oom", retry=NO_RETRY) as store:
            store.window("bounded", max_tokens=1000).add("kept")
            w, added = store.window("oom", max_items=1000), 0
            with pytest.raises(cs.StoreOutOfMemoryError):
                for i in range(1000):
                    w.add(f"{i} " + "x" * 20_000)
                    added += 1

        async def cold_reads() -> tuple[int, list[str]]:
            async with cs.AsyncContextStore.from_url(f"redis://127.0.0.1:{server.port}/0", prefix="oom") as fresh:
                unbounded = await fresh.handle("oom").items()
                bounded = await fresh.handle("bounded").items()
                return len(unbounded), [i.content for i in bounded]

        assert asyncio.run(cold_reads()) == (added, ["kept"])
    finally:
        client.close()
        server.stop()


def test_out_of_memory_is_a_clear_error_and_changes_nothing(redis_binary):
    server = RedisProcess("--maxmemory", "3mb", "--maxmemory-policy", "noeviction", binary=redis_binary).start()
    client = redis.Redis(port=server.port)
    try:
        with cs.ContextStore(client, prefix="oom", retry=NO_RETRY) as store:
            w = store.window("oom", max_items=1000)
            store.window("bounded", max_tokens=1000).add("kept")  # its config bounds it: read plainly
            added = 0
            with pytest.raises(cs.StoreOutOfMemoryError) as ei:
                for i in range(1000):
                    before = dump_window(client, "oom", "oom")
                    w.add(f"{i} " + "x" * 20_000)
                    added += 1
            assert "out of memory" in str(ei.value) and "nothing was changed" in str(ei.value)
            assert dump_window(client, "oom", "oom") == before  # the refused add wrote nothing
            assert added > 10 and w.verify().ok
            assert len(w.items()) == added  # reads still work
            with cs.ContextStore(client, prefix="oom", retry=NO_RETRY) as cold:  # nothing cached: no plain
                assert len(cold.handle("oom").items()) == added  # reads at maxmemory (MULTI is refused)
                assert [i.content for i in cold.handle("bounded").items()] == ["kept"]
            assert w.clear() == added  # removals still work at maxmemory, and free it
            assert w.add("fits again").content == "fits again"
            assert w.verify().ok
    finally:
        client.close()
        server.stop()
