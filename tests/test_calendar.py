"""The tests that touch time, again one year ahead.

A fixture with an absolute expiry passes the day it is written and fails every day after. Here a
redis-server and a pytest run both start under libfaketime with their clocks 365 days ahead
(the server's ``TIME`` and Python's ``time.time()`` agree, as on a real machine a year from now),
and run every test file that deals in expiries, leases, archives, request logs or timestamps.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from support import RedisProcess

libfaketime = pytest.importorskip("libfaketime")

#: the test files whose subject involves the clock (TTLs, the archive's and the request log's
#: expiry, leases, claim times, added_at / created_at)
TIME_SENSITIVE = [
    "test_stored_items.py",
    "test_summaries.py",
    "test_requests.py",
    "test_config.py",
    "test_events.py",
    "test_seed_001_window.py",
    "test_compactor.py",
    "test_cli_verbs.py",
]
YEAR_S = 365 * 86_400


def shifted_env(days: int) -> dict[str, str]:
    """This process's environment with libfaketime preloaded, the wall clock ``days`` ahead."""
    ok, preload = libfaketime.get_reload_information()
    assert ok, "libfaketime could not be loaded here"
    return {**os.environ, **preload, "FAKETIME": f"+{days}d"}


@pytest.mark.slow
def test_the_time_sensitive_tests_pass_a_year_from_now() -> None:
    env = shifted_env(365)
    server = RedisProcess(env=env).start()  # the bundled server: the clock, not the version, is the subject
    try:
        client = redis.Redis.from_url(server.url)
        seconds, _ = client.time()
        client.close()
        assert abs(seconds - time.time() - YEAR_S) < 600, "the server's clock is not a year ahead"
        here = Path(__file__).parent
        files = [str(here / f) for f in TIME_SENSITIVE if (here / f).exists()]
        files.append(f"{here / 'test_calendar.py'}::test_the_shifted_run_really_runs_a_year_ahead")
        done = subprocess.run(
            # the sync API only: the clock is the subject, and both APIs drive the same plans
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-rs",
                "-p",
                "no:cacheprovider",
                "-n",
                "0",
                "-x",
                "-k",
                "not async",
                "-m",
                "not slow",  # the multi-process runs: their subject is concurrency, not the date
                *files,
            ],
            env={**env, "REDIS_URL": server.url, "CS_EXPECT_YEAR_AHEAD": "1"},
            cwd=here.parent,
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        server.stop()
    tail = done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed and int(passed.group(1)) > 50, tail
    assert "only inside test_the_time_sensitive" not in done.stdout, tail  # the clock check ran


def test_the_shifted_run_really_runs_a_year_ahead() -> None:
    """Inside the shifted run (``CS_EXPECT_YEAR_AHEAD``), Python's clock is a year ahead."""
    if not os.environ.get("CS_EXPECT_YEAR_AHEAD"):
        pytest.skip("only inside test_the_time_sensitive_tests_pass_a_year_from_now")
    real = float(subprocess.run(["date", "+%s"], capture_output=True, text=True, env={}).stdout)
    assert abs(time.time() - real - YEAR_S) < 600
