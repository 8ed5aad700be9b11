"""The sans-I/O plans driven with canned replies, without Redis: what each plan sends (script,
keys, ARGV layout, request id) and how it decodes each reply. The same plans run against a real
server in every other test file; here their logic is pinned down on its own."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

import contextstore as cs
from contextstore.core import facts, layout, wire
from contextstore.core.config import config_values, creation_config
from contextstore.core.keys import window_keys
from contextstore.core.layout import CLEARED_PLACEHOLDER, Meta
from contextstore.core.stored import stored_json
from contextstore.core.tokens import resolve_counter
from contextstore.plans import build as build_plans
from contextstore.plans import chat as chat_plans
from contextstore.plans import compaction as compaction_plans
from contextstore.plans import items as item_plans
from contextstore.plans.base import External, PlainRead, ScriptCall, Settings, WindowState

from support import drive


def words(text: str) -> int:
    return len(text.split())


def settings(**helpers: Any) -> Settings:
    return Settings(prefix="ctx", counter=resolve_counter(words), item_limit=1000, max_content_bytes=10_000, **helpers)


def state(**config: Any) -> WindowState:
    cfg = creation_config(config_values(config, 1000), 1000)
    return WindowState("w", window_keys("ctx", "w"), cfg)


def stored(n: int, content: str, **fields: Any) -> list[Any]:
    added = datetime.now(UTC)  # relative to now: tests hold on any date
    fields.setdefault("token_count", words(content))
    fields["type"] = cs.ItemType(fields.get("type", "code"))
    item = cs.ContextItem(content=content, id=f"ctx-{n}", seq=n, added_at=added, **fields)
    return whole_json(item)


def whole_json(item: cs.ContextItem) -> list[Any]:
    """An item as the scripts send it: [id, stored JSON, attrs, pinned] (raw_entry in lua/lib/items.lua)."""
    attrs = f"{item.seq}|{item.token_count}|{item.priority}|{item.type.value}|{facts.of_item(item)}|{item.group or ''}"
    return [(item.id or "").encode(), stored_json(item), attrs.encode(), int(item.pinned)]


def meta(**fields: object) -> list[str]:
    """A meta hash as a read script sends it (flat), with ``fields`` over a 100-token window."""
    values = {
        Meta.MAX_TOKENS: "100",
        Meta.MAX_ITEMS: "50",
        Meta.ITEM_LIMIT: "1000",
        Meta.THRESHOLD: "85.0",
        Meta.STRATEGY: "remove_low_priority",
        Meta.TTL: "0",
        Meta.SEQ: "3",
    }
    values.update({k: str(v) for k, v in fields.items()})
    return [x for pair in values.items() for x in pair]


# -- add ---------------------------------------------------------------------------------------


def test_add_sends_one_script_call_and_decodes_the_stored_items():
    st = state(max_tokens=100)
    plan = item_plans.add(settings(), st, [("hello big world", {"type": "user_message", "role": "user"})])
    sent, reply = drive(plan, [["ok", 1, 0, 0, 0, 0, stored(1, "hello big world", type="user_message", role="user")]])
    (call,) = sent
    assert isinstance(call, ScriptCall) and call.name == "add" and call.keys == st.keys
    assert call.request.startswith("add:")
    config = ["100", "1000", "1000", "85.0", "remove_low_priority", "0", "0", "0", "", "75.0", "10000", "86400", "0.0"]
    assert list(call.args[: wire.CONFIG_ARGS]) == config
    rest = call.args[wire.CONFIG_ARGS :]
    # placeholder tokens, nothing replaced, one item, no caller id
    # placeholder tokens, replace, most items compacted inside the add, item count, then the item
    # placeholder tokens, replace, defer, conditions, n, then the item: id, body, ...
    assert rest[:6] == [str(words(CLEARED_PLACEHOLDER)), "", str(compaction_plans.COMPACT_CHUNK), "", "1", ""]
    assert rest[6] == b'{"content":"hello big world","role":"user"}'  # what :items stores, after its time
    # type, tokens, priority, pinned, group, link, letters
    assert rest[7:] == ["user_message", "3", "50", "0", "", "", "U"]
    assert call.argv()[0].startswith(call.request + "|")  # the request and its argument fingerprint
    assert (reply.added, reply.evicted, reply.compactions, reply.trigger, reply.freed) == (1, 0, 0, 0, 0)
    assert reply.items[0].id == "ctx-1" and reply.items[0].role == "user"


def test_add_validates_before_sending_anything():
    plan = item_plans.add(settings(), state(), [("ok", {}), ("  ", {})])
    with pytest.raises(cs.InvalidItemError, match="empty or blank"):
        next(plan)


@pytest.mark.parametrize(
    ("reply", "error", "fields"),
    [
        (
            ["!", "FULL", "tokens", "90", "100", "20"],
            cs.ContextWindowFullError,
            {"unit": "tokens", "current": 90, "max": 100, "requested": 20},
        ),
        (["!", "FULL", "items", "5", "5", "1"], cs.ContextWindowFullError, {"unit": "items", "max": 5}),
        (["!", "DUPLICATE", "mine"], cs.DuplicateItemError, {}),
        (["!", "BADARG", "item", "1"], cs.InvalidItemError, {}),
        (["!", "CORRUPT", "ctx-3"], cs.CorruptWindowError, {}),
    ],
)
def test_add_turns_each_status_code_into_its_exception(reply, error, fields):
    plan = item_plans.add(settings(), state(max_tokens=100), [("some text", {"id": "mine"})])
    next(plan)
    with pytest.raises(error) as got:
        plan.send(reply)
    assert {k: getattr(got.value, k) for k in fields} == fields


# -- build -------------------------------------------------------------------------------------


def read_reply(raw: list[Any], **fields: object) -> list[Any]:
    """list.lua's reply to a listing (fifo, order, pinned) that fits one call."""
    listed = [r[0] for r in raw]
    return [meta(**fields), 0, raw, listed, [], -1]


