"""Reported usage (§20): ``record_usage`` stores what the provider reported for the build of a
version, once per request id; ``stats()`` sums it and keeps the window's token calibration, which
the budgets, the compaction threshold and ``usage_percent`` apply; a version that is not the
window's, a bad count or a corrupt calibration change nothing."""

from __future__ import annotations

import pytest

import contextstore as cs
from contextstore.core.layout import CALIBRATION_MAX, CALIBRATION_SAMPLES, Meta

NO_RESERVE = cs.BuildOptions(reserve_for_response=0)


def _conversation(w, turns: int = 10) -> None:
    for i in range(turns):
        w.add(f"question number {i} about the weather in a town " * 2, role="user")
        w.add(f"answer number {i}: sunny, with a light breeze " * 2, role="assistant")


def _usage_events(w) -> list[cs.events.UsageRecorded]:
    return [e for e in w.events(since="0") if isinstance(e, cs.events.UsageRecorded)]


def test_usage_is_summed_and_recorded_once_per_request_id(store):
    w = store.window("u-sum", max_tokens=5_000)
    _conversation(w)
    assert w.stats().usage == cs.UsageTotals() and w.stats().token_calibration == 1.0
    built = w.build_structured(NO_RESERVE)
    report = {"input_tokens": 100, "output_tokens": 20, "cache_read_tokens": 300, "cache_write_tokens": 40}
    w.record_usage(built.version, **report, model="claude-sonnet-4", request_id="call-1")
    w.record_usage(built.version, **report, model="claude-sonnet-4", request_id="call-1")  # a retry
    assert w.stats().usage == cs.UsageTotals(**report, records=1)
    w.record_usage(built.version, input_tokens=5, request_id="call-2")
    assert w.stats().usage == cs.UsageTotals(
        input_tokens=105, output_tokens=20, cache_read_tokens=300, cache_write_tokens=40, records=2
    )
    first = _usage_events(w)[0]
    assert (first.version, first.model) == (built.version, "claude-sonnet-4")
    assert first.estimated_tokens == built.total_tokens
    assert len(_usage_events(w)) == 2


def test_the_calibration_is_what_the_provider_counted_per_estimated_token(store):
    w = store.window("u-cal", max_tokens=5_000)
    _conversation(w)
    built = w.build_structured(NO_RESERVE)
    reported = round(built.total_tokens * 1.33)
    # the prompt as the provider counted it: input + cache read + cache write (Anthropic's split)
    got = w.record_usage(built.version, input_tokens=reported - 200, cache_read_tokens=150, cache_write_tokens=50)
    assert got == pytest.approx(1.33, abs=0.01) and w.stats().token_calibration == got
    # a smaller ratio later does not lower it (the largest of the recent ones: compact early)...
    for _ in range(CALIBRATION_SAMPLES - 1):
        w.record_usage(built.version, input_tokens=built.total_tokens)
    assert w.stats().token_calibration == got
    # ...until it is no longer among the last CALIBRATION_SAMPLES
    w.record_usage(built.version, input_tokens=built.total_tokens)
    assert w.stats().token_calibration == 1.0
    w.record_usage(built.version, input_tokens=built.total_tokens * 50)
    assert w.stats().token_calibration == CALIBRATION_MAX  # clamped


def test_budgets_thresholds_and_usage_apply_to_calibrated_counts(store):
    w = store.window("u-budget", max_tokens=2_000)
    _conversation(w, 20)
    built = w.build_structured(NO_RESERVE)
    w.record_usage(built.version, input_tokens=round(built.total_tokens * 1.33))
    factor = w.stats().token_calibration
    assert factor > 1.3
    for limit in (300, 600, 1_000):
        options = cs.BuildOptions(max_tokens=limit, reserve_for_response=0, max_history_items=100)
        for again in (w.build_structured(options), w.build_messages_structured(options)):
            assert again.excluded_item_ids and again.total_tokens * factor <= limit  # as the provider counts
            assert again.total_tokens * factor > limit - 60  # and fills it
    stats = w.stats()
    assert stats.usage_percent == pytest.approx(stats.current_tokens * factor * 100 / 2_000, rel=1e-3)
    assert stats.available_tokens == int(2_000 / factor) - stats.current_tokens
    # adds keep the window within max_tokens as the provider counts it: they compact sooner
    for i in range(40):
        w.add(f"more words in turn {i} " * 8, role="user")
        assert w.stats().current_tokens * factor <= 2_000


def test_a_full_window_is_refused_at_its_calibrated_limit(store):
    w = store.window("u-full", max_tokens=400, max_items=100)
    w.add("be brief " * 30, role="system", pinned=True)
    built = w.build_structured(NO_RESERVE)
    w.record_usage(built.version, input_tokens=built.total_tokens * 2)
    with pytest.raises(cs.ContextWindowFullError) as refused:
        w.add("a long question " * 70, role="user", pinned=True)  # fits 400, not 400 / 2
    assert refused.value.max == 200 and w.stats().total_items == 1


