"""Building prompts within a budget (contract §6)."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextstore as cs

from support import open_store

COUNTER = cs.TiktokenCounter()

#: the rules of a build (sections, flags, history, budgets, token bounds) do not differ by server;
#: the reads that feed them do, and run on every server in test_build_paths.py, test_cold_builds.py,
#: test_build_cache.py and test_appended_reads.py
pytestmark = pytest.mark.usefixtures("one_server")


def test_sections_order_and_conversation_group(store):
    w = store.window("b-sections")
    w.add("be helpful", type="system_prompt")
    w.add("hi", type="user_message", role="user", priority=10)
    w.add("doc A", type="retrieved_document", priority=10)
    w.add("hello!", type="assistant_message", role="assistant", priority=90)
    w.add("doc B", type="retrieved_document", priority=90)
    w.add("how are you?", type="user_message", role="user", priority=50)
    w.add("use tools", type="instruction")
    w.add("tool says 42", type="tool_result")
    sep = "\n\n---\n\n"
    assert w.build() == sep.join(
        [
            "be helpful",
            "use tools",
            "doc B",
            "doc A",
            "tool says 42",
            "[user]: hi",
            "[assistant]: hello!",
            "[user]: how are you?",
        ]
    )
    # order="priority": seed 001's literal key order (user rank 5 before assistant rank 6)
    assert w.build(cs.BuildOptions(order="priority")) == sep.join(
        [
            "be helpful",
            "use tools",
            "doc B",
            "doc A",
            "tool says 42",
            "[user]: how are you?",
            "[user]: hi",
            "[assistant]: hello!",
        ]
    )


def test_flags_and_history_limit(store):
    w = store.window("b-flags")
    w.add("sys", type="system_prompt")
    w.add("inst", type="instruction")
    w.add("mem", type="working_memory")
    w.add("doc", type="retrieved_document")
    w.add("code", type="code")
    for i in range(5):
        w.add(f"m{i}", type="user_message", role="user")
    w.add("pinned old sys", type="system_prompt", pinned=True)
    opts = cs.BuildOptions(
        include_system_prompt=False,
        include_instructions=False,
        include_relevant_memory=False,
        max_history_items=2,
        section_separator="|",
    )
    assert w.build(opts) == "pinned old sys|code|[user]: m3|[user]: m4"
    assert "m" not in w.build(cs.BuildOptions(include_recent_history=False, section_separator="|")).replace("mem", "")


def test_history_limit_skips_a_group_with_more_messages_than_are_left(store):
    """max_history_items counts messages, newest unit first; a group whose messages would go
    over the limit is left out whole, and older units that fit still come in."""
    w = store.window("b-history-group")
    w.add("old", type="user_message", role="user")
    w.add("middle", type="user_message", role="user")
    w.add("ask", type="user_message", role="user", group="pair")
    w.add("answer", type="assistant_message", role="assistant", group="pair")
    built = w.build_structured(cs.BuildOptions(max_history_items=1, section_separator="|"))
    assert built.content == "[user]: middle"
    assert sorted(built.omitted_item_ids) == ["ctx-1", "ctx-3", "ctx-4"]
    assert w.build(cs.BuildOptions(max_history_items=2, section_separator="|")) == "[user]: ask|[assistant]: answer"


def test_message_format(store):
    w = store.window("b-format")
    w.add("hi", type="user_message", role="user")
    w.add("plain")
    assert w.build(cs.BuildOptions(message_format="<{role}>{content}</{role}>", section_separator="\n")) == (
        "plain\n<user>hi</user>"
    )


def test_pinned_first_then_budget_history_newest_first(store):
    w = store.window("b-budget", max_tokens=10_000)
    w.add("SYSTEM", type="system_prompt", pinned=True)
    for i in range(10):
        w.add(f"message number {i}", type="user_message", role="user")
    budget_opts = cs.BuildOptions(max_tokens=60, reserve_for_response=20)
    built = w.build_structured(budget_opts)
    assert built.included_item_ids[0] == "ctx-1"
    assert built.total_tokens <= 40
    included = [w.get(i).content for i in built.included_item_ids[1:]]
    # the newest messages win the budget; they are rendered in conversation order
    assert included == [f"message number {i}" for i in range(10 - len(included), 10)]
    # all 10 messages were candidates (max_history_items=10); the older ones did not fit
    n_out = 10 - len(included)
    assert 0 < n_out < 10
    assert built.excluded_item_ids == [f"ctx-{n}" for n in range(1 + n_out, 1, -1)]


def test_every_item_is_included_excluded_or_omitted(store):
    w = store.window("b-lists", max_tokens=10_000)
    w.add("SYSTEM", type="system_prompt", pinned=True)
    w.add("a document", type="retrieved_document")
    for i in range(15):
        w.add(f"message number {i}", type="user_message", role="user")
    built = w.build_structured(
        cs.BuildOptions(max_history_items=4, include_relevant_memory=False, max_tokens=32, reserve_for_response=0)
    )
    assert built.included_item_ids[0] == "ctx-1" and len(built.included_item_ids) < 5
    assert built.omitted_item_ids == ["ctx-2"] + [f"ctx-{n}" for n in range(3, 14)]  # doc, old messages
    every = built.included_item_ids + built.excluded_item_ids + built.omitted_item_ids
    assert sorted(every) == sorted(i.id for i in w.items())
    assert set(built.excluded_item_ids) <= {f"ctx-{n}" for n in range(14, 18)}


@pytest.mark.parametrize("limit", [1000, 800, 1])
def test_a_reserve_that_leaves_no_room_is_an_error_that_names_the_fix(store, limit):
    w = store.window(f"b-reserve-{limit}", max_tokens=limit)
    w.add("hello")
    with pytest.raises(cs.InvalidOptionsError) as info:
        w.build()
    assert (
        f"reserve_for_response=1000 leaves no room for a prompt: the max_tokens of window "
        f"'b-reserve-{limit}' is {limit}; pass BuildOptions(reserve_for_response=N) with N < {limit}" in str(info.value)
    )
    with pytest.raises(cs.InvalidOptionsError, match=r"BuildOptions\.max_tokens is 300"):
        w.build(cs.BuildOptions(max_tokens=300, reserve_for_response=300))
    if limit > 1:
        assert w.build(cs.BuildOptions(reserve_for_response=limit - 10)) == "hello"


def test_budget_too_small(store):
    w = store.window("b-small", max_tokens=2000)
    w.add("x " * 500, pinned=True, token_count=1200)
    with pytest.raises(cs.BudgetTooSmallError) as info:
        w.build()  # budget 2000 - 1000 reserve
    assert info.value.budget == 1000 and info.value.pinned_tokens > 1000


def test_no_budget_includes_everything(store):
    w = store.window("b-nobudget")
    for i in range(20):
        w.add(f"item {i}")
    built = w.build_structured()
    assert len(built.included_item_ids) == 20 and built.excluded_item_ids == []


def test_build_never_deletes_unless_asked(store, r, prefix):
    w = store.window("b-compact", max_tokens=2000, compaction_threshold=100)
    for i in range(10):
        w.add(f"filler {i}", token_count=190, priority=i)
    built = w.build_structured()  # budget 1000 < 1900 stored
    assert not built.was_compacted and w.stats().total_items == 10
    built = w.build_structured(cs.BuildOptions(compact=True))
    assert built.was_compacted and built.tokens_freed_by_compaction == 570  # down to 70% of 2000
    assert w.stats().current_tokens == 1330 and w.stats().compaction_count == 1


def test_exact_tokens(store):
    w = store.window("b-exact", max_tokens=100_000)
    for i in range(30):
        w.add(
            f"  line {i}:\t{{x}} `y`\n", type="user_message" if i % 2 else "tool_result", role="user" if i % 2 else None
        )
    approx = w.build_structured(cs.BuildOptions(max_history_items=100))
    exact = w.build_structured(cs.BuildOptions(max_history_items=100, exact_tokens=True))
    assert exact.content == approx.content
    assert exact.total_tokens == COUNTER.count(exact.content) <= approx.total_tokens


def test_exact_tokens_uses_the_slack(store):
    w = store.window("b-slack")
    for i in range(40):
        w.add(f"(item {i})", type="text")
    counts = []
    for exact in (False, True):
        b = w.build_structured(cs.BuildOptions(max_tokens=150, reserve_for_response=0, exact_tokens=exact))
        assert COUNTER.count(b.content) <= 150 and b.total_tokens <= 150
        counts.append(len(b.included_item_ids))
    assert counts[1] > counts[0]


_text = st.text(
    alphabet=st.sampled_from(string.ascii_letters + string.digits + " \n\t.,;:!?-_()[]{}<>`'\"/\\#*é中😀"),
    min_size=1,
    max_size=60,
).filter(lambda s: s.strip())


@pytest.mark.parametrize("api_kind", ["sync", "async"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    contents=st.lists(st.tuples(_text, st.sampled_from([None, "user", "assistant", "tool"])), min_size=1, max_size=12),
    sep=st.sampled_from(["\n\n---\n\n", "\n", " ", "", "\n\n"]),
)
def test_total_tokens_bounds(redis_url, prefix, api_kind, contents, sep):
    """exact <= total_tokens <= exact + 2 per included item, and within the budget."""
    with open_store(api_kind, url=redis_url, prefix=prefix) as s:
        w = s.window("b-prop")
        w.clear()
        w.add_many([{"content": c, "role": role, "type": "text"} for c, role in contents])
        for budget in (None, 60):
            b = w.build_structured(cs.BuildOptions(max_tokens=budget, reserve_for_response=0, section_separator=sep))
            exact = COUNTER.count(b.content)
            assert exact <= b.total_tokens <= exact + 2 * len(b.included_item_ids)
            if budget is not None:
                assert b.total_tokens <= budget


def test_exact_count_of_pinned_items_over_budget_is_budget_too_small(make_store):
    # a caller-given token_count is trusted by the estimate; the exact count knows better
    w = make_store(token_counter=len).window("b-exact-pinned")
    w.add("x" * 50, pinned=True, token_count=5)
    assert w.build_structured(cs.BuildOptions(max_tokens=20, reserve_for_response=0)).total_tokens <= 20
    with pytest.raises(cs.BudgetTooSmallError):
        w.build_structured(cs.BuildOptions(max_tokens=20, reserve_for_response=0, exact_tokens=True))
