"""Reads in bounded calls (contextstore/plans/reads.py) against a real redis-server.

With pages of a few ids and a few hundred bytes, every read of a window takes many calls; its
answers must equal those of one unbounded call, and a window changed between two calls of one
read must be read again (the answer is the window as it is after the change, never a mix).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import redis

import contextstore as cs
from contextstore.plans import reads
from contextstore.plans import snapshot as snapshot_plans
from contextstore.plans.base import ScriptCall


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reads, "PAGE_IDS", 3)
    monkeypatch.setattr(reads, "PAGE_BYTES", 300)


def _fill(w: Any, rng: random.Random, n: int) -> None:
    types = ["system_prompt", "instruction", "retrieved_document", "user_message", "assistant_message", "code"]
    for i in range(n):
        size = rng.choice([5, 40, 400])  # some items alone exceed a page's bytes
        w.add(
            f"item {i} " + "word " * size,
            type=rng.choice(types),
            priority=rng.randint(0, 100),
            pinned=rng.random() < 0.2,
        )
    call = {"id": "call-1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    w.add_many(
        [
            {"content": "", "type": "assistant_message", "role": "assistant", "metadata": {"tool_calls": [call]}},
            {"content": "found " * 50, "type": "tool_result", "role": "tool", "metadata": {"tool_call_id": "call-1"}},
        ]
    )


def _answers(w: Any) -> dict[str, Any]:
    budget = cs.BuildOptions(max_tokens=1500, reserve_for_response=0)
    return msgspec.to_builtins(
        {
            "items": w.items(),
            "last 4": w.items(limit=4),
            "last 3 messages": w.items(types=["user_message", "assistant_message"], limit=3),
            "ordered": w.ordered_items(),
            "documents": w.ordered_items(types=["retrieved_document"]),
            "pinned": w.pinned_items(),
            "snapshot": w.snapshot().items,
            "build": w.build(budget),
            "messages": w.build_messages(budget),
        }
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bounded_reads_answer_as_one_unbounded_read(redis_url, prefix, monkeypatch, seed):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("w", max_items=200)
        _fill(w, random.Random(seed), 40)
        whole = _answers(w)
        monkeypatch.setattr(reads, "PAGE_IDS", 3)
        monkeypatch.setattr(reads, "PAGE_BYTES", 300)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:  # nothing cached
        assert _answers(fresh.window("w")) == whole


def _drive(store: cs.ContextStore, plan: Any, between: Callable[[int], None]) -> tuple[Any, list[list[Any]]]:
    """Run a plan call by call, calling ``between(n)`` after the n-th script call; returns the
    plan's result and every script call's name and arguments (a window its config does not bound is first
    asked its size with a plain command, ``reads.plain_ok``, which is run but not counted)."""
    sent: list[list[Any]] = []
    try:
        request = next(plan)
        while True:
            reply = store._execute(request)
            if isinstance(request, ScriptCall):
                sent.append([request.name, *request.args])
                between(len(sent))
            request = plan.send(reply)
    except StopIteration as stop:
        return stop.value, sent


def _texts(items: list[Any]) -> list[str]:
    return [i.content for i in items]


@pytest.mark.parametrize(
    "change",
    [
        lambda w: w.add("added while reading"),
        lambda w: w.remove(w.items()[5].id),
        lambda w: w.pin(w.items()[7].id),
        lambda w: w.update_priority(w.items()[2].id, 0),
    ],
    ids=["add", "remove", "pin", "priority"],
)
def test_a_window_changed_between_calls_is_read_again(redis_url, prefix, small_pages, change):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("w", max_items=200)
        _fill(w, random.Random(7), 20)
        with cs.ContextStore.from_url(redis_url, prefix=prefix) as writer:
            other = writer.window("w")
            got, sent = _drive(store, reads.read(w._state, "order"), lambda n: change(other) if n == 2 else None)
            assert _texts(got.items()) == _texts(other.ordered_items())  # the window after the change
        assert [a[4] for a in sent if a[:2] == ["list", "order"]].count("0") == 2  # the listing began again


def test_a_removal_between_listing_and_fetch_is_read_again(redis_url, prefix, small_pages):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("w")
        for i in range(4):
            w.add(f"big {i} " + "x " * 400)  # each alone exceeds a call's bytes: all but one deferred
        ids = [i.id for i in w.items()]
        listing_done = []

        def between(n: int) -> None:
            if n == 2 and not listing_done:  # after the listing and the first fetch
                listing_done.append(w.remove(ids[-1]))

        got, sent = _drive(store, reads.read(w._state, "fifo"), between)
        assert [i.id for i in got.items()] == ids[:-1]
        assert "fetch" in [a[0] for a in sent] and sent.count(sent[0]) == 2  # listed, fetched, listed again


def test_a_window_that_keeps_changing_is_read_in_one_call_at_last(redis_url, prefix, small_pages):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("w", max_items=200)
        _fill(w, random.Random(3), 12)
        with cs.ContextStore.from_url(redis_url, prefix=prefix) as writer:
            other = writer.window("w")
            got, sent = _drive(store, reads.read(w._state, "order"), lambda n: other.add(f"more {n}"))
        listings = [a for a in sent if a[0] == "list" and a[4] == "0"]
        assert len(listings) == reads.ATTEMPTS + 1 and listings[-1][5:] == ["0", "0"]  # unbounded
        texts = _texts(got.items())  # the window as that last call read it
        assert f"more {len(sent) - 1}" in texts and f"more {len(sent)}" not in texts


def test_a_window_deleted_while_being_read_reads_as_missing(redis_url, prefix, small_pages):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("w", max_items=200)
        _fill(w, random.Random(5), 12)
        got, _ = _drive(store, reads.read(w._state, "fifo"), lambda n: w.delete() if n == 1 else None)
        assert not got.exists and got.items() == []


def test_both_apis_read_in_bounded_calls(make_store, small_pages):
    writer, reader = make_store(), make_store()  # the reader has cached nothing
    w = writer.window("w", max_items=200)
    _fill(w, random.Random(11), 25)
    r = reader.window("w")
    assert _texts(r.items()) == _texts(w.items()) and len(w.items()) == 27
    assert _texts(r.items(limit=5)) == _texts(w.items())[-5:]
    assert r.build(cs.BuildOptions(max_tokens=6000, reserve_for_response=0)) == w.build(
        cs.BuildOptions(max_tokens=6000, reserve_for_response=0)
    )
    assert _texts(r.snapshot().items) == _texts(w.items())


def test_a_page_of_the_build_order_is_that_slice_and_costs_what_it_holds(make_store, r):
    """``ordered_items(offset=, limit=)`` (what ``contextstore watch`` reads per screen) equals the
    slice of the whole build order, with types and pins too, and the server sends a page's bytes,
    not the window's."""
    writer, reader = make_store(item_limit=2000), make_store(item_limit=2000, item_cache_bytes=0)
    w = writer.window("paged", max_items=2000)
    _fill(w, random.Random(13), 60)
    w.add_many([{"content": f"filler {n} " + "word " * 100, "type": "user_message"} for n in range(600)])
    whole = [i.id for i in w.ordered_items()]
    page = reader.window("paged")
    for offset, limit in ((0, 10), (7, 5), (300, 40), (650, 50), (5000, 5), (0, 0)):
        assert [i.id for i in page.ordered_items(offset=offset, limit=limit)] == whole[offset : offset + limit]
    assert [i.id for i in page.ordered_items(offset=640)] == whole[640:]
    docs = [i.id for i in w.ordered_items(types=["retrieved_document"])]
    in_page = set(whole[5:40])
    assert [i.id for i in page.ordered_items(types=["retrieved_document"], offset=5, limit=35)] == [
        d for d in docs if d in in_page
    ]
    before = r.info("stats")["total_net_output_bytes"]
    page.ordered_items(offset=300, limit=10)
    one_page = r.info("stats")["total_net_output_bytes"] - before
    before = r.info("stats")["total_net_output_bytes"]
    page.ordered_items()
    whole_read = r.info("stats")["total_net_output_bytes"] - before
    assert one_page * 20 < whole_read, (one_page, whole_read)
    for bad in ({"offset": -1}, {"offset": "3"}, {"limit": -2}):
        with pytest.raises(cs.InvalidOptionsError):
            page.ordered_items(**bad)


