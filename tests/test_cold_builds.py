"""Cold chat builds move only what fits: a store that keeps no items (``item_cache_bytes=0``, a
stateless worker) chooses from the window's facts (``:meta``, ``:attrs`` with their letters,
``:pinned``) and reads the bodies of the chosen items only (plans/chat.py ``_from_facts``). The
result is exactly a whole read's; windows whose facts do not serve are read whole."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import redis

import contextstore as cs
from contextstore.core import facts
from contextstore.plans import build_read, facts_read, facts_walk, reads

from support import key, on_cluster, same_build, whole_reads

OPTS = cs.BuildOptions(max_tokens=600, reserve_for_response=0, max_history_items=1000)


def _call(call_id: str, name: str = "lookup") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": '{"q": 1}'}}


def _chat(w, turns: int) -> None:
    """A conversation of ``turns`` turns, a tool call and its result every third."""
    w.add("You are terse.", role="system", pinned=True)
    for n in range(turns):
        w.add(f"question {n} " + "why " * 20, role="user")
        if n % 3 == 0:
            w.add("", role="assistant", metadata={"tool_calls": [_call(f"call_{n}")]})
            w.add(f"result {n} " + "data " * 30, role="tool", metadata={"tool_call_id": f"call_{n}"})
        w.add(f"answer {n} " + "because " * 25, role="assistant")


def _same(a: object, b: object) -> None:
    assert msgspec.to_builtins(a) == msgspec.to_builtins(b)


def _whole(redis_url: str, prefix: str, wid: str, opts: cs.BuildOptions, fmt: str = "openai") -> Any:
    """The build of a store with an item cache: it reads the window whole."""
    with whole_reads(), cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:
        return fresh.window(wid).build_messages_structured(opts, format=fmt)


def _out_bytes(r: redis.Redis) -> int:
    return int(r.info("stats")["total_net_output_bytes"])


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_a_stateless_build_reads_only_the_bodies_it_takes(make_store, redis_url, prefix, r, bodies_asked, fmt):
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts; counts one server's commands")
    _chat(make_store().window("cold", max_tokens=50_000), 60)  # ~6x the budget
    stateless = make_store(item_cache_bytes=0).window("cold")
    expected = _whole(redis_url, prefix, "cold", OPTS, fmt)
    r.config_resetstat()
    before = _out_bytes(r)
    got = stateless.build_messages_structured(OPTS, format=fmt)
    cold_bytes = _out_bytes(r) - before
    stats = r.info("commandstats")
    _same(got, expected)
    assert bodies_asked == [got.included_item_ids]  # in the order they render
    assert len(got.included_item_ids) < len(got.excluded_item_ids)
    assert stats["cmdstat_hgetall"]["calls"] == 2 and "cmdstat_hscan" not in stats  # :meta, then :attrs
    # three round trips: the meta, every attrs (a reach of 1000 holds every item), then the bodies
    # with the built event in the same transaction
    assert stats["cmdstat_exec"]["calls"] == 3 and r.xlen(f"{prefix}:{{cold}}:events") > 0
    assert sum(v["calls"] for k, v in stats.items() if k.split("_", 1)[1] in ("fcall", "evalsha")) == 1
    before = _out_bytes(r)
    _whole(redis_url, prefix, "cold", OPTS, fmt)
    assert cold_bytes < 0.5 * (_out_bytes(r) - before)


def test_a_stateless_build_of_a_small_window_within_its_budget_takes_two_round_trips(make_store, redis_url, prefix, r):
    """The first round trip's scan brings a small window's attrs whole; every item fits, and every
    body is read with the ``built`` event (not read whole first, then the event alone)."""
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts; counts one server's commands")
    _chat(make_store().window("fits", max_tokens=50_000), 12)  # ~40 items; a reach short of 512
    roomy = cs.BuildOptions(max_tokens=20_000, reserve_for_response=0, max_history_items=100)
    stateless = make_store(item_cache_bytes=0).window("fits")
    expected = _whole(redis_url, prefix, "fits", roomy)
    r.config_resetstat()
    got = stateless.build_messages_structured(roomy)
    stats = r.info("commandstats")
    _same(got, expected)
    assert not got.excluded_item_ids and not got.omitted_item_ids  # every item taken
    assert stats["cmdstat_exec"]["calls"] == 2 and stats["cmdstat_hscan"]["calls"] == 1
    assert stats["cmdstat_hgetall"]["calls"] == 1  # :meta; no whole read of :items
    assert sum(v["calls"] for k, v in stats.items() if k.split("_", 1)[1] in ("fcall", "evalsha")) == 1


def test_an_item_cache_smaller_than_a_build_keeps_within_its_bound(make_store, redis_url, prefix, r, bodies_asked):
    """A store whose item cache cannot keep what a build takes (``item_cache_bytes``) reads
    those bodies on every build, keeps no more than its bound, and chooses what a whole read
    does each time; one that can keeps them, and its next build of the unchanged window reads
    nothing."""
    _chat(make_store().window("huge", max_tokens=50_000), 60)
    expected = _whole(redis_url, prefix, "huge", OPTS)
    small = make_store(item_cache_bytes=2000)  # a build takes ~3 KB of content
    for _ in range(3):
        _same(small.window("huge").build_messages_structured(OPTS), expected)
    assert len(bodies_asked) == 3 and small._settings.item_cache._bytes <= 2000
    bodies_asked.clear()
    roomy = make_store(item_cache_bytes=20_000)
    for _ in range(2):
        _same(roomy.window("huge").build_messages_structured(OPTS), expected)
    assert len(bodies_asked) == 2 and roomy._settings.item_cache._bytes > 2000
    w = roomy.window("huge")
    r.config_resetstat()
    w.build_messages_structured(OPTS)
    assert "cmdstat_exec" not in r.info("commandstats")  # neither facts nor bodies: the event alone


def test_a_stateless_build_of_a_window_that_fits_reads_every_body_once(make_store, redis_url, prefix, bodies_asked):
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts")
    _chat(make_store().window("fits", max_tokens=50_000), 4)
    got = make_store(item_cache_bytes=0).window("fits").build_messages_structured(OPTS)
    _same(got, _whole(redis_url, prefix, "fits", OPTS))
    assert not got.excluded_item_ids and bodies_asked == [got.included_item_ids]


@pytest.mark.parametrize(
    "opts",
    [cs.BuildOptions(reserve_for_response=0), cs.BuildOptions(max_tokens=50_000, reserve_for_response=0)],
    ids=["the window's own budget", "a budget as large as the window's max_tokens"],
)
def test_a_build_within_the_windows_own_budget_reads_as_any_build(make_store, redis_url, prefix, bodies_asked, opts):
    """Without a budget of its own below the window's max_tokens, a build reads the same way:
    the facts, then the bodies it takes (here all of them)."""
    _chat(make_store().window("own", max_tokens=50_000), 30)
    got = make_store(item_cache_bytes=0).window("own").build_messages_structured(opts)
    assert bodies_asked == [got.included_item_ids]
    _same(got, _whole(redis_url, prefix, "own", opts))


def test_a_window_its_config_bounds_is_read_in_two_round_trips(make_store, redis_url, prefix, r, bodies_asked):
    """A window of the default config (a 50-item sliding window, no max_tokens): its item count
    and the build's budget bound what the facts read and the bodies move, so no call asks the
    window's size first."""
    if on_cluster(redis_url):
        pytest.skip("counts one server's commands")
    w = make_store().window("small")
    for n in range(30):
        w.add(f"message {n} " + "words " * 40, role="user" if n % 2 else "assistant")
    stateless = make_store(item_cache_bytes=0).window("small")
    r.config_resetstat()
    got = stateless.build_messages_structured(cs.BuildOptions(max_tokens=300, reserve_for_response=0))
    assert r.info("commandstats")["cmdstat_exec"]["calls"] == 2 and len(bodies_asked) == 1
    _same(got, _whole(redis_url, prefix, "small", cs.BuildOptions(max_tokens=300, reserve_for_response=0)))


