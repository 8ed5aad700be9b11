"""The direct EVALSHA path (contextstore/_direct.py) used for clients the store makes itself."""

from __future__ import annotations

import redis

import contextstore as cs
from contextstore._direct import pack


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
