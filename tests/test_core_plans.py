"""The stream, compactor and topology plans driven with canned replies, without Redis: what each
sends (the redis-py call and its arguments) and what it makes of each reply. The same plans run
against real servers in test_events.py, test_compactor.py and test_cluster.py; here their logic
is pinned down on its own, as h11's tests pin a protocol down without a socket."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

import contextstore as cs
from contextstore import compactor
from contextstore.core import streams, topology
from contextstore.core.layout import Meta
from contextstore.core.streams import Deliver, Sleep, StreamCall
from contextstore.core.tokens import resolve_counter
from contextstore.events import ItemAdded, OtherEvent
from contextstore.plans.base import Settings

from support import drive

KEY_A, KEY_B = "ctx:{a}:events", "ctx:{b}:events"


def run_stream(plan: Any, replies: list[Any]) -> tuple[list[StreamCall], list[Any], list[float]]:
    """Drive a stream plan to its end: each ``StreamCall`` answered by the next reply, ``Sleep``
    and ``Deliver`` by None. Returns the calls, what it delivered and how long it slept."""
    calls: list[StreamCall] = []
    delivered: list[Any] = []
    slept: list[float] = []
    replies = list(replies)
    try:
        request = next(plan)
        while True:
            reply = None
            if isinstance(request, StreamCall):
                calls.append(request)
                assert replies, f"the plan asked for more than its replies: {request!r}"
                reply = replies.pop(0)
            elif isinstance(request, Sleep):
                slept.append(request.seconds)
            else:
                assert isinstance(request, Deliver)
                delivered.append(request.value)
            request = plan.send(reply)
    except StopIteration:
        assert not replies, f"{len(replies)} replies left over"
        return calls, delivered, slept


def added(n: int) -> dict[bytes, bytes]:
    """An ``item_added`` entry's fields, as redis-py hands them over."""
    return {b"event": b"item_added", b"item_id": f"ctx-{n}".encode(), b"type": b"code",
            b"token_count": b"3", b"total_tokens_after": str(3 * n).encode()}  # fmt: skip


def ms(entry_id: str) -> datetime:
    return datetime.fromtimestamp(int(entry_id.split("-")[0]) / 1000, tz=UTC)


# -- following one window --------------------------------------------------------------------


def test_follow_reads_after_since_delivers_typed_events_and_stops_when_none_came():
    first = [(b"1700000000000-0", added(1)), (b"1700000000001-0", {b"event": b"from_a_newer_version", b"x": b"1"})]
    plan = streams.follow("a", KEY_A, "0", None, count=2)
    calls, delivered, _ = run_stream(plan, [[[KEY_A.encode(), first]], [[KEY_A.encode(), []]]])
    assert [c.method for c in calls] == ["xread", "xread"]
    assert calls[0].kwargs == {"streams": {KEY_A: "0"}, "count": 2, "block": None}
    assert calls[1].kwargs["streams"] == {KEY_A: "1700000000001-0"}  # after the last entry delivered
    event, unknown = delivered
    assert isinstance(event, ItemAdded) and (event.item_id, event.total_tokens_after) == ("ctx-1", 3)
    assert (event.window_id, event.id, event.at) == ("a", "1700000000000-0", ms("1700000000000-0"))
    assert isinstance(unknown, OtherEvent) and (unknown.kind, unknown.fields) == ("from_a_newer_version", {"x": "1"})


def test_follow_reads_the_resp3_shape_and_starts_at_new_events_without_since():
    resp3 = {KEY_A.encode(): [[(b"1700000000005-0", added(5))]]}
    calls, delivered, _ = run_stream(streams.follow("a", KEY_A, None, 250), [resp3, {}])
    assert calls[0].kwargs == {"streams": {KEY_A: "$"}, "count": 100, "block": 250}
    assert [e.item_id for e in delivered] == ["ctx-5"]


def test_follow_with_block_zero_waits_for_ever():
    plan = streams.follow("a", KEY_A, "0", 0)
    with pytest.raises(AssertionError, match="more than its replies"):
        run_stream(plan, [[], [], []])  # three empty reads, and it still asks for a fourth


@pytest.mark.parametrize(("since", "block_ms"), [("yesterday", None), (5, None), ("0", -1), ("0", 1.5)])
def test_follow_checks_its_arguments_before_any_call(since, block_ms):
    with pytest.raises(cs.InvalidOptionsError):
        streams.follow("a", KEY_A, since, block_ms)


# -- consumer groups -------------------------------------------------------------------------