def test_a_build_made_by_another_worker_calibrates_too(make_store):
    builder, recorder = make_store(), make_store(item_cache_bytes=0)
    _conversation(builder.window("u-fleet", max_tokens=5_000))
    built = builder.window("u-fleet").build_messages_structured(NO_RESERVE)
    w = recorder.window("u-fleet")
    w.record_usage(built.version, input_tokens=built.total_tokens * 2, request_id="fleet-1")
    assert w.stats().token_calibration == 2.0
    assert builder.window("u-fleet").stats().token_calibration == 2.0


def test_usage_of_a_version_no_build_names_keeps_the_calibration(store):
    w = store.window("u-nobuild", max_tokens=5_000)
    _conversation(w, 2)
    version = w.stats().version
    w.record_usage(version, input_tokens=900, output_tokens=10)
    assert w.stats().token_calibration == 1.0 and w.stats().usage.input_tokens == 900
    assert _usage_events(w)[0].estimated_tokens is None


def test_a_version_that_is_not_this_windows_records_nothing(store):
    w, other = store.window("u-mine", max_tokens=5_000), store.window("u-other", max_tokens=5_000)
    _conversation(w, 2)
    _conversation(other, 2)
    theirs = other.build_structured(NO_RESERVE).version
    mine = w.build_structured(NO_RESERVE).version
    lifetime, seq, removed = mine.split(".")
    for bad in (theirs, "", "garbage", "1.2", f"{lifetime}.{int(seq) + 1}.{removed}", f"{mine}.0", 17, None):
        with pytest.raises(cs.InvalidOptionsError):
            w.record_usage(bad, input_tokens=10)
    w.delete()
    _conversation(w, 2)  # the same id, made again: the old version is another lifetime's
    with pytest.raises(cs.InvalidOptionsError, match="not one this window reported"):
        w.record_usage(mine, input_tokens=10)
    assert w.stats().usage == cs.UsageTotals() and not _usage_events(w)
    gone = store.window("u-missing")
    gone.delete()
    with pytest.raises(cs.InvalidOptionsError):  # no window: no version is its
        gone.record_usage(mine, input_tokens=10)
    assert "u-missing" not in store.windows()


@pytest.mark.parametrize(
    "report",
    [{"input_tokens": -1}, {"input_tokens": True}, {"input_tokens": 1.5}, {"input_tokens": "10"},
     {"input_tokens": 1, "output_tokens": -3}, {"input_tokens": 1, "cache_read_tokens": 2**60},
     {"input_tokens": 1, "model": "two words"}, {"input_tokens": 1, "model": ""},
     {"input_tokens": 1, "model": "x\x1b[2J"}, {"input_tokens": 1, "request_id": "no spaces allowed"}],
)  # fmt: skip
def test_a_bad_report_is_refused_with_nothing_recorded(one_server, store, report):
    """(Refused by the client's checks, before any script: one server.)"""
    w = store.window("u-bad", max_tokens=5_000)
    _conversation(w, 1)
    version = w.build_structured(NO_RESERVE).version
    with pytest.raises(cs.InvalidOptionsError):
        w.record_usage(version, **report)
    assert w.stats().usage == cs.UsageTotals() and not _usage_events(w)


@pytest.mark.parametrize("stored", ["7.5", "0.1", "nan", "1.2 1.3", "many"])
def test_a_corrupt_calibration_stops_every_write_and_read(store, r, stored):
    w = store.window("u-corrupt", max_tokens=5_000)
    _conversation(w, 1)
    r.hset(w._state.keys.meta, Meta.CALIBRATION, stored)
    before = r.hgetall(w._state.keys.meta)
    with pytest.raises(cs.CorruptWindowError):
        w.add("one more", role="user")
    with pytest.raises(cs.CorruptWindowError):
        w.stats()
    with pytest.raises(cs.CorruptWindowError):
        w.record_usage("1.1.0", input_tokens=5)
    assert r.hgetall(w._state.keys.meta) == before
    assert any(Meta.CALIBRATION in p for p in w.verify().problems)


def test_workers_recording_at_once_lose_nothing_and_count_nothing_twice(make_store):
    from concurrent.futures import ThreadPoolExecutor

    w = make_store().window("u-many", max_tokens=5_000)
    _conversation(w, 3)
    version = w.build_structured(NO_RESERVE).version

    def worker(n: int) -> None:
        mine = make_store(item_cache_bytes=0).window("u-many")  # a stateless worker of its own
        for k in range(25):
            for _ in range(2):  # each report sent twice, as after a lost reply
                mine.record_usage(version, input_tokens=10, output_tokens=1, request_id=f"w{n}-{k}")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(worker, range(4)))
    assert w.stats().usage == cs.UsageTotals(input_tokens=1000, output_tokens=100, records=100)
    assert len(_usage_events(w)) == 100