def test_a_first_read_reaching_past_a_small_window_scans_nothing_and_reads_on_after_the_meta(
    make_store, redis_url, prefix, r
):
    """A stateless build whose options reach back past what a small window holds (512 items, a
    listpack hash: ``max_history_items`` of 1000 here) scans nothing of ``:attrs`` (a listpack's
    scan costs ~3x its ``HGETALL``): after the meta, every attrs follows in the next round trip
    when the walk's first page would hold every item, else the walk's reads. With a shorter reach
    the scan and the walk's first page come with the meta. Each build chooses what a whole read
    does."""
    if on_cluster(redis_url):
        pytest.skip("counts one server's commands")
    for wid, turns in (("few", 40), ("many", 250)):  # ~120 items; ~650: a hash table
        _chat(make_store().window(wid, max_items=1000), turns)
    walked = {}
    reach = cs.BuildOptions(max_tokens=600, reserve_for_response=0, max_history_items=250)  # a page of 516
    short = cs.BuildOptions(max_tokens=600, reserve_for_response=0)
    for wid, opts in (("few", OPTS), ("many", OPTS), ("many", reach), ("few", short)):
        stateless = make_store(item_cache_bytes=0).window(wid)
        r.config_resetstat()
        got = stateless.build_messages_structured(opts)
        stats = r.info("commandstats")
        calls = [stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("lrange", "zrangebyscore", "exec", "hgetall")]
        walked[wid, opts.max_history_items] = [*calls, stats.get("cmdstat_hscan", {}).get("calls", 0)]
        _same_choice(got, _whole(redis_url, prefix, wid, opts))
    assert walked["few", 1000] == [0, 0, 3, 2, 0]  # the meta, every attrs, the bodies
    assert walked["many", 1000] == [0, 0, 3, 2, 0]  # the same
    reach_walk = walked["many", 250]  # the meta, the walk (pages the budget sizes, :sizes), the bodies
    assert reach_walk[0] >= 1 and reach_walk[2] >= 3 and reach_walk[3:] == [1, 0]
    assert walked["few", 10] == [1, 2, 2, 1, 1]  # the scan and the page with the meta


