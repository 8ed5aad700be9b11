"""The direct EVALSHA path (contextstore/drivers/direct.py) used for clients the store makes itself."""

from __future__ import annotations

import os

import pytest
import redis
import redis.asyncio

import contextstore as cs
from contextstore.drivers.direct import pack

from support import on_cluster

# the lean path serves plain clients only; a cluster client routes each call itself
pytestmark = pytest.mark.skipif(on_cluster(os.environ.get("REDIS_URL", "")), reason="plain Redis only")


def test_pack_is_resp_array_of_bulk_strings():
    assert pack(["EVALSHA", "ab", 1, b"k\r\n", "é"]) == (
        b"*5\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$3\r\nk\r\n\r\n$2\r\n\xc3\xa9\r\n"
    )


def test_owned_clients_use_it_and_callers_clients_do_not(redis_url, r, prefix):
    owned = cs.ContextStore.from_url(redis_url, prefix=prefix)
    theirs = cs.ContextStore(redis.Redis.from_url(redis_url), prefix=prefix)
    try:
        assert owned._direct is not None and theirs._direct is None
        w1, w2 = owned.window("direct"), theirs.window("direct")
        a = w1.add("from the owned client", type="user_message", role="user")
        assert w2.get(a.id) == a  # both paths read and write the same keys
    finally:
        owned.close()
        theirs._client.close()


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


def test_the_async_store_uses_it_on_every_loop_and_survives_the_same_faults(redis_url, r, prefix):
    import asyncio

    store = cs.AsyncContextStore.from_url(redis_url, prefix=prefix)
    their_client = redis.asyncio.Redis.from_url(redis_url)
    theirs = cs.AsyncContextStore(their_client, prefix=prefix)

    async def turn(text: str, first: bool) -> list[str]:
        assert (await store._loops.current()).direct is not None
        # the caller's client goes redis-py's way; on later loops the store's own copy is lean
        assert ((await theirs._loops.current()).direct is None) is first
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
