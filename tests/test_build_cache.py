"""Builds through the store's item cache equal builds that read every item.

One store builds (and caches what it reads), another client changes the window meanwhile: adds
(by either store, tool calls answered at once or builds later), removals, pins, priorities,
cleared tool results, summaries and their undo, clear, restore. After
every step, the caching store's build and build_messages (and a stateless store's, which chooses from the
facts and reads the chosen bodies only) must equal those of a store that has
never seen the window, for random budgets and formats.
"""

from __future__ import annotations

import contextlib
import gc
import itertools

import msgspec
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

import contextstore as cs
from contextstore.plans import build_read as build_read_plans
from contextstore.render import select
from contextstore.render.select import build_key

from support import key, on_cluster, same_build, whole_reads

_n = itertools.count()
#: no shrinking: a failure is reported as found (shrinking a stateful run against Redis takes minutes)
FIND = (Phase.explicit, Phase.reuse, Phase.generate)
TEXT = st.text(alphabet="abc xyz-\n`*7", min_size=1, max_size=60).filter(lambda s: s.strip())
TYPES = st.sampled_from(
    ["system_prompt", "instruction", "retrieved_document", "user_message", "assistant_message", "code", "error"]
)
FORMATS = st.sampled_from([None, "<{role}> {content}", "{content}"])


def _summarize(items):
    return f"summary of {len(items)} items"


def _same(a: object, b: object) -> None:
    assert msgspec.to_builtins(a) == msgspec.to_builtins(b)


