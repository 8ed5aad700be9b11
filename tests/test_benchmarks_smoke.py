"""A few seconds of the benchmarks, so that a change that breaks them fails CI (the full runs
stay manual: docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def smoke(script: str, timeout: int, *args: str) -> str:
    """What ``benchmarks/<script> --smoke`` (and ``args``) prints, once it exited 0."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--smoke", *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_peers_smoke_prints_every_table_and_the_goals():
    text = smoke("peers.py", 240)
    for heading in ("append 60 messages", "build, 60 3x over", "build, 60 fits", "prompt prefix", "goals"):
        assert heading in text, f"{heading!r} missing from:\n{text[-3000:]}"
    goals = text.split("\ngoals\n", 1)[1]
    for goal in ("3x over", "that fits", "append p50", "memory per message", "4 writers"):
        row = next(line for line in goals.splitlines() if goal in line)
        assert row.rstrip(" |").endswith(("met", "not met")), row
    assert "0 / 0" in goals  # writers: nothing lost or duplicated, even in a smoke run


@pytest.mark.slow  # four worker processes for each system
def test_fleet_smoke_prints_the_tables_and_every_goal():
    """A fleet of two workers over a few sessions, then the single calls: every table prints,
    every goal has a verdict, and the workers' turns lost or duplicated no message."""
    text = smoke("fleet.py", 300)
    for heading in ("sessions that fit their budget", "sessions 3x over their budget", "single calls", "### Goals"):
        assert heading in text, f"{heading!r} missing from:\n{text[-3000:]}"
    goals = text.split("### Goals", 1)[1]
    for goal in ("lost or duplicated", "add, server time", "add, client p50", "unchanged window", "memory per message"):
        row = next(line for line in goals.splitlines() if goal in line)
        assert row.rstrip(" |").endswith(("met", "not met")), row
    lost = next(line for line in goals.splitlines() if "lost or duplicated" in line)
    assert "| 0 " in lost and lost.rstrip(" |").endswith("met"), lost


@pytest.mark.slow  # two worker processes
def test_a_paired_fleet_takes_the_turns_asked_of_each_worker():
    """``--turns N``: each worker takes N turns a half, however long they take (two in smoke)."""
    text = smoke("fleet.py", 300, "--turns", "3", "--only", "contextstore")
    for title in ("sessions that fit their budget", "sessions 3x over their budget"):
        rows = text.split(title, 1)[1].split("\n### ", 1)[0].splitlines()
        ours = next(line for line in rows if line.startswith("| contextstore "))
        assert ours.rstrip(" |").rsplit("|", 1)[1].strip() == "6", ours


def test_add_profile_smoke_prints_every_phase_of_an_add():
    """The checkpoints still find their places in the scripts: every phase of an add has a time,
    and so has the plain add they are set against."""
    text = smoke("add_profile.py", 120)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from add_profile import PHASES
    finally:
        sys.path.pop(0)
    rows = {
        line.split("|")[1].strip(): line.split("|")[2].strip() for line in text.splitlines() if line.count("|") == 3
    }
    for phase in (*PHASES, "**the plain add, script time (INFO commandstats)**"):
        assert float(rows[phase]) >= 0, f"{phase!r}: {rows.get(phase)!r} in:\n{text}"
    assert float(rows["**the plain add, script time (INFO commandstats)**"]) > 0
    if "### Redis 7.0" in text:  # Valkey's TIME stands still inside a script: its phases read 0
        assert float(rows["writes: item, attrs, order, fifo"]) > 0