def test_a_consumer_creates_its_groups_takes_its_own_pending_then_claims_then_reads_new():
    group, plan = streams.consumer("ctx", False, ["a", "b"], "g", "c1", None, 10, 1000)
    own = [[KEY_A.encode(), [(b"1-0", added(1)), (b"2-0", None)]]]  # 2-0 was trimmed away while pending
    claimed = [b"0-0", [(b"3-0", added(3))], []]
    new = [[KEY_B.encode(), [(b"4-0", added(4))]]]
    nothing = [b"0-0", [], []]
    replies = [True, None, own, claimed, nothing, new, nothing, nothing, []]
    calls, delivered, slept = run_stream(plan, replies)
    assert group == "g" and slept == []
    assert [c.method for c in calls] == ["xgroup_create", "xgroup_create", "xreadgroup", "xautoclaim", "xautoclaim",
                                         "xreadgroup", "xautoclaim", "xautoclaim", "xreadgroup"]  # fmt: skip
    assert calls[0].kwargs == {"name": KEY_A, "groupname": "g", "id": "0", "mkstream": True}
    assert calls[0].ignore == ("BUSYGROUP",)  # a group that exists is joined, not an error
    assert calls[2].kwargs == {"groupname": "g", "consumername": "c1", "count": 10, "streams": {KEY_A: "0", KEY_B: "0"}}
    assert calls[3].kwargs["min_idle_time"] == 1000 and calls[3].kwargs["name"] == KEY_A
    assert calls[5].kwargs["streams"] == {KEY_A: ">", KEY_B: ">"} and calls[5].kwargs["block"] is None
    mine, theirs, fresh = delivered
    assert [e.item_id for e in mine.events] == ["ctx-1"] and mine.pending == {KEY_A: ["1-0", "2-0"]}
    assert [e.window_id for e in theirs.events] == ["a"] and theirs.pending == {KEY_A: ["3-0"]}
    assert [e.window_id for e in fresh.events] == ["b"] and fresh.pending == {KEY_B: ["4-0"]}
    assert streams.acknowledge("g", mine.pending)[0].args == (KEY_A, "g", "1-0", "2-0")


def test_a_cluster_consumer_reads_each_stream_alone_and_polls_until_block_ms_passed():
    _, plan = streams.consumer("ctx", True, ["a", "b"], "g", "c1", 100, 10, 1000)
    nothing = [b"0-0", [], []]
    rounds = [nothing, nothing, [], []] * 3  # three empty rounds: claims, then one read per stream
    calls, delivered, slept = run_stream(plan, [True, True, [], [], *rounds])
    reads = [c.kwargs["streams"] for c in calls if c.method == "xreadgroup"]
    assert reads[:2] == [{KEY_A: "0"}, {KEY_B: "0"}] and reads[2:4] == [{KEY_A: ">"}, {KEY_B: ">"}]
    assert all(c.kwargs.get("block") is None for c in calls if c.method == "xreadgroup")  # never blocks on a slot
    assert delivered == [] and slept == [streams.POLL_SECONDS, streams.POLL_SECONDS]  # 2 x 50 ms >= 100 ms


def test_one_window_of_a_cluster_is_read_in_one_blocking_call():
    _, plan = streams.consumer("ctx", True, "a", "g", "c1", 100, 10, 1000)
    calls, _, slept = run_stream(plan, [True, [], [b"0-0", [], []], []])
    assert calls[-1].kwargs["block"] == 100 and slept == []


@pytest.mark.parametrize(
    "args",
    [
        ([], "g", "c", None, 10, 0),
        (["a"], "bad group", "c", None, 10, 0),
        (["a"], "g", "c", None, 0, 0),
        (["a"], "g", "c", -5, 10, 0),
        (["a{x}"], "g", "c", None, 10, 0),
    ],
)
def test_a_consumer_checks_its_arguments_before_any_call(args):
    with pytest.raises(ValueError):  # InvalidOptionsError, InvalidWindowIdError
        streams.consumer("ctx", False, *args)


# -- the compactor ---------------------------------------------------------------------------


def settings() -> Settings:
    return Settings(prefix="ctx", counter=resolve_counter(lambda t: len(t.split())), item_limit=1000,
                    max_content_bytes=10_000)  # fmt: skip


def meta(tokens: int, max_tokens: int = 100, warn: float = 75.0, **more: object) -> list[Any]:
    """peek.lua's reply (meta) for a window holding ``tokens`` (``more``: other Meta fields)."""
    fields = {Meta.MAX_TOKENS: max_tokens, Meta.MAX_ITEMS: 50, Meta.ITEM_LIMIT: 1000, Meta.THRESHOLD: "85.0",
              Meta.STRATEGY: "remove_oldest", Meta.TTL: 0, Meta.TOKENS: tokens, Meta.WARN_PERCENT: warn,
              **more}  # fmt: skip
    return [[x for pair in fields.items() for x in (pair[0], str(pair[1]))], 0, []]


def job() -> compactor.CompactorJob:
    return compactor.new_job(["a"], "g", "c1", 5000, 1000, 100)


def test_tend_leaves_a_missing_window_and_one_below_warn_percent_alone():
    for reply in ([[], 0, []], meta(tokens=74)):
        calls, outcome = drive(compactor.tend(settings(), job(), "a"), [reply])
        assert outcome == compactor.NOT_NEEDED and [c.name for c in calls] == ["peek"]


def test_tend_backs_off_a_window_another_compactor_holds():
    calls, outcome = drive(compactor.tend(settings(), job(), "a"), [meta(tokens=80), 0])
    assert outcome == compactor.BUSY and [c.name for c in calls] == ["peek", "lease"]
    assert calls[1].args[0] == "acquire" and calls[1].args[1].startswith("c1/")  # the job's lease token