def test_iter_items_yields_the_arrival_order_page_by_page(make_store, small_pages):
    """``iter_items`` (what ``contextstore show`` and ``export`` read a big window with) yields
    what ``items()`` holds, whatever the page size, the type filter and the gaps removals leave."""
    writer, reader = make_store(item_limit=2000), make_store(item_limit=2000, item_cache_bytes=0)
    w = writer.window("iter", max_items=2000)
    _fill(w, random.Random(17), 40)
    for item in w.items()[3:30:4]:
        w.remove(item.id)  # seq gaps
    whole = [i.id for i in w.items()]
    it = reader.window("iter")
    for size in (1, 3, 7, 500):
        assert [i.id for i in it.iter_items(page_size=size)] == whole
    messages = [i.id for i in w.items(types=["user_message", "assistant_message"])]
    assert [i.id for i in it.iter_items(["user_message", "assistant_message"], page_size=4)] == messages
    assert list(it.iter_items([])) == [] and list(reader.window("nothing").iter_items()) == []
    for bad in ({"page_size": 0}, {"page_size": "3"}, {"types": ["gossip"]}):
        with pytest.raises(cs.InvalidOptionsError):
            it.iter_items(**bad)  # refused at the call, before a page is read


def test_iter_items_goes_on_after_the_last_seq_seen_while_the_window_changes(redis_url, prefix):
    """Between two pages, items are added and removed: every item present throughout comes
    exactly once, in arrival order, added ones come too, and a page costs what it holds."""
    with cs.ContextStore.from_url(redis_url, prefix=prefix, item_cache_bytes=0) as store:
        w = store.window("moving", max_items=1000)
        w.add_many([{"content": f"m{n} " + "word " * 80, "type": "user_message"} for n in range(700)])
        ids = [i.id for i in w.items()]
        raw = redis.Redis.from_url(redis_url)
        try:
            before = raw.info("stats")["total_net_output_bytes"]
            pages = w.iter_items(page_size=10)
            seen = [next(pages).id]
            one_page = raw.info("stats")["total_net_output_bytes"] - before
            before = raw.info("stats")["total_net_output_bytes"]
            w.items()
            whole = raw.info("stats")["total_net_output_bytes"] - before
        finally:
            raw.close()
        assert one_page * 20 < whole, (one_page, whole)
        seen += [next(pages).id for _ in range(14)]  # into the second page
        gone = {ids[3], ids[20], ids[400]}  # one seen, two not yet
        for item_id in gone:
            w.remove(item_id)
        added = w.add("added while reading").id
        seen += [i.id for i in pages]
        assert len(seen) == len(set(seen))
        assert [i for i in seen if i not in gone] == [i for i in ids if i not in gone] + [added]
        assert ids[400] not in seen