def _parallel_calls(w) -> None:
    w.add("", role="assistant", metadata={"tool_calls": [_call("p1"), _call("p2", "other")]})
    w.add("first", role="tool", metadata={"tool_call_id": "p1"})
    w.add("second", role="tool", metadata={"tool_call_id": "p2"})


def _sourced_document(w) -> None:
    w.add("the handbook says so", type="retrieved_document", source_ref="handbook.md#3")


def _stored_before_letters(r: redis.Redis, prefix: str) -> None:
    key = f"{prefix}:{{whole}}:attrs"
    for item_id, value in r.hgetall(key).items():
        seq, tokens, priority, kind, _letters, group = value.decode().split("|", 5)
        old = f"{seq}|{tokens}|{priority}|{kind}" + (f"||{group}" if group else "")
        r.hset(key, item_id, old)


def test_a_window_whose_facts_cannot_choose_is_built_on_a_whole_read(make_store, redis_url, prefix, r, bodies_asked):
    if on_cluster(redis_url):
        pytest.skip("counts one server's commands")
    w = make_store().window("whole", max_tokens=50_000)
    _chat(w, 30)
    _stored_before_letters(r, prefix)
    got = make_store(item_cache_bytes=0).window("whole").build_messages_structured(OPTS)
    assert bodies_asked == []  # the facts did not serve: no body was read by them
    _same(got, _whole(redis_url, prefix, "whole", OPTS))


def _items_read(monkeypatch) -> list[list[Any]]:
    """The ids of each ``HMGET :items`` a facts read (``facts_walk.Walk``) sends."""
    asked: list[list[Any]] = []
    real = facts_walk.Walk.commands

    def recording(walk, keys):
        reads = real(walk, keys)
        asked.extend([list(c[2:]) for c in reads if c[0] == "HMGET" and c[1] == keys.items])
        return reads

    monkeypatch.setattr(facts_walk.Walk, "commands", recording)
    return asked


@pytest.mark.parametrize(
    "case, needing", [(_parallel_calls, 2), (_sourced_document, 1)], ids=["parallel tool calls", "a source_ref"]
)
def test_items_whose_letters_need_their_body_are_read_whole_with_the_facts(
    make_store, redis_url, prefix, r, bodies_asked, monkeypatch, case, needing
):
    """Parallel tool calls (letter ``L``) and a context item with a ``source_ref`` header (``R``)
    are chosen and costed with their bodies: the facts read takes those bodies in its next
    round trip, and the build reads the bodies of the other items it takes only, choosing
    exactly what a whole read chooses."""
    if on_cluster(redis_url):
        pytest.skip("counts one server's commands")
    w = make_store().window("needs", max_tokens=50_000)
    _chat(w, 30)
    case(w)
    for n in range(3):
        w.add(f"and then {n}", role="user")
        w.add(f"so {n}", role="assistant")
    walked = _items_read(monkeypatch)
    got = make_store(item_cache_bytes=0).window("needs").build_messages_structured(OPTS)
    assert len(walked) == 1 and len(walked[0]) == needing  # only the items that need them
    assert bodies_asked == [got.included_item_ids]
    _same(got, _whole(redis_url, prefix, "needs", OPTS))


