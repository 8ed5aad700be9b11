"""A script call that meets a flushed script cache or a killed connection: the script is loaded
once and run, the retry policy reconnects, and the request id keeps the write exactly once."""

from __future__ import annotations

import os

import pytest
import redis
import redis.asyncio

import contextstore as cs

from support import on_cluster

# one server's script cache and connections (a cluster has tests of its own)
pytestmark = pytest.mark.skipif(on_cluster(os.environ.get("REDIS_URL", "")), reason="plain Redis only")


def test_reloads_flushed_scripts_and_survives_killed_connections(redis_url, r, prefix):
    store = cs.ContextStore.from_url(redis_url, prefix=prefix)
    try:
        w = store.window("direct-faults", max_items=100)
        w.add("one")
        r.script_flush()
        w.add("two")  # NOSCRIPT -> loaded once, then run
        r.client_kill_filter(_type="normal", skipme=True)  # the pooled connection dies
        w.add("three")  # the retry policy reconnects; the request id keeps it exactly once
        assert [i.content for i in w.items()] == ["one", "two", "three"]
        assert w.verify().ok
    finally:
        store.close()


def test_the_async_store_on_every_loop_survives_the_same_faults(redis_url, r, prefix):
    import asyncio

    store = cs.AsyncContextStore.from_url(redis_url, prefix=prefix)
    their_client = redis.asyncio.Redis.from_url(redis_url)
    theirs = cs.AsyncContextStore(their_client, prefix=prefix)

    async def turn(text: str, first: bool) -> list[str]:
        w = await store.window("adirect", max_items=100)
        await w.add(text)
        seen = [i.content for i in await (await theirs.window("adirect")).items()]
        if first:
            await their_client.aclose()  # the caller closes what it brought
        return seen

    async def faults() -> list[str]:
        w = await store.window("adirect")
        r.script_flush()
        await w.add("after a flush")  # NOSCRIPT -> loaded once, then run
        r.client_kill_filter(_type="normal", skipme=True)
        await w.add("after a kill")  # reconnects; exactly once
        assert (await w.verify()).ok
        return [i.content for i in await w.items()]

    assert asyncio.run(turn("first loop", True)) == ["first loop"]
    assert asyncio.run(turn("second loop", False)) == ["first loop", "second loop"]  # a loop's own client
    assert asyncio.run(faults())[-2:] == ["after a flush", "after a kill"]
    asyncio.run(store.close())
    asyncio.run(theirs.close())
