"""Every contextstore exception survives pickle with its fields, also across a real
multiprocessing pool; retries are logged at DEBUG and giving up once at WARNING."""

from __future__ import annotations

import logging
import pickle

import pytest

import contextstore as cs
from contextstore import errors

from support import PROCESSES, RedisProcess, free_port


def _every_error_class() -> list[type[cs.ContextStoreError]]:
    found, todo = set(), [cs.ContextStoreError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: c.__name__)


def _sample(cls: type[cs.ContextStoreError]) -> cs.ContextStoreError:
    """An instance with every field set to something recognisable."""
    if cls is cs.ContextWindowFullError:
        return cls("tokens", 900, 1000, 250)
    if cls is cs.BudgetTooSmallError:
        return cls(1200, 800)
    if cls is cs.ConfigConflictError:
        return cls("agent-7", {"max_tokens": (4096, 8192), "max_items": (10, 50)})
    if cls is cs.WindowNotFoundError:
        return cls("no-such-window")
    if cls is cs.SummaryNotFoundError:
        return cls("ctx-7.0", "its archive entry expired")
    if cls is cs.ReplicationTimeoutError:
        return cls(0, 1, 1000)
    if cls is cs.ReplayUnavailableError:
        return cls("request 'add:r-1' was applied once already", "add:r-1")
    return cls(f"{cls.__name__} happened: details 42")


def _fields(exc: BaseException) -> tuple[object, ...]:
    return type(exc), str(exc), exc.args, vars(exc)


ERRORS = _every_error_class()


def test_the_error_tree_is_what_the_library_exports():
    names = {c.__name__ for c in ERRORS}
    assert {
        "ContextWindowFullError",
        "BudgetTooSmallError",
        "ConfigConflictError",
        "WindowNotFoundError",
        "ScriptError",
        "CorruptWindowError",
    } <= names
    assert issubclass(cs.WindowNotFoundError, LookupError)
    for cls in ERRORS:
        assert cls.__module__ == errors.__name__, cls


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_every_exception_pickles_with_its_fields(cls):
    exc = _sample(cls)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(exc, protocol=protocol))
        assert _fields(back) == _fields(exc)
    full = pickle.loads(pickle.dumps(cs.ContextWindowFullError("items", 50, 50, 1)))
    assert (full.unit, full.current, full.max, full.requested) == ("items", 50, 50, 1)


def _raise(name: str) -> None:
    raise _sample(getattr(errors, name))


@pytest.mark.slow
def test_a_pool_whose_worker_raises_gets_each_exception_back():
    """Before the fix an unpicklable exception killed the pool's result thread and get() hung;
    the timeout makes a regression fail instead of hanging CI."""
    with PROCESSES.Pool(2) as pool:
        pending = {cls: pool.apply_async(_raise, (cls.__name__,)) for cls in ERRORS}
        for cls, result in pending.items():
            with pytest.raises(cls) as got:
                result.get(timeout=60)
            assert _fields(got.value) == _fields(_sample(cls))


def test_retries_log_at_debug_and_giving_up_once_at_warning(caplog):
    server = RedisProcess().start()
    store = cs.ContextStore.from_url(server.url, retry=cs.RetryPolicy(attempts=4, base=0.001, cap=0.01))
    store.window("w")  # reached once: from now on a refusal means it went away, and is retried
    server.stop()
    with caplog.at_level(logging.DEBUG, logger="contextstore"), pytest.raises(cs.StoreUnavailableError):
        store.window("w")
    store.close()
    levels = [(r.levelno, r.getMessage().split(" ")[0]) for r in caplog.records if r.name == "contextstore"]
    assert levels.count((logging.DEBUG, "retrying")) == 3
    assert [lv for lv in levels if lv[0] >= logging.WARNING] == [(logging.WARNING, "gave")]


def test_a_refusal_is_not_retried_and_logs_only_the_full_window(caplog, redis_url):
    with cs.ContextStore.from_url(redis_url) as store, caplog.at_level(logging.DEBUG, logger="contextstore"):
        w = store.window("errs-full", max_items=1)
        w.add("pinned", pinned=True)
        with pytest.raises(cs.ContextWindowFullError):
            w.add("no room")
        w.delete()
    loud = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [("ERROR", "Context window full for agent errs-full: current=1, max=1, requested=1")]
    assert not [r for r in caplog.records if "retry" in r.getMessage() or "gave up" in r.getMessage()]


def test_the_library_prints_nothing_without_logging_configured(tmp_path):
    """No handler of the application's: the library's WARNING goes nowhere (NullHandler), so a
    program that handles the error prints only what it chooses to."""
    import subprocess
    import sys

    code = (
        "import contextstore as cs\n"
        f"s = cs.ContextStore.from_url('redis://127.0.0.1:{free_port()}/0', "
        "retry=cs.RetryPolicy(attempts=2, base=0))\n"
        "try:\n    s.window('w')\nexcept cs.StoreUnavailableError:\n    print('handled')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.stdout == "handled\n" and res.stderr == ""
