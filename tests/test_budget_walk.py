"""A build whose budget, not ``max_history_items``, decides how much conversation it takes reads
what that budget can use: its facts read walks the conversation newest first in pages until the
budget fills, then reads from ``:sizes`` only the older messages that may still fit what is left
(``plans/facts_reach.py``). Each build chooses exactly what a whole read chooses, on windows above
and below a page, with ``max_history_items`` above the window and binding inside it, with relevance
scores ordering the documents before the conversation, with a writer acting between the pages;
``:sizes`` stays true through every way of writing items."""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis

import contextstore as cs
from contextstore.core import layout
from contextstore.core.parts import text_of
from contextstore.errors import CorruptWindowError
from contextstore.plans import facts_reach, facts_read

from support import on_cluster, same_build, whole_reads

KINDS = ("openai", "anthropic", "text")


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "look", "arguments": "{}"}}


def _fill(w: Any, n: int, seed: int = 7, shared_group: bool = False) -> None:
    """A system prompt, a pinned user message and note, documents before the conversation and a custom item after
    it, then ``n`` turns: messages of 1-150 words (a short one every few; of one token, now and
    then in the older half only: what the room a budget leaves may still take there), a tool call
    and its result every fifth turn; with ``shared_group``, one group of the caller's own that
    holds two messages."""
    rng = random.Random(seed)
    w.add("You are terse.", role="system")
    w.add("the user's standing request, pinned", role="user", pinned=True)  # in every build, however old
    w.add("remember the code word", type="working_memory", pinned=True)
    w.add("a retrieved fact " * 20, type="retrieved_document", priority=3)
    w.add("a custom note " * 5, type="custom")
    batch: list[dict[str, Any]] = []
    for t in range(n):
        size = rng.choice([1, 2, 3, 40, 80, 150]) if t % 4 else rng.choice([60, 90])
        tiny = t < n // 2 and t % 9 == 4  # a one-token message, only in the older half
        batch.append({"content": "k" if tiny else f"q{t} " + "word " * size, "role": "user"})
        if t % 5 == 2:
            batch.append({"content": "", "role": "assistant", "metadata": {"tool_calls": [_call(f"c{t}")]}})
            batch.append({"content": f"r{t} " + "data " * 30, "role": "tool", "metadata": {"tool_call_id": f"c{t}"}})
        batch.append({"content": f"a{t} " + "because " * rng.choice([2, 30, 70]), "role": "assistant"})
        if len(batch) >= 200:
            w.add_many(batch)
            batch = []
    if batch:
        w.add_many(batch)
    if shared_group:
        w.add_many([
            {"content": "a pair, first", "role": "user", "group": "pair"},
            {"content": "a pair, second", "role": "assistant", "group": "pair"},
        ])  # fmt: skip


def _build(w: Any, kind: str, opts: cs.BuildOptions) -> Any:
    return w.build_structured(opts) if kind == "text" else w.build_messages_structured(opts, format=kind)


def _whole(make_store: Any, wid: str, kind: str, opts: cs.BuildOptions) -> Any:
    with whole_reads():
        return _build(make_store().window(wid), kind, opts)


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of 32 ids and no window read whole at once: a window of hundreds of items walks as one
    of many thousands does."""
    monkeypatch.setattr(facts_read, "FIRST_PAGE", 32)
    monkeypatch.setattr(facts_read, "EVERY_ATTRS", 0)


@pytest.fixture
def jumps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """What each jump of a facts read listed from ``:sizes`` (None: it found the index short)."""
    real, listed = facts_reach.Jump.took, []

    def took(self: Any, *args: Any) -> Any:
        listed.append(found := real(self, *args))
        return found

    monkeypatch.setattr(facts_reach.Jump, "took", took)
    yield listed


@pytest.mark.parametrize("turns", [12, 260], ids=["within a page", "pages"])  # 260: ~600 items, no listpack
@pytest.mark.parametrize("cap", ["above the window", "binding"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_build_kind_with_a_large_cap_chooses_what_a_whole_read_chooses(
    make_store, small_pages, jumps, turns, cap, kind
):
    w = make_store().window("w", max_tokens=10**7)
    _fill(w, turns)
    messages = sum(1 for i in w.items() if i.type.value in layout.SIZED_TYPES)
    most = 100_000 if cap == "above the window" else messages * 2 // 3
    for budget in (1500, 4000):
        opts = cs.BuildOptions(max_tokens=budget, reserve_for_response=0, max_history_items=most)
        whole = _whole(make_store, "w", kind, opts)
        for cache in (0, None):
            store = make_store(**({} if cache is None else {"item_cache_bytes": cache}))
            same_build(_build(store.window("w"), kind, opts), whole, (kind, cap, budget, cache))
            same_build(_build(store.window("w"), kind, opts), whole, (kind, cap, budget, cache, "again"))
    if turns > 100:  # the walk stopped where the budget filled, and found older messages that fit
        assert any(jumps)


class _Scorer:
    """Relevance scores that put the shortest texts first (an order unlike build order, where the
    largest documents came first), and the number of items each call scored."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def score(self, query: str | None, items: Sequence[cs.ContextItem]) -> list[float]:
        self.calls.append(len(items))
        return [-len(text_of(i.content)) - zlib.crc32(i.id.encode()) / 2**32 for i in items]