def facts_reply(raw: list[Any], **fields: object) -> list[Any]:
    """The first round trip of a facts read (plans/build_read.py ``read_facts``) of a window
    holding ``raw``, as redis-py parses its MULTI/EXEC: the meta, the pins, the whole of a small
    :attrs (an HSCAN's cursor 0), the ids that are not conversation messages, the newest ids."""
    conversation = {b"user_message", b"assistant_message"}
    meta_hash = dict(zip(*[iter(x.encode() for x in meta(**fields))] * 2, strict=True))
    others = [r[0] for r in raw if r[2].split(b"|")[3] not in conversation]
    return [meta_hash, {r[0] for r in raw if r[3]}, (0, {r[0]: r[2] for r in raw}), others, [], [r[0] for r in raw]]


def stamp_of(**fields: object) -> list[bytes | None]:
    """An ``HMGET`` of the meta's epoch, seq and item count (``reads.STAMP``), as ``meta`` holds them."""
    held = dict(zip(*[iter(meta(**fields))] * 2, strict=True))
    return [None if held.get(f) is None else held[f].encode() for f in (Meta.EPOCH, Meta.SEQ, Meta.ITEMS)]


def server(raw: list[Any], event: int = 1, **fields: object) -> Any:
    """Answers whatever a build asks of a window holding ``raw`` (``fields`` in its meta): the
    facts' first round trip, every attrs and body at once, bodies by id, the meta's stamp, and
    its ``built`` event (``event``: 1 written, -1 the window moved on); ``raw`` in arrival order."""
    attrs, jsons = {r[0]: r[2] for r in raw}, {r[0]: r[1] for r in raw}

    def one(command: tuple[Any, ...]) -> Any:
        verb, key = command[0], command[1].rsplit(":", 1)[1]
        if (verb, key) == ("HMGET", "meta"):
            return stamp_of(**fields)
        if (verb, key) == ("HMGET", "items"):
            return [jsons.get(i.encode()) for i in command[2:]]
        if (verb, key) == ("HMGET", "attrs"):
            return [attrs.get(i if isinstance(i, bytes) else i.encode()) for i in command[2:]]
        if (verb, key) == ("HMGET", "groups"):
            return [b"" for _ in command[2:]]
        if (verb, key) == ("LRANGE", "fifo"):  # the oldest ids (raw is in arrival order)
            return [r[0] for r in raw[: int(command[3]) + 1]]
        return {("HGETALL", "attrs"): attrs, ("HGETALL", "items"): jsons}[verb, key]

    def answer(request: Any) -> Any:
        if isinstance(request, ScriptCall):
            return event
        if request.commands[0][0] == "HGETALL":  # the first round trip of a facts read
            reply = facts_reply(raw, **fields)  # without the scan of :attrs when it sent none
            reply = reply if any(c[0] == "HSCAN" for c in request.commands) else reply[:2] + reply[3:]
            since = [one(c) for c in request.commands if c[0] == "HMGET" or c[:3] == ("LRANGE", c[1], 0)]
            return [*reply, *since]
        return [*map(one, request.commands), *([event] if request.then is not None else [])]

    return answer


