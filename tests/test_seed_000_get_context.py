"""Seed 000: get-context — filter by type, keep the most recent N, chronological order."""

from __future__ import annotations

import pytest

import contextstore as cs


@pytest.fixture
def win(store):
    w = store.window("seed000")
    for content, t in [
        ("defun foo", "code"),
        ("ERROR: ...", "error"),
        ("defun bar", "code"),
        ("WARNING: ...", "error"),
        ("defun baz", "code"),
        ("notes...", "text"),
    ]:
        w.add(content, type=t)
    return w


def ids(items):
    return [i.id for i in items]


def test_step1_all_items_in_order(win):
    assert ids(win.items()) == ["ctx-1", "ctx-2", "ctx-3", "ctx-4", "ctx-5", "ctx-6"]


def test_step2_filter_by_type(win):
    assert ids(win.items(types=["error"])) == ["ctx-2", "ctx-4"]
    assert ids(win.items(types=[cs.ItemType.ERROR])) == ["ctx-2", "ctx-4"]


def test_step3_limit_keeps_most_recent(win):
    assert ids(win.items(limit=3)) == ["ctx-4", "ctx-5", "ctx-6"]


def test_step4_filter_then_limit(win):
    assert ids(win.items(types=["code"], limit=2)) == ["ctx-3", "ctx-5"]


def test_alt1_no_matches_is_empty(win):
    assert win.items(types=["file"]) == []


def test_alt2_limit_beyond_count_returns_all(win):
    assert len(win.items(limit=100)) == 6


def test_alt3_multiple_types(win):
    assert ids(win.items(types=["code", "error"])) == ["ctx-1", "ctx-2", "ctx-3", "ctx-4", "ctx-5"]


def test_limit_zero_and_empty_type_list(win):
    assert win.items(limit=0) == []
    assert win.items(types=[]) == []


def test_read_only_and_fresh_list(win, r, prefix):
    from support import dump_window

    before = dump_window(r, prefix, "seed000")
    got = win.items()
    got.clear()  # the returned list is the caller's own
    assert len(win.items()) == 6
    assert dump_window(r, prefix, "seed000") == before


def test_manual_verification_block(store):
    w = store.window("seed000-manual")
    w.add("code1", type="code")
    w.add("error1", type="error")
    w.add("code2", type="code")
    w.add("error2", type="error")
    assert len(w.items()) == 4
    assert len(w.items(types=["code"])) == 2
    assert len(w.items(limit=2)) == 2
    result = w.items(types=["error"], limit=1)
    assert len(result) == 1 and result[0].content == "error2"


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_bad_limit_is_typed(win, bad):
    with pytest.raises(cs.InvalidOptionsError):
        win.items(limit=bad)


def test_bad_type_filter_is_typed(win):
    with pytest.raises(cs.InvalidOptionsError):
        win.items(types=["nope"])