def _without_time(snap: Any) -> Any:
    out = msgspec.to_builtins(snap)
    out.pop("created_at")
    return out


def test_write_snapshot_writes_what_snapshot_holds_page_by_page(make_store, tmp_path, monkeypatch):
    """``write_snapshot`` (what ``contextstore export`` writes) is ``snapshot()``'s JSON, archive
    entries included, written a page of items at a time."""
    monkeypatch.setattr(snapshot_plans, "EXPORT_PAGE", 7)
    writer = make_store(summarizer=cs.ExtractiveSummarizer())
    w = writer.window("snap", max_items=200, max_tokens=100_000)
    _fill(w, random.Random(21), 40)
    w.configure(max_tokens=w.stats().current_tokens + 100)
    assert w.compact("summarize", target_percent=50)  # a summary and its archive entry
    reader = make_store().window("snap")
    path = tmp_path / "snap.json"
    with path.open("wb") as fp:
        fp.write(b"kept ")
        n = reader.write_snapshot(fp)
    data = path.read_bytes()
    assert data.startswith(b"kept ")
    written = msgspec.json.decode(data[5:], type=cs.ContextSnapshot)
    whole = reader.snapshot()
    assert n == len(whole.items) > 7 and written.archive and _without_time(written) == _without_time(whole)
    with (tmp_path / "empty.json").open("wb") as fp:
        assert make_store().window("no-such").write_snapshot(fp) == 0


def test_write_snapshot_starts_again_when_the_window_changes_between_pages(redis_url, prefix, tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot_plans, "EXPORT_PAGE", 5)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("moving", max_items=200)
        w.add_many([f"message {n}" for n in range(23)])
        real, pages = store._execute, []

        def adding_once(request):
            reply = real(request)
            if isinstance(request, ScriptCall) and request.name == "list":
                pages.append(request.args[0])
                if len(pages) == 2:
                    w.remove("ctx-1")  # written with the first page
            return reply

        store._execute = adding_once  # type: ignore[method-assign]
        path = tmp_path / "moving.json"
        with path.open("wb") as fp:
            assert w.write_snapshot(fp) == 22
        store._execute = real  # type: ignore[method-assign]
        written = msgspec.json.decode(path.read_bytes(), type=cs.ContextSnapshot)
        assert [i.content for i in written.items] == [i.content for i in w.items()]
        assert len(pages) > 5 + 2  # the first two pages of 23 items, then all 22 again


def test_write_snapshot_refuses_what_is_not_a_seekable_binary_file(make_store, tmp_path):
    w = make_store().window("snap-bad")
    w.add("one")
    closed = (tmp_path / "closed.json").open("wb")
    closed.close()
    with (tmp_path / "text.json").open("w") as text:
        for bad in (None, "a path", text, closed):
            with pytest.raises(cs.InvalidOptionsError, match="binary file open for writing"):
                w.write_snapshot(bad)
    assert (tmp_path / "text.json").read_text() == "" and len(w.items()) == 1