def hmget_items(request: Any) -> list[str]:
    """The ids a plain read asks the bodies of (its ``HMGET`` of :items)."""
    return [i for c in request.commands if c[0] == "HMGET" and c[1].endswith(":items") for i in c[2:]]


def bodies_read(sent: list[Any]) -> list[list[str]]:
    """The ids of each read of bodies among ``sent`` (its ``HMGET`` of :items)."""
    return [ids for ids in (hmget_items(r) for r in sent if isinstance(r, PlainRead)) if ids]


def reads_everything(request: Any) -> bool:
    """Whether a plain read takes every attrs and body at once (``build_read._everything``)."""
    return isinstance(request, PlainRead) and ("HGETALL", "ctx:{w}:items") in [c[:2] for c in request.commands]


def test_build_renders_within_the_budget_and_reports_every_item():
    raw = [
        stored(1, "You are terse.", type="system_prompt", pinned=True),
        stored(2, "one two three four five six seven eight nine ten", type="user_message", role="user"),
        stored(3, "a short reply", type="assistant_message", role="assistant"),
    ]
    plan = build_plans.build(settings(), state(max_tokens=100), cs.BuildOptions(max_tokens=40, reserve_for_response=10))
    sent, built = drive(plan, [server(raw, tokens=20, items=3)] * 3)
    facts_call, everything, event_call = sent
    assert isinstance(facts_call, PlainRead) and reads_everything(everything)  # every item is a candidate
    # every body came with the facts, one view of the window: its event holds no condition
    assert event_call.name == "event" and list(event_call.args[:2]) == ["0", "built"]
    assert not event_call.request
    assert built.content == (
        "You are terse.\n\n---\n\n[user]: one two three four five six seven eight nine ten"
        "\n\n---\n\n[assistant]: a short reply"
    )
    assert built.included_item_ids == ["ctx-1", "ctx-2", "ctx-3"] and built.total_tokens <= 30


def test_build_excludes_what_does_not_fit_and_omits_what_the_options_leave_out():
    raw = [stored(n, f"message {n} " + "word " * 8, type="user_message", role="user") for n in range(1, 6)]
    opts = cs.BuildOptions(max_tokens=30, reserve_for_response=0, max_history_items=3)
    sent, built = drive(build_plans.build(settings(), state(max_tokens=100), opts), [server(raw)] * 3)
    assert hmget_items(sent[1]) == [f"ctx-{n}" for n in range(1, 6)]  # the bodies of the facts read (all)
    assert built.omitted_item_ids == ["ctx-1", "ctx-2"]  # older than the 3 most recent
    assert built.included_item_ids == ["ctx-4", "ctx-5"] and built.excluded_item_ids == ["ctx-3"]


def test_build_refuses_a_reserve_that_leaves_no_room_after_reading_the_limit():
    plan = build_plans.build(settings(), state(max_tokens=100), None)  # default reserve 1000
    with pytest.raises(cs.InvalidOptionsError, match="reserve_for_response=1000 leaves no room"):
        drive(plan, [server([])] * 3)