def test_a_window_that_moves_between_the_facts_and_the_bodies_is_built_again(
    make_store, redis_url, prefix, monkeypatch
):
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts")
    other = cs.ContextStore.from_url(redis_url, prefix=prefix)  # sync: it writes in the middle of an async build
    writer = other.window("moving", max_tokens=50_000)
    _chat(writer, 30)
    real = build_read.read_bodies
    moved: list[str] = []

    def racing(state, got, stubs, event):
        if not moved:  # another worker adds between this build's two reads
            moved.append(writer.add("a question that came in meanwhile", role="user").id or "")
        return (yield from real(state, got, stubs, event))

    monkeypatch.setattr(build_read, "read_bodies", racing)
    whole = _counted(monkeypatch)
    got = make_store(item_cache_bytes=0).window("moving").build_messages_structured(OPTS)
    assert whole == []  # its facts read again, not the window whole
    expected = _whole(redis_url, prefix, "moving", OPTS)
    _same(got, expected)
    assert moved[0] in got.included_item_ids  # the newest user message: always in a chat build
    assert got.version == writer.stats().version
    other.close()


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The whole reads the builds made from now on (``build_read.read``), by what they read."""
    real, made = build_read.read, []

    def counted(state: Any, *args: Any) -> Any:
        made.append(args[0] if args else "")
        return (yield from real(state, *args))

    monkeypatch.setattr(build_read, "read", counted)
    return made


@pytest.mark.parametrize("cache", [0, None], ids=["stateless", "caching"])
@pytest.mark.parametrize("moved", ["facts", "bodies"])
def test_a_window_other_workers_write_between_round_trips_is_never_read_whole(
    make_store, redis_url, prefix, monkeypatch, cache, moved
):
    """A long session that other workers keep writing: a build whose facts came with every body it
    uses (a stateless store's build of a window that fits: one view of it) writes its ``built``
    event whatever came since, and one whose window moved before it read the bodies it lacks
    reads the facts again (from those it read, when its store keeps them): none reads the window
    whole."""
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts")
    other = cs.ContextStore.from_url(redis_url, prefix=prefix)
    writer = other.window("busy", max_tokens=50_000)
    _chat(writer, 30)
    fits = cs.BuildOptions(max_tokens=50_000, reserve_for_response=0, max_history_items=100_000)
    opts = fits if moved == "facts" else OPTS
    store = make_store(**({} if cache is None else {"item_cache_bytes": cache}))
    store.window("busy").build_messages_structured(opts)  # a caching store keeps what it read
    writer.add("one more", role="user")
    before = _whole(redis_url, prefix, "busy", opts)
    real, added = build_read.read_bodies, []

    def racing(state, got, stubs, event):
        if not added:
            added.append(writer.add("a question that came in meanwhile", role="user").id or "")
        return (yield from real(state, got, stubs, event))

    monkeypatch.setattr(build_read, "read_bodies", racing)
    whole = _counted(monkeypatch)
    got = store.window("busy").build_messages_structured(opts)
    assert added and whole == []
    if moved == "facts" and cache == 0:  # every body came with the facts: the window as they found it
        _same(got, before)
        assert added[0] not in got.included_item_ids
    else:
        _same(got, _whole(redis_url, prefix, "busy", opts))
        assert added[0] in got.included_item_ids
    other.close()


def test_letters_that_disagree_with_a_body_make_the_build_read_whole(make_store, redis_url, prefix, r, bodies_asked):
    """Letters written by another writer (or corrupted) never change a build: the bodies it
    reads are checked against them, and on a mismatch it builds on a whole read."""
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts")
    w = make_store().window("liar", max_tokens=50_000)
    _chat(w, 30)
    newest = w.items()[-1].id or ""  # an assistant answer, in every build that fits it
    key = f"{prefix}:{{liar}}:attrs"
    r.hset(key, newest, r.hget(key, newest).decode().replace("|A|", "|S|"))  # now a system message: placed first
    got = make_store(item_cache_bytes=0).window("liar").build_messages_structured(OPTS)
    assert newest in bodies_asked[0]  # chosen by its letters, read, found to disagree
    _same(got, _whole(redis_url, prefix, "liar", OPTS))


def test_each_item_keeps_the_letters_a_build_chooses_by(store, r, prefix):
    w = store.window("letters", max_tokens=50_000, default_strategy="clear_tool_results")
    w.add("be brief", role="developer")
    w.add("hi", role="user")
    w.add("", role="assistant", metadata={"tool_calls": [_call("c1")]})
    w.add("found " * 50, role="tool", metadata={"tool_call_id": "c1"})
    _parallel_calls(w)
    _sourced_document(w)
    w.add("x = 1", type="code")
    w.add("a note in the user's voice", type="text", role="user")
    w.add("", role="assistant", metadata={"tool_calls": [_call("c2")]}, group="turn-2")
    w.add("done", role="tool", metadata={"tool_call_id": "c2"})
    w.compact("clear_tool_results", target_percent=0.1)
    letters = {i.decode(): v.decode().split("|")[4] for i, v in r.hgetall(f"{prefix}:{{letters}}:attrs").items()}
    assert letters == {
        "ctx-1": "S",  # developer: a system message
        "ctx-2": "U",
        "ctx-3": "AK",  # one call, named as its group
        "ctx-4": "TQc",  # answers the call named as its group; cleared by the store since
        "ctx-5": "AL",  # parallel calls: the build needs the body to pair them
        "ctx-6": "TQ",  # the first of them: its group is p1
        "ctx-7": "TL",
        "ctx-8": "XR",  # a context item with a source_ref (its header needs the body)
        "ctx-9": "X",
        "ctx-10": "U",  # any type in the user's role
        "ctx-11": "AL",  # a call in a group of the caller's
        "ctx-12": "TL",
    }
    assert all(letters[i.id or ""].replace(facts.CLEARED, "") == facts.of_item(i) for i in w.items())
    assert w.verify().ok


def _attrs_asked(monkeypatch) -> list[int]:
    """How many ``:attrs`` fields each facts read asked for by name (its ``HMGET`` calls)."""
    asked: list[int] = []
    real = facts_walk.Walk.commands

    def counting(self, k):
        commands = real(self, k)
        asked.extend(len(c) - 2 for c in commands if c[0] == "HMGET" and c[1] == k.attrs)
        return commands

    monkeypatch.setattr(facts_walk.Walk, "commands", counting)
    return asked


def _same_choice(got: Any, whole: Any, case: str = "") -> None:
    """``got`` is ``whole`` but for ``omitted_item_ids`` and ``excluded_item_ids``: those of
    ``whole`` that ``got`` read (``support.same_build``)."""
    same_build(got, whole, case)


def _agent_window(w, turns: int, shape: str = "chat") -> None:
    """A long conversation with pinned and other context early on, tool calls throughout; then
    (``shape``) code between the last messages, or an agent's long run of steps after the last
    user message."""
    w.add("You are terse.", role="system", pinned=True)
    w.add("the handbook, chapter 1 " + "rules " * 150, type="retrieved_document", priority=60)
    w.add("def f(): pass", type="code", pinned=True)
    w.add("what the user told us " * 30, type="text", role="user", priority=0)  # context, in the user's role
    _chat(w, turns)
    w.add("note: keep it short", type="text", priority=10)
    if shape == "code between messages":
        for n in range(60):
            w.add(f"step {n} " + "ok " * 10, role="user" if n % 2 else "assistant")
            w.add_many([{"content": f"x{n}_{k} = {k}", "type": "code", "priority": 0} for k in range(6)])
    elif shape == "parallel tool calls":  # letters L: their bodies come with the facts
        for n in range(40):
            w.add(f"look up {n}", role="user")
            w.add("", role="assistant", metadata={"tool_calls": [_call(f"p{n}a"), _call(f"p{n}b", "other")]})
            w.add(f"found {n}a " + "data " * 20, role="tool", metadata={"tool_call_id": f"p{n}a"})
            w.add(f"found {n}b " + "data " * 20, role="tool", metadata={"tool_call_id": f"p{n}b"})
            w.add(f"so {n}", role="assistant")
    elif shape == "a long agent run":
        w.add("now fix every failing test", role="user")
        for n in range(150):
            w.add(f"step {n}: " + "trying " * 8, role="assistant")


#: the option sets a big window is built with (a text build takes four of them: it reads as a chat build does)
BIG_OPTS = {
    "10 messages": cs.BuildOptions(max_tokens=900, reserve_for_response=0),
    "3 messages": cs.BuildOptions(max_tokens=900, reserve_for_response=0, max_history_items=3),
    "40 messages, tight": cs.BuildOptions(max_tokens=300, reserve_for_response=0, max_history_items=40),
    "40 messages, arrival": cs.BuildOptions(
        max_tokens=5000, reserve_for_response=0, max_history_items=40, order="arrival"
    ),
    "no memory": cs.BuildOptions(max_tokens=900, reserve_for_response=0, include_relevant_memory=False),
    "no history": cs.BuildOptions(max_tokens=900, reserve_for_response=0, include_recent_history=False),
}
BIG_CASES = [("messages", name) for name in BIG_OPTS] + [
    ("text", name) for name in ("10 messages", "40 messages, tight", "no memory", "no history")
]


#: the cases built of each shape of window: every case, but parallel tool calls (letters L: their
#: bodies read with the facts) only with the two option sets that reach furthest back
SHAPES = {
    "chat": BIG_CASES,
    "code between messages": BIG_CASES,
    "a long agent run": BIG_CASES,
    "parallel tool calls": [(k, o) for k, o in BIG_CASES if o in ("40 messages, tight", "3 messages")],
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("api", ["sync"], indirect=True)  # one plan: the asyncio shell runs it in the other tests
def test_a_big_window_is_built_from_the_facts_of_what_the_build_can_offer(
    make_store, redis_url, prefix, r, bodies_asked, monkeypatch, shape
):
    """Of a window too large to scan in one call, a stateless build reads the facts of what it
    may offer only: pinned items, items that are not conversation messages, and the newest
    conversation back as far as ``max_history_items`` reaches (each with its tool-call group);
    a chat build then reads the bodies it takes, a text build those of what it may offer (it
    counts joints with their edges). Either chooses exactly what a whole read chooses;
    ``omitted_item_ids`` lists the items it read and left out, the start of the whole read's.
    One window of each shape takes every case (builds change nothing stored)."""
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts")
    monkeypatch.setattr(facts_read, "SCAN_COUNT", 1)  # ~670 items: a hash table, not read in one call
    w = make_store().window("long", max_items=1000)
    _agent_window(w, 200, shape)  # 670-1000 items: :attrs is a hash table
    count = len(w.items())
    asked = _attrs_asked(monkeypatch)
    for kind, options in SHAPES[shape]:
        opts, case = BIG_OPTS[options], f"{kind}, {options}"
        asked.clear()
        bodies_asked.clear()
        stateless = make_store(item_cache_bytes=0).window("long")
        r.config_resetstat()
        if kind == "messages":
            got = stateless.build_messages_structured(opts)
            assert bodies_asked == [got.included_item_ids], case
            _same_choice(got, _whole(redis_url, prefix, "long", opts), case)
        else:
            got = stateless.build_structured(opts)
            assert r.info("commandstats")["cmdstat_hgetall"]["calls"] == 1, case  # :meta; a whole read adds more
            with whole_reads(), cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:
                _same_choice(got, fresh.window("long").build_structured(opts), case)
        assert 0 < sum(asked) < count * 0.6, (case, asked, count)  # the tool results come with their calls


@pytest.mark.parametrize("kind", ["messages", "text"])
@pytest.mark.parametrize("limit", [None, 20_000], ids=["no budget", "the window's own budget"])
def test_a_window_too_large_to_read_whole_is_built_from_its_facts_without_a_budget_of_its_own(
    make_store, redis_url, prefix, r, bodies_asked, monkeypatch, kind, limit
):
    """A build without a budget of its own reads a window that fits one read whole (as the test
    above shows), but one over that page from its facts, as a build with a budget does."""
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts")
    monkeypatch.setattr(facts_read, "SCAN_COUNT", 1)
    monkeypatch.setattr(reads, "PAGE_IDS", 300)  # a whole read's page: the window is over it
    w = make_store().window("unbudgeted", max_items=1000, max_tokens=limit)
    _agent_window(w, 200)
    opts = cs.BuildOptions(reserve_for_response=0)
    stateless = make_store(item_cache_bytes=0).handle("unbudgeted")  # its config: the caller's
    r.config_resetstat()
    if kind == "messages":
        got = stateless.build_messages_structured(opts)
        assert bodies_asked == [got.included_item_ids]
    else:
        got = stateless.build_structured(opts)
    assert r.info("commandstats")["cmdstat_hgetall"]["calls"] == 1  # :meta; a whole read adds :items, :attrs
    with whole_reads(), cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:
        whole = fresh.window("unbudgeted")
        _same_choice(got, whole.build_messages_structured(opts) if kind == "messages" else whole.build_structured(opts))


def test_the_facts_count_only_while_the_window_holds_still(make_store, redis_url, prefix, r, bodies_asked, monkeypatch):
    """Every round trip of a facts read checks the window's epoch, seq and count: a window that
    changed between two is read again (then the build is the window's as it is after the
    change), and one that keeps changing is built on a whole read."""
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts")
    monkeypatch.setattr(facts_read, "SCAN_COUNT", 1)
    w = make_store().window("moving", max_items=1000)
    _agent_window(w, 200)  # ~670 items: :attrs is a hash table, which HSCAN reads in parts
    stateless = make_store(item_cache_bytes=0).window("moving")
    opts = cs.BuildOptions(max_tokens=900, reserve_for_response=0)
    real, trips = build_read.read_facts, []

    def adding_between_round_trips(every: bool):
        def read_facts(state, settled, recent, *rest):
            plan = real(state, settled, recent, *rest)
            request = next(plan)
            try:
                while True:
                    trips.append(request)
                    if len(trips) == 2 or (every and len(trips) > 2):  # another worker, outside this loop
                        with cs.ContextStore.from_url(redis_url, prefix=prefix, item_limit=2000) as other:
                            other.handle("moving").add(f"a question between round trips {len(trips)}", role="user")
                    request = plan.send((yield request))
            except StopIteration as stop:
                return stop.value

        return read_facts

    monkeypatch.setattr(build_read, "read_facts", adding_between_round_trips(every=False))
    once = stateless.build_messages_structured(opts)
    assert len(trips) > 3 and bodies_asked == [once.included_item_ids]  # read again, then it counted
    _same_choice(once, _whole(redis_url, prefix, "moving", opts))
    assert "a question between round trips 2" in str(once.messages)

    trips.clear()
    bodies_asked.clear()
    monkeypatch.setattr(build_read, "read_facts", adding_between_round_trips(every=True))
    moving = stateless.build_messages_structured(opts)
    assert bodies_asked == []  # never held still: a whole read
    assert moving.included_item_ids == _whole(redis_url, prefix, "moving", opts).included_item_ids


class _WordScorer:
    """A relevance scorer: how often the query's words occur in an item's text."""

    def score(self, query: str | None, items: list[cs.ContextItem]) -> list[float]:
        words = (query or "").split()
        return [float(sum(i.content.count(w) for w in words)) for i in items]


@pytest.mark.parametrize("kind", ["messages", "text"])
def test_a_build_with_relevance_scores_reads_the_texts_it_scores_and_the_facts_of_the_rest(
    make_store, redis_url, prefix, r, bodies_asked, monkeypatch, kind
):
    """A stateless build with a query and a relevance scorer reads the facts of what it can
    offer, and the texts of the retrieved documents and working memory it scores; it chooses
    what a whole read chooses (the scores reorder the documents)."""
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts")
    monkeypatch.setattr(facts_read, "SCAN_COUNT", 1)
    w = make_store().window("scored", max_items=1000)
    _agent_window(w, 200)
    for topic in ("ducks", "geese", "swans", "herons", "owls", "larks"):
        w.add(f"all about {topic}: " + f"{topic} " * 60, type="retrieved_document", priority=60)
    asked = _attrs_asked(monkeypatch)
    stateless = make_store(item_cache_bytes=0, relevance_scorer=_WordScorer()).window("scored")
    opts = cs.BuildOptions(max_tokens=400, reserve_for_response=0, query="owls")

    def built(window: Any, options: cs.BuildOptions) -> Any:
        return window.build_messages_structured(options) if kind == "messages" else window.build_structured(options)

    r.config_resetstat()
    got = built(stateless, opts)
    assert r.info("commandstats")["cmdstat_hgetall"]["calls"] == 1  # :meta; a whole read adds :items, :attrs
    assert 0 < sum(asked) < len(w.items()) * 0.6
    if kind == "messages":
        assert bodies_asked == [got.included_item_ids]
    with whole_reads(), cs.ContextStore.from_url(redis_url, prefix=prefix, relevance_scorer=_WordScorer()) as fresh:
        _same_choice(got, built(fresh.window("scored"), opts))
    unscored = built(make_store(item_cache_bytes=0).window("scored"), opts)
    assert "owls " * 60 in str(got) and "owls " * 60 not in str(unscored)  # the scores chose it


@pytest.mark.parametrize("kind", ["messages", "text"])
def test_a_build_that_compacts_chooses_from_the_facts_and_builds_on_the_window_it_left(
    make_store, redis_url, prefix, r, kind
):
    """``compact=True`` on a stateless store: the facts say whether the window is over the
    budget; the compaction runs on the server and the build is the compacted window's."""
    if on_cluster(redis_url):
        pytest.skip("a cluster's client reads with scripts")
    w = make_store().window("compacting", max_items=1000, max_tokens=16_000, compaction_threshold=100)
    _agent_window(w, 200)
    before = w.stats().current_tokens
    stateless = make_store(item_cache_bytes=0).window("compacting")
    opts = cs.BuildOptions(max_tokens=8_000, reserve_for_response=0, compact=True)
    r.config_resetstat()
    got = stateless.build_messages_structured(opts) if kind == "messages" else stateless.build_structured(opts)
    assert r.info("commandstats")["cmdstat_hscan"]["calls"] == 1  # the facts read came first
    after = w.stats()
    assert got.was_compacted and got.tokens_freed_by_compaction == before - after.current_tokens > 0
    assert got.version == after.version
    again = cs.BuildOptions(max_tokens=8_000, reserve_for_response=0)
    with whole_reads(), cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:
        whole = fresh.window("compacting")
        expected = whole.build_messages_structured(again) if kind == "messages" else whole.build_structured(again)
    assert got.included_item_ids == expected.included_item_ids and got.total_tokens == expected.total_tokens


def test_after_adds_alone_a_store_reads_the_facts_of_the_added_items_only(make_store, redis_url, prefix, monkeypatch):
    """A store that holds the window's last facts reads, after other stores only added items
    (the epoch held, and the item count grew by as much as the seq), the attrs of the added
    items alone: those with ids the store gave them with its first round trip (guessed by seq),
    the others by id; after a removal (or a change in place) it walks the window's facts again.
    Each build chooses what a whole read does."""
    monkeypatch.setattr(facts_read, "SCAN_COUNT", 1)  # :attrs read by the walk, not whole in one call
    w = make_store().window("appended", max_items=1000)
    _chat(w, 200)  # ~535 items: :attrs is a hash table
    opts = cs.BuildOptions(max_tokens=600, reserve_for_response=0, max_history_items=60)
    reader = make_store().window("appended")
    asked = _attrs_asked(monkeypatch)
    _same_choice(reader.build_messages_structured(opts), _whole(redis_url, prefix, "appended", opts))
    assert sum(asked) > 60
    asked.clear()
    w.add("one more?", role="user")
    w.add("and a note", type="text", priority=10)
    w.add("yes", role="assistant", id="my-own-id")
    _same_choice(reader.build_messages_structured(opts), _whole(redis_url, prefix, "appended", opts))
    assert sum(asked) == 1  # the added items' attrs alone: two guessed with the first round trip
    asked.clear()
    w.remove(w.items(limit=5)[0].id)  # a removal: the earlier facts may name an item gone
    w.add("after the removal", role="user")
    _same_choice(reader.build_messages_structured(opts), _whole(redis_url, prefix, "appended", opts))
    assert sum(asked) > 60


def test_in_a_small_window_a_store_guesses_fewer_added_ids(make_store, redis_url, prefix, monkeypatch):
    """Of a window small enough for its ``:attrs`` to be a listpack (up to 512 items), where each
    id looked up walks every field, a store with the last facts guesses 8 added ids rather than
    32; more added items than that it reads by id in the next round trip, and chooses what a
    whole read does."""
    monkeypatch.setattr(facts_read, "SCAN_COUNT", 1)  # :attrs read by the walk, not whole in one call
    w = make_store().window("small", max_items=1000)
    _chat(w, 40)  # ~120 items
    reader = make_store().window("small")
    _same_choice(reader.build_messages_structured(OPTS), _whole(redis_url, prefix, "small", OPTS))
    guessed: list[int] = []
    real = facts_read._guessed
    monkeypatch.setattr(facts_read, "_guessed", lambda last: guessed.append(len(got := real(last))) or got)
    asked = _attrs_asked(monkeypatch)
    for n in range(12):
        w.add(f"question {n}", role="user")
    _same_choice(reader.build_messages_structured(OPTS), _whole(redis_url, prefix, "small", OPTS))
    assert guessed == [facts_read.GUESSED_SMALL] == [8]
    assert sum(asked) == 12 - 8  # the added ids not guessed, read by id


def test_a_walk_that_cannot_reuse_the_last_facts_goes_as_deep_as_a_first_read(
    make_store, redis_url, prefix, monkeypatch, one_server
):
    """A store holding the window's last facts first reads a short page of the newest ids (what
    was added since is mostly fewer); when a removal means those facts cannot be reused, its next
    page reaches as far back as a first read's: one round trip more than a first read, not one
    per doubling of the page. (The plan's round trips are the same on every server.)"""
    monkeypatch.setattr(facts_read, "SCAN_COUNT", 1)  # :attrs read by the walk, not whole in one call
    w = make_store().window("deep", max_items=1000)
    _chat(w, 300)  # ~800 items: :attrs is a hash table on every server
    opts = cs.BuildOptions(max_tokens=600, reserve_for_response=0, max_history_items=100)
    reader = make_store().window("deep")
    rounds: list[int] = []
    took = facts_walk.Walk.took
    monkeypatch.setattr(facts_walk.Walk, "took", lambda walk, *a: rounds.append(1) or took(walk, *a))
    _same_choice(reader.build_messages_structured(opts), _whole(redis_url, prefix, "deep", opts))
    first, rounds[:] = len(rounds), []
    w.remove(w.items(limit=5)[0].id)  # the earlier facts may name an item gone
    w.add("after the removal", role="user")
    _same_choice(reader.build_messages_structured(opts), _whole(redis_url, prefix, "deep", opts))
    assert 0 < len(rounds) <= first + 1, (len(rounds), first)


def test_after_evictions_a_store_reads_the_facts_of_the_added_items_only(make_store, redis_url, prefix, monkeypatch):
    """A window at its item cap evicts its oldest unpinned units as other stores add. A store
    whose last facts hold every item then reads the attrs of the added items alone (guessed by
    seq with its first round trip, which also reads the oldest ids of ``:fifo``: the evicted are
    the ones before the oldest unpinned id), forgets the bodies of the evicted, and chooses what a
    whole read does; a removal that is not of the oldest makes it walk the window's facts again."""
    monkeypatch.setattr(facts_read, "SCAN_COUNT", 1)  # :attrs read by the walk, not whole in one call
    w = make_store().window("evicting", max_items=80)
    _chat(w, 40)  # a pinned system prompt, then ~120 items: the oldest went already
    reader_store = make_store()
    reader = reader_store.window("evicting")
    asked = _attrs_asked(monkeypatch)
    _same_choice(reader.build_messages_structured(OPTS), _whole(redis_url, prefix, "evicting", OPTS))
    oldest = [i.id for i in w.items()[:3]]
    assert oldest[0] == "ctx-1"  # the pinned system prompt stays
    asked.clear()
    for n in range(3):
        w.add(f"question {n} again", role="user")  # each evicts the oldest unpinned unit
    assert w.items()[0].id == "ctx-1" and oldest[1] not in {i.id for i in w.items()}
    _same_choice(reader.build_messages_structured(OPTS), _whole(redis_url, prefix, "evicting", OPTS))
    assert sum(asked) == 0  # the added items' attrs came with the first round trip, by guess
    held = reader_store._settings.item_cache._windows[key(prefix, "evicting", "meta")]
    assert oldest[1] not in held.items and len(held.items) <= 80  # the evicted bodies forgotten
    asked.clear()
    w.remove(w.items()[5].id)  # not the oldest: the earlier facts cannot say what went
    w.add("after the removal", role="user")
    _same_choice(reader.build_messages_structured(OPTS), _whole(redis_url, prefix, "evicting", OPTS))
    assert sum(asked) >= 78
