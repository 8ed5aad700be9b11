"""Properties of conversations over random sequences of operations (hypothesis), and a fleet
of worker processes running tool-calling turns on one window."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import contextstore as cs

from _workers import tool_turns
from chat_rules import check_anthropic, check_openai, groups_whole
from support import PROCESSES, events, raw_client

STRATEGIES = ["remove_oldest", "remove_low_priority", "clear_tool_results"]
PLAIN = ["user_message", "assistant_message", "retrieved_document", "code", "tool_result"]


def _call(call_id: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": "tool", "arguments": json.dumps({"id": call_id})}}


class ConversationMachine(RuleBasedStateMachine):
    """Adds (plain items, tool-call groups of 1-3 results, calls answered later), pins,
    evictions, every server-side strategy and builds in both formats, on one small window."""

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__()
        self.url, self.prefix, self.n = url, prefix, 0
        self.pending: list[str] = []  # calls whose results come in a later add
        self.pinned: set[str] = set()  # pinned items: never evicted or compacted
        self.unanswered: set[str] = set()  # calls whose result could not be added

    @initialize(
        max_items=st.integers(6, 30),
        max_tokens=st.integers(150, 1500),
        strategy=st.sampled_from(STRATEGIES),
        keep_recent=st.integers(0, 2),
    )
    def open(self, max_items, max_tokens, strategy, keep_recent):
        self.store = cs.ContextStore.from_url(self.url, prefix=self.prefix)
        self.wid = f"prop{id(self)}"
        self.store.window(self.wid).delete()
        self.w = self.store.window(
            self.wid, max_items=max_items, max_tokens=max_tokens, default_strategy=strategy, keep_recent=keep_recent
        )

    def teardown(self):
        if hasattr(self, "store"):
            self.store.window(self.wid).delete()
            self.store.close()

    def _next(self) -> str:
        self.n += 1
        return f"c{self.n}"

    @rule(kind=st.sampled_from(PLAIN), words=st.integers(1, 60), pinned=st.booleans())
    def add_plain(self, kind, words, pinned):
        role = {"user_message": "user", "assistant_message": "assistant"}.get(kind)
        try:
            it = self.w.add("word " * words, type=kind, role=role, pinned=pinned and words < 10)
        except cs.ContextWindowFullError:
            return
        if it.pinned:
            self.pinned.add(it.id or "")

    @rule(results=st.integers(1, 3), words=st.integers(1, 80), later=st.booleans())
    def add_tool_turn(self, results, words, later):
        calls = [_call(self._next()) for _ in range(results)]
        batch = [{"content": "", "type": "assistant_message", "role": "assistant", "metadata": {"tool_calls": calls}}]
        answers = [
            {"content": "out " * words, "type": "tool_result", "role": "tool", "metadata": {"tool_call_id": c["id"]}}
            for c in calls
        ]
        try:
            self.w.add_many(batch if later else batch + answers)
        except cs.ContextWindowFullError:
            return
        if later:
            self.pending += [c["id"] for c in calls]

    @rule(words=st.integers(1, 40))
    def interleaved_turn(self, words):
        """A call, another worker's message, then the call's result: three separate adds."""
        call_id = self._next()
        self.unanswered.add(call_id)
        message = {
            "content": "",
            "type": "assistant_message",
            "role": "assistant",
            "metadata": {"tool_calls": [_call(call_id)]},
        }
        try:
            self.w.add_many([message])
            self.w.add("meanwhile " * words, type="user_message", role="user")
            self.w.add("result", type="tool_result", role="tool", metadata={"tool_call_id": call_id})
        except (cs.ContextWindowFullError, cs.InvalidItemError):
            return  # no room, or the call went (whole) to make room for the message
        self.unanswered.discard(call_id)

    @rule()
    def answer_pending(self):
        if not self.pending:
            return
        call_id = self.pending.pop(0)
        try:
            self.w.add("late output", type="tool_result", role="tool", metadata={"tool_call_id": call_id})
        except (cs.InvalidItemError, cs.ContextWindowFullError):
            self.unanswered.add(call_id)  # its call went (whole) meanwhile, or there is no room

    @rule(data=st.data())
    def pin_or_unpin(self, data):
        items = self.w.items()
        if items:
            it = data.draw(st.sampled_from(items))
            (self.w.unpin if it.pinned else self.w.pin)(it.id)
            (self.pinned.discard if it.pinned else self.pinned.add)(it.id or "")

    @rule(strategy=st.sampled_from(STRATEGIES), percent=st.integers(0, 90))
    def compact(self, strategy, percent):
        plan = self.w.plan_compaction(strategy, percent)
        assert self.w.compact(strategy, percent) == plan.tokens_freed

    @rule(
        budget=st.integers(20, 2000),
        order=st.sampled_from(["sections", "arrival"]),
        fmt=st.sampled_from(["openai", "anthropic"]),
    )
    def build_messages(self, budget, order, fmt):
        opts = cs.BuildOptions(max_tokens=budget, reserve_for_response=0, order=order, max_history_items=50)
        users = [i for i in self.w.items() if i.role == "user" or (i.role is None and i.type.value == "user_message")]
        try:
            built = self.w.build_messages_structured(opts, format=fmt)
        except cs.BudgetTooSmallError:
            return
        except cs.NoConversationError:
            assert fmt == "anthropic" and not users  # a question is always sent when there is one
            return
        assert built.total_tokens <= budget
        if users:  # a chat build never leaves out the newest user message
            assert users[-1].id in built.included_item_ids or any(
                users[-1].group and i.group == users[-1].group for i in self.w.items() if i.id in built.omitted_item_ids
            )
        if built.included_item_ids:
            (check_openai if fmt == "openai" else check_anthropic)(built.messages)
        if fmt == "anthropic":
            assert built.messages["messages"], "an Anthropic build sent no message"
        included = set(built.included_item_ids)
        groups_whole([i for i in self.w.items() if i.id in included])

    @rule(budget=st.integers(20, 2000))
    def build_text(self, budget):
        try:
            built = self.w.build_structured(cs.BuildOptions(max_tokens=budget, reserve_for_response=0))
        except cs.BudgetTooSmallError:
            return
        assert built.total_tokens <= budget
        included = set(built.included_item_ids)
        groups_whole([i for i in self.w.items() if i.id in included], complete=False)

    @invariant()
    def window_is_whole(self):
        if not hasattr(self, "w"):
            return
        report = self.w.verify()
        assert report.ok, report.problems
        items = self.w.items()
        assert self.pinned <= {i.id for i in items}, "a pinned item was evicted or compacted"
        groups_whole(items, complete=False)  # results never outlive their call
        answered_later = set(self.pending) | self.unanswered
        for it in items:  # a turn added whole keeps every result while its call stays
            calls = {c["id"] for c in (it.metadata or {}).get("tool_calls") or ()}
            if calls and not calls & answered_later:
                got = {
                    i.metadata["tool_call_id"] for i in items if i.group == it.group and i.type.value == "tool_result"
                }
                assert got == calls, f"group {it.group} lost a result"


@pytest.mark.slow
def test_conversation_state_machine(redis_url, prefix):
    run_state_machine_as_test(
        lambda: ConversationMachine(redis_url, prefix),
        settings=settings(
            max_examples=25, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
        ),
    )


@pytest.mark.slow
def test_four_workers_run_tool_calling_turns_on_one_window(redis_url, r, prefix):
    wid, workers, turns = "fleet", 4, 25
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        store.window(wid, max_tokens=2500, default_strategy="clear_tool_results", keep_recent=2)
        with PROCESSES.Pool(workers) as pool:
            jobs = [pool.apply_async(tool_turns, (redis_url, prefix, wid, w, turns)) for w in range(workers)]
            added = [i for job in jobs for i in job.get(timeout=180)]
        win = store.window(wid)
        report, items, stats = win.verify(), win.items(), win.stats()
    assert report.ok, report.problems
    groups_whole(items)  # every turn was added whole, so no group may have lost a member
    assert stats.current_tokens <= 2500 and stats.compaction_count > 0
    ev = events(r, prefix, wid)
    removed = {e["item_id"] for e in ev if e["event"] == "item_removed"}
    cleared = {e["item_id"] for e in ev if e["event"] == "item_cleared"}
    present = {i.id for i in items}
    assert len(added) == len(set(added))
    assert set(added) == present | removed and not present & removed  # each item present or accounted for
    assert cleared and cleared <= set(added)
    assert {e["item_id"] for e in ev if e["event"] == "item_added"} == set(added)
    client = raw_client(redis_url)
    client.close()


def test_a_tool_result_cleared_and_then_evicted_by_one_add_keeps_the_counters_true(redis_url, prefix):
    """Found by the state machine: the second tool turn clears a stored result (clear_tool_results)
    and then evicts it at max_items, in one add_many; its removal must count the tokens it had
    once cleared, not before."""
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("clear-evict", max_items=6, max_tokens=150, default_strategy="clear_tool_results")
        for n, words in ((1, 8), (3, 1)):
            calls = [_call(f"c{n}"), _call(f"c{n + 1}")]
            w.add_many(
                [{"content": "", "role": "assistant", "metadata": {"tool_calls": calls}}]
                + [{"content": "out " * words, "role": "tool", "metadata": {"tool_call_id": c["id"]}} for c in calls]
            )
        assert w.verify().ok, w.verify().problems