class CachedBuilds(RuleBasedStateMachine):
    ids = Bundle("ids")

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__()
        self.url, self.prefix, self.wid = url, prefix, f"cache{next(_n)}"
        self.builder = cs.ContextStore.from_url(url, prefix=prefix)  # builds, and caches
        self.other = cs.ContextStore.from_url(url, prefix=prefix, summarizer=_summarize)  # changes the window
        #: keeps nothing: chat builds choose from the facts and read the chosen bodies only
        self.stateless = cs.ContextStore.from_url(url, prefix=prefix, item_cache_bytes=0)
        self.calls = 0
        self.unanswered: list[str] = []  # tool calls made by call_later, answered by answer

    @initialize(target=ids, max_tokens=st.integers(300, 900), clear_results=st.booleans(),
                first=st.lists(st.tuples(TEXT, TYPES, st.integers(0, 100)), min_size=4, max_size=20))  # fmt: skip
    def open(self, max_tokens, clear_results, first):
        strategy = "clear_tool_results" if clear_results else "remove_low_priority"
        self.w = self.builder.window(self.wid, max_tokens=max_tokens, max_items=40, default_strategy=strategy)
        self.o = self.other.window(self.wid)
        for content, type, priority in first:  # a window worth building from the start
            self.add(content, type, priority, False, False, None)
        self.tight_builds_agree()  # and cached
        return multiple(*(i.id or "" for i in self.o.items()))

    def teardown(self) -> None:
        self.builder.close()
        self.other.close()
        self.stateless.close()

    @rule(target=ids, content=TEXT, type=TYPES, priority=st.integers(0, 100), pinned=st.booleans(),
          by_other=st.booleans(), caller_id=st.sampled_from([None, "mine", "yours"]))  # fmt: skip
    def add(self, content, type, priority, pinned, by_other, caller_id):
        w = self.o if by_other else self.w
        role = {"user_message": "user", "assistant_message": "assistant"}.get(type)
        try:
            pin = pinned and priority > 60
            return w.add(content, type=type, priority=priority, pinned=pin, role=role, id=caller_id).id
        except (cs.ContextWindowFullError, cs.DuplicateItemError):
            return "ctx-0"

    @rule(target=ids, n=st.integers(1, 3), content=TEXT)
    def tool_call(self, n, content):
        self.calls += 1
        calls = [
            {"id": f"call{self.calls}x{k}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            for k in range(n)
        ]
        try:
            self.o.add("", type="assistant_message", role="assistant", metadata={"tool_calls": calls})
            for c in calls:
                self.o.add(content * 3, type="tool_result", role="tool", metadata={"tool_call_id": c["id"]})
        except cs.ContextWindowFullError:
            pass
        return f"call{self.calls}"

    @rule(n=st.integers(1, 2), by_other=st.booleans())
    def call_later(self, n, by_other):
        """A tool call whose results come in a later step: builds see its group grow."""
        self.calls += 1
        ids = [f"late{self.calls}x{k}" for k in range(n)]
        calls = [{"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}} for c in ids]
        with contextlib.suppress(cs.ContextWindowFullError):
            (self.o if by_other else self.w).add(
                "", type="assistant_message", role="assistant", metadata={"tool_calls": calls}
            )
            self.unanswered += ids

    @rule(target=ids, content=TEXT, by_other=st.booleans())
    def answer(self, content, by_other):
        if not self.unanswered:
            return "ctx-0"
        call = self.unanswered.pop(0)
        try:
            w = self.o if by_other else self.w
            return w.add(content, type="tool_result", role="tool", metadata={"tool_call_id": call}).id
        except (cs.ContextWindowFullError, cs.ToolCallLinkError):
            return "ctx-0"

    @rule(item=ids)
    def remove(self, item):
        self.o.remove(item)

    @rule(item=ids, pin=st.booleans())
    def pin(self, item, pin):
        (self.o.pin if pin else self.o.unpin)(item)

    @rule(item=ids, priority=st.integers(0, 100))
    def priority(self, item, priority):
        self.o.update_priority(item, priority)

    @rule(pin=st.booleans(), priority=st.integers(0, 100))
    def change_the_oldest(self, pin, priority):
        """The oldest item is the one a tight build leaves out: pinning it or raising its
        priority changes what a build takes."""
        oldest = self.o.items()[:1]
        for item in oldest:
            (self.o.pin if pin else self.o.unpin)(item.id or "")
            self.o.update_priority(item.id or "", priority)

    @rule(strategy=st.sampled_from(["clear_tool_results", "summarize", "remove_oldest"]), percent=st.integers(0, 60))
    def compact(self, strategy, percent):
        self.o.compact(strategy, target_percent=float(percent))

    @rule()
    def undo_last_summary(self):
        summaries = [i for i in self.o.items() if (i.metadata or {}).get("summary_of")]
        if summaries:
            with contextlib.suppress(cs.ContextWindowFullError, cs.SummaryNotFoundError, cs.DuplicateItemError):
                self.o.undo_summary(summaries[-1].id)

    @rule(include_pinned=st.booleans())
    def clear(self, include_pinned):
        self.o.clear(include_pinned)

    @rule(content=TEXT)
    def restore_elsewhere(self, content):
        """Another window's snapshot restored over this one: same ids and seqs, other content."""
        donor = self.other.window(f"{self.wid}-donor", max_tokens=5000)
        donor.clear(include_pinned=True)
        for k in range(3):
            donor.add(f"{content} {k}", type="user_message", role="user")
        self.o.restore(msgspec.structs.replace(donor.snapshot(), window_id=self.wid))

    @rule(max_tokens=st.integers(30, 900))
    def configure(self, max_tokens):
        """A config change moves no item: a build within the window's own limit must see it."""
        with contextlib.suppress(cs.ContextWindowFullError, cs.InvalidOptionsError):
            self.o.configure(max_tokens=max_tokens)

    @rule()
    def delete(self):
        self.o.delete()

    @invariant()
    def tight_builds_agree(self):
        for budget in (40, 120, None):  # None: the window's max_tokens
            self._agree(cs.BuildOptions(max_tokens=budget, reserve_for_response=0))

    @rule(max_tokens=st.integers(20, 900), reserve=st.integers(0, 10), history=st.integers(0, 40),
          fmt=FORMATS, order=st.sampled_from(["sections", "priority", "arrival"]), exact=st.booleans())  # fmt: skip
    def build(self, max_tokens, reserve, history, fmt, order, exact):
        self._agree(cs.BuildOptions(max_tokens=max_tokens, reserve_for_response=reserve, max_history_items=history,
                                    message_format=fmt, order=order, exact_tokens=exact))  # fmt: skip

    def _agree(self, opts: cs.BuildOptions) -> None:
        for build in ("build_structured", "build_messages_structured"):
            stateless = self.stateless.window(self.wid)
            try:
                with whole_reads(), cs.ContextStore.from_url(self.url, prefix=self.prefix) as fresh:
                    expected = getattr(fresh.window(self.wid), build)(opts)
            except cs.BudgetTooSmallError as exc:
                for w in (self.w, stateless):
                    with pytest.raises(cs.BudgetTooSmallError) as got:
                        getattr(w, build)(opts)
                    assert (got.value.pinned_tokens, got.value.budget) == (exc.pinned_tokens, exc.budget)
                continue
            same_build(getattr(self.w, build)(opts), expected)
            same_build(getattr(self.w, build)(opts), expected)  # twice: from the last facts
            same_build(getattr(stateless, build)(opts), expected)


def test_cached_builds_equal_builds_that_read_everything(redis_url, prefix, one_server):
    """On one server: the reads it checks are plain commands, the same on each (the scripts
    behind the writes run on every server in the other tests)."""
    run_state_machine_as_test(
        lambda: CachedBuilds(redis_url, prefix),
        settings=settings(max_examples=12, stateful_step_count=20, deadline=None, phases=FIND,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]),
    )  # fmt: skip


def test_a_window_written_before_epochs_is_built_from_a_full_read_until_its_next_write(store, r, prefix):
    w = store.window("old", max_tokens=1000)
    w.add("first", type="user_message", role="user")
    meta = key(prefix, "old", "meta")
    r.hdel(meta, "epoch")  # as 0.1 wrote it
    opts = cs.BuildOptions(reserve_for_response=0)
    assert w.build_structured(opts).included_item_ids == ["ctx-1"]
    assert w.build_structured(opts).included_item_ids == ["ctx-1"]  # no epoch: nothing cached
    w.add("second", type="user_message", role="user")
    assert r.hget(meta, "epoch") is not None  # its next write gave it one
    assert w.build_structured(opts).content.endswith("[user]: second")


def test_every_change_in_place_starts_a_new_epoch(redis_url, r, prefix):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as s:
        w = s.window("epochs", max_tokens=1000, default_strategy="clear_tool_results")
        w.add("a", type="user_message", role="user")
        meta = key(prefix, "epochs", "meta")
        seen = [r.hget(meta, "epoch")]
        for change in (
            lambda: w.pin("ctx-1"),
            lambda: w.update_priority("ctx-1", 7),
            lambda: w.restore(w.snapshot()),
        ):
            change()
            seen.append(r.hget(meta, "epoch"))
        w.add("b", type="user_message", role="user")  # an add keeps the epoch: its seq is new
        seen.append(r.hget(meta, "epoch"))
        assert None not in seen and len(set(seen[:4])) == 4 and seen[4] == seen[3]


@pytest.fixture
def bodies_read(monkeypatch) -> list[str]:
    """The ids of the bodies builds read with their facts or after them (each one decoded)."""
    read: list[str] = []
    real = build_read_plans.stored.decode_item

    def recording(entry):
        item = real(entry)
        read.append(item.id)
        return item

    monkeypatch.setattr(build_read_plans.stored, "decode_item", recording)
    return read


def test_a_build_after_adds_reads_only_the_bodies_it_lacks(redis_url, r, prefix, bodies_read):
    """Within an epoch a store reads no body it holds: after other stores' adds a build reads
    the added items' bodies only, after a removal none; a new epoch (a pin) reads them again."""
    with (
        cs.ContextStore.from_url(redis_url, prefix=prefix) as s,
        cs.ContextStore.from_url(redis_url, prefix=prefix) as o,
    ):
        w = s.window("grow", max_tokens=5000)
        for k in range(5):
            w.add(f"message {k}", type="user_message", role="user")
        w.add("an older doc", type="retrieved_document", priority=20)
        opts = cs.BuildOptions(reserve_for_response=0)
        w.build_structured(opts)
        assert sorted(bodies_read) == sorted(f"ctx-{n}" for n in range(1, 7))
        bodies_read.clear()
        w.build_structured(opts)
        assert bodies_read == []  # unchanged: built from the last facts, no read
        o.window("grow").add("from elsewhere", type="user_message", role="user")
        o.window("grow").add("a doc", type="retrieved_document", priority=90)
        built = w.build_structured(opts)
        assert sorted(bodies_read) == ["ctx-7", "ctx-8"]
        assert built.content.startswith("a doc") and built.content.endswith("[user]: from elsewhere")
        bodies_read.clear()
        o.window("grow").remove("ctx-3")
        built = w.build_messages_structured(opts)
        assert bodies_read == [] and "ctx-3" not in built.included_item_ids
        o.window("grow").pin("ctx-1")  # a change in place: a new epoch
        w.build_messages_structured(opts)
        assert len(bodies_read) == 7


def test_a_build_after_adds_puts_the_added_items_in_their_build_order_places(redis_url, prefix):
    """After adds alone a caching store reuses its last facts and puts each added item in its
    place in build order (an instruction or a document ranks before the conversation, whatever
    its seq): its text and chat builds equal a whole read's, on a window a budget cuts."""
    with (
        cs.ContextStore.from_url(redis_url, prefix=prefix) as s,
        cs.ContextStore.from_url(redis_url, prefix=prefix) as o,
    ):
        w = s.window("places", max_tokens=100_000)
        w.add("You are terse.", role="system", pinned=True)
        w.add("an old doc", type="retrieved_document", priority=10)
        for k in range(40):
            w.add(f"message {k} " + "word " * 20, role=("user", "assistant")[k % 2])
        opts = cs.BuildOptions(max_tokens=600, reserve_for_response=0, max_history_items=8)
        w.build_structured(opts), w.build_messages_structured(opts)  # its last facts
        other = o.window("places")
        other.add("a new instruction", type="instruction", priority=80)
        other.add("a new doc", type="retrieved_document", priority=90)
        other.add("the newest question", role="user")
        with whole_reads(), cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:
            text, chat = (
                fresh.window("places").build_structured(opts),
                fresh.window("places").build_messages_structured(opts),
            )
        assert text.content.index("a new instruction") < text.content.index("a new doc") < text.content.index("message")
        same_build(w.build_structured(opts), text)
        same_build(w.build_messages_structured(opts), chat)
        held = s._settings.item_cache.last_facts(key(prefix, "places", "meta")).found.items()
        assert "a new doc" in [i.content for i in held] or any(i.seq == 44 for i in held)  # read after the adds
        assert [i.id for i in held] == [i.id for i in sorted(held, key=build_key)]  # the facts in build order


@pytest.mark.parametrize(
    "change",
    [
        lambda w: (w.remove("ctx-1"), w.add("new a"), w.add("new b")),  # one item more, not one added
        lambda w: (w.remove("ctx-5"), w.add("new a")),  # as many items, not unchanged
        lambda w: (w.add("new a"), w.remove("ctx-6")),  # added and gone again: the count is back
    ],
    ids=["remove-oldest-add-two", "remove-newest-add-one", "add-then-remove-it"],
)
def test_removals_and_adds_between_builds_are_never_taken_for_adds_alone(redis_url, prefix, change):
    """A build read lists only the added items when every item the store holds is still there;
    a removal hidden behind adds (the item count alone would pass) makes it list everything."""
    with (
        cs.ContextStore.from_url(redis_url, prefix=prefix) as s,
        cs.ContextStore.from_url(redis_url, prefix=prefix) as o,
    ):
        w = s.window("mixed", max_tokens=5000)
        for k in range(5):
            w.add(f"message {k}", type="user_message", role="user")
        opts = cs.BuildOptions(reserve_for_response=0)
        w.build_messages_structured(opts)  # cached
        change(o.window("mixed"))
        with whole_reads(), cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:
            expected = fresh.window("mixed").build_messages_structured(opts)
        same_build(w.build_messages_structured(opts), expected)


def _listings(r) -> int:
    """``ZRANGEBYSCORE`` calls the server has run so far: a facts read's listing of the items
    before and after the conversation in build order."""
    return int(r.info("commandstats").get("cmdstat_zrangebyscore", {}).get("calls", 0))


@pytest.mark.parametrize("api", ["sync", "async"], indirect=True)
def test_a_caching_store_lists_the_build_order_only_when_its_last_facts_cannot_grow(make_store, redis_url, r, prefix):
    """After adds a caching store grows its last facts from the page of newest ids and lists no
    build order (the listing grows with the window's tool results and documents); after a change
    in place it reads the facts afresh, listing the build order, so an old document the
    conversation's walk does not reach is still offered. Each build equals a whole read's."""
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as o:
        w = make_store().window("listed", max_tokens=100_000)  # sync, or asyncio behind a proxy
        w.add("an old doc", type="retrieved_document", priority=10)
        w.add_many([{"content": f"message {k}", "role": ("user", "assistant")[k % 2]} for k in range(100)])
        opts = cs.BuildOptions(max_tokens=2000, reserve_for_response=0, max_history_items=8)
        w.build_messages_structured(opts)  # its last facts
        for change, listings in (
            (lambda other: other.add("the newest question", role="user"), 0),
            (lambda other: other.pin("ctx-50"), 2),  # a new epoch: read afresh
        ):
            change(o.window("listed"))
            with whole_reads(), cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:
                expected = fresh.window("listed").build_messages_structured(opts)
            before = _listings(r)
            built = w.build_messages_structured(opts)
            same_build(built, expected)
            assert "ctx-1" in built.included_item_ids
            assert _listings(r) - before == listings


def _script_calls(r) -> int:
    """Script calls the server has run so far (EVALSHA, FCALL and their read-only forms)."""
    stats = r.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k in _SCRIPT_STATS)


_SCRIPT_STATS = {"cmdstat_evalsha", "cmdstat_evalsha_ro", "cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_eval"}


@pytest.mark.parametrize("asyncio_store", [False, True], ids=["sync", "asyncio"])
def test_a_build_of_a_window_the_store_holds_as_it_is_is_one_call(redis_url, r, prefix, asyncio_store):
    """The second build is the `built` event alone; once another store changed the window (an
    add, a config change), the event is refused, nothing is logged twice, and the build reads."""
    import asyncio

    def built_events() -> int:
        return sum(1 for _, f in r.xrange(key(prefix, "one", "events")) if f[b"event"] == b"built")

    async def builds(w) -> list[tuple[list[str], int, int]]:
        got = w.get("ctx-1")  # the read script loaded
        await got if asyncio_store else got
        out = []
        for change in (None, None, "add", None, "configure"):
            if change == "add":
                other.window("one").add("third", type="user_message", role="user")
            elif change == "configure":
                other.window("one").configure(max_tokens=12)  # only the newest message fits now
            before = _script_calls(r)
            got = w.build_structured(opts)
            got = await got if asyncio_store else got
            out.append((got.included_item_ids, _script_calls(r) - before, built_events()))
        return out

    opts = cs.BuildOptions(reserve_for_response=0)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as other:
        w0 = other.window("one", max_tokens=1000)
        w0.add("first message", type="user_message", role="user")
        w0.add("second message", type="user_message", role="user")
        if asyncio_store:

            async def go():
                async with cs.AsyncContextStore.from_url(redis_url, prefix=prefix) as s:
                    return await builds(await s.window("one"))

            seen = asyncio.run(go())
        else:
            with cs.ContextStore.from_url(redis_url, prefix=prefix) as s:
                seen = asyncio.run(builds(s.window("one")))
    first, again, after_add, quiet, after_config = seen
    assert again[1] == 1  # the event alone, checked against the last facts read
    assert again[0] == first[0] == ["ctx-1", "ctx-2"] and (first[2], again[2]) == (1, 2)
    assert after_add[0] == ["ctx-1", "ctx-2", "ctx-3"] and after_add[2] == 3
    assert after_add[1] == 2  # the refused event; the facts and the new body (plain), the event
    assert quiet[1] == 1  # the facts read found the window as last read: quiet again
    assert after_config[0] == ["ctx-3"] and after_config[2] == 5  # the new limit, one event per build
    assert after_config[1] == 2


def test_a_store_with_no_item_cache_reads_the_facts_and_bodies_for_every_build(make_store, redis_url, r, prefix):
    """``item_cache_bytes=0`` (a stateless worker): nothing is kept, so every build reads the
    facts and the bodies it uses (a prompt build: of everything it may offer) in two
    MULTI/EXECs and writes its event, and sees every other store's change."""
    if on_cluster(redis_url):
        pytest.skip("counts one server's commands")
    s = make_store(item_cache_bytes=0)  # sync, and asyncio through a proxy
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as o:
        w = s.window("stateless", max_tokens=5000)
        w.add("first")
        opts = cs.BuildOptions(reserve_for_response=0)
        w.build_structured(opts)  # loads the event script
        for n in range(3):
            o.window("stateless").add(f"from elsewhere {n}", type="user_message", role="user")
            r.config_resetstat()
            built = w.build_structured(opts)
            stats = r.info("commandstats")
            assert built.content.endswith(f"[user]: from elsewhere {n}") and len(built.included_item_ids) == n + 2
            scripts = sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "fcall", "fcall_ro"))
            assert stats["cmdstat_exec"]["calls"] == 2 and scripts == 1, stats  # facts, bodies; the built event
            assert s._settings.item_cache.last_facts(key(prefix, "stateless", "meta")) is None
    for bad in (-1, True, "64MB", 1.5):
        with pytest.raises(cs.InvalidOptionsError, match="item_cache_bytes"):
            make_store(item_cache_bytes=bad)