def _documents(w: Any, n: int, seed: int = 3) -> None:
    """Three documents of 400 words, then ``n`` documents and working notes of 5-40 words: in
    build order the large ones fill most of a small budget, best first (the short ones) they
    leave the conversation more, so the room the walk works out follows their scores."""
    rng = random.Random(seed)
    w.add_many([{"content": f"big{d} " + "fact " * 400, "type": "retrieved_document"} for d in range(3)])
    w.add_many([
        {"content": f"doc{d} " + "fact " * rng.choice([5, 20, 40]),
         "type": "retrieved_document" if d % 3 else "working_memory"}
        for d in range(n)
    ])  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_a_build_with_a_query_stops_where_its_budget_fills(make_store, small_pages, jumps, kind):
    """With a query and a relevance scorer the documents before the conversation go best first, so
    the room they leave it follows their scores: the walk reads them whole, scores them, and stops
    where the budget fills as any build does. It chooses what a whole read chooses, and the scorer
    runs once a build."""
    w = make_store().window("ranked", max_tokens=10**7)
    _fill(w, 260)
    _documents(w, 21)
    for budget in (1050, 1300, 1350, 1600, 1900, 4000):  # where the order of the documents matters
        opts = cs.BuildOptions(max_tokens=budget, reserve_for_response=0, max_history_items=100_000, query="facts")
        whole = _whole(lambda **kw: make_store(relevance_scorer=_Scorer(), **kw), "ranked", kind, opts)
        for cache in (0, None):
            scorer = _Scorer()
            store = make_store(relevance_scorer=scorer, **({} if cache is None else {"item_cache_bytes": cache}))
            same_build(_build(store.window("ranked"), kind, opts), whole, (kind, budget, cache))
            assert scorer.calls == [26], scorer.calls  # 24 documents and the two of _fill
    assert jumps  # the walk worked out the room the scored documents leave, and the budget decided


@pytest.mark.parametrize("kind", KINDS)
def test_facts_a_smaller_build_read_serve_a_larger_one_only_as_a_start(make_store, small_pages, kind):
    """A caching store builds an unchanged window with a small ``max_history_items`` or budget,
    then with a larger one: the facts the first read (as far as its cap, or its budget, reached;
    and a build with a query's documents in their order) do not hold every message the second
    may take, so its walk reads on from them."""
    w = make_store().window("grows", max_tokens=10**7, max_items=1000)
    _fill(w, 260)
    store = make_store(relevance_scorer=_Scorer())  # a cap below max_items: a caching store walks
    builds = [(10**6, 10), (10**6, 100), (10**6, 10), (10**6, 300), (1500, 990), (12000, 990), (1300, 990)]
    builds += [(6000, 990), (1900, 990, "facts"), (8000, 990, "facts")]
    for n, (budget, cap, *query) in enumerate(builds):
        opts = cs.BuildOptions(
            max_tokens=budget, reserve_for_response=0, max_history_items=cap, query=[*query, None][0]
        )
        whole = _whole(lambda **kw: make_store(relevance_scorer=_Scorer(), **kw), "grows", kind, opts)
        same_build(_build(store.window("grows"), kind, opts), whole, (n, kind, budget, cap, query))
        if n == 7:
            _documents(w, 21)


