"""Rewind (§19): ``win.rewind(to)`` takes a window back to one of its items in one step, keeping
what it took in the archive; ``undo_rewind`` puts it back exactly; a tool call is never cut from
its results; another worker's turn, a stale version or a bad id change nothing."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest

import contextstore as cs

from support import dump_window


def _call(call_id: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": "search", "arguments": "{}"}}


def _conversation(w) -> list[cs.ContextItem]:
    w.add("You are terse.", role="system", pinned=True)
    w.add("first question", role="user", id="q1")
    w.add("first answer", role="assistant")
    w.add("second question", role="user", id="q2")
    w.add_many([
        {"content": "", "role": "assistant", "metadata": {"tool_calls": [_call("c1")]}},
        {"content": "found it", "role": "tool", "metadata": {"tool_call_id": "c1"}},
    ])  # fmt: skip
    w.add("a note to keep", type="text", pinned=True)
    w.add("second answer", role="assistant")
    return w.items()


def _same(a: list[cs.ContextItem], b: list[cs.ContextItem]) -> None:
    assert msgspec.to_builtins(a) == msgspec.to_builtins(b)


def test_a_rewind_takes_everything_after_the_item_and_its_undo_puts_it_back(store):
    w = store.window("rw", max_tokens=10_000)
    before = _conversation(w)
    rid = w.rewind("q2")
    assert rid.startswith("rewind-")
    _same(w.items(), before[:4])  # the pinned note after q2 went too
    assert w.verify().ok and w.stats().total_items == 4
    last = w.build_messages(cs.BuildOptions(reserve_for_response=0))[-1]
    assert last == {"role": "user", "content": "second question"}
    assert w.undo_rewind(rid) == 4
    _same(w.items(), before)
    assert w.verify().ok and [i.content for i in w.pinned_items()] == ["You are terse.", "a note to keep"]
    with pytest.raises(cs.InvalidOptionsError, match="no rewind"):
        w.undo_rewind(rid)  # undone already
    kinds = [e.kind for e in w.events(since="0")]
    assert kinds.count("rewound") == 1 and kinds.count("rewind_undone") == 1
    rewound = next(e for e in w.events(since="0") if e.kind == "rewound")
    assert isinstance(rewound, cs.events.Rewound) and (rewound.item_id, rewound.items_removed) == ("q2", 4)


def test_items_added_after_a_rewind_stay_when_it_is_undone(store):
    w = store.window("rw-later", max_tokens=10_000)
    before = _conversation(w)
    rid = w.rewind("q1")
    later = w.add("a different second question", role="user")
    assert w.undo_rewind(rid) == 6
    assert [i.id for i in w.items()] == [i.id for i in before] + [later.id]
    assert w.verify().ok


@pytest.mark.parametrize(
    "to, error, match",
    [
        ("ctx-5", cs.InvalidOptionsError, "cut tool-call group"),  # the call: its result comes after it
        ("nowhere", cs.InvalidOptionsError, "is not in the window"),
    ],
)
def test_a_rewind_that_cannot_be_done_changes_nothing(store, r, prefix, to, error, match):
    w = store.window("rw-bad", max_tokens=10_000)
    _conversation(w)
    assert w.items()[4].id == "ctx-5" and w.items()[4].metadata["tool_calls"]
    before = dump_window(r, prefix, "rw-bad")
    with pytest.raises(error, match=match):
        w.rewind(to)
    assert dump_window(r, prefix, "rw-bad") == before


def test_a_rewind_honours_expect_version_and_another_workers_turn(store, r, prefix):
    w = store.window("rw-turn", max_tokens=10_000)
    _conversation(w)
    stale = w.stats().version
    w.add("one more", role="user")
    before = dump_window(r, prefix, "rw-turn")
    with pytest.raises(cs.VersionConflictError):
        w.rewind("q2", expect_version=stale)
    assert dump_window(r, prefix, "rw-turn") == before
    with w.turn(input="a new question", owner="worker-1") as turn:
        other = store.window("rw-turn")  # another worker's handle
        with pytest.raises(cs.TurnBusyError):
            other.rewind("q2")
        rid = turn.rewind("q2")  # inside the running turn: allowed
        assert w.items()[-1].id == "q2"
        with pytest.raises(cs.TurnBusyError):
            other.undo_rewind(rid)
    assert w.undo_rewind(rid, expect_version=w.stats().version) == 6  # the turn's input came after q2 too
    assert w.items()[-1].content == "a new question"


def test_an_undo_is_refused_when_an_id_is_taken_again_or_the_archive_expired(store):
    w = store.window("rw-taken", max_tokens=10_000, archive_ttl_seconds=1)
    _conversation(w)
    rid = w.rewind("q1")
    w.add("again", role="user", id="q2")  # the id of an item the rewind took
    with pytest.raises(cs.DuplicateItemError, match="'q2' is in the window again"):
        w.undo_rewind(rid)
    w.remove("q2")
    time.sleep(1.1)
    with pytest.raises(cs.InvalidOptionsError, match="no rewind"):
        w.undo_rewind(rid)
    with pytest.raises(cs.InvalidOptionsError, match="what rewind\\(\\) returned"):
        w.undo_rewind("ctx-3.1")  # a summary id is not a rewind id


def test_a_fork_holds_the_items_up_to_its_point_and_leaves_the_source_alone(store):
    w = store.window("src", max_tokens=10_000, keep_recent=2)
    before = _conversation(w)
    child = w.fork("src-branch", at="q2")
    _same(child.items(), before[:4])
    _same(w.items(), before)
    assert child.stats().max_tokens == 10_000 and child.stats().total_items == 4
    child.add("another second answer", role="assistant")
    assert [i.content for i in w.items()] == [i.content for i in before]  # the source goes its own way
    assert child.lineage() == cs.Lineage(parent="src", fork_point="q2", forks=[])
    whole = w.fork("src-now")
    _same(whole.items(), before)
    assert w.lineage() == cs.Lineage(parent=None, fork_point=None, forks=["src-branch", "src-now"])
    assert child.verify().ok and whole.verify().ok
    kinds = [(e.kind, getattr(e, "fork", ""), getattr(e, "parent", "")) for e in w.events(since="0")]
    assert ("forked", "src-branch", "") in kinds
    assert [(e.kind, e.parent) for e in child.events(since="0") if e.kind == "forked"] == [("forked", "src")]
    w.delete()
    _same(child.items()[:4], before[:4])  # a fork outlives its parent


def test_a_fork_at_a_version_holds_the_items_of_that_version(store):
    w = store.window("src-v", max_tokens=10_000)
    w.add("first", role="user")
    then = w.add("second", role="assistant")
    version = w.stats().version
    w.add("third", role="user")
    child = w.fork("src-v-then", at=version)
    assert [i.content for i in child.items()] == ["first", "second"]
    assert child.lineage().fork_point == then.id
    w.remove(then.id or "")  # a removal by hand: that version cannot be gone back to
    with pytest.raises(cs.InvalidOptionsError, match="items were removed by hand since it"):
        w.fork("src-v-late", at=version)


def test_a_fork_at_a_version_that_cannot_be_gone_back_to_names_the_real_cause(store):
    """A version from the future, of another lifetime, or malformed: each refusal says which."""
    w = store.window("src-why", max_tokens=10_000)
    w.add("first", role="user")
    created, seq, removed = w.stats().version.split(".")
    causes = {
        f"{created}.{int(seq) + 5}.{removed}": "from the future: the window has reached seq 1, the version names seq 6",
        f"{int(created) + 1}.{seq}.{removed}": "another lifetime of the window",
        "1.2": "malformed",
    }
    for version, cause in causes.items():
        with pytest.raises(cs.InvalidOptionsError, match=cause) as refused:
            w.fork("src-why-2", at=version)
        assert "removed by hand" not in str(refused.value)
    assert not store.window("src-why-2").items()


@pytest.mark.parametrize(
    "new_id, at, match",
    [
        ("taken", None, "exists already"),
        ("fresh", "ctx-5", "cut tool-call group"),
        ("fresh", "nowhere", "no item id of the window"),
        ("src-bad", None, "an id of its own"),
    ],
)
def test_a_fork_that_cannot_be_made_writes_nothing(store, r, prefix, new_id, at, match):
    w = store.window("src-bad", max_tokens=10_000)
    _conversation(w)
    store.window("taken").add("already here")
    before = [dump_window(r, prefix, wid) for wid in ("src-bad", "taken", "fresh")]
    with pytest.raises(cs.InvalidOptionsError, match=match):
        w.fork(new_id, at=at)
    assert [dump_window(r, prefix, wid) for wid in ("src-bad", "taken", "fresh")] == before


@pytest.mark.parametrize("api", ["sync"], indirect=True)  # the command runs the sync API
def test_the_command_forks_and_rewinds(store, redis_url, prefix, capsys, monkeypatch):
    from contextstore import cli

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["--url", redis_url, "--prefix", prefix, *argv])
        out, err = capsys.readouterr()
        return code, out, err

    w = store.window("cli-src", max_tokens=10_000)
    _conversation(w)
    assert run("fork", "cli-src", "cli-branch", "--at", "q2")[:2] == (
        0,
        "forked cli-src at q2 into cli-branch: 4 items\n",
    )
    code, out, _ = run("rewind", "cli-src", "q1", "--json")
    rewind_id = msgspec.json.decode(out)["rewind_id"]
    assert code == 0 and [i.id for i in w.items()][-1] == "q1"
    assert run("rewind", "cli-src", rewind_id, "--undo")[:2] == (0, "put back 6 items\n")
    code, _, err = run("fork", "cli-src", "cli-branch")
    assert code == 2 and "exists already" in err
    code, _, err = run("rewind", "cli-src", "nowhere")
    assert code == 2 and "'nowhere' is not in the window" in err
    code, out, _ = run("ls", "--tree", "--json")
    listed = [(row["window_id"], row["parent"], row["depth"]) for row in msgspec.json.decode(out)]
    assert code == 0 and listed == [("cli-src", None, 0), ("cli-branch", "cli-src", 1)]
    code, out, _ = run("ls", "--tree")
    assert code == 0 and "└ cli-branch" in out
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # show on a terminal names where a fork comes from
    code, out, _ = run("show", "cli-branch")
    assert code == 0 and "forked from cli-src at q2" in out


def test_tree_order_puts_each_fork_under_its_parent_and_survives_a_loop():
    from contextstore.cli.listing import tree_order

    parents = {"a": None, "a/1": "a", "a/1/x": "a/1", "a/2": "a", "b": "gone", "loop1": "loop2", "loop2": "loop1"}
    assert tree_order(list(parents), parents) == [
        ("a", 0), ("a/1", 1), ("a/1/x", 2), ("a/2", 1), ("b", 0), ("loop1", 0), ("loop2", 1),
    ]  # fmt: skip


@pytest.mark.parametrize("api", ["sync"], indirect=True)  # writers in threads of their own
def test_a_fork_taken_while_four_writers_add_is_a_prefix_of_the_window(make_store):
    import threading

    w = make_store().window("busy", max_tokens=1_000_000, max_items=1000)
    w.add("You are terse.", role="system", pinned=True)
    stop = threading.Event()

    def writer(n: int) -> None:
        mine = make_store().window("busy")
        k = 0
        while not stop.is_set() and k < 200:
            mine.add(f"writer {n} message {k}", role="user" if k % 2 else "assistant")
            k += 1

    def grown_past(n: int) -> None:  # the writers added something since (on a loaded machine they start late)
        deadline = time.monotonic() + 30
        while w.stats().total_items <= n and time.monotonic() < deadline:
            time.sleep(0.01)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    forks: list[list[Any]] = []
    for n in range(3):
        grown_past(len(forks[-1]) if forks else 1)
        forks.append(w.fork(f"busy-{n}").items())
    stop.set()
    for t in threads:
        t.join()
    final = w.items()
    for got in forks:
        assert 1 < len(got) <= len(final)
        _same(got, final[: len(got)])  # what the window held at one moment, whole
    assert len({len(f) for f in forks}) > 1  # the writers moved the window on between the forks


def test_a_fork_refuses_a_foreign_version_and_a_bad_id_with_nothing_written(store, r, prefix):
    w = store.window("src-ids", max_tokens=10_000)
    _conversation(w)
    other = store.window("elsewhere", max_tokens=10_000)
    other.add("hello", role="user")
    foreign = other.stats().version  # another window's version: another lifetime
    before = dump_window(r, prefix, "src-ids")
    with pytest.raises(cs.InvalidOptionsError, match="no item id of the window, and as a version it is"):
        w.fork("fresh", at=foreign)
    with pytest.raises(cs.InvalidWindowIdError):
        w.fork("two words")
    assert dump_window(r, prefix, "src-ids") == before and not store.window("fresh").items()


def test_a_client_that_dies_after_writing_the_fork_leaves_it_whole(store, monkeypatch):
    """The fork is one script on its own slot; a client that dies before the parent notes it
    leaves a whole fork that names its parent (the parent does not list it)."""
    from contextstore.plans import fork as fork_plans

    w = store.window("src-dies", max_tokens=10_000)
    before = _conversation(w)
    real = fork_plans.restore

    def restore_then_die(*args, **kwargs):
        yield from real(*args, **kwargs)
        raise KeyboardInterrupt("the client died")

    monkeypatch.setattr(fork_plans, "restore", restore_then_die)
    with pytest.raises(KeyboardInterrupt):
        w.fork("src-dies-fork")
    child = store.window("src-dies-fork", create=False)
    _same(child.items(), before)
    assert child.lineage().parent == "src-dies" and w.lineage().forks == []
