"""Window config lives in Redis: create, attach, conflicts, configure, TTL, ids, recreation."""

from __future__ import annotations

import time

import pytest
from redis.crc import key_slot

import contextstore as cs

from support import check_invariants, key


def test_first_window_call_creates_later_calls_attach(make_store):
    a, b = make_store(), make_store()
    wa = a.window("cfg", max_tokens=8192, compaction_threshold=90, default_strategy="remove_oldest")
    wb = b.window("cfg")  # attaches and loads the stored config
    s = wb.stats()
    assert (s.max_tokens, s.max_items, s.compaction_threshold, s.default_strategy) == (
        8192,
        1000,
        90.0,
        cs.CompactionStrategy.REMOVE_OLDEST,
    )
    assert b.window("cfg", max_tokens=8192).stats().max_tokens == 8192  # same value: fine
    with pytest.raises(cs.ConfigConflictError) as info:
        b.window("cfg", max_tokens=4096)
    assert info.value.conflicts == {"max_tokens": (4096, 8192)}
    wa.add("x")
    assert wb.stats().total_items == 1


def test_item_cap_defaults(make_store):
    s = make_store(item_limit=300)
    assert s.window("cfg-a").stats().max_items == 50
    assert s.window("cfg-b", max_tokens=100).stats().max_items == 300
    assert s.window("cfg-c", max_tokens=100, max_items=20).stats().max_items == 20
    with pytest.raises(cs.InvalidOptionsError):
        s.window("cfg-d", max_items=301)


def test_configure_is_seen_by_every_worker(make_store, r, prefix):
    a, b = make_store(), make_store()
    wa, wb = a.window("cfg-live", max_items=10), b.window("cfg-live")
    for i in range(6):
        wa.add(f"x{i}", pinned=i == 0)
    cfg = wb.configure(max_items=3, max_tokens=500, compaction_threshold=80, default_strategy="remove_oldest")
    assert (cfg.max_items, cfg.max_tokens, cfg.compaction_threshold) == (3, 500, 80.0)
    assert [i.content for i in wa.items()] == ["x0", "x4", "x5"]  # evicted down to the new cap
    s = wa.stats()
    assert (s.max_items, s.max_tokens, s.default_strategy.value) == (3, 500, "remove_oldest")
    wb.configure(max_tokens=None)
    assert wa.stats().max_tokens is None
    check_invariants(r, prefix, "cfg-live")


@pytest.mark.parametrize("wid", ["", "a b", "x{y}", "glob*", "q?", "[set]", "ü", "a" * 201, "tab\t"])
def test_invalid_window_ids(store, wid):
    with pytest.raises(cs.InvalidWindowIdError):
        store.window(wid)


def test_valid_window_id_alphabet(store):
    wid = "Agent_7.team-a:run@2026/x+y=z"
    store.window(wid).add("x")
    assert wid in store.windows()


@pytest.mark.parametrize("cls", [cs.ContextStore, cs.AsyncContextStore])
def test_invalid_store_options(redis_url, cls):
    with pytest.raises(cs.InvalidWindowIdError):
        cls.from_url(redis_url, prefix="bad{prefix}")
    with pytest.raises(cs.InvalidOptionsError):
        cls.from_url(redis_url, item_limit=0)
    with pytest.raises(cs.InvalidOptionsError):
        cls.from_url(redis_url, colour="red")
    with pytest.raises(cs.InvalidOptionsError):
        cls.from_url("http://not-redis")
    with pytest.raises(cs.InvalidOptionsError):
        cls.from_url(redis_url, token_counter=42)
    with pytest.raises(cs.InvalidOptionsError, match="from_url"):
        cls(redis_url)  # a URL where a client belongs: said at once, not at the first call


def test_windows_lists_this_prefix_only(make_store, redis_url, prefix):
    s = make_store()
    for wid in ("b", "a", "c"):
        s.window(wid)
    other = make_store(prefix=prefix + "other")
    other.window("z")
    assert s.windows() == ["a", "b", "c"]
    assert other.windows() == ["z"]


def test_ttl_rearmed_by_mutations_not_reads(store, r, prefix):
    w = store.window("cfg-ttl", ttl_seconds=100)
    w.add("x")
    keys = [key(prefix, "cfg-ttl", k) for k in ("meta", "items", "order", "fifo", "attrs", "events")]
    assert all(90 < r.ttl(k) <= 100 for k in keys)
    for k in keys:
        r.expire(k, 50)
    w.items(), w.stats(), w.build(), w.snapshot()
    assert all(r.ttl(k) <= 50 for k in keys)  # reads do not re-arm
    w.update_priority("ctx-1", 9)
    assert all(r.ttl(k) > 90 for k in keys)


def test_expired_window_reads_empty_and_writes_recreate(store, r, prefix):
    w = store.window("cfg-exp", ttl_seconds=1, max_items=7)
    w.add("a")
    w.add("b")
    deadline = time.monotonic() + 5
    while r.exists(key(prefix, "cfg-exp", "meta")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert w.items() == [] and w.stats().total_items == 0
    assert w.add("new life").id == "ctx-1"  # a new lifetime: ids start again
    assert w.stats().max_items == 7  # recreated with the handle's config


def test_deleted_window_recreated_by_add(store, r, prefix):
    w = store.window("cfg-del", max_tokens=300)
    w.add("x")
    assert w.delete() is True
    assert w.delete() is False
    # only the request log stays (so a retried delete still answers True), and it expires
    log_keys = {key(prefix, "cfg-del", "requests").encode(), key(prefix, "cfg-del", "replies").encode()}
    assert set(r.scan_iter(match=f"{prefix}:{{cfg-del}}:*", count=10_000)) == log_keys
    assert all(0 < r.ttl(k) <= 900 for k in log_keys)
    assert w.get("ctx-1") is None and w.remove("ctx-1") is False and w.clear() == 0
    assert set(r.scan_iter(match=f"{prefix}:{{cfg-del}}:*", count=10_000)) == log_keys  # those did not recreate it
    assert w.add("y").id == "ctx-1" and w.stats().max_tokens == 300


def test_keys_share_one_hash_tag(store, r, prefix):
    w = store.window("cfg-keys")
    w.add("x", pinned=True)
    keys = sorted(k.decode() for k in r.scan_iter(match=f"{prefix}:*", count=10_000))
    assert keys == [
        f"{prefix}:{{cfg-keys}}:{n}"
        for n in ("attrs", "events", "fifo", "items", "meta", "order", "pinned", "replies", "requests")
    ]
    assert len({key_slot(k.encode()) for k in keys}) == 1  # one cluster slot: one script may touch all


def test_create_false_attaches_to_an_existing_window_and_never_creates_one(store, r, prefix):
    with pytest.raises(cs.WindowNotFoundError) as missing:
        store.window("cfg-absent", create=False)
    assert isinstance(missing.value, LookupError) and missing.value.window_id == "cfg-absent"
    assert str(missing.value) == "window 'cfg-absent' does not exist"
    assert list(r.scan_iter(match=f"{prefix}:*", count=10_000)) == []  # nothing written
    store.window("cfg-there", max_tokens=500).add("hello")
    w = store.window("cfg-there", create=False)
    assert w.stats().max_tokens == 500 and [i.content for i in w.items()] == ["hello"]
    assert store.window("cfg-there", create=False, max_tokens=500).stats().total_items == 1
    with pytest.raises(cs.ConfigConflictError):
        store.window("cfg-there", create=False, max_tokens=400)
    with pytest.raises(cs.InvalidOptionsError):
        store.window("cfg-there", create="no")
    assert store.windows() == ["cfg-there"]
