"""A cached window's build read after other stores' adds (build_read.lua's appended listing): what
is not adds alone (a removal hidden behind adds, a caller id added again, more adds than it
lists) is read as a whole listing, and every build equals a fresh store's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

import contextstore as cs

from support import command_calls as _calls
from support import on_cluster

OPTS = cs.BuildOptions(reserve_for_response=0)


@pytest.fixture(autouse=True)
def _one_server(redis_url: str) -> None:
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with build_read.lua")


@contextlib.contextmanager
def _two(url: str, prefix: str) -> Iterator[tuple[cs.ContextStore, cs.ContextStore]]:
    """The store that builds (and caches) and another that changes its windows."""
    with cs.ContextStore.from_url(url, prefix=prefix) as s, cs.ContextStore.from_url(url, prefix=prefix) as o:
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


@pytest.mark.parametrize(
    "change",
    [
        lambda w: (w.remove("m3"), w.add("back again", id="m3"), w.add("and one more")),
        lambda w: (w.remove("m11"), w.add("back again", id="m11")),
        lambda w: w.add_many([f"bulk {k}" for k in range(513)]),
    ],
    ids=["re-added-caller-id-behind-an-add", "newest-removed-and-re-added", "more-adds-than-listed (512)"],
)
def test_what_is_not_adds_alone_is_read_as_a_whole_listing(redis_url, r, prefix, change):
    """A caller's id removed and added again keeps the item count an add alone would give, and
    sits where the newest cached id sat: its seq tells it apart."""
    with _two(redis_url, prefix) as (s, o):
        w = _cached_window(s, "tricky")
        o.window("tricky").add("moves the window")
        w.build_messages_structured(OPTS)  # now moving: builds read first
        change(o.window("tricky"))
        before = _calls(r, "zrange")
        built = w.build_messages_structured(OPTS)
        assert _calls(r, "zrange") > before  # the whole listing, not the appended one
        _same(built, _fresh_build(redis_url, prefix, "tricky"))