@pytest.mark.parametrize("kind", ["openai", "text"])
def test_a_full_budget_s_facts_serve_a_larger_one_as_a_start(make_store, small_pages, kind):
    """A caching store's build whose budget was full left out the older units it read for their
    groups (it could offer none); a larger build on the unchanged window walks on from those
    facts, and reads those units again when it may offer them."""
    w = make_store().window("full", max_tokens=10**7, max_items=1000)
    _fill(w, 260)
    for first in (1063, 1126, 1140, 1385):  # budgets the newest conversation fills to the token here
        store = make_store()
        for budget in (first, 4000):
            opts = cs.BuildOptions(max_tokens=budget, reserve_for_response=0, max_history_items=990)
            same_build(
                _build(store.window("full"), kind, opts), _whole(make_store, "full", kind, opts), (first, budget)
            )


@pytest.mark.parametrize("seed", [0, 1, 7])  # 7: a walk past the facts it reused, where a group straddles a page
@pytest.mark.parametrize("evicting", [False, True], ids=["", "evicting"])
@pytest.mark.parametrize("api", ["sync"], indirect=True)  # one plan: the asyncio shell runs it in the other tests
def test_a_caching_store_s_builds_between_writes_choose_what_whole_reads_choose(
    make_store, small_pages, seed, evicting
):
    """Builds of every kind, budget, cap and query, one after another on a caching store, with
    adds (``evicting``: each evicts the oldest unpinned item), tool calls, removals, pins and
    compactions between some of them: each chooses what a whole read chooses, whatever facts the
    store kept from the build before."""
    rng = random.Random(seed)
    w = make_store().window("mixed", max_tokens=10**7, max_items=1000)
    _fill(w, 200, seed=seed)
    _documents(w, 9, seed=seed)
    if evicting:
        w.configure(max_items=w.stats().total_items)
    store = make_store(relevance_scorer=_Scorer())
    for step in range(40):
        kind, budget = rng.choice(KINDS), rng.choice([700, 1100, 1600, 2500, 4000, 9000])
        cap, query = rng.choice([10, 60, 300, 990]), rng.choice([None, None, "facts"])
        opts = cs.BuildOptions(max_tokens=budget, reserve_for_response=0, max_history_items=cap, query=query)
        whole = _whole(lambda **kw: make_store(relevance_scorer=_Scorer(), **kw), "mixed", kind, opts)
        same_build(_build(store.window("mixed"), kind, opts), whole, (seed, step, kind, budget, cap, query))
        change = rng.random()
        if change < 0.2:
            w.add(
                rng.choice(["k", "a short one", "a longer message " + "word " * 60]),
                role=rng.choice(["user", "assistant"]),
            )
        elif change < 0.3:
            w.remove(rng.choice([i.id for i in w.items(limit=40) if not i.pinned and not i.group]) or "")
        elif change < 0.35:
            w.pin(rng.choice([i.id for i in w.items(limit=300) if i.type.value in layout.SIZED_TYPES]) or "")
        elif change < 0.4:
            w.add_many([
                {"content": "", "role": "assistant", "metadata": {"tool_calls": [_call(f"x{step}")]}},
                {"content": "r " * 30, "role": "tool", "metadata": {"tool_call_id": f"x{step}"}},
            ])  # fmt: skip
        elif change < 0.43:
            w.compact("remove_oldest", target_percent=80)


def test_a_big_window_reads_a_small_part_of_its_conversation(make_store, redis_url, r):
    """1,300 turns (~3,000 items, more than a page): a stateless chat build with every message
    competing reads the attrs of a small part of the conversation (the tool calls and results it
    reads whole: items that are not messages compete whatever ``max_history_items`` says)."""
    if on_cluster(redis_url):
        pytest.skip("counts one server's commands")
    w = make_store(item_limit=5000).window("big", max_tokens=10**7, max_items=5000)
    _fill(w, 1300)
    count = w.stats().total_items
    opts = cs.BuildOptions(max_tokens=4000, reserve_for_response=0, max_history_items=100_000)
    r.config_resetstat()
    got = make_store(item_cache_bytes=0).window("big").build_messages_structured(opts)
    listed = {*got.included_item_ids, *got.excluded_item_ids, *got.omitted_item_ids}
    messages = [i.id for i in w.items() if i.type.value in layout.SIZED_TYPES]
    read = sum(1 for i in messages if i in listed)
    assert read < len(messages) * 0.3, (read, len(messages), count)
    same_build(got, _whole(make_store, "big", "openai", opts))


