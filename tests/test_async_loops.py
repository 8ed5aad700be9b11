"""An AsyncContextStore works from any event loop: several ``asyncio.run`` calls, threads that
each run their own loop, and loops that come and go; no redis-py RuntimeError escapes and no
connection is left open (warnings are errors in this suite, ResourceWarning included)."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time

import pytest
import redis.asyncio

import contextstore as cs

from support import on_cluster


async def _add(store: cs.AsyncContextStore, wid: str, text: str) -> int:
    win = await store.window(wid)
    await win.add(text)
    return (await win.stats()).total_items


# a caller's plain client is copied for other loops; a caller's cluster client cannot be (the
# store says so), and one made by from_url(...?cluster=true) is made again per loop instead
CALLERS_PLAIN_CLIENT = pytest.mark.skipif(on_cluster(os.environ.get("REDIS_URL", "")), reason="plain clients")


def _named(url: str, name: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}client_name={name}"


def _no_clients(r, name: str, seconds: float = 5.0) -> bool:
    """True once no connection under ``name`` is open (the server sees a close a moment later)."""
    deadline = time.monotonic() + seconds
    while _clients(r, name) and time.monotonic() < deadline:
        time.sleep(0.02)
    return _clients(r, name) == 0


def _clients(r, name: str) -> int:
    """Connections open on the server under ``name`` (the store's clients and every copy)."""
    return sum(1 for c in r.client_list() if c.get("name") == name)


def test_one_store_across_several_asyncio_run_calls(redis_url, prefix, r):
    store = cs.AsyncContextStore.from_url(_named(redis_url, prefix), prefix=prefix)
    counts = [asyncio.run(_add(store, "loops", f"turn {i}")) for i in range(5)]
    assert counts == [1, 2, 3, 4, 5]
    assert asyncio.run(store.windows()) == ["loops"]
    asyncio.run(store.close())
    gc.collect()
    assert _no_clients(r, prefix), "a loop's connections were left open"


def test_threads_each_running_their_own_loop_share_one_store(redis_url, prefix, r):
    store = cs.AsyncContextStore.from_url(_named(redis_url, prefix), prefix=prefix)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        async def many() -> None:
            for i in range(20):
                await _add(store, "threads", f"thread {n} item {i}")

        try:
            asyncio.run(many())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread hung on a shared connection pool"
    assert errors == []

    async def check() -> None:
        win = await store.window("threads", create=False)
        assert (await win.stats()).total_items == 50  # the default 50-item window, 80 adds
        assert (await win.verify()).ok
        await store.close()

    asyncio.run(check())
    gc.collect()
    assert _no_clients(r, prefix)


def test_close_from_one_loop_closes_the_loops_still_running_elsewhere(redis_url, prefix, r):
    store = cs.AsyncContextStore.from_url(_named(redis_url, prefix), prefix=prefix)
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever)
    runner.start()
    try:
        asyncio.run_coroutine_threadsafe(_add(store, "elsewhere", "from the thread's loop"), loop).result(30)
        assert asyncio.run(_add(store, "elsewhere", "from the main thread")) == 2
        assert _clients(r, prefix) >= 1  # the thread's loop still holds its connection(s)
        asyncio.run(store.close())
        assert _no_clients(r, prefix)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(30)
        loop.close()


@CALLERS_PLAIN_CLIENT
def test_a_callers_client_is_used_on_its_loop_and_copied_for_others(redis_url, prefix, r):
    async def main() -> tuple[cs.AsyncContextStore, redis.asyncio.Redis]:
        client = redis.asyncio.Redis.from_url(redis_url)
        store = cs.AsyncContextStore(client, prefix=prefix)
        assert await _add(store, "mine", "on the caller's loop") == 1
        return store, client

    loop = asyncio.new_event_loop()
    store, client = loop.run_until_complete(main())
    assert asyncio.run(_add(store, "mine", "on another loop")) == 2  # a copy, closed with its loop
    loop.run_until_complete(store.close())
    assert loop.run_until_complete(client.ping())  # close() leaves the caller's client open
    loop.run_until_complete(client.aclose())
    loop.close()


@CALLERS_PLAIN_CLIENT
def test_a_client_bound_to_another_loop_is_a_contextstore_error(redis_url, prefix):
    """A caller's client that redis-py already bound to another loop: a typed error that says
    what to do, not redis-py's RuntimeError (and no hang)."""
    client = redis.asyncio.Redis.from_url(redis_url)
    home = asyncio.new_event_loop()
    home.run_until_complete(client.set(f"{prefix}:probe", "1"))  # its connection now belongs to `home`
    store = cs.AsyncContextStore(client, prefix=prefix)
    with pytest.raises(cs.ContextStoreError) as got:
        asyncio.run(_add(store, "elsewhere", "x"))
    assert "event loop" in str(got.value) and isinstance(got.value.__cause__, RuntimeError)
    asyncio.run(store.close())
    home.run_until_complete(client.aclose())
    home.close()