def test_a_first_build_under_which_every_item_competes_reads_the_window_in_one_round_trip(make_store, r, redis_url):
    """Options under which every item competes, whatever the window holds (``max_history_items``
    at least its ``max_items``): every item is a candidate, so a store that keeps items and holds
    nothing of the window reads every attrs and body in its first round trip (one MULTI/EXEC),
    then writes its event; a store that keeps nothing reads the facts, then what it takes."""
    if on_cluster(redis_url):
        pytest.skip("counts one server's commands")
    w = make_store().window("all", max_tokens=50_000, max_items=200)
    for n in range(150):  # :attrs a hash table on Redis 7 (over 128 fields)
        w.add(f"message {n} " + "word " * 20, role="user" if n % 2 else "assistant")
    opts = cs.BuildOptions(max_tokens=600, reserve_for_response=0, max_history_items=200)
    for cache_bytes, transactions in ((None, 1), (0, 2)):
        store = make_store() if cache_bytes is None else make_store(item_cache_bytes=cache_bytes)
        reader = store.window("all")
        r.config_resetstat()
        built = reader.build_messages_structured(opts)
        stats = r.info("commandstats")
        assert stats["cmdstat_exec"]["calls"] == transactions, (cache_bytes, stats)
        with whole_reads():
            expected = make_store().window("all").build_messages_structured(opts)
        same_build(built, expected)


