"""A restore or a fork of more items than one call writes (``wire.ROWS_A_CALL``) stages all but
the last part in keys no read sees (stage.lua), then restore.lua moves them into the window with
the last part, in one step: the window appears whole or not at all, each call holds the shard
for a bounded time, a retry of the restore resumes its staging, a refusal leaves nothing behind.
The parts are made small here (4 items) so that windows of a few items are staged."""

from __future__ import annotations

import math

import msgspec
import pytest

import contextstore as cs
from contextstore.core import wire
from contextstore.core.keys import window_keys
from contextstore.core.layout import STAGE_TTL_MS
from contextstore.plans.base import ScriptCall

from support import dump_window

PART = 4


@pytest.fixture
def parts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Parts of PART items; the list of how many items each staged part came after."""
    monkeypatch.setattr(wire, "ROWS_A_CALL", PART)
    staged: list[int] = []
    real = wire.stage_args

    def recorded(before, items):
        staged.append(before)
        return real(before, items)

    monkeypatch.setattr(wire, "stage_args", recorded)
    return staged


def _staging_keys(r, prefix: str, window_id: str) -> list[bytes]:
    return sorted(r.scan_iter(match=f"{prefix}:{{{window_id}}}:staged:*", count=1000))


def _conversation(w, turns: int = 6) -> list[cs.ContextItem]:
    w.add("You are terse.", role="system", pinned=True)
    for t in range(turns):
        w.add(f"question {t}", role="user", id=f"q{t}")
        w.add_many([
            {"content": "", "role": "assistant",
             "metadata": {"tool_calls": [{"id": f"c{t}", "type": "function",
                                          "function": {"name": "search", "arguments": "{}"}}]}},
            {"content": f"found {t}", "role": "tool", "metadata": {"tool_call_id": f"c{t}"}},
        ])  # fmt: skip
        w.add(f"answer {t}", role="assistant", priority=t % 3)
    return w.items()


def _same(a: list[cs.ContextItem], b: list[cs.ContextItem]) -> None:
    assert msgspec.to_builtins(a) == msgspec.to_builtins(b)


def _counters(w) -> tuple:
    s = w.stats()
    return s.total_items, s.current_tokens, s.tokens_by_type, s.items_by_type


def test_a_fork_over_one_call_is_staged_then_appears_whole(store, r, prefix, parts):
    w = store.window("big-src", max_tokens=100_000)
    before = _conversation(w)
    child = w.fork("big-child")
    assert parts == [PART * k for k in range(math.ceil(len(before) / PART) - 1)]  # every part but the last
    _same(child.items(), before)
    assert _counters(child) == _counters(w) and child.verify().ok
    assert child.lineage() == cs.Lineage(parent="big-src", fork_point=before[-1].id, forks=[])
    assert [e.items for e in child.events(since="0") if e.kind == "forked"] == [len(before)]
    assert _staging_keys(r, prefix, "big-child") == []
    keys = window_keys(prefix, "big-child")
    assert [r.ttl(k) for k in (keys.items, keys.attrs, keys.order, keys.fifo)] == [-1] * 4  # no staging expiry
    child.add("question 6", role="user")  # a window like any other after it
    assert child.items()[-1].seq > before[-1].seq


def test_a_restore_over_one_call_matches_its_snapshot_and_keeps_the_ttl(make_store, r, prefix, parts):
    store = make_store(summarizer=cs.ExtractiveSummarizer())
    src = store.window("snap-src", max_tokens=100_000, keep_recent=8, ttl_seconds=3600)
    _conversation(src, turns=4)
    assert src.compact("summarize", target_percent=0) > 0
    src.add("after the summary", role="user")
    snap = src.snapshot()
    target = store.window("snap-dst", max_tokens=5_000)
    target.add("an item the restore replaces", role="user")
    target.restore(snap)
    assert parts, "the restore was staged"
    _same(target.items(), src.items())
    assert _counters(target) == _counters(src) and target.verify().ok
    assert 3500 < r.ttl(window_keys(prefix, "snap-dst").items) <= 3600  # the snapshot's TTL, not the staging's
    (summary,) = [i for i in src.items() if (i.metadata or {}).get("summary_of")]
    assert target.undo_summary(summary.id or "") > 0  # its archive came with it
    assert _staging_keys(r, prefix, "snap-dst") == []


def test_a_client_that_dies_while_staging_leaves_no_window_and_its_retry_completes(
    store, r, prefix, parts, monkeypatch
):
    src = store.window("die-src", max_tokens=100_000)
    before = _conversation(src)
    snap = src.snapshot()
    real = wire.stage_args

    def die_at_the_third(before_, items):
        if before_ == 2 * PART:
            raise KeyboardInterrupt("the client died")
        return real(before_, items)

    monkeypatch.setattr(wire, "stage_args", die_at_the_third)
    target = store.handle("die-dst")
    with pytest.raises(KeyboardInterrupt):
        target.restore(snap, request_id="restore-1")
    assert not r.exists(*window_keys(prefix, "die-dst"))  # nothing of the window is visible
    assert "die-dst" not in store.windows()
    staged = _staging_keys(r, prefix, "die-dst")
    assert staged and all(0 < r.pttl(k) <= STAGE_TTL_MS for k in staged)  # left behind for a while only
    monkeypatch.setattr(wire, "stage_args", real)
    target.restore(snap, request_id="restore-1")  # the same request: it resumes its staging
    _same(target.items(), before)
    assert _counters(target) == _counters(src) and target.verify().ok
    assert _staging_keys(r, prefix, "die-dst") == []


def test_a_refused_fork_after_staging_leaves_nothing_behind(store, r, prefix, parts):
    w = store.window("ref-src", max_tokens=100_000)
    _conversation(w)
    store.window("ref-taken").add("already here")
    kept = dump_window(r, prefix, "ref-taken")
    with pytest.raises(cs.InvalidOptionsError, match="exists already"):
        w.fork("ref-taken")
    assert parts, "the fork staged before it was refused"
    assert dump_window(r, prefix, "ref-taken") == kept and _staging_keys(r, prefix, "ref-taken") == []


def _rows(store, w, snap) -> list[bytes]:
    """The packed item rows restore() would send for ``snap`` (one argument: fewer than 1000)."""
    from contextstore.plans import snapshot as snapshot_plans

    plan = snapshot_plans.restore(store._settings, w._state, snap)
    call = next(plan)
    plan.close()
    return [a for a in call.args if isinstance(a, bytes) and a.startswith(b"[[")]


def _row_list(packed: bytes) -> list[list[str]]:
    return msgspec.json.decode(packed)


@pytest.mark.parametrize(
    "case",
    ["does not follow", "an id staged before", "a seq before the staged", "malformed", "commit counts more"],
)
def test_the_scripts_refuse_parts_no_client_sends(store, r, prefix, monkeypatch, case):
    """stage.lua and restore.lua check the staged parts themselves (a foreign or corrupt caller),
    before any write."""
    from contextstore.core.keys import STAGED, staged_keys

    monkeypatch.setattr(wire, "ROWS_A_CALL", 1000)
    src = store.window("raw-src", max_tokens=100_000)
    _conversation(src, turns=2)
    w = store.window("raw-dst", max_tokens=100_000)
    w.add("already here")
    rows = _row_list(_rows(store, w, src.snapshot())[0])
    first, rest = rows[:4], rows[4:]
    staging = staged_keys(w._state.keys, "raw")

    def call(name, keys, args):
        def plan():
            return (yield ScriptCall(name, keys, args, "restore:raw" if name == "restore" else ""))

        return store._run(plan())

    def part(before, chunk):
        return call("stage", staging, [str(before), str(len(chunk)), msgspec.json.encode(chunk)])

    assert part(0, first) == 4
    staged_before = {k: r.dump(k) for k in _staging_keys(r, prefix, "raw-dst")}
    window_before = dump_window(r, prefix, "raw-dst")
    if case == "does not follow":
        reply = part(2, rest)
    elif case == "an id staged before":
        reply = part(4, [[first[1][0], *rest[0][1:]]])
    elif case == "a seq before the staged":
        reply = part(4, [[rest[0][0] + "x", rest[0][1], "1", *rest[0][3:]]])
    elif case == "malformed":
        reply = call("stage", staging, ["4", "1", b'[["only", "two"]]'])
    else:  # restore.lua told more were staged than were
        from contextstore.core import layout

        config = wire.config_args(w._state.config)
        args = [*config, *config, "9", "0", "0"]
        assert len(config) == len(layout.Meta.CONFIG)
        keys = (*w._state.keys, *(getattr(staging, n) for n in STAGED))
        reply = call("restore", keys, args)
    assert reply[0] in (b"!", "!") and reply[1] in (b"BADARG", "BADARG"), reply
    assert {k: r.dump(k) for k in _staging_keys(r, prefix, "raw-dst")} == staged_before
    assert dump_window(r, prefix, "raw-dst") == window_before
