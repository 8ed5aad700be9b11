"""The cookbook's programs run as the docs show them (``docs/cookbook/*.py``, included verbatim
in the pages): each as its own process, against redis-servers this test starts, with a local
OpenAI-compatible server standing in for the model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

import contextstore as cs

from _openai_server import FakeChatServer
from support import RedisProcess

COOKBOOK = Path(__file__).resolve().parent.parent / "docs" / "cookbook"


@pytest.fixture
def server() -> Iterator[RedisProcess]:
    s = RedisProcess().start()
    yield s
    s.stop()


def run_recipe(name: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python docs/cookbook/<name> args...`` with ``env`` added to this process's environment."""
    return subprocess.run(
        [sys.executable, str(COOKBOOK / name), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_with_chat_model(name: str, server: RedisProcess) -> subprocess.CompletedProcess[str]:
    """``run_recipe`` against ``server`` with the local chat model standing in for OpenAI."""
    model = FakeChatServer().start()
    model.mode = "chat"
    try:
        return run_recipe(name, CONTEXTSTORE_URL=server.url, OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY="x")
    finally:
        model.stop()


def test_the_chat_loop_shares_each_conversation_among_workers(server):
    done = run_with_chat_model("chat_loop.py", server)
    assert done.returncode == 0, done.stderr
    turns = re.findall(r"^(\w+) turn (\d) \(worker (\d+)\): seen (\d+) messages; re: (.*)$", done.stdout, re.M)
    assert len(turns) == 9
    # turn t was answered from the whole history so far, whichever worker wrote it:
    # the system prompt, t questions and t answers, and the question of this turn
    assert all(int(seen) == 2 + 2 * int(turn) for _, turn, _, seen, _ in turns)
    assert len({pid for _, _, pid, _, _ in turns}) > 1, "every turn ran on one worker"
    with cs.ContextStore.from_url(server.url) as store:
        for conversation in ("alice", "bob", "carol"):
            win = store.window(f"chat-{conversation}", create=False)
            items = win.items()
            assert [i.type.value for i in items] == ["system_prompt"] + ["user_message", "assistant_message"] * 3
            assert [i.content for i in items[2::2]] == [
                f"seen {2 + 2 * t} messages; re: {items[1 + 2 * t].content}" for t in range(3)
            ]
            assert win.verify().ok


def test_moving_windows_keeps_every_item_and_empties_the_source(server, tmp_path):
    target = RedisProcess().start()
    try:
        with cs.ContextStore.from_url(server.url) as source:
            before = {}
            for n, wid in enumerate(["agent-7", "team/b"]):
                win = source.window(wid, max_tokens=4000 + n, keep_recent=2)
                win.add("You review code.", type="system_prompt", pinned=True)
                call = {"id": f"call_{n}", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
                win.add("", type="assistant_message", role="assistant", metadata={"tool_calls": [call]})
                win.add("3 matches", type="tool_result", role="tool", metadata={"tool_call_id": f"call_{n}"})
                win.add("Thanks.", type="user_message", role="user", priority=70)
                before[wid] = win.snapshot()
            done = run_recipe("move_window.py", server.url, target.url, "agent-7", "team/b")
            assert done.returncode == 0, done.stderr
            assert "agent-7: moved 4 items" in done.stdout and "team/b: moved 4 items" in done.stdout
            assert source.windows() == []
        with cs.ContextStore.from_url(target.url) as moved:
            for wid, snap in before.items():
                after = moved.window(wid, create=False).snapshot()
                assert msgspec.structs.replace(after, created_at=snap.created_at) == snap
        missing = run_recipe("move_window.py", server.url, target.url, "no-such-window")
        assert missing.returncode != 0 and "WindowNotFoundError" in missing.stderr
    finally:
        target.stop()


def test_the_background_compactor_summarises_while_the_agent_adds(server):
    done = run_recipe("compactor.py", CONTEXTSTORE_URL=server.url)
    assert done.returncode == 0, done.stderr
    summary_id, count = re.search(r"^(ctx-[\d.]+) summarises (\d+) notes: ", done.stdout, re.M).groups()
    with cs.ContextStore.from_url(server.url) as store:
        win = store.window("research-notes", create=False)
        ids = {i.id for i in win.items()}
        replaced = [i.id for i in win.archived(summary_id)]
        assert summary_id in ids and len(replaced) == int(count) > 0
        assert not ids & set(replaced), "a summarised note is still in the window"
        assert win.stats().compaction_count >= 1 and win.verify().ok


def test_the_computer_use_loop_keeps_the_newest_screenshots_within_the_budget(server):
    done = run_recipe("computer_use.py", CONTEXTSTORE_URL=server.url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "12 screenshots stored; one counts 1372 tokens"  # 1280*800/750 and the text
    kept = re.fullmatch(r"within 6000 tokens: the newest (\d+) screenshots, (\d+) tokens", lines[1])
    assert kept and 1 < int(kept[1]) < 12 and int(kept[2]) <= 6000
    assert "cannot carry (text only)" in lines[2]
    with cs.ContextStore.from_url(server.url) as store:
        shots = [i for i in store.window("computer-use", create=False).items() if i.type is cs.ItemType.TOOL_RESULT]
        assert len(shots) == 12 and all(isinstance(i.content, list) for i in shots)


def test_retry_from_here_branches_and_rewinds(server):
    done = run_with_chat_model("retry_from_here.py", server)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "branch: seen 4 messages; re: Rewrite it as a formal itinerary."
    assert lines[1] == "main:   seen 4 messages; re: Make it cheaper."
    assert lines[2] == "main holds 5 items, the branch 5"
    assert lines[3] == "lineage: ['trip/formal'] trip ctx-3"
    assert lines[4] == "after the rewind, main ends with: seen 4 messages; re: Make it cheaper."
    assert lines[5] == "put back: 2 items"
    with cs.ContextStore.from_url(server.url) as store:
        trip, formal = store.window("trip", create=False), store.window("trip/formal", create=False)
        assert [i.id for i in formal.items()][:3] == [i.id for i in trip.items()][:3]
        assert trip.stats().total_items == 7 and trip.verify().ok and formal.verify().ok