def test_a_chat_build_reads_the_bodies_it_takes_with_its_event():
    raw = [stored(n, f"message {n} " + "word " * 8, type="user_message", role="user") for n in range(1, 6)]
    opts = cs.BuildOptions(max_tokens=30, reserve_for_response=0)
    sent, built = drive(
        chat_plans.build_messages(settings(), state(max_tokens=100), opts), [server(raw, tokens=50)] * 2
    )
    assert hmget_items(sent[1]) == built.included_item_ids == ["ctx-5"] and sent[1].then.name == "event"
    assert [m["content"] for m in built.messages] == ["message 5 " + "word " * 8]
    # a window within the budget whose scan brought every attrs: every item is taken, and every
    # body is read with the event all the same
    roomy = cs.BuildOptions(max_tokens=60, reserve_for_response=0)
    sent, built = drive(
        chat_plans.build_messages(settings(), state(max_tokens=100), roomy), [server(raw[3:], tokens=20, items=2)] * 3
    )
    assert len(sent) == 2 and hmget_items(sent[1]) == ["ctx-4", "ctx-5"] and sent[1].then.name == "event"
    assert built.included_item_ids == ["ctx-4", "ctx-5"]


def test_a_second_build_reads_only_the_bodies_the_store_lacks():
    s, st = settings(), state(max_tokens=100)
    first = [stored(n, f"message {n}", type="user_message", role="user") for n in (1, 2)]
    opts = cs.BuildOptions(reserve_for_response=0)
    sent, built = drive(build_plans.build(s, st, opts), [server(first, epoch="7", seq="2", items="2")] * 3)
    assert reads_everything(sent[1]) and built.included_item_ids == ["ctx-1", "ctx-2"]
    now = [first[1], stored(3, "message 3", type="user_message", role="user")]  # ctx-1 went meanwhile
    moved = server(now, epoch="7", seq="3", items="2")
    sent, built = drive(build_plans.build(s, st, opts), [server(now, event=-1), *[moved] * 5])
    assert sent[0].name == "event"  # from the last facts: the window moved on
    assert isinstance(sent[1], PlainRead) and bodies_read(sent) == [["ctx-3"]]  # it holds ctx-2
    assert built.included_item_ids == ["ctx-2", "ctx-3"]
    assert "message 2" in built.content and "message 1" not in built.content
    # a new epoch: the bodies the store holds are stale, every one is read again
    sent, built = drive(build_plans.build(s, st, opts), [server(now, epoch="8", seq="3", items="2")] * 3)
    assert isinstance(sent[0], PlainRead) and reads_everything(sent[1])  # no event first: it was moving


@pytest.mark.parametrize("chat", [False, True], ids=["build", "build_messages"])
def test_a_build_of_a_window_the_store_has_read_is_one_conditional_event(chat):
    s, st = settings(), state(max_tokens=100)
    first = [stored(n, f"message {n}", type="user_message", role="user") for n in (1, 2)]
    opts = cs.BuildOptions(reserve_for_response=0)
    fields = {"epoch": "7", "seq": "2", "items": "2", "created_us": "5"}

    def run(replies):
        plan = chat_plans.build_messages(s, st, opts) if chat else build_plans.build(s, st, opts)
        return drive(plan, replies)

    _, before = run([server(first, **fields)] * 3)
    sent, built = run([1])  # the event alone, checked against what the facts read said
    (call,) = sent
    n = int(call.args[0])
    held = dict(zip(call.args[1 : 2 * n : 2], call.args[2 : 2 * n + 1 : 2], strict=True))
    assert call.name == "event" and int(call.args[0]) == len(Meta.BUILD_INPUTS)
    assert call.args[2 * len(Meta.BUILD_INPUTS) + 1] == "built"
    assert held == {Meta.EPOCH: "7", Meta.ITEMS: "2", Meta.CREATED_US: "5", Meta.SEQ: "2", Meta.REMOVED_BY_CALLER: ""}
    assert built.included_item_ids == before.included_item_ids and built.version == before.version == "5.2.0"
    # the window moved on: the event wrote nothing (-1); the build reads the facts and runs again
    third = [*first, stored(3, "message 3", type="user_message", role="user")]
    moved = {**fields, "seq": "3", "items": "3"}
    sent, built = run([-1, *[server(third, **moved)] * 5])
    assert sent[0].name == "event" and isinstance(sent[1], PlainRead) and bodies_read(sent) == [["ctx-3"]]
    assert built.included_item_ids == ["ctx-1", "ctx-2", "ctx-3"]
    # a window seen moving is read first (no event sent in vain) until a read finds it as last read
    fourth = [*third, stored(4, "message 4", type="user_message", role="user")]
    sent, _ = run([server(fourth, **{**moved, "seq": "4", "items": "4"})] * 5)
    assert isinstance(sent[0], PlainRead)
    sent, _ = run([server(fourth, **{**moved, "seq": "4", "items": "4"})] * 5)  # unchanged since
    assert isinstance(sent[0], PlainRead)
    sent, built = run([1])
    assert [c.name for c in sent] == ["event"] and built.included_item_ids[-1] == "ctx-4"


