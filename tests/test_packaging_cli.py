"""The wheel ships the Lua scripts; the CLI runs the demo and inspects windows."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import contextstore as cs
from contextstore.drivers import scripts

from support import key, raw_client

ROOT = Path(__file__).resolve().parent.parent


def test_every_script_has_a_header_naming_keys_and_reply():
    for name in scripts.SCRIPT_NAMES:
        text = (ROOT / "lua" / f"{name}.lua").read_text()
        head = text.split("\n\n", 1)[0]
        assert head.startswith(f"-- {name}.lua:"), name
        assert "KEYS" in head and ("Reply" in head or "reply" in head), name


@pytest.mark.slow
def test_installed_wheel_loads_its_lua(tmp_path):
    wheel_dir = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheel_dir), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheel_dir.glob("contextstore-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for name in scripts.SCRIPT_NAMES:
        assert f"contextstore/lua/{name}.lua" in names
    for name in scripts.LIB_NAMES:
        assert f"contextstore/lua/lib/{name}.lua" in names
    assert "contextstore/py.typed" in names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import contextstore.drivers.scripts as s; "
        "print(s.lua_dir()); print(len(s.sources()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(target)], check=True, capture_output=True, text=True, cwd=tmp_path, timeout=60
    ).stdout.split()
    assert out[0].startswith(str(target)) and int(out[1]) == len(scripts.SCRIPT_NAMES)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "contextstore.cli", *args], capture_output=True, text=True, timeout=180
    )


@pytest.mark.slow
def test_cli_demo_and_inspection(redis_url, prefix, one_server):
    res = _cli("--url", redis_url, "--prefix", prefix, "demo", "--workers", "2", "--items", "6")  # the old name
    assert res.returncode == 0, res.stderr
    assert "verify(): OK; within budget: yes" in res.stdout
    assert "what a worker sends the model next" in res.stdout
    assert _cli("--url", redis_url, "--prefix", prefix, "windows").stdout.split() == ["demo"]
    stats = _cli("--url", redis_url, "--prefix", prefix, "stats", "demo", "--json")
    assert '"total_items"' in stats.stdout
    items = _cli("--url", redis_url, "--prefix", prefix, "items", "demo", "--limit", "3").stdout  # the old name
    assert len([line for line in items.splitlines() if line.startswith("ctx-")]) == 3
    assert _cli("--url", redis_url, "--prefix", prefix, "markdown", "demo").stdout.startswith("## Context\n\n")
    built = _cli("--url", redis_url, "--prefix", prefix, "build", "demo", "--reserve", "0").stdout
    assert "You are the on-call" in built
    ok = _cli("--url", redis_url, "--prefix", prefix, "verify", "demo")
    assert ok.returncode == 0 and ok.stdout.startswith("OK: window demo:"), ok.stdout + ok.stderr
    missing = _cli("--url", redis_url, "--prefix", prefix, "verify", "nope")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert _cli("--url", redis_url, "--prefix", prefix, "windows").stdout.split() == ["demo"]  # not created
    client = raw_client(redis_url)
    client.hset(key(prefix, "demo", "meta"), "tokens", "1")  # break a counter
    client.close()
    broken = _cli("--url", redis_url, "--prefix", prefix, "verify", "demo")
    assert broken.returncode == 1 and broken.stdout.startswith("BROKEN: window demo: 1 problem(s)")
    assert ":meta tokens is 1" in broken.stdout


def test_cli_reports_typed_errors(redis_url):
    res = _cli("--url", redis_url, "stats", "bad{id}")
    assert res.returncode == 2 and "contextstore:" in res.stderr and "Traceback" not in res.stderr


def test_public_names():
    expected = {
        "ContextStore",
        "AsyncContextStore",
        "ContextWindow",
        "AsyncContextWindow",
        "ContextItem",
        "ItemType",
        "CompactionStrategy",
        "BuildOptions",
        "BuiltContext",
        "ContextSnapshot",
        "ContextWindowStats",
        "EmbeddedServer",
        "TokenCounter",
        "TiktokenCounter",
        "ContextStoreError",
        "InvalidItemError",
        "InvalidWindowIdError",
        "InvalidOptionsError",
        "DuplicateItemError",
        "ContextWindowFullError",
        "BudgetTooSmallError",
        "ConfigConflictError",
        "StrategyUnavailableError",
        "StoreUnavailableError",
    }
    assert expected <= set(cs.__all__)


def test_token_counter_options(make_store):
    assert make_store(token_counter=len).window("tc").add("12345").token_count == 5
    assert make_store(token_counter="cl100k_base").window("tc2").add("hello world").token_count == 2

    class Words:
        def count(self, text):
            return len(text.split())

        def count_many(self, texts):
            return [self.count(t) for t in texts]

    w = make_store(token_counter=Words()).window("tc3")
    assert w.add_many(["a b c", "d e"]) == 2 and w.stats().current_tokens == 5
    with pytest.raises(cs.InvalidOptionsError):
        make_store(token_counter="no-such-encoding")
