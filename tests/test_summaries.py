"""Summaries and relevance with the shipped helpers: quality on the fixed data set in
tests/data/, where a summary goes in a conversation, the archive, and undo."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

import contextstore as cs

from chat_rules import check_anthropic, check_openai, groups_whole
from support import check_invariants, dump_window, events, key
from test_conversations import call, turn

DATA = Path(__file__).parent / "data"
RELEVANCE = json.loads((DATA / "relevance.json").read_text())
CONVERSATION = json.loads((DATA / "conversation.json").read_text())


def _summaries(w) -> list[cs.ContextItem]:
    return [i for i in w.items() if "summary_of" in (i.metadata or {})]


# -- quality on the fixed data set -------------------------------------------------------------


def _documents(w) -> None:
    docs = RELEVANCE["documents"]
    w.add_many([{"id": d["id"], "content": d["text"], "type": "retrieved_document"} for d in docs])


def test_bm25_selective_keeps_the_relevant_document(make_store):
    store = make_store(relevance_scorer=cs.BM25Scorer())
    kept_relevant = 0
    for n, q in enumerate(RELEVANCE["queries"]):
        w = store.window(f"rel-{n}", max_tokens=3000, compaction_threshold=100)
        _documents(w)
        w.compact("selective", target_percent=5, query=q["query"])
        kept = [i.id for i in w.items()]
        assert 0 < len(kept) <= 5, kept  # about a sixth of the 30 documents survive
        kept_relevant += q["relevant"] in kept
    assert kept_relevant >= 9, f"the relevant document survived for {kept_relevant} of 10 queries"


def test_bm25_ranks_a_query_build(make_store):
    """BuildOptions(query=...) ranks retrieved documents by relevance: the one that answers the
    query is what a tight budget keeps."""
    store = make_store(relevance_scorer=cs.BM25Scorer())
    w = store.window("rel-build", max_tokens=3000)
    _documents(w)
    hits = 0
    for q in RELEVANCE["queries"]:
        built = w.build_structured(cs.BuildOptions(max_tokens=60, reserve_for_response=0, query=q["query"]))
        hits += built.included_item_ids == [q["relevant"]]
    assert hits >= 9
    no_query = w.build_structured(cs.BuildOptions(max_tokens=60, reserve_for_response=0))
    assert no_query.included_item_ids == ["doc-01"]  # without a query: build order (oldest first)


def _conversation(w) -> None:
    w.add_many([{"content": m["content"], "type": m["type"]} for m in CONVERSATION["messages"]])


def test_extractive_summary_keeps_the_key_facts(make_store):
    store = make_store(summarizer=cs.ExtractiveSummarizer())
    w = store.window("facts", max_tokens=4000, compaction_threshold=100, keep_recent=0)
    _conversation(w)
    before = w.stats().current_tokens
    freed = w.compact("summarize", target_percent=0)
    (summary,) = _summaries(w)
    assert len(summary.metadata["summary_of"]) == len(CONVERSATION["messages"])
    missing = [f for f in CONVERSATION["key_facts"] if f not in summary.content]
    assert not missing, summary.content
    assert summary.content.startswith("Summary of 18 earlier items, extractive (")
    assert summary.token_count <= 0.3 * before and freed == before - summary.token_count


def test_extractive_summary_is_deterministic_and_within_its_budget():
    items = [cs.ContextItem(content=m["content"], type=cs.ItemType(m["type"])) for m in CONVERSATION["messages"]]
    for max_tokens in (40, 100, 400):
        s = cs.ExtractiveSummarizer(max_tokens)
        first = s.summarize(items)
        assert s.summarize(items) == first
        assert s.counter.count(first) <= s.budget(items) <= max_tokens
    with pytest.raises(cs.InvalidOptionsError):
        cs.ExtractiveSummarizer(ratio=1.5)


# -- where a summary goes ---------------------------------------------------------------------


def test_a_conversation_summary_goes_where_the_replaced_turns_were(make_store, r, prefix):
    store = make_store(summarizer=cs.ExtractiveSummarizer())
    w = store.window("place", max_tokens=2000, compaction_threshold=100, keep_recent=2)
    w.add("You are terse.", type="system_prompt", pinned=True)
    for n in range(6):
        turn(w, n, results=2)
    w.add("pinned note", type="user_message", pinned=True)
    for n in range(6, 8):
        turn(w, n)
    before = w.items()
    w.compact("summarize", target_percent=10)
    (summary,) = _summaries(w)
    replaced = set(summary.metadata["summary_of"])
    after = w.items()
    # nothing summarised is kept, pins and the two newest units (the last answer, and the call
    # with its result before it) are kept
    assert not replaced & {i.id for i in after if i.id != summary.id}
    assert {i.id for i in before if i.pinned} <= {i.id for i in after}
    assert {i.id for i in before[-3:]} <= {i.id for i in after}
    assert before[-4].id in replaced  # the question before them is not protected
    # whole groups only
    groups = {}
    for i in before:
        if i.group:
            groups.setdefault(i.group, set()).add(i.id)
    assert all(ids <= replaced or not ids & replaced for ids in groups.values())
    groups_whole(after)
    # arrival order: the summary sits where the oldest replaced item was
    assert summary.seq == min(i.seq for i in before if i.id in replaced)
    assert [i.seq for i in after] == sorted(i.seq for i in after)
    assert summary.role == "user" and summary.type is cs.ItemType.WORKING_MEMORY
    everything = cs.BuildOptions(max_tokens=2000, reserve_for_response=0, max_history_items=100)
    msgs = w.build_messages(everything)
    check_openai(msgs)
    check_anthropic(w.build_messages(everything, format="anthropic"))
    assert msgs[0]["role"] == "system" and msgs[1]["content"] == summary.content
    check_invariants(r, prefix, "place")


def test_a_summary_event_names_the_summary(make_store, r, prefix):
    store = make_store(summarizer=cs.ExtractiveSummarizer())
    w = store.window("sum-event", max_tokens=4000, compaction_threshold=100, keep_recent=0)
    _conversation(w)
    w.compact("summarize", target_percent=1)
    (summary,) = _summaries(w)
    compacted = [e for e in events(r, prefix, "sum-event") if e["event"] == "compacted"]
    assert compacted[-1]["summary_id"] == summary.id and compacted[-1]["strategy"] == "summarize"
    typed = [e for e in w.events(since="0") if isinstance(e, cs.events.Compacted)]
    assert typed[-1].summary_id == summary.id


# -- archive and undo ---------------------------------------------------------------------------


def _summarised(make_store, window_id: str, **config):
    store = make_store(summarizer=cs.ExtractiveSummarizer())
    w = store.window(window_id, max_tokens=1500, compaction_threshold=100, keep_recent=1, **config)
    w.add("You are terse.", type="system_prompt", pinned=True)
    for n in range(5):
        turn(w, n, results=2)
    before = w.items()
    w.compact("summarize", target_percent=20)
    (summary,) = _summaries(w)
    return w, before, summary


def test_undo_restores_exactly_what_the_summary_replaced(make_store, r, prefix):
    w, before, summary = _summarised(make_store, "undo")
    replaced = summary.metadata["summary_of"]
    archived = w.archived(summary.id)
    assert [i.id for i in archived] == replaced
    assert archived == [i for i in before if i.id in replaced]  # every field, in arrival order
    messages_before = [i for i in before]
    assert w.undo_summary(summary.id) == len(replaced)
    assert w.items() == messages_before  # ids, seq, content, metadata, groups, order
    assert summary.id not in {i.id for i in w.items()}
    assert w.archived(summary.id) == []
    st = w.stats()
    assert st.current_tokens == sum(i.token_count for i in before) and st.total_items == len(before)
    removed, *added, undone = list(w.events(since="0"))[-len(replaced) - 2 :]
    assert isinstance(removed, cs.events.ItemRemoved) and (removed.item_id, removed.reason) == (summary.id, "undo")
    assert [(type(e), e.item_id) for e in added] == [(cs.events.ItemAdded, i) for i in replaced]
    assert isinstance(undone, cs.events.SummaryUndone) and undone.summary_id == summary.id
    assert undone.items_restored == len(replaced) and undone.total_tokens_after == st.current_tokens
    check_invariants(r, prefix, "undo")
    with pytest.raises(cs.SummaryNotFoundError):  # undone once
        w.undo_summary(summary.id)


def test_undo_of_a_summary_of_a_summary_unwinds_in_turn(make_store):
    w, before, first = _summarised(make_store, "undo-twice")
    for n in range(5, 8):
        turn(w, n, results=2)
    w.compact("summarize", target_percent=20)
    second = next(s for s in _summaries(w) if s.id != first.id)
    assert first.id in second.metadata["summary_of"]
    w.undo_summary(second.id)
    w.undo_summary(first.id)
    assert [i.id for i in w.items()][: len(before)] == [i.id for i in before]
    assert w.verify().ok


def test_undo_is_refused_when_the_items_no_longer_fit(make_store, r, prefix):
    w, _, summary = _summarised(make_store, "undo-full")
    free = w.stats().available_tokens
    w.add("filler " * 10, token_count=free - 5)
    dump = r.hgetall(key(prefix, "undo-full", "items"))
    with pytest.raises(cs.ContextWindowFullError) as info:
        w.undo_summary(summary.id)
    assert info.value.unit == "tokens" and info.value.max == 1500
    assert r.hgetall(key(prefix, "undo-full", "items")) == dump
    assert len(w.archived(summary.id)) == len(summary.metadata["summary_of"])  # still there


def test_undo_is_refused_once_a_replaced_id_is_in_use_again(make_store):
    w, _, summary = _summarised(make_store, "undo-inuse")
    replaced = w.archived(summary.id)
    again = next(i.group for i in replaced if i.group)  # a tool call id the summary replaced
    w.add_many([
        {"content": "", "type": "assistant_message", "metadata": {"tool_calls": [call(again)]}},
        {"content": "new result", "type": "tool_result", "metadata": {"tool_call_id": again}},
    ])  # fmt: skip
    with pytest.raises(cs.DuplicateItemError, match=again):
        w.undo_summary(summary.id)
    assert w.get(summary.id) is not None


def test_undo_is_refused_once_the_summary_is_gone(make_store):
    w, _, summary = _summarised(make_store, "undo-gone")
    w.remove(summary.id)
    with pytest.raises(cs.SummaryNotFoundError) as info:
        w.undo_summary(summary.id)
    assert info.value.summary_id == summary.id and "no longer in the window" in str(info.value)
    with pytest.raises(cs.SummaryNotFoundError):
        w.undo_summary("ctx-no-such")


def test_the_archive_expires(make_store, r, prefix):
    w, _, summary = _summarised(make_store, "archive-ttl", archive_ttl_seconds=1)
    assert w.archived(summary.id)
    time.sleep(1.1)
    assert w.archived(summary.id) == []
    with pytest.raises(cs.SummaryNotFoundError, match="expired"):
        w.undo_summary(summary.id)
    # the next summary drops the expired entry from the archive hash
    for n in range(5, 9):
        turn(w, n, results=2)
    w.compact("summarize", target_percent=20)
    fields = set(r.hkeys(key(prefix, "archive-ttl", "archive")))
    assert summary.id.encode() not in fields and len(fields) == 2  # the new entry and the expiry index


def test_a_snapshot_carries_the_archive_and_restore_keeps_its_expiry(make_store, r, prefix):
    w, _, summary = _summarised(make_store, "archive-restore")
    snap = w.snapshot()
    (entry,) = snap.archive
    assert entry.summary_id == summary.id and entry.items == w.archived(summary.id)
    left = entry.expires_at - datetime.now(UTC)
    assert timedelta(seconds=86_000) < left <= timedelta(seconds=86_400)
    # through JSON (export / import) into another window: undo works there, with the same expiry
    moved = msgspec.json.decode(msgspec.json.encode(snap), type=cs.ContextSnapshot)
    copy = make_store().window("archive-copy")
    copy.restore(moved)
    assert copy.archived(summary.id) == entry.items
    assert copy.snapshot().archive[0].expires_at == entry.expires_at
    restored = [e for e in events(r, prefix, "archive-copy") if e["event"] == "restored"]
    assert restored[-1]["archived"] == "1" and restored[-1]["archive_dropped"] == "0"
    assert copy.undo_summary(summary.id) == len(entry.items) and copy.verify().ok
    w.delete()
    assert not r.exists(key(prefix, "archive-restore", "archive"))


def test_restore_drops_archive_entries_whose_expiry_passed(make_store, r, prefix):
    w, _, summary = _summarised(make_store, "archive-expired")
    snap = w.snapshot()
    past = msgspec.structs.replace(snap.archive[0], expires_at=datetime.now(UTC) - timedelta(seconds=1))
    target = make_store().window("archive-expired-copy")
    target.restore(msgspec.structs.replace(snap, archive=[past]))
    assert target.archived(summary.id) == [] and target.snapshot().archive == []
    with pytest.raises(cs.SummaryNotFoundError, match="expired"):
        target.undo_summary(summary.id)
    restored = [e for e in events(r, prefix, "archive-expired-copy") if e["event"] == "restored"]
    assert restored[-1]["archived"] == "0" and restored[-1]["archive_dropped"] == "1"
    assert target.get(summary.id) is not None  # the summary itself is restored, as an item
    assert not r.hexists(key(prefix, "archive-expired-copy", "archive"), summary.id)


def test_a_restore_replaces_the_archive_and_refuses_a_bad_entry(make_store, r, prefix):
    w, _, summary = _summarised(make_store, "archive-replace")
    snap = w.snapshot()
    w.restore(msgspec.structs.replace(snap, archive=[]))  # a snapshot without the entry
    assert w.archived(summary.id) == [] and not r.exists(key(prefix, "archive-replace", "archive"))
    w.restore(snap)
    assert w.archived(summary.id) == snap.archive[0].items
    before = dump_window(r, prefix, "archive-replace")
    stray = msgspec.structs.replace(snap.archive[0], summary_id="ctx-not-a-summary")
    with pytest.raises(cs.InvalidOptionsError):
        w.restore(msgspec.structs.replace(snap, archive=[stray]))
    clash = msgspec.structs.replace(snap.archive[0], items=[snap.items[0]])  # an item the window holds
    with pytest.raises(cs.InvalidItemError):
        w.restore(msgspec.structs.replace(snap, archive=[clash]))
    assert dump_window(r, prefix, "archive-replace") == before
