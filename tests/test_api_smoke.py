"""The smoke set both APIs run: every window method once, on a store of each API (the asyncio one
behind ``SyncProxy``), with the answers a caller relies on. Both shells drive the same plans, so
the behaviour itself is tested once (on the sync API) elsewhere; ``test_api_parity.py`` keeps
their signatures and docstrings the same."""

from __future__ import annotations

import io

import contextstore as cs


def test_every_window_method_answers_on_each_api(store):
    w = store.window("smoke", max_tokens=2000)
    w.add("be brief", type="system_prompt", pinned=True)
    first = w.add("hello", role="user")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert w.add_many([
        {"content": "", "role": "assistant", "metadata": {"tool_calls": [call]}},
        {"content": "42", "role": "tool", "metadata": {"tool_call_id": "c1"}},
    ]) == 2  # fmt: skip
    assert w.get(first.id).content == "hello"
    parts = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
    ]
    assert w.get(w.add(parts, role="user", id="parts").id).content == parts and w.remove("parts")
    assert [i.content for i in w.pinned_items()] == ["be brief"]
    assert len(w.items()) == len(list(w.iter_items())) == len(w.ordered_items()) == 4
    assert w.update_priority(first.id, 90) and w.pin(first.id) and w.unpin(first.id)
    assert "hello" in w.build() and w.build_structured().total_tokens > 0
    assert w.build_messages()[-1]["role"] == "tool"
    assert w.build_messages_structured(format="anthropic").format == "anthropic"
    assert "```" in w.to_markdown()
    assert w.plan_compaction("remove_oldest", target_percent=1).items
    snap = w.snapshot()
    sink = io.BytesIO()
    assert w.write_snapshot(sink) > 0 and b"hello" in sink.getvalue()
    assert w.verify().ok and w.stats().total_items == 4
    assert w.compact("remove_oldest", target_percent=1) > 0
    assert [i.content for i in w.items()] == ["be brief"]  # the pinned system prompt stays
    store.window("smoke-copy").restore(snap)
    assert [i.content for i in store.window("smoke-copy").items()] == [i.content for i in snap.items]
    assert w.add("again", role="user").id and w.remove(w.items()[-1].id or "")
    assert [i.content for i in w.pop()] == ["be brief"]
    w.configure(max_tokens=3000)
    assert w.stats().max_tokens == 3000
    assert "compacted" in [e.kind for e in w.events(since="0")]
    assert w.turn_status().owner == ""
    with w.turn() as turn:
        turn.add("in a turn", role="user")
    assert w.items()[-1].content == "in a turn"
    w.add("and an answer", role="assistant")
    rid = w.rewind(w.items()[-2].id or "")
    assert w.items()[-1].content == "in a turn" and w.undo_rewind(rid) == 1
    assert w.items()[-1].content == "and an answer"
    built = w.build_structured(cs.BuildOptions(reserve_for_response=0))
    assert w.record_usage(built.version, input_tokens=2 * built.total_tokens, output_tokens=3) == 2.0
    assert w.stats().usage.output_tokens == 3 and w.stats().token_calibration == 2.0
    branch = w.fork("smoke-branch", at=w.items()[0].id)
    assert len(branch.items()) == 1 and branch.lineage().parent == "smoke" and w.lineage().forks == ["smoke-branch"]
    assert w.clear(include_pinned=True) == 2 and w.stats().total_items == 0
    assert w.delete() and "smoke" not in store.windows()