@pytest.mark.parametrize("kind", KINDS)
def test_pinned_messages_count_for_no_cap_and_stay_however_old(make_store, small_pages, kind):
    """Pinned messages spread through a conversation whose ``max_history_items`` binds: the walk's
    count of the messages above its floor leaves them out (the cap counts no pinned unit), and
    the ones older than the floor stay in every build."""
    w = make_store().window("pins", max_tokens=10**7, max_items=1000)
    w.add_many([
        {"content": f"p{n}" if n % 10 == 0 else "k" if n < 300 and n % 5 == 4 else f"message {n} " + "word " * 40,
         "role": ("user", "assistant")[n % 2], "pinned": n % 10 == 0}
        for n in range(600)
    ])  # fmt: skip
    for budget in (1200, 2000, 3000):
        opts = cs.BuildOptions(max_tokens=budget, reserve_for_response=0, max_history_items=300)
        got = _build(make_store(item_cache_bytes=0).window("pins"), kind, opts)
        same_build(got, _whole(make_store, "pins", kind, opts), (kind, budget))


def test_a_walk_whose_budget_is_full_reads_nothing_of_sizes(make_store, redis_url, r, small_pages):
    """When what the newest conversation takes leaves less than a message's overhead, no older
    message can fit: the walk stops there without counting or listing ``:sizes``."""
    if on_cluster(redis_url):
        pytest.skip("counts one server's commands")
    w = make_store().window("full", max_tokens=10**7)
    w.add_many([{"content": f"m{n}", "role": ("user", "assistant")[n % 2], "token_count": 100} for n in range(400)])
    budget = layout.REPLY_PRIMING + 20 * (100 + layout.MESSAGE_OVERHEAD)  # the 20 newest, to the token
    opts = cs.BuildOptions(max_tokens=budget, reserve_for_response=0, max_history_items=100_000)
    r.config_resetstat()
    got = make_store(item_cache_bytes=0).window("full").build_messages_structured(opts)
    stats = r.info("commandstats")
    assert len(got.included_item_ids) == 20 and got.total_tokens == budget
    assert "cmdstat_zcount" not in stats and "cmdstat_zcard" not in stats, sorted(stats)
    same_build(got, _whole(make_store, "full", "openai", opts))


@pytest.mark.parametrize("late", ["a question", "a document"])
@pytest.mark.parametrize("when", ["between pages", "between the page and the jump", "after the jump"])
def test_a_writer_between_pages_gives_the_build_of_the_window_it_left(
    make_store, redis_url, prefix, small_pages, when, late
):
    """Another worker adds while a build walks: the facts read notices (every round trip checks
    the meta's stamp), reads again, and the build is a whole read's of the window after the add.
    A late document, with a build that has a query, changes the scores the walk's room came from."""
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts")
    other = cs.ContextStore.from_url(redis_url, prefix=prefix)  # sync: it writes in the middle of an async build
    writer = other.window("moving", max_tokens=10**7)
    _fill(writer, 260)
    query = {"a document": "facts"}.get(late)
    opts = cs.BuildOptions(max_tokens=2500, reserve_for_response=0, max_history_items=100_000, query=query)
    if query:
        _documents(writer, 21)
    # the shortest document scores best: it goes first and changes the room the others leave
    adds = {"a question": {"role": "user"}, "a document": {"type": "retrieved_document"}}[late]
    trips: list[str] = []
    real_commands, real_jump = facts_read.Walk.commands, facts_reach.Jump.commands
    wrote: list[str] = []

    def act(where: str) -> None:
        trips.append(where)
        first = {"between pages": ("page", 2), "between the page and the jump": ("jump", 1)}.get(when, ("page", 99))
        if not wrote and trips.count(first[0]) == first[1]:
            wrote.append(writer.add("a late question?", **adds).id or "")

    def page(self: Any, k: Any) -> Any:
        act("page")
        return real_commands(self, k)

    def jump(self: Any, key: str) -> Any:
        act("jump")
        out = real_jump(self, key)
        if when == "after the jump" and not wrote:
            wrote.append(writer.add("a late question?", **adds).id or "")
        return out

    facts_read.Walk.commands, facts_reach.Jump.commands = page, jump  # type: ignore[method-assign]
    try:
        got = (
            make_store(item_cache_bytes=0, relevance_scorer=_Scorer()).window("moving").build_messages_structured(opts)
        )
    finally:
        facts_read.Walk.commands, facts_reach.Jump.commands = real_commands, real_jump  # type: ignore[method-assign]
    assert wrote and "jump" in trips
    assert wrote[0] in got.included_item_ids  # the newest user message (the best document): in every chat build
    same_build(got, _whole(lambda **kw: make_store(relevance_scorer=_Scorer(), **kw), "moving", "openai", opts))
    other.close()