def test_a_build_from_the_last_facts_that_fails_reads_before_it_raises():
    s, st = settings(), state(max_tokens=100)
    pinned = [stored(1, "word " * 30, type="system_prompt", pinned=True)]
    opts = cs.BuildOptions(reserve_for_response=0)
    drive(build_plans.build(s, st, opts), [server(pinned, epoch="7", seq="1", items="1")] * 3)
    small = cs.BuildOptions(reserve_for_response=0, max_tokens=20)  # too small for the pin held
    sent, built = drive(build_plans.build(s, st, small), [server([], epoch="8", seq="1", items="0")] * 3)
    assert isinstance(sent[0], PlainRead) and built.included_item_ids == []  # unpinned meanwhile
    sent, built = drive(build_plans.build(s, st, small), [1])  # the store now holds that read: one call
    assert [c.name for c in sent] == ["event"] and built.included_item_ids == []


# -- compaction ----------------------------------------------------------------------------------


def test_server_side_compaction_runs_in_parts_until_the_script_says_done():
    plan = compaction_plans.compact(settings(), state(max_tokens=100), "remove_oldest", 50.0)
    sent, freed = drive(plan, [[30, 1], [12, 0]])
    first, second = sent
    assert [c.name for c in sent] == ["compact", "compact"] and freed == 42
    chunk, placeholder = str(compaction_plans.COMPACT_CHUNK), str(words(CLEARED_PLACEHOLDER))
    assert first.args == ["remove_oldest", "50.0", chunk, "0", placeholder, "0", "0"]  # no config: it makes no window
    assert second.args[3] == "1" and second.request == first.request + "/1"  # one compaction, two parts
    assert second.args[-1] == "30"  # what the first part freed counts toward clear_at_least


def test_default_strategy_is_read_from_the_window_first():
    plan = compaction_plans.compact(settings(), state(max_tokens=100), None)
    meta_call = next(plan)
    assert meta_call.name == "peek" and meta_call.args[0] == "meta"
    compact_call = plan.send([meta(strategy="remove_oldest"), 0, []])
    assert compact_call.args[0] == "remove_oldest"


def test_summarize_calls_the_helper_outside_redis_and_commits_what_it_read():
    raw = [stored(1, "alpha " * 30, priority=10), stored(2, "beta " * 30, priority=90)]
    plan = compaction_plans.compact(settings(summarizer=lambda items: "short"), state(max_tokens=100), "summarize", 50)
    read_call = next(plan)
    assert read_call.name == "list" and read_call.args[0] == "fifo"
    helper = plan.send(read_reply(raw, tokens=60))
    assert isinstance(helper, External) and [i.id for i in helper.args[0]] == ["ctx-1"]  # lowest priority
    commit = plan.send(helper.fn(*helper.args))
    assert commit.name == "commit" and commit.same_args is False
    sha = hashlib.sha1(raw[0][1] + b"\n" + raw[0][2]).hexdigest()  # what commit.lua checks
    assert commit.args[:4] == ["summarize", "1", "ctx-1", sha]
    assert commit.args[-layout.ITEM_ARGS :][2:] == ["working_memory", "1", "10", "0", "", "", "X"]  # the summary item
    with pytest.raises(StopIteration) as done:
        plan.send([29, "ctx-1.0"])
    assert done.value.value == 29


def test_a_conflicting_commit_reads_and_decides_again():
    raw = [stored(1, "alpha " * 30), stored(2, "beta " * 30)]
    plan = compaction_plans.compact(
        settings(relevance_scorer=lambda q, items: [1.0] * len(items)), state(max_tokens=100), "selective", 50
    )
    next(plan)
    helper = plan.send(read_reply(raw, tokens=60))
    commit = plan.send(helper.fn(*helper.args))
    again = plan.send(["!", "CONFLICT", "ctx-1"])  # another worker changed ctx-1 meanwhile
    assert again.name == "list" and again.args[0] == "fifo" and commit.name == "commit"
    with pytest.raises(StopIteration) as done:  # the other worker already brought it under the target
        plan.send(read_reply(raw[1:], tokens=30))
    assert done.value.value == 0