def test_tend_compacts_with_the_default_strategy_to_15_points_below_warn_and_releases_the_lease():
    j = job()
    replies = [meta(tokens=80), 1, meta(tokens=80), [20, 1], [5, 0], 1]
    calls, outcome = drive(compactor.tend(settings(), j, "a"), replies)
    assert outcome == compactor.DONE
    assert [c.name for c in calls] == ["peek", "lease", "peek", "compact", "compact", "lease"]
    assert calls[1].args == ["acquire", j.token, "5000"] and calls[-1].args[:2] == ["release", j.token]
    compact_args = calls[3].args
    assert "remove_oldest" in compact_args and "60.0" in compact_args  # warn_percent 75 - 15


@pytest.mark.parametrize(("target", "sent"), [("50.0", "50.0"), ("80.0", "60.0")])
def test_tend_compacts_to_the_windows_compaction_target_when_it_is_below_warn(target, sent):
    replies = [meta(tokens=80, target=target), 1, meta(tokens=80, target=target), [30, 0], 1]
    calls, _ = drive(compactor.tend(settings(), job(), "a"), replies)
    assert calls[3].name == "compact" and sent in calls[3].args  # a target above warn would free nothing


def test_tend_measures_usage_against_the_calibrated_limit():
    # 70 estimated tokens of 100 are below warn (75%); calibrated 1.25 (the provider counts 25%
    # more), the limit is 80 estimated tokens and 70 is 87.5% of it
    calls, outcome = drive(compactor.tend(settings(), job(), "a"), [meta(tokens=70, calibration="1.25"), 0])
    assert outcome == compactor.BUSY and [c.name for c in calls] == ["peek", "lease"]
    calls, outcome = drive(compactor.tend(settings(), job(), "a"), [meta(tokens=70)])
    assert outcome == compactor.NOT_NEEDED


def test_tend_asks_to_try_again_when_nothing_could_be_freed():
    replies = [meta(tokens=90), 1, meta(tokens=90), [0, 0], meta(tokens=90), 1]
    calls, outcome = drive(compactor.tend(settings(), job(), "a"), replies)
    assert outcome == compactor.RETRY and [c.name for c in calls][-2:] == ["peek", "lease"]


def test_a_window_that_failed_backs_off_doubling_and_a_handled_one_is_acknowledged():
    j = job()
    assert not j.handled("a", compactor.BUSY, now=100.0) and not j.due("a", 100.4) and j.due("a", 100.5)
    assert not j.handled("a", RuntimeError("down"), now=200.0) and not j.due("a", 200.9) and j.due("a", 201.0)
    assert j.handled("a", compactor.DONE, now=300.0) and j.due("a", 300.0)
    assert not j.handled("a", compactor.RETRY, now=400.0) and j.due("a", 400.0)  # no ack, but no back-off


def test_a_delivery_is_split_by_window_trimmed_entries_included():
    event = streams._delivery({KEY_A: "a"}, [(KEY_A, "1-0", added(1))]).events[0]
    delivery = streams.Delivery([event], {KEY_A: ["1-0"], KEY_B: ["9-0"]})  # b's entry was trimmed away
    assert compactor.by_window(delivery) == {"a": {KEY_A: ["1-0"]}, "b": {KEY_B: ["9-0"]}}


def test_compactor_options_are_checked():
    for bad in ([], "a b", None):
        with pytest.raises(ValueError):
            compactor.new_job(bad if bad is not None else ["a"], "g" if bad is not None else "bad group", "c", 1, 0, 1)


# -- cluster topology ------------------------------------------------------------------------


def node(flags: str, slots: list[list[str]], migrations: list[Any] | None = None) -> dict[str, Any]:
    return {"node_id": flags, "flags": flags, "slots": slots, "migrations": migrations or []}


def test_layout_is_each_primarys_own_view_and_compares_whatever_the_reply_order():
    one = {"h1:7000": node("myself,master", [["0", "8191"]]), "h2:7001": node("master", [["8192", "16383"]])}
    two = {"h2:7001": node("myself,master", [["8192", "16383"]]), "h1:7000": node("master", [["0", "8191"]])}
    by_node = {"n1": one, "n2": two}
    layout = topology.layout_of(by_node)
    assert layout == (("h1:7000", ("['0', '8191']",)), ("h2:7001", ("['8192', '16383']",)))
    assert topology.layout_of({"n2": two, "n1": one}) == layout
    assert topology.layout_of(one) == (("h1:7000", ("['0', '8191']",)),)  # one node's own reply


def test_a_layout_while_a_slot_migrates_is_none_and_a_moved_slot_differs():
    steady = {"n1": {"a:1": node("myself,master", [["0", "16383"]])}}
    migrating = {"n1": {"a:1": node("myself,master", [["0", "16383"]], [{"slot": "5", "node_id": "x"}])}}
    moved = {"n1": {"a:1": node("myself,master", [["0", "16382"]])}}
    assert topology.layout_of(migrating) is None
    assert topology.layout_of(moved) != topology.layout_of(steady)
    assert topology.layout_of({}) == () and topology.layout_of(None) == ()