def _sized(r: redis.Redis, prefix: str, wid: str) -> dict[str, float]:
    return {k.decode(): s for k, s in r.zrange(f"{prefix}:{{{wid}}}:sizes", 0, -1, withscores=True)}


def _check_sizes(w: Any, r: redis.Redis, prefix: str) -> None:
    """``:sizes`` holds every message of ``w``, scored by its size class and seq, and nothing else."""
    want = {
        i.id: float(layout.size_score(i.token_count, i.seq)) for i in w.items() if i.type.value in layout.SIZED_TYPES
    }
    assert _sized(r, prefix, w.window_id) == want
    assert w.verify().ok


def test_sizes_stays_true_through_every_way_of_writing_items(make_store, redis_url, r, prefix):
    if on_cluster(redis_url):
        pytest.skip("reads keys with a plain client")
    store = make_store(summarizer=cs.ExtractiveSummarizer())
    w = store.window("s", max_tokens=10**7, max_items=400)
    _fill(w, 60)
    _check_sizes(w, r, prefix)
    w.add_many([{"content": f"more {n} " + "x " * n, "role": "user"} for n in range(200)])  # evicts the oldest
    _check_sizes(w, r, prefix)
    w.remove(w.items(types=["user_message"])[-3].id)
    w.pop(2)
    _check_sizes(w, r, prefix)
    w.compact(cs.CompactionStrategy.CLEAR_TOOL_RESULTS, target_percent=1)
    w.compact(cs.CompactionStrategy.REMOVE_LOW_PRIORITY, target_percent=60)
    _check_sizes(w, r, prefix)
    w.configure(max_tokens=w.stats().current_tokens)
    assert w.compact(cs.CompactionStrategy.SUMMARIZE, target_percent=50)
    _check_sizes(w, r, prefix)
    w.undo_summary(next(i.id for i in w.items() if "." in (i.id or "")))  # ctx-<seq>.<n>
    _check_sizes(w, r, prefix)
    rewound = w.rewind(w.items(types=["user_message"])[-10].id)
    _check_sizes(w, r, prefix)
    w.undo_rewind(rewound)
    _check_sizes(w, r, prefix)
    child = w.fork("s-child")
    _check_sizes(child, r, prefix)
    w.restore(child.snapshot())
    _check_sizes(w, r, prefix)
    w.clear()  # the pinned items stay
    _check_sizes(w, r, prefix)
    w.clear(include_pinned=True)
    assert _sized(r, prefix, "s") == {} and w.verify().ok


def test_a_window_written_before_sizes_builds_as_a_whole_read_does(
    make_store, redis_url, r, prefix, small_pages, jumps
):
    """A window whose ``:sizes`` lacks messages (written before it was kept, or an upgrade's
    adds since) is walked in pages: its count tells."""
    if on_cluster(redis_url):
        pytest.skip("writes keys with a plain client")
    w = make_store().window("old", max_tokens=10**7)
    _fill(w, 260)
    r.delete(f"{prefix}:{{old}}:sizes")
    w.add("one since the upgrade", role="user")
    opts = cs.BuildOptions(max_tokens=2000, reserve_for_response=0, max_history_items=100_000)
    got = make_store(item_cache_bytes=0).window("old").build_messages_structured(opts)
    same_build(got, _whole(make_store, "old", "openai", opts))
    assert jumps == [None]  # it found the index short (and never tried again), and read on in pages
    assert w.verify().ok  # messages it lacks are not a problem


