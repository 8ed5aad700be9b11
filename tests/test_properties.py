"""Property tests: after any sequence of operations the window's invariants hold, and any call
that is rejected changes nothing."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import contextstore as cs

from support import SyncProxy, check_invariants, dump_window, raw_client

_n = itertools.count()


def _summarize(items):
    return f"summary of {len(items)} items"


def _score(query, items):
    return [(i.priority * 31 + i.seq) % 7 for i in items]


TEXT = st.text(min_size=1, max_size=40).filter(lambda s: s.strip())
TYPES = st.sampled_from([t.value for t in cs.ItemType])
PRIORITY = st.integers(-2, 102)  # a little outside the valid range on purpose
TOKENS = st.one_of(st.none(), st.integers(1, 160))


class WindowMachine(RuleBasedStateMachine):
    ids = Bundle("ids")

    def __init__(self, url: str, prefix: str, api: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.raw = raw_client(url)
        self.loop = asyncio.new_event_loop() if api == "async" else None
        helpers = {"summarizer": _summarize, "relevance_scorer": _score}
        if api == "sync":
            self.store = cs.ContextStore.from_url(url, prefix=prefix, **helpers)
        else:
            self.store = SyncProxy(cs.AsyncContextStore.from_url(url, prefix=prefix, **helpers), self.loop)
        self.wid = f"prop{next(_n)}"
        self.seen: set[str] = set()
        self.pinned: set[str] = set()
        self.caller: dict[str, str] = {}  # caller id -> content it was first added with

    @initialize(max_tokens=st.one_of(st.none(), st.integers(100, 600)), max_items=st.integers(1, 15))
    def open(self, max_tokens, max_items):
        self.w = self.store.window(self.wid, max_tokens=max_tokens, max_items=max_items)

    def teardown(self) -> None:
        self.store.close()
        self.raw.close()
        if self.loop is not None:
            self.loop.close()

    def _dump(self):
        return dump_window(self.raw, self.prefix, self.wid)

    def _try(self, fn):
        """Run a mutation; if it is rejected, nothing may have changed."""
        before = self._dump()
        try:
            return True, fn()
        except cs.ContextStoreError as exc:
            assert not isinstance(exc, cs.StoreUnavailableError)
            assert self._dump() == before, f"rejected call changed the window: {exc!r}"
            return False, exc

    def _present(self) -> set[str]:
        return {i.id for i in self.w.items()}

    @rule(target=ids, content=TEXT, itype=TYPES, priority=PRIORITY, pinned=st.booleans(), tokens=TOKENS)
    def add(self, content, itype, priority, pinned, tokens):
        ok, it = self._try(
            lambda: self.w.add(content, type=itype, priority=priority, pinned=pinned, token_count=tokens)
        )
        if not ok:
            assert isinstance(it, (cs.ContextWindowFullError, cs.InvalidItemError))
            assert not 0 <= priority <= 100 or isinstance(it, cs.ContextWindowFullError)
            return "never-added"
        assert it.id not in self.seen, "an id was handed out twice"
        self.seen.add(it.id)
        if pinned:
            self.pinned.add(it.id)
        return it.id

    @rule(
        caller_id=st.sampled_from(["msg-a", "msg-b", "msg-c"]),
        content=st.sampled_from(["one", "two"]),
        priority=st.integers(0, 100),
    )
    def add_with_caller_id(self, caller_id, content, priority):
        present = self.w.get(caller_id)
        ok, it = self._try(lambda: self.w.add(content, id=caller_id, priority=priority))
        if present is not None:
            if present.content == content:
                assert ok and it == present  # a safe retry returns the stored item unchanged
            else:
                assert not ok and isinstance(it, cs.DuplicateItemError)
        elif ok:
            assert it.id == caller_id and it.content == content and it.priority == priority
            self.seen.add(caller_id)

    @rule(strategy=st.sampled_from(["summarize", "selective"]), target_percent=st.floats(0, 100))
    def compact_outside_redis(self, strategy, target_percent):
        before = self._present()
        ok, freed = self._try(lambda: self.w.compact(strategy, target_percent))
        assert ok and freed >= 0
        new = self._present() - before
        if strategy == "selective":
            assert not new
        assert len(new) <= 1  # at most the summary
        self.seen |= new

    @rule(
        specs=st.lists(
            st.fixed_dictionaries(
                {"content": TEXT, "type": TYPES, "priority": st.integers(0, 100), "token_count": TOKENS}
            ),
            max_size=6,
        )
    )
    def add_many(self, specs):
        before = self._present()
        ok, n = self._try(lambda: self.w.add_many(specs))
        if ok:
            assert n == len(specs)
            new = self._present() - before
            assert not new & self.seen
            self.seen |= new

    @rule(item_id=ids)
    def remove(self, item_id):
        was = item_id in self._present()
        assert self.w.remove(item_id) is was
        assert self.w.get(item_id) is None
        self.pinned.discard(item_id)

    @rule(item_id=ids, pin=st.booleans())
    def pin(self, item_id, pin):
        was = item_id in self._present()
        assert (self.w.pin(item_id) if pin else self.w.unpin(item_id)) is was
        if was:
            (self.pinned.add if pin else self.pinned.discard)(item_id)
            assert self.w.get(item_id).pinned is pin

    @rule(item_id=ids, priority=PRIORITY)
    def priority(self, item_id, priority):
        ok, res = self._try(lambda: self.w.update_priority(item_id, priority))
        assert ok is (0 <= priority <= 100)
        if ok and res:
            assert self.w.get(item_id).priority == priority

    @rule(strategy=st.sampled_from(["remove_oldest", "remove_low_priority", None]), target_percent=st.floats(0, 100))
    def compact(self, strategy, target_percent):
        ok, freed = self._try(lambda: self.w.compact(strategy, target_percent))
        assert ok and freed >= 0
        s = self.w.stats()
        if s.max_tokens and freed:
            unpinned = [i for i in self.w.items() if not i.pinned]
            assert s.current_tokens <= s.max_tokens * target_percent / 100 or not unpinned

    @rule(include_pinned=st.booleans())
    def clear(self, include_pinned):
        self.w.clear(include_pinned)
        left = self.w.items()
        assert all(i.pinned for i in left) and (not include_pinned or not left)
        if include_pinned:
            self.pinned.clear()

    @rule(max_items=st.integers(0, 16), max_tokens=st.one_of(st.none(), st.integers(-1, 600)))
    def configure(self, max_items, max_tokens):
        ok, _ = self._try(lambda: self.w.configure(max_items=max_items, max_tokens=max_tokens))
        if ok:
            assert self.w.stats().max_items == max_items

    @rule()
    def snapshot_restore(self):
        snap = self.w.snapshot()
        self.w.clear(include_pinned=True)
        self.w.restore(snap)
        assert self.w.items() == snap.items

    @rule(max_tokens=st.one_of(st.none(), st.integers(1, 800)), reserve=st.integers(0, 300), exact=st.booleans())
    def build(self, max_tokens, reserve, exact):
        before = {k: v for k, v in self._dump().items() if not k.endswith(b":events")}
        try:
            b = self.w.build_structured(
                cs.BuildOptions(max_tokens=max_tokens, reserve_for_response=reserve, exact_tokens=exact)
            )
        except (cs.BudgetTooSmallError, cs.InvalidOptionsError):
            pass
        else:
            budget = max_tokens if max_tokens is not None else self.w.stats().max_tokens
            if budget is not None:
                assert b.total_tokens <= budget - reserve
            assert set(b.included_item_ids) >= {i.id for i in self.w.pinned_items()}
            every = b.included_item_ids + b.excluded_item_ids + b.omitted_item_ids
            assert sorted(every) == sorted(i.id for i in self.w.items()), "an item is in no list, or in two"
        after = {k: v for k, v in self._dump().items() if not k.endswith(b":events")}
        assert after == before, "a build changed the window"

    @invariant()
    def window_is_consistent(self):
        if not hasattr(self, "w"):
            return
        check_invariants(self.raw, self.prefix, self.wid)
        present = self._present()
        assert present <= self.seen, "an item no call handed out is in the window"
        assert self.pinned <= present, "a pinned item disappeared"


@pytest.mark.parametrize("api_kind", ["sync", "async"])
def test_window_state_machine(redis_url, prefix, api_kind):
    # the model's breadth on the sync API; the asyncio shell drives the same plans: fewer runs
    examples = 30 if api_kind == "sync" else 10
    run_state_machine_as_test(
        lambda: WindowMachine(redis_url, prefix, api_kind),
        settings=settings(
            max_examples=examples, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
        ),
    )