def test_what_the_usage_cost_at_the_callers_prices():
    used = cs.UsageTotals(input_tokens=1_000, output_tokens=500, cache_read_tokens=9_000, cache_write_tokens=0)
    sonnet = cs.Prices(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    assert used.cost(sonnet) == pytest.approx((1_000 * 3.0 + 500 * 15.0 + 9_000 * 0.3) / 1e6)
    assert used.cache_read_share == pytest.approx(0.9) and cs.UsageTotals().cache_read_share == 0.0
    assert cs.UsageTotals().cost(sonnet) == 0.0
    for bad in ({"input": -1.0}, {"input": float("nan")}, {"input": 1.0, "output": float("inf")}, {"input": "3"}):
        with pytest.raises(cs.InvalidOptionsError, match="price must be a finite number"):
            cs.Prices(**bad)
    with pytest.raises(cs.InvalidOptionsError, match="prices must be a Prices"):
        used.cost({"input": 3.0})  # type: ignore[arg-type]


def test_the_command_shows_what_the_reported_usage_cost(one_server, store, redis_url, prefix, capsys):
    from contextstore import cli

    w = store.window("u-cli", max_tokens=5_000)
    _conversation(w, 2)
    version = w.build_structured(NO_RESERVE).version
    w.record_usage(version, input_tokens=1_000, output_tokens=500, cache_read_tokens=9_000)

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["--url", redis_url, "--prefix", prefix, *argv])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = run("stats", "u-cli", "--prices", "3,15,0.3,3.75")
    out = " ".join(out.split())  # as wrapped to the terminal's width
    assert code == 0 and "cost of the reported usage: 0.013200" in out and "(90.0% of the prompt)" in out
    code, out, _ = run("stats", "u-cli", "--prices", "3,15,0.3", "--json")
    assert code == 0 and '"cost":0.0132' in out.replace(" ", "")
    code, _, err = run("stats", "u-cli", "--prices", "3,-15")
    assert code == 2 and "INPUT,OUTPUT[,CACHE_READ,CACHE_WRITE]" in err


# -- what a compaction costs the provider's prompt cache ---------------------------------------

ARRIVAL = cs.BuildOptions(order="arrival", reserve_for_response=0, max_tokens=100_000, max_history_items=10_000)


def _agent_run(w, turns: int = 6) -> None:
    w.add("You are terse.", role="system", pinned=True)
    for i in range(turns):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "look", "arguments": "{}"}}
        w.add(f"question {i}", role="user")
        w.add("", role="assistant", metadata={"tool_calls": [call]})
        w.add(f"result {i} " + "data " * 100, role="tool", metadata={"tool_call_id": f"c{i}"})
        w.add(f"answer {i}", role="assistant")


def _lost_prefix(before: cs.BuiltMessages, after: cs.BuiltMessages, tokens: dict[str, int]) -> int:
    """The tokens of ``before``'s messages from the first one ``after`` does not repeat on: what
    a provider's prefix cache of ``before`` cannot serve for ``after``."""
    pairs = zip(before.messages, after.messages, strict=False)
    same = next((k for k, (a, b) in enumerate(pairs) if a != b), min(len(before.messages), len(after.messages)))
    return sum(tokens[i] for i in before.included_item_ids[same:])


@pytest.mark.parametrize(
    "strategy", ["clear_tool_results", "remove_oldest", "summarize", "an add's compaction", "late tool results"]
)
def test_a_compaction_reports_the_prompt_it_invalidated_as_the_built_payloads_show(make_store, strategy):
    """``compacted``'s ``tokens_invalidated`` is what the arrival-order prompts before and after
    it no longer share: the tokens from its first change on, no more (summed from whichever side
    of the first change is shorter: late tool results change the window's last items)."""
    store = make_store(summarizer=cs.ExtractiveSummarizer())
    w = store.window("cache", max_tokens=3_000, keep_recent=2, compaction_threshold=80.0, compaction_target=20)
    if strategy == "late tool results":
        _conversation(w, 15)
        strategy = "clear_tool_results"
    _agent_run(w)
    tokens = {i.id: i.token_count for i in w.items()}
    before = w.build_messages_structured(ARRIVAL)
    assert len(before.messages) == len(tokens)  # one message per item: the payloads show every change
    if strategy == "an add's compaction":
        w.add("one more " * 120, role="user", token_count=2_000)  # past the threshold: the add compacts
    else:
        w.compact(strategy, target_percent=10)
    after = w.build_messages_structured(ARRIVAL)
    (event,) = [e for e in w.events(since="0") if isinstance(e, cs.events.Compacted)]
    assert 0 < event.tokens_invalidated == _lost_prefix(before, after, tokens) < sum(tokens.values())