def test_a_corrupt_sizes_never_changes_a_build(make_store, redis_url, r, prefix, small_pages):
    """An id in ``:sizes`` that is no item sends the build to a whole read; a key of another type
    is ``CorruptWindowError``; a score its message's tokens do not give is named by verify."""
    if on_cluster(redis_url):
        pytest.skip("writes keys with a plain client")
    w = make_store().window("bad", max_tokens=10**7)
    _fill(w, 260)
    key, meta = f"{prefix}:{{bad}}:sizes", f"{prefix}:{{bad}}:meta"
    opts = cs.BuildOptions(max_tokens=2000, reserve_for_response=0, max_history_items=100_000)
    victim = w.items(types=["user_message"])[3]
    r.zrem(key, victim.id)
    r.zadd(key, {"no-such-item": 1 * layout.SIZE_WEIGHT + 5})  # the count still holds
    got = make_store(item_cache_bytes=0).window("bad").build_messages_structured(opts)
    same_build(got, _whole(make_store, "bad", "openai", opts))
    assert any("no-such-item" in p for p in w.verify().problems)
    r.zrem(key, "no-such-item")
    r.zadd(key, {victim.id: 30 * layout.SIZE_WEIGHT + victim.seq})
    assert any(victim.id in p and ":sizes score" in p for p in w.verify().problems)
    r.delete(key)
    r.set(key, "not a sorted set")
    r.hincrby(meta, "seq", 0)
    with pytest.raises(CorruptWindowError):
        make_store(item_cache_bytes=0).window("bad").build_messages_structured(opts)


def test_a_group_of_two_messages_counts_the_cap_by_pages(make_store, small_pages, jumps):
    """Where ``max_history_items`` binds and a group of the caller's holds two messages, counting
    messages from ``:sizes`` cannot place the cap: the build walks in pages, and is exact."""
    w = make_store().window("pairs", max_tokens=10**7)
    _fill(w, 260, shared_group=True)
    assert w._state.config is not None
    messages = sum(1 for i in w.items() if i.type.value in layout.SIZED_TYPES)
    opts = cs.BuildOptions(max_tokens=2000, reserve_for_response=0, max_history_items=messages // 2)
    got = make_store(item_cache_bytes=0).window("pairs").build_messages_structured(opts)
    same_build(got, _whole(make_store, "pairs", "openai", opts))
    assert jumps == []


def test_a_budget_that_takes_much_of_a_window_reads_its_attrs_at_once(make_store, redis_url, r, jumps):
    """Where the walk's first page (what fills the budget, twice) would be half the window or
    more, one ``HGETALL`` of ``:attrs`` costs the shard less than pages and a jump: the build reads
    every attrs after the meta (a fleet's long sessions, a third over their budget)."""
    if on_cluster(redis_url):
        pytest.skip("counts one server's commands")
    w = make_store(item_limit=5000).window("third", max_tokens=10**7, max_items=5000)
    _fill(w, 520)  # ~1,200 items: more than a window read whole without a budget's say
    tokens = w.stats().current_tokens
    opts = cs.BuildOptions(max_tokens=tokens // 3, reserve_for_response=0, max_history_items=100_000)
    r.config_resetstat()
    got = make_store(item_cache_bytes=0).window("third").build_messages_structured(opts)
    stats = r.info("commandstats")
    assert stats["cmdstat_hgetall"]["calls"] == 2 and "cmdstat_lrange" not in stats and not jumps
    same_build(got, _whole(make_store, "third", "openai", opts))


def test_a_store_builds_each_kind_from_the_facts_another_kind_read(make_store, small_pages, jumps):
    """A caching store keeps the last facts read of a window, whichever build read them: a text
    build from a chat build's facts (whose messages cost 4 more each, so fewer were listed), and a
    chat build from a text build's, each choose what a whole read chooses."""
    w = make_store().window("mixed", max_tokens=10**7, max_items=1000)
    _fill(w, 260)
    store = make_store()  # a cap below the window's max_items: a caching store walks (else it reads all at once)
    for n, (kind, budget) in enumerate([("openai", 1500), ("text", 1500), ("anthropic", 4000), ("text", 900)] * 2):
        opts = cs.BuildOptions(max_tokens=budget, reserve_for_response=0, max_history_items=990)
        same_build(_build(store.window("mixed"), kind, opts), _whole(make_store, "mixed", kind, opts), (n, kind))
        if n == 3:
            w.add("one more, between builds", role="user")
    assert any(jumps)
