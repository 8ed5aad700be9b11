"""Redis can lose its script cache (SCRIPT FLUSH, restart, failover): every call still works."""

from __future__ import annotations

import pytest

import contextstore as cs

from support import check_invariants, on_cluster


def test_every_operation_after_script_flush(store, r, prefix):
    w = store.window("noscript", max_tokens=1000, max_items=10)

    def flush():
        r.script_flush()

    steps = [
        lambda: w.add("a", token_count=10),
        lambda: w.add_many(["b", {"content": "c", "pinned": True}]),
        lambda: w.get("ctx-1"),
        lambda: w.pin("ctx-1"),
        lambda: w.unpin("ctx-1"),
        lambda: w.update_priority("ctx-1", 80),
        lambda: w.items(types=["code"], limit=5),
        lambda: w.ordered_items(),
        lambda: w.pinned_items(),
        lambda: w.build_structured(cs.BuildOptions(reserve_for_response=10, compact=True)),
        lambda: w.to_markdown(),
        lambda: w.compact(target_percent=0),
        lambda: w.restore(w.snapshot()),
        lambda: w.stats(),
        lambda: w.configure(max_items=20),
        lambda: w.remove("ctx-2"),
        lambda: w.clear(),
        lambda: store.window("noscript"),
        lambda: w.delete(),
    ]
    for step in steps:
        flush()
        assert r.script_exists("0" * 40) == [False]
        step()
    check_invariants(r, prefix, "noscript")


def _calls(r, command):
    return r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0)


def test_scripts_are_loaded_once_then_cached(store, r, redis_url):
    if on_cluster(redis_url):
        pytest.skip("counts the calls one server saw (INFO commandstats)")
    w = store.window("noscript-cache")
    r.script_flush()
    w.add("x")  # EVALSHA -> NOSCRIPT -> SCRIPT LOAD -> EVALSHA
    evalsha, loads, evals = _calls(r, "evalsha"), _calls(r, "script|load") + _calls(r, "script"), _calls(r, "eval")
    for i in range(5):
        w.add(f"y{i}")
    assert _calls(r, "evalsha") - evalsha == 5  # one round trip per add
    assert _calls(r, "script|load") + _calls(r, "script") - loads == 0  # no reloads
    assert _calls(r, "eval") - evals == 0  # the script body is not resent
