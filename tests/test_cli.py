"""The ``contextstore`` command as a first-day user meets it: one line on stderr and a
documented exit status for every expected failure, reading verbs that never create a window,
help on every option, and a demo that shows several workers and never hangs."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import click
import pytest

import contextstore as cs
from contextstore import cli

from support import free_port

READING_VERBS = [["stats"], ["items"], ["build"], ["markdown"], ["snapshot"], ["verify"], ["stats", "--json"]]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """The command in this process: (exit status, stdout, stderr)."""
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # nothing should exit the process; say so if it does
        pytest.fail(f"the command called sys.exit({exc.code})")
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, f"expected one line on stderr, got {err!r}"
    assert "Traceback" not in err
    return err.rstrip("\n")


@pytest.mark.parametrize("verb", READING_VERBS, ids=" ".join)
def test_reading_a_missing_window_says_so_and_creates_nothing(capsys, redis_url, prefix, verb):
    base = ("--url", redis_url, "--prefix", prefix)
    code, out, err = run(capsys, *base, verb[0], "no-such-window", *verb[1:])
    assert (code, out) == (1, "")
    assert one_line(err) == "contextstore: window 'no-such-window' does not exist"
    assert run(capsys, *base, "windows")[:2] == (0, "")


def test_an_unreachable_redis_is_one_line_and_exit_1(capsys):
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    for verb in (["verify", "x"], ["stats", "x"], ["windows"]):
        code, out, err = run(capsys, "--url", url, *verb)
        assert (code, out) == (1, "")
        line = one_line(err)
        assert line.startswith(f"contextstore: Redis at {url} is unavailable"), line


def test_an_unreachable_redis_in_a_real_process_prints_no_retry_noise():
    url = f"redis://127.0.0.1:{free_port()}/0"
    res = subprocess.run(
        [sys.executable, "-m", "contextstore.cli", "--url", url, "stats", "x"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1 and res.stdout == ""
    assert "retrying" not in res.stderr and "gave up" not in res.stderr
    one_line(res.stderr)
    verbose = subprocess.run(
        [sys.executable, "-m", "contextstore.cli", "-vv", "--url", url, "stats", "x"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # nothing listens there: reported at the first contact, not retried (retries are for a
    # server that was reached and went away), also when the log is on
    assert verbose.returncode == 1 and "retrying" not in verbose.stderr and "gave up" not in verbose.stderr
    assert verbose.stderr.strip().splitlines()[-1].startswith("contextstore: Redis at")


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--workers", "0"],
        ["demo", "--turns", "-3"],
        ["demo", "--max-tokens", "x"],
        ["items", "w", "--limit", "-1"],
        ["build", "w", "--reserve", "-5"],
        ["no-such-command"],
        [],
    ],
    ids=" ".join,
)
def test_usage_errors_are_one_line_and_exit_2(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert one_line(err).startswith("contextstore")


def test_a_bad_window_id_is_a_usage_error(capsys, redis_url):
    code, _, err = run(capsys, "--url", redis_url, "stats", "bad{id}")
    assert code == 2 and one_line(err).startswith("contextstore: window id 'bad{id}' must be")


def test_version(capsys):
    assert run(capsys, "--version") == (0, f"contextstore {cs.__version__}\n", "")


def _commands(group: click.Group):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command)
        else:
            yield name, command


def test_every_option_has_help_and_every_verb_a_description_without_jargon():
    texts = [cli.cli.help or ""]
    texts += [p.help or "" for p in cli.cli.params if isinstance(p, click.Option)]
    for name, command in _commands(cli.cli):
        assert command.help, f"{name} has no description"
        texts.append(command.help)
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{name} {param.name} has no help"
                texts.append(param.help)
    for text in texts:
        assert not re.search(r"seed|contract|§", text, re.I), text


def test_build_on_a_small_window_names_the_reserve_and_json_reports_every_item(capsys, redis_url, prefix):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("small", max_tokens=800)
        w.add("You review code.", type="system_prompt", pinned=True)
        for n in range(15):
            w.add(f"message {n}", type="user_message", role="user")
    base = ("--url", redis_url, "--prefix", prefix, "build", "small")
    code, out, err = run(capsys, *base)
    assert (code, out) == (2, "")
    assert "--reserve 1000 leaves no room for a prompt within 800 tokens" in one_line(err)
    code, out, err = run(capsys, *base, "--reserve", "100")
    assert code == 0 and err == "" and out.startswith("You review code.") and "message 14" in out
    code, out, _ = run(capsys, *base, "--reserve", "100", "--json")
    import msgspec

    built = msgspec.json.decode(out, type=cs.BuiltContext)
    assert len(built.included_item_ids) == 11 and built.excluded_item_ids == []
    assert built.omitted_item_ids == [f"ctx-{n}" for n in range(2, 7)]  # beyond max_history_items=10


def _demo(redis_url: str, prefix: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """The demo in a process of its own, on one server (it drives the library, whose scripts run
    on every server in the other tests)."""
    return subprocess.run(
        [sys.executable, "-m", "contextstore.cli", "--url", redis_url, "--prefix", prefix, "demo", *argv],
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.slow
def test_demo_with_a_tiny_window_finishes_and_counts_refused_turns(redis_url, prefix, one_server):
    """It hung for ever when a worker's ContextWindowFullError could not be unpickled."""
    res = _demo(redis_url, prefix, "--workers", "3", "--turns", "5", "--max-tokens", "150")
    assert res.returncode == 0, res.stderr
    assert re.search(r"3 workers took 15 turns .*\n[1-9]\d* turns refused as too big for the window", res.stdout)
    assert "verify(): OK; within budget: yes" in res.stdout


