"""The background compactor: store.run_compactor() (sync and async) and `contextstore
compactor`, its lease, and a compactor summarising while processes add and remove, killed with
SIGKILL mid-summary and replaced by another."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import contextstore as cs

from _openai_server import FakeChatServer
from _workers import add_and_remove
from support import PROCESSES, check_invariants, events, key

WARN = 60.0
ADDS = 150  # per writer process, 50 ms apart: about 8 s of four agents talking


def _wait(check: Callable[[], object], seconds: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.05)


def _fill(w, until_percent: float) -> None:
    n = 0
    while w.stats().usage_percent < until_percent:
        w.add(f"note {n}: the code word is word{n}. " + "detail " * 20, type="user_message", priority=n % 7)
        n += 1


@pytest.fixture
def compactor_thread(redis_url: str, prefix: str) -> Iterator[Callable[..., threading.Event]]:
    """``start(windows, **options)`` runs a sync compactor in a thread; stopped at teardown."""
    running: list[tuple[threading.Thread, threading.Event, cs.ContextStore]] = []

    def start(windows=None, **options) -> threading.Event:
        store = cs.ContextStore.from_url(redis_url, prefix=prefix, summarizer=cs.ExtractiveSummarizer())
        stop = threading.Event()
        t = threading.Thread(target=store.run_compactor, args=(windows,), kwargs={"stop": stop, **options})
        t.start()
        running.append((t, stop, store))
        return stop

    yield start
    for t, stop, store in running:
        stop.set()
        t.join(10)
        assert not t.is_alive(), "the compactor did not stop"
        store.close()


def test_the_compactor_summarises_a_window_that_crosses_warn_percent(redis_url, prefix, r, compactor_thread):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("bg", max_tokens=2000, warn_percent=WARN, default_strategy="summarize", keep_recent=2)
        other = store.window("bg-idle", max_tokens=2000, warn_percent=WARN)
        other.add("hello")
        _fill(w, WARN + 1)  # before it starts: its group begins at the oldest event kept
        compactor_thread(consumer="c1", block_ms=200)
        _wait(lambda: w.stats().usage_percent <= WARN - 15, what="the compactor to compact")
        (summary,) = [i for i in w.items() if "summary_of" in (i.metadata or {})]
        assert w.archived(summary.id) and w.stats().compaction_count == 1
        assert other.stats().compaction_count == 0
        compacted = [e for e in events(r, prefix, "bg") if e["event"] == "compacted"]
        assert compacted[-1]["strategy"] == "summarize" and compacted[-1]["summary_id"] == summary.id
        check_invariants(r, prefix, "bg")
        _wait(lambda: not r.exists(key(prefix, "bg", "lease")), 5, "the lease to be released")


def test_the_compactor_compacts_down_to_the_windows_compaction_target(redis_url, prefix, compactor_thread):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("bg-target", max_tokens=2000, warn_percent=WARN, compaction_target=WARN - 8,
                         default_strategy="remove_oldest")  # fmt: skip
        _fill(w, WARN + 1)
        compactor_thread(["bg-target"], consumer="c1", block_ms=200)
        _wait(lambda: w.stats().compaction_count == 1, what="the compactor to compact")
        # down to the target (52%), not to warn_percent - 15 (45%): each note is ~2.3% of the window
        assert WARN - 15 + 3 < w.stats().usage_percent <= WARN - 8


def test_a_window_below_warn_percent_is_left_alone(redis_url, prefix, compactor_thread):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("bg-low", max_tokens=2000, warn_percent=WARN, default_strategy="summarize")
        compactor_thread(["bg-low"], consumer="c1", block_ms=200)
        _fill(w, WARN - 10)
        time.sleep(1.0)
        assert w.stats().compaction_count == 0


def test_a_window_leased_by_another_compactor_waits_for_it(redis_url, prefix, r, compactor_thread):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("bg-lease", max_tokens=2000, warn_percent=WARN, default_strategy="summarize")
        _fill(w, WARN + 1)
        r.set(key(prefix, "bg-lease", "lease"), "someone-else", px=1500)  # a compactor that died
        began = time.monotonic()
        compactor_thread(["bg-lease"], consumer="c1", block_ms=200)
        _wait(lambda: w.stats().compaction_count == 1, what="the compaction after the lease expired")
        assert time.monotonic() - began >= 1.2  # not before the other's lease expired


def test_without_the_strategys_helper_it_falls_back_to_remove_low_priority(redis_url, prefix, compactor_thread):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("bg-sel", max_tokens=2000, warn_percent=WARN, default_strategy="selective")
        _fill(w, WARN + 1)
        compactor_thread(["bg-sel"], consumer="c1", block_ms=200)  # it has a summarizer, no scorer
        _wait(lambda: w.stats().usage_percent <= WARN - 15, what="a fallback compaction")
        strategies = [e.strategy for e in w.events(since="0") if isinstance(e, cs.events.Compacted)]
        assert strategies == [cs.CompactionStrategy.REMOVE_LOW_PRIORITY]


def test_the_async_compactor(redis_url, prefix):
    async def main() -> float:
        async with cs.AsyncContextStore.from_url(
            redis_url, prefix=prefix, summarizer=cs.ExtractiveSummarizer()
        ) as store:
            w = await store.window("bg-async", max_tokens=2000, warn_percent=WARN, default_strategy="summarize")
            n = 0
            while (await w.stats()).usage_percent < WARN + 1:
                await w.add(f"note {n}: value {n}. " + "detail " * 20, type="user_message")
                n += 1
            stop = asyncio.Event()
            task = asyncio.create_task(store.run_compactor(["bg-async"], stop=stop, consumer="a1", block_ms=200))
            for _ in range(300):
                if (await w.stats()).usage_percent <= WARN - 15:
                    break
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.wait_for(task, 10)
            return (await w.stats()).usage_percent

    assert asyncio.run(main()) <= WARN - 15


def test_bad_compactor_options(redis_url, prefix):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        for bad in ({"lease_ms": 0}, {"group": ""}, {"consumer": "a b"}):
            with pytest.raises(cs.InvalidOptionsError):
                store.run_compactor(["w"], stop=threading.Event(), **bad)
        with pytest.raises(cs.InvalidWindowIdError):
            store.run_compactor(["bad id"], stop=threading.Event())
        with pytest.raises(cs.InvalidOptionsError):
            store.run_compactor([], stop=threading.Event())


# -- the command, and a compactor killed mid-summary ----------------------------------------------


def _compactor_process(redis_url: str, prefix: str, name: str, base_url: str, log: Path) -> subprocess.Popen:
    cmd = [
        sys.executable, "-m", "contextstore", "--url", redis_url, "--prefix", prefix, "-v", "compactor", "busy",
        "--summarizer", "openai", "--model", "local", "--base-url", base_url, "--consumer", name,
        "--lease-ms", "2000", "--claim-after-ms", "1000",
    ]  # fmt: skip
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_the_command_stops_on_sigterm(redis_url, prefix, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "contextstore", "--url", redis_url, "--prefix", prefix, "compactor", "x"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stderr.readline() if proc.stderr else ""  # printed once its handlers are set
        assert "tending" in first, first
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0 and "stopped" in err, err
    finally:
        proc.kill()
        proc.communicate()


def test_the_command_refuses_openai_without_a_model(redis_url, prefix):
    done = subprocess.run(
        [sys.executable, "-m", "contextstore", "--url", redis_url, "compactor", "--summarizer", "openai"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "--model" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_compactor_killed_mid_summary_and_writers_that_never_lose_an_add(redis_url, prefix, r, tmp_path, one_server):
    max_tokens = 6000
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window(
            "busy", max_tokens=max_tokens, warn_percent=WARN, default_strategy="summarize", keep_recent=2,
            compaction_threshold=95,
        )  # fmt: skip
        server = FakeChatServer().start()
        server.mode, server.delay = "slow", 0.3
        first = _compactor_process(redis_url, prefix, "first", server.base_url, tmp_path / "first.log")
        second = None
        ctx = PROCESSES
        try:
            with ctx.Pool(4) as pool:
                jobs = [
                    pool.apply_async(add_and_remove, (redis_url, prefix, "busy", n, ADDS, n % 2 == 1, 0.05))
                    for n in range(4)
                ]
                summaries = lambda: [e for e in events(r, prefix, "busy") if e.get("summary_id")]  # noqa: E731

                def under_way() -> bool:  # the test adds too: on a loaded machine the writers may be done first
                    w.add("pressure: " + "detail " * 20, type="user_message")
                    return bool(summaries()) and server.in_flight

                _wait(under_way, 60, "a summary committed and another under way")
                committed_before_kill = len(summaries())
                first.send_signal(signal.SIGKILL)
                first.wait(10)
                assert r.get(key(prefix, "busy", "lease")).startswith(b"first/")  # it died holding the lease
                second = _compactor_process(redis_url, prefix, "second", server.base_url, tmp_path / "second.log")
                results = [j.get(120) for j in jobs]
            _wait(lambda: len(summaries()) > committed_before_kill, 60, "the second compactor to summarise")
            _wait(lambda: w.stats().usage_percent < WARN, 60, "the second compactor to finish")
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(10)
            server.stop()
        _check_nothing_lost(w, r, prefix, results, max_tokens)
        assert "first" not in (tmp_path / "second.log").read_text()  # its own log, no errors of the first
        assert "Traceback" not in (tmp_path / "second.log").read_text()


def _check_nothing_lost(w, r, prefix, results, max_tokens) -> None:
    stream = events(r, prefix, "busy")
    assert all(int(e["total_tokens_after"]) <= max_tokens for e in stream if "total_tokens_after" in e)
    kept = {i.id for i in w.items()}
    removed = {e["item_id"] for e in stream if e["event"] == "item_removed"}
    added = {i for res in results for i in res["added"]}
    assert len(added) == 4 * ADDS
    assert added <= kept | removed, f"lost adds: {sorted(added - kept - removed)[:5]}"
    summarised: set[str] = set()
    for e in stream:
        if e.get("summary_id"):
            archived = {i.id for i in w.archived(e["summary_id"])}
            assert archived and not archived & kept, "an item both summarised and kept"
            summarised |= archived
    assert summarised and summarised <= removed
    assert {i for res in results for i in res["removed"]} <= removed
    check_invariants(r, prefix, "busy")
    strategies = [e["strategy"] for e in stream if e["event"] == "compacted"]
    print(f"compactions: {len(strategies)}, summaries: {strategies.count('summarize')}")
