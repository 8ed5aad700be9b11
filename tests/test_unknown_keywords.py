"""Every call that takes keywords refuses one it does not know, naming it and the closest valid
one, before anything is written (a misspelt ``rol=`` never stores an item without its role)."""

from __future__ import annotations

import pytest

import contextstore as cs

from support import dump_window

#: every refusal here is the client's, before any I/O: it does not differ by server
pytestmark = pytest.mark.usefixtures("one_server")


@pytest.mark.parametrize(
    "call, bad, hint",
    [
        (lambda w: w.add("x", type="text", rol="user"), "rol", "role"),
        (lambda w: w.add("x", priorty=5), "priorty", "priority"),
        (lambda w: w.add_many([{"content": "x", "rol": "user"}]), "rol", "role"),
        (lambda w: w.add_many(["ok", {"content": "x", "grup": "g"}]), "grup", "group"),
        (lambda w: w.replace([{"content": "x", "metadta": {}}]), "metadta", "metadata"),
        (lambda w: w.configure(max_tokenz=3), "max_tokenz", "max_tokens"),
    ],
)
def test_an_unknown_keyword_is_refused_by_name_and_nothing_changes(store, r, prefix, call, bad, hint):
    w = store.window("kw", max_tokens=1000)
    w.add("before", type="text")
    before = dump_window(r, prefix, "kw")
    with pytest.raises(cs.InvalidOptionsError) as info:
        call(w)
    assert repr(bad) in str(info.value) and repr(hint) in str(info.value)
    assert dump_window(r, prefix, "kw") == before


def test_window_handle_and_store_options_name_the_closest(make_store):
    store = make_store()
    for call, bad, hint in [
        (lambda: store.window("kw2", max_tokenz=5), "max_tokenz", "max_tokens"),
        (lambda: store.handle("kw2", keep_recnt=2), "keep_recnt", "keep_recent"),
        (lambda: make_store(prefx="p"), "prefx", "prefix"),
        (lambda: make_store(item_limt=5), "item_limt", "item_limit"),
    ]:
        with pytest.raises(cs.InvalidOptionsError) as info:
            call()
        assert repr(bad) in str(info.value) and f"did you mean {hint!r}" in str(info.value)


def test_a_keyword_far_from_any_lists_the_valid_ones(store):
    with pytest.raises(cs.InvalidOptionsError, match=r"unknown item keyword 'zzz' \(valid: group, id, metadata"):
        store.handle("kw3").add("x", zzz=1)