def _talk(stdout: str) -> list[str]:
    """The rows of the messages a worker would send, as the demo prints them."""
    return [line for line in stdout.splitlines() if re.match(r"^(system|user|assistant|tool) ", line)]


@pytest.mark.slow
def test_demo_tells_a_conversation_that_adds_up(redis_url, prefix, one_server):
    res = _demo(redis_url, prefix, "--workers", "3", "--turns", "10")
    assert res.returncode == 0, res.stderr
    held = re.search(r"the window holds (\d+) items: (\d+) pinned .* \+ (\d+) from the workers\n  \((.*)\)", res.stdout)
    assert held, res.stdout
    total, pinned, workers = (int(held.group(n)) for n in (1, 2, 3))
    per_worker = [int(n) for n in re.findall(r"worker-\d: (\d+)", held.group(4))]
    assert len(per_worker) == 3 and sum(per_worker) == workers and pinned + workers == total  # the counts add up
    rows = _talk(res.stdout)
    assert [r.split()[0] for r in rows[:2]] == ["system", "system"]
    topic = None
    for row in rows[2:]:  # every answer follows its own question, call and result
        asked = re.search(r"What is the status of (.+)\?", row)
        if asked:
            topic = asked.group(1)
        answered = re.search(r"Status of (.+?):", row)
        if answered:
            assert answered.group(1) == topic, rows
    assert re.search(r"\d+ older items did not fit", res.stdout)  # the budget binds
    assert max(len(line) for line in res.stdout.splitlines()) <= 120  # laid out for 120 columns, not wrapped at 80
    assert len(rows) > 10 and all(len(r) <= 120 for r in rows)


@pytest.mark.slow
def test_demo_whose_pinned_prompt_cannot_fit_is_one_line(redis_url, prefix, one_server):
    res = _demo(redis_url, prefix, "--workers", "1", "--items", "1", "--max-tokens", "5")
    assert res.returncode == 1
    assert one_line(res.stderr).startswith("contextstore: context window full (tokens)")


def test_a_reader_that_goes_away_is_no_traceback(redis_url, prefix):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        store.window("big").add_many(["x" * 4000] * 40)  # a snapshot larger than a pipe's buffer
    cmd = f"{sys.executable} -m contextstore.cli --url {redis_url} --prefix {prefix} snapshot big | head -c 10"
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert res.stdout == '{"format_v' and res.stderr == ""


def test_a_corrupt_window_is_listed_verified_repaired_and_deleted(capsys, redis_url, prefix, r, tmp_path, one_server):
    """The operator's way through a corrupt window: ``ls`` lists it (marked) beside the others,
    ``verify`` names what is wrong, ``import --force`` of its export repairs it, ``delete``
    deletes it; none of them stops at reading its config."""
    base = ("--url", redis_url, "--prefix", prefix)
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        for wid in ("bad", "good"):
            store.window(wid).add_many(["one", "two"])
    assert run(capsys, *base, "export", str(tmp_path), "bad")[0] == 0
    r.hset(f"{prefix}:{{bad}}:meta", mapping={"used_output": "\x1b[2Jx", "threshold": "high"})
    code, out, _ = run(capsys, *base, "ls", "--json")
    rows = {row["window_id"]: row for row in json.loads(out)}
    assert code == 0 and "threshold" in rows["bad"]["corrupt"] and rows["good"]["items"] == 2
    for argv in (["ls"], ["ls", "--tree"]):
        code, out, _ = run(capsys, *base, *argv)
        assert code == 0 and "corrupt" in out and "good" in out and "\x1b" not in out
    code, out, _ = run(capsys, *base, "verify", "bad")
    assert code == 1 and "BROKEN" in out and "used_output" in out and "threshold" in out and "\x1b" not in out
    assert run(capsys, *base, "stats", "bad")[0] == 1  # the views still refuse to show it
    assert run(capsys, *base, "import", str(tmp_path), "--force")[0] == 0
    assert run(capsys, *base, "verify", "bad")[:2] == (0, "OK: window bad: 2 items, 2 tokens, every invariant holds\n")
    r.hset(f"{prefix}:{{bad}}:meta", "threshold", "high")
    assert run(capsys, *base, "delete", "bad")[:2] == (0, "deleted bad\n")
    assert run(capsys, *base, "delete", "bad")[0] == 1
    assert run(capsys, *base, "ls", "--json")[1].count("window_id") == 1