def test_paired_runs_two_versions_side_by_side():
    """benchmarks/paired.py with this checkout as its own baseline: both sides run, the table
    prints a ratio per call (the add's and the build's script time and p50, the chat and prompt
    builds after evictions' p50)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "paired.py"), "--baseline", str(ROOT), "--rounds", "2",
         "--calls", "5", "--messages", "100"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith(("| add", "| build"))]
    assert len(rows) == 6 and all(line.count("x |") == 1 for line in rows), out.stdout


def test_big_windows_smoke_prints_every_operation_at_each_size():
    """benchmarks/big_windows.py --smoke: each operation has a row at each size, and the numbers
    are real (a cold build sends bytes and runs commands; show reports its memory)."""
    text = smoke("big_windows.py", 300)
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in text.splitlines() if line.count("|") == 9]
    got = {(r[0], r[1]): r[2:] for r in rows if r[0] != "operation" and not r[0].startswith("-")}
    for op in ("add one message", "stats", "build, cold", "build, warm (unchanged)", "snapshot", "verify",
               "contextstore show", "contextstore show, terminal", "fork (whole window)", "rewind 100 items",
               "undo_rewind 100 items", "delete"):  # fmt: skip
        for size in ("200", "2,000"):
            assert float(got[(op, size)][0]) > 0, (op, size, text)
    assert int(got[("build, cold", "2,000")][3]) > 0 and float(got[("build, cold", "2,000")][2].replace(",", "")) > 0
    assert float(got[("contextstore show", "2,000")][4]) > 0
    screen, whole = got[("contextstore show, terminal", "2,000")], got[("contextstore show", "2,000")]
    assert float(screen[4]) > 0 and int(screen[3]) < int(whole[3])  # one screen: fewer commands than every item
    assert float(got[("fork (whole window)", "2,000")][4].strip("+ (Redis)")) > 0  # the memory a fork adds
    assert 0 < float(got[("fork (whole window)", "2,000")][5]) < 1000  # its longest command, ms
    for build in ("build, cold, 100 messages", "build, cold, every message competes",
                  "build_structured, cold, every message competes"):  # fmt: skip
        assert f"### {build}: what it sent against what it returns" in text, text


def test_cost_smoke_replays_each_strategy_and_calibration_keeps_every_prompt_within_the_context():
    """benchmarks/cost.py --smoke: a row per strategy in both sessions; the calibrated windows
    send no prompt the simulated provider refuses, the uncalibrated one does (its estimates are
    25% short), and a lower compaction target costs less than the default one and invalidates
    less of the prompt cache; trimming compacts nothing. With the build's cache breakpoints the
    default target costs less than with breakpoints on the system block and the last block only
    (the prefix before a compaction's first edit is read from the cache) and as little as a cache
    that reads any shared prefix would allow (within 1%). No row that sends every prompt extends
    more builds than the session's bound says any compaction could. Every compacting strategy
    breaks the cached prefix at most once per compaction (a build that silently left items out
    broke it a second time), and says so for each session."""
    text = smoke("cost.py", 120)
    bounds = [int(line.rsplit(" ", 1)[1].rstrip("%")) for line in text.splitlines() if "can extend" in line]
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 14 and cells[0] != "strategy" and not cells[0].startswith("-"):
            rows.setdefault(cells[0], []).append(cells)
    assert len(rows) == 5 and all(len(r) == 2 for r in rows.values()), text
    cost = lambda cells: float(cells[3].replace(",", ""))  # noqa: E731
    invalidated = lambda cells: int(cells[12].replace(",", ""))  # noqa: E731
    two, anywhere = (lambda cells, n=n: float(cells[n].replace(",", "")) for n in (5, 6))
    assert len(bounds) == 2 and all(0 < b < 100 for b in bounds), text
    for session in range(2):
        sent_all = [cells for cells in (r[session] for r in rows.values()) if cells[7] == "0"]
        assert sent_all and all(int(cells[1].rstrip("%")) <= bounds[session] for cells in sent_all), text
        assert invalidated(rows["trim every turn"][session]) == 0
        lower, default = rows["clear at threshold down to 40%, calibrated"], rows["clear at threshold, calibrated"]
        assert 0 < invalidated(lower[session]) < invalidated(default[session])
        assert rows["clear at threshold"][session][7] != "0"  # refused
        assert rows["clear at threshold, calibrated"][session][7] == "0"
        assert rows["clear at threshold down to 40%, calibrated"][session][7] == "0"
        assert anywhere(default[session]) <= cost(default[session]) <= 1.01 * anywhere(default[session])
        assert cost(default[session]) < two(default[session])
        assert cost(rows["clear at threshold down to 40%, calibrated"][session]) < cost(
            rows["clear at threshold, calibrated"][session]
        )
        for name, cells in ((name, r[session]) for name, r in rows.items() if name != "trim every turn"):
            assert float(cells[10]) <= 1.0, (name, session, text)
    assert text.count("prefix breaks per compaction <= 1 in every compacting strategy: met") == 2, text


def test_blobs_smoke_stores_screenshots_in_a_fraction_of_the_memory():
    text = smoke("blobs.py", 120)
    ratio = int(text.split("memory: inline parts take ", 1)[1].split("x", 1)[0])
    assert ratio >= 5, text


def test_image_checks_smoke_prints_a_row_per_format():
    """benchmarks/image_checks.py --smoke: a row per image format, each with a cost per MB."""
    text = smoke("image_checks.py", 120)
    for fmt in ("PNG", "JPEG", "GIF", "WEBP"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {fmt} "))
        assert row.rstrip(" |").split("|")[-1].strip().replace(",", "").isdigit(), row
