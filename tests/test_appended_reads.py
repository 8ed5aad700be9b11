"""A cached window's build read in plain commands (plans/cached.py ``plain_appended``, what a
store whose server runs scripts by EVALSHA uses; forced here on every server): after other
stores' adds it reads the added items alone, in two transactions and no script; whatever it
cannot settle (a change between its two calls, a removal hidden behind adds, a caller id added
again, more adds than it lists) is asked of build_read.lua, and every build equals a fresh store's."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

import contextstore as cs
from contextstore.plans import cached
from contextstore.plans.base import PlainRead, ScriptCall

from support import command_calls as _calls
from support import on_cluster

OPTS = cs.BuildOptions(reserve_for_response=0)


@pytest.fixture(autouse=True)
def _one_server(redis_url: str) -> None:
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with build_read.lua")


@contextlib.contextmanager
def _two(url: str, prefix: str) -> Iterator[tuple[cs.ContextStore, cs.ContextStore]]:
    """The store that builds (and caches; reading what was added plainly) and another that
    changes its windows."""
    with cs.ContextStore.from_url(url, prefix=prefix) as s, cs.ContextStore.from_url(url, prefix=prefix) as o:
        s._settings.evalsha_scripts = lambda: True
        yield s, o


def _cached_window(store: cs.ContextStore, wid: str, n: int = 12) -> Any:
    w = store.window(wid, max_tokens=50_000)
    w.add_many([{"content": f"message {k}", "role": "user" if k % 2 else "assistant", "id": f"m{k}"} for k in range(n)])
    w.build_messages_structured(OPTS)  # the store's cache holds the window
    return w


def _fresh_build(url: str, prefix: str, wid: str) -> Any:
    with cs.ContextStore.from_url(url, prefix=prefix) as fresh:
        return fresh.window(wid).build_messages_structured(OPTS)


def _same(a: object, b: object) -> None:
    assert msgspec.to_builtins(a) == msgspec.to_builtins(b)


def test_a_build_after_adds_reads_the_added_items_alone_without_a_script(redis_url, r, prefix):
    with _two(redis_url, prefix) as (s, o):
        w = _cached_window(s, "grown")
        o.window("grown").add_many([{"content": f"from o {k}", "role": "user"} for k in (1, 2, 3)])
        w.build_messages_structured(OPTS)  # refused from the cache alone: the window is now moving
        o.window("grown").add_many([{"content": f"from o {k}", "role": "user"} for k in (4, 5)])
        r.config_resetstat()
        built = w.build_messages_structured(OPTS)
        stats = r.info("commandstats")
        reads = sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("fcall_ro", "evalsha_ro"))
        assert reads == 0 and stats["cmdstat_exec"]["calls"] == 2, stats  # two transactions, no read script
        assert stats["cmdstat_lrange"]["calls"] == 1 and "cmdstat_hgetall" in stats, stats
        assert "cmdstat_zrange" not in stats, stats  # the listing is the cache's, with the added ids put in
        _same(built, _fresh_build(redis_url, prefix, "grown"))
        assert built.messages[-1]["content"] == "from o 5"


def _drive(store: cs.ContextStore, plan: Any, after_first_plain: Callable[[], None]) -> tuple[Any, list[Any]]:
    """Run ``plan`` request by request, calling ``after_first_plain()`` once the first plain
    transaction is answered; returns the result and what was asked (PlainRead or script name)."""
    asked: list[Any] = []
    try:
        request = next(plan)
        while True:
            reply = store._execute(request)
            asked.append(request.name if isinstance(request, ScriptCall) else request)
            if isinstance(request, PlainRead) and sum(isinstance(a, PlainRead) for a in asked) == 1:
                after_first_plain()
            request = plan.send(reply)
    except StopIteration as stop:
        return stop.value, asked


@pytest.mark.parametrize(
    "change",
    [
        lambda w: w.add("added between the calls"),
        lambda w: w.remove("m3"),
        lambda w: w.pin("m4"),
        lambda w: w.update_priority("m5", 0),
    ],
    ids=["add", "remove", "pin", "priority"],
)
def test_a_change_between_the_two_calls_sends_the_read_to_build_read_lua(redis_url, prefix, change):
    with _two(redis_url, prefix) as (s, o):
        w = _cached_window(s, "raced")
        other = o.window("raced")
        other.add_many(["before the read 1", "before the read 2"])
        found, asked = _drive(s, cached.read_for_build(s._settings, w._state), lambda: change(other))
        assert [a for a in asked if not isinstance(a, PlainRead)] == ["build_read"]  # after two plain calls
        assert sum(isinstance(a, PlainRead) for a in asked) == 2
        with cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:
            assert [i.id for i in found.decoded] == [i.id for i in fresh.window("raced").ordered_items()]
        _same(w.build_messages_structured(OPTS), _fresh_build(redis_url, prefix, "raced"))


@pytest.mark.parametrize(
    "change",
    [
        lambda w: (w.remove("m3"), w.add("back again", id="m3"), w.add("and one more")),
        lambda w: (w.remove("m11"), w.add("back again", id="m11")),
        lambda w: w.add_many([f"bulk {k}" for k in range(cached.APPENDED_MAX + 1)]),
    ],
    ids=["re-added-caller-id-behind-an-add", "newest-removed-and-re-added", "more-adds-than-listed"],
)
def test_what_is_not_adds_alone_is_read_by_read_lua(redis_url, r, prefix, change):
    """A caller's id removed and added again keeps the item count an add alone would give, and
    sits where the newest cached id sat: its seq tells it apart."""
    with _two(redis_url, prefix) as (s, o):
        w = _cached_window(s, "tricky")
        o.window("tricky").add("moves the window")
        w.build_messages_structured(OPTS)  # now moving: builds read first
        change(o.window("tricky"))
        before = _calls(r, "zscore") + _calls(r, "zrange")
        built = w.build_messages_structured(OPTS)
        assert _calls(r, "zscore") + _calls(r, "zrange") > before  # build_read.lua's (the plain read asks neither)
        _same(built, _fresh_build(redis_url, prefix, "tricky"))


def test_the_server_decides_how_what_was_added_is_read(redis_url, r, prefix):
    """Plainly where the server runs scripts by EVALSHA (6.2), by build_read.lua's ``FCALL_RO`` where
    it has functions (Redis 7, Valkey): one round trip that costs the shard about as much."""
    with (
        cs.ContextStore.from_url(redis_url, prefix=prefix) as s,
        cs.ContextStore.from_url(redis_url, prefix=prefix) as o,
    ):
        w = _cached_window(s, "either")
        for n in range(2):  # the first build finds the window moving, the second reads first
            o.window("either").add(f"from o {n}", role="user")
            r.config_resetstat()
            w.build_messages_structured(OPTS)
        functions = s._scripts.mode != "eval"  # "auto" on a server that had the library loaded already
        assert functions == (int(r.info("server")["redis_version"].split(".")[0]) >= 7)
        assert _calls(r, "fcall_ro") == (1 if functions else 0)
        assert _calls(r, "exec") == (0 if functions else 2)
        _same(w.build_messages_structured(OPTS), _fresh_build(redis_url, prefix, "either"))
