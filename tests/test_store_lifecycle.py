"""A store's life: an unreachable Redis is reported at the first contact without retrying, a
server that was reached and went away is waited for (and said so), and a closed store refuses
every call without closing a client it did not make."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import pytest
import redis

import contextstore as cs

from support import RedisProcess, free_port

PATIENT = cs.RetryPolicy(attempts=50, base=0.01, cap=0.05, deadline_s=30.0)


def _waits(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting for Redis")]


#: a port bound and never listened on, for the whole run: connecting is refused, and no server a
#: later test starts can take it (a port merely found free at collection could be)
_NOT_LISTENING = socket.socket()
_NOT_LISTENING.bind(("127.0.0.1", 0))


@pytest.fixture(scope="module", autouse=True)
def _port_released_at_the_end() -> Any:
    yield
    _NOT_LISTENING.close()


def _unreachable_urls() -> list[str]:
    missing_socket = os.path.join(tempfile.mkdtemp(prefix="cs-nosock-"), "redis.sock")
    port = _NOT_LISTENING.getsockname()[1]
    return [f"redis://127.0.0.1:{port}/0", f"unix://{missing_socket}", f"redis://127.0.0.1:{port}/0?cluster=true"]


@pytest.mark.parametrize("url", _unreachable_urls(), ids=["refused", "no-socket", "cluster"])
def test_nothing_listening_fails_at_the_first_contact_without_retrying(url, caplog):
    caplog.set_level(logging.DEBUG, logger="contextstore")
    # a sync cluster client reads the slot map in from_url
    with pytest.raises(cs.StoreUnavailableError), cs.ContextStore.from_url(url, retry=PATIENT) as store:
        store.window("w")
    astore = cs.AsyncContextStore.from_url(url, retry=PATIENT)

    async def go() -> None:
        try:
            with pytest.raises(cs.StoreUnavailableError):
                await astore.window("w")
            with pytest.raises(cs.StoreUnavailableError):
                await astore.windows()
        finally:
            await astore.close()

    asyncio.run(go())
    assert _waits(caplog) == [] and not [r for r in caplog.records if "retrying" in r.getMessage()]


def test_a_server_that_was_reached_is_waited_for_and_said_so(caplog, redis_binary):
    caplog.set_level(logging.INFO, logger="contextstore")
    server = RedisProcess(binary=redis_binary).start()
    with cs.ContextStore.from_url(server.url, retry=PATIENT) as store:
        w = store.window("back", max_tokens=1000)
        w.add("before", type="text")
        server.proc.terminate()  # type: ignore[union-attr]
        server.proc.wait(10)  # type: ignore[union-attr]
        again = RedisProcess(binary=redis_binary, port=server.port)

        restarted: dict[str, Any] = {}

        def restart_soon() -> None:
            time.sleep(0.3)
            restarted["server"] = again.start()

        t = threading.Thread(target=restart_soon)
        t.start()
        try:
            w.add("after", type="text")  # refused while it restarts: retried, it was reached before
        finally:
            t.join()
            restarted["server"].stop()
            server.stop()
    assert len(_waits(caplog)) >= 1 and f"127.0.0.1:{server.port}" in _waits(caplog)[0]


def test_the_command_fails_at_once_on_an_unreachable_url():
    url = f"redis://127.0.0.1:{free_port()}/0"
    done = subprocess.run(
        [sys.executable, "-m", "contextstore", "--url", url, "ls"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert done.stderr.startswith("contextstore: Redis at") and "unavailable" in done.stderr
    assert "waiting for" not in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_closed_store_refuses_every_call(make_store, api):
    store = make_store()
    w = store.window("closing", max_tokens=1000)
    w.add("x", type="text")
    store.close()
    calls = [
        lambda: w.add("y", type="text"),
        lambda: w.stats(),
        lambda: w.items(),
        lambda: w.build(),
        lambda: store.window("another"),
        lambda: store.windows(),
        lambda: list(w.events(since="0")),
    ]
    for call in calls:
        with pytest.raises(cs.StoreClosedError):
            call()


def test_a_closed_sync_window_property_and_handle_refuse(redis_url, prefix):
    store = cs.ContextStore.from_url(redis_url, prefix=prefix)
    w, h = store.window("closing-sync"), store.handle("closing-handle")
    store.close()
    with pytest.raises(cs.StoreClosedError):
        _ = w.current_tokens
    with pytest.raises(cs.StoreClosedError):
        h.add("z", type="text")
    with pytest.raises(cs.StoreClosedError):
        next(iter(store.consume(["closing-sync"], "g", "c")))


def test_closing_a_store_leaves_the_callers_client_open(redis_url, prefix):
    client = redis.Redis.from_url(redis_url)
    store = cs.ContextStore(client, prefix=prefix)
    store.window("mine").add("x", type="text")
    store.close()
    with pytest.raises(cs.StoreClosedError):
        store.window("mine")
    assert client.ping() is True  # the caller's client still works
    client.close()