def test_summarize_without_a_summarizer_is_refused_before_any_io():
    with pytest.raises(cs.StrategyUnavailableError):
        next(compaction_plans.compact(settings(), state(max_tokens=100), "summarize"))


def test_a_restore_packs_its_items_into_few_arguments():
    """A command takes at most 1,048,576 arguments (ten an item stopped restore, and so fork, of a
    window over ~100,000 items), and a server sets up many arguments of a script slowly: the
    items' rows go ROWS_AN_ARGUMENT to an argument, fewer when they pass BYTES_AN_ARGUMENT."""
    from contextstore.plans import snapshot as snapshot_plans

    items = [cs.ContextItem(content=f"message {n}", id=f"ctx-{n}", seq=n, token_count=2, role="user",
                            type=cs.ItemType.USER_MESSAGE) for n in range(1, 301)]  # fmt: skip
    snap = cs.ContextSnapshot(
        window_id="w", created_at=datetime.now(UTC), max_tokens=10_000, max_items=500, items=items
    )
    sent, _ = drive(snapshot_plans.restore(settings(), state(), snap), [1])
    argv = sent[0].argv()[1:]  # after the request id
    config = 2 * len(layout.Meta.CONFIG)
    assert len(argv) == config + 4 and argv[config : config + 2] == ["0", "300"]  # none staged; 300 here
    rows = msgspec.json.decode(argv[config + 2])
    assert len(rows) == 300 and rows[0][0] == "ctx-1" and rows[-1][0] == "ctx-300"
    rows = [[f"id{n}", "x" * 600_000] for n in range(5)] + [[f"small{n}", "y"] for n in range(2500)]
    packed = wire._packed(rows)  # a 600 KB row fills an argument; small ones go 1000 to one
    assert [len(msgspec.json.decode(a)) for a in packed] == [1, 1, 1, 1, 1000, 1000, 501]
    assert [r for a in packed for r in msgspec.json.decode(a)] == rows  # every row, in order


def test_a_restore_of_more_than_a_call_writes_stages_its_parts_then_moves_them_in(monkeypatch):
    """Over ``wire.ROWS_A_CALL`` items, every part but the last goes to stage.lua (in keys named
    after the request, under the window's hash tag), each after the count staged before; then
    restore.lua gets the last part, the staged count and the staged keys after the window's."""
    from contextstore.core.keys import STAGED
    from contextstore.plans import snapshot as snapshot_plans

    monkeypatch.setattr(wire, "ROWS_A_CALL", 100)
    items = [cs.ContextItem(content=f"message {n}", id=f"ctx-{n}", seq=n, token_count=2, role="user",
                            type=cs.ItemType.USER_MESSAGE) for n in range(1, 251)]  # fmt: skip
    snap = cs.ContextSnapshot(
        window_id="w", created_at=datetime.now(UTC), max_tokens=10_000, max_items=500, items=items
    )
    sent, _ = drive(snapshot_plans.restore(settings(), state(), snap, request_id="r1"), [100, 200, 250])
    assert [c.name for c in sent] == ["stage", "stage", "restore"]
    stage_keys = sent[0].keys
    assert sent[1].keys == stage_keys and all(":{w}:staged:" in k for k in stage_keys)
    assert [c.args[:2] for c in sent[:2]] == [["0", "100"], ["100", "100"]]
    assert [msgspec.json.decode(c.args[2])[0][0] for c in sent[:2]] == ["ctx-1", "ctx-101"]
    config = 2 * len(layout.Meta.CONFIG)
    assert sent[2].args[config : config + 2] == ["200", "50"]
    assert list(sent[2].keys) == [*state().keys, *(getattr(stage_keys, n) for n in STAGED)]
    again, _ = drive(snapshot_plans.restore(settings(), state(), snap, request_id="r1"), [100, 200, 250])
    assert again[0].keys == stage_keys  # a retry of the request stages into the same keys: it resumes