@pytest.mark.parametrize("api", ["sync", "async"], indirect=True)
def test_a_prompt_build_of_an_unchanged_window_works_out_nothing_again(make_store, redis_url, prefix, monkeypatch):
    """A caching store's next prompt build of a window it holds as it is starts from what the last
    one worked out (its units and cost table), not only from its facts: no unit is made again;
    after another store's adds, only the added items' units are made, and the prompt is a whole
    read's."""
    w = make_store().window("again", max_tokens=100_000)  # sync, or asyncio behind a proxy
    for k in range(30):
        w.add(f"message {k} " + "word " * 10, type="user_message", role="user")
    opts = cs.BuildOptions(max_tokens=150, reserve_for_response=0, max_history_items=1000)
    first = w.build_structured(opts)
    made: list[int] = []
    real = select.Unit.of
    monkeypatch.setattr(select.Unit, "of", lambda items: (made.append(1), real(items))[1])
    again = w.build_structured(opts)
    assert made == [] and again.content == first.content and again.excluded_item_ids == first.excluded_item_ids
    s2 = cs.ContextStore.from_url(redis_url, prefix=prefix)
    s2.window("again").add_many(["one more", "and another"])  # new facts: their units grow from the last ones
    s2.close()
    grown = w.build_structured(opts)
    assert len(made) == 2  # the added items' units alone
    with whole_reads(), cs.ContextStore.from_url(redis_url, prefix=prefix) as fresh:
        same_build(grown, fresh.window("again").build_structured(opts))


