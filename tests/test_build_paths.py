"""The one read of builds chooses exactly what a whole read would.

A build reads the facts of what it can offer, then the bodies it uses: all of them (a store
without an item cache), those its cache lacks, or none (its last facts read, unchanged). Here
each build kind (prompt and chat builds, each order, pins, groups, history limits, include
flags, budgets) runs through each kind of store, on windows below and above a page, and must
equal the build of a fresh store that read the window whole (but for ``omitted_item_ids``, which
lists what the build read and left out); a writer acting between two calls of a build gives the
build of the window after the write, never a mix.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

import contextstore as cs
from contextstore.plans import reads

from support import on_cluster, same_build, whole_reads

OPTIONS = {
    "sections": cs.BuildOptions(max_tokens=900, reserve_for_response=0, max_history_items=1000),
    "priority": cs.BuildOptions(max_tokens=700, reserve_for_response=0, order="priority"),
    "arrival": cs.BuildOptions(max_tokens=800, reserve_for_response=0, order="arrival", max_history_items=40),
    "history 3": cs.BuildOptions(max_tokens=2000, reserve_for_response=0, max_history_items=3),
    "no memory": cs.BuildOptions(max_tokens=600, reserve_for_response=0, include_relevant_memory=False),
    "no budget": cs.BuildOptions(reserve_for_response=0, max_history_items=1000),
}
Build = Callable[[Any, cs.BuildOptions], Any]
KINDS: dict[str, Build] = {
    "prompt": lambda w, o: w.build_structured(o),
    "openai": lambda w, o: w.build_messages_structured(o, format="openai"),
    "anthropic": lambda w, o: w.build_messages_structured(o, format="anthropic"),
}


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}


def _fill(w: Any, rng: random.Random, turns: int) -> None:
    """Context of every kind, pins, then a conversation with a tool call every fourth turn."""
    w.add("You are terse.", role="system", pinned=True)
    w.add("Answer in English.", type="instruction", priority=80)
    for n in range(6):
        w.add(f"doc {n} " + "fact " * rng.randint(5, 60), type="retrieved_document", priority=rng.randint(0, 100))
    w.add("def f(): return 1", type="code", pinned=rng.random() < 0.5)
    for n in range(turns):
        w.add(f"question {n} " + "why " * rng.randint(3, 40), role="user")
        if n % 4 == 0:
            w.add("", role="assistant", metadata={"tool_calls": [_call(f"call_{n}")]})
            w.add(f"result {n} " + "data " * rng.randint(5, 50), role="tool", metadata={"tool_call_id": f"call_{n}"})
        w.add(f"answer {n} " + "because " * rng.randint(3, 40), role="assistant", priority=rng.randint(0, 100))


def _plain(built: Any) -> Any:
    """A build's choice and payload (not ``omitted_item_ids``, which follows what it read)."""
    out = msgspec.to_builtins(built)
    out.pop("omitted_item_ids")
    return out


def _expected(make_store: Callable[..., Any], wid: str) -> dict[tuple[str, str], Any]:
    """Every build kind with every option set, by a fresh store that reads the window whole."""
    with whole_reads():
        fresh = make_store().window(wid)
        return {(k, o): build(fresh, opts) for k, build in KINDS.items() for o, opts in OPTIONS.items()}


def _every_build(w: Any) -> dict[tuple[str, str], Any]:
    return {(k, o): build(w, opts) for k, build in KINDS.items() for o, opts in OPTIONS.items()}


def _agree(got: dict[tuple[str, str], Any], expected: dict[tuple[str, str], Any]) -> None:
    assert got.keys() == expected.keys()
    for case, built in got.items():
        same_build(built, expected[case])


#: the stores that read a window each their own way (the options of make_store)
PATHS = {
    "stateless (facts, then bodies)": {"item_cache_bytes": 0},
    "cache too small (bodies read again)": {"item_cache_bytes": 500},
    "item cache": {},
}


@pytest.mark.parametrize("turns", [12, 45], ids=["below a page", "above a page"])
@pytest.mark.parametrize("path", list(PATHS))
def test_every_build_kind_chooses_what_a_whole_read_does(make_store, monkeypatch, path, turns):
    monkeypatch.setattr(reads, "PAGE_IDS", 40)  # the larger window lists in pages
    monkeypatch.setattr(reads, "PAGE_BYTES", 3000)
    writer = make_store()
    w = writer.window("paths", max_tokens=50_000)
    _fill(w, random.Random(turns), turns)
    expected = _expected(make_store, "paths")
    reader = make_store(**PATHS[path]).window("paths")
    _agree(_every_build(reader), expected)
    _agree(_every_build(reader), expected)  # again: from what the first builds kept
    w.add("one more question?", role="user")  # only an add since: a cached store reads its body alone
    w.add("and a doc", type="retrieved_document", priority=99)
    _agree(_every_build(reader), _expected(make_store, "paths"))
    w.pin(w.items(types=["assistant_message"])[-1].id)  # a change in place: a new epoch
    _agree(_every_build(reader), _expected(make_store, "paths"))


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("change", ["add", "remove", "pin"])
def test_a_writer_between_two_calls_of_a_build_gives_the_build_after_it(redis_url, prefix, path, change):
    if on_cluster(redis_url):
        pytest.skip("counts one server's calls")
    with (
        cs.ContextStore.from_url(redis_url, prefix=prefix) as writer,
        cs.ContextStore.from_url(redis_url, prefix=prefix, **PATHS[path]) as reader,
    ):
        w = writer.window("race", max_tokens=50_000)
        _fill(w, random.Random(5), 30)
        r = reader.window("race")
        for n, (kind, build) in enumerate(KINDS.items()):
            build(r, OPTIONS["sections"])  # what a store keeps, it has
            with cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:
                before = _plain(build(fresh.window("race"), OPTIONS["sections"]))
            act = {
                "add": lambda n=n: w.add(f"late question {n}", role="user"),
                "remove": lambda: w.remove(w.items(types=["user_message"])[-1].id),
                "pin": lambda n=n: w.pin(w.items(types=["user_message"])[n].id),  # an old one: excluded till now
            }[change]
            real, calls = reader._execute, []

            def after_the_first_call(request: Any, real: Any = real, calls: list[Any] = calls, act: Any = act) -> Any:
                reply = real(request)
                calls.append(request)
                if len(calls) == 1:
                    act()
                return reply

            reader._execute = after_the_first_call  # type: ignore[method-assign]
            try:
                got = _plain(build(r, OPTIONS["sections"]))
            finally:
                reader._execute = real  # type: ignore[method-assign]
            with cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:
                after = _plain(build(fresh.window("race"), OPTIONS["sections"]))
            assert before != after, kind  # the write changes the build: a mix would be neither
            assert got in (before, after), (kind, len(calls))