def test_what_a_caching_store_holds_of_a_window_is_not_walked_by_the_garbage_collector(redis_url, prefix, one_server):
    """The items, units and listings a store's item cache keeps of a window it built are not
    tracked by the garbage collector (a worker holding thousands of windows would have every
    collection walk them all): holding a 1,200-item window adds next to nothing to what a
    collection walks but the metadata of its tool calls (lists and dicts within dicts)."""
    writer = cs.ContextStore.from_url(redis_url, prefix=prefix, item_limit=5000)
    for wid, turns in (("warm", 3), ("held", 300)):
        w = writer.window(wid, max_tokens=10**6, max_items=5000)
        for turn in range(turns):
            call = {"id": f"c{turn}", "type": "function", "function": {"name": "look", "arguments": "{}"}}
            w.add_many([
                {"content": f"question {turn}", "role": "user"},
                {"content": "", "role": "assistant", "metadata": {"tool_calls": [call]}},
                {"content": f"result {turn}", "role": "tool", "metadata": {"tool_call_id": f"c{turn}"}},
                {"content": f"answer {turn}", "role": "assistant"},
            ])  # fmt: skip
    writer.close()
    opts = cs.BuildOptions(max_tokens=10**6, reserve_for_response=0, max_history_items=5000)
    with cs.ContextStore.from_url(redis_url, prefix=prefix, item_limit=5000) as store:
        store.window("warm").build_messages_structured(opts)  # what any first build sets up
        gc.collect()
        before = len(gc.get_objects())
        built = store.window("held").build_messages_structured(opts)
        assert len(built.included_item_ids) == 1200
        del built
        gc.collect()
        held = len(gc.get_objects()) - before
    assert held < 4 * 300 + 100, held  # a call's metadata: its dict, the list, the call, its function
