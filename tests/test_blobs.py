"""Large content parts stored once per prefix by reference (§18): the same screenshot sent in
many turns, or by many windows, is one blob; every read gives the parts back as they were given;
a blob no item refers to any more is released by the store itself (removal, eviction,
compaction, clear, delete, TTL, a cleared tool result), while one that an item or an archived
row still refers to stays; a blob in a shape no script writes is a corrupt window."""

from __future__ import annotations

import base64
import hashlib
import random
import struct
import time
import zlib

import pytest

import contextstore as cs
from contextstore.core import blobs, parts
from contextstore.plans import blobs as blob_plans

THRESHOLD = 4096


def screenshot(seed: int = 0, kb: int = 24) -> bytes:
    """A PNG (its header says 320x200) with ``kb`` KiB of data that does not compress."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    noise = random.Random(seed).randbytes(kb * 1024)
    ihdr = struct.pack(">IIBBBBB", 320, 200, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", noise) + chunk(b"IEND", b"")


def image_url(seed: int = 0) -> dict:
    data = base64.b64encode(screenshot(seed)).decode()
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}", "detail": "high"}}


def anthropic_image(seed: int = 0) -> dict:
    data = base64.b64encode(screenshot(seed)).decode()
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def question(seed: int = 0) -> list[dict]:
    return [{"type": "text", "text": "What is on the screen?"}, image_url(seed)]


def blob_keys(r, prefix: str) -> list[str]:
    """The blobs' payload keys under ``prefix`` (not their indexes)."""
    return sorted(k.decode() for k in r.scan_iter(f"{prefix}:{{*#blobs:*}}:*") if not k.endswith(b":index"))


def sweep(store) -> int:
    """One sweep now, as the store's background sweep runs it."""
    return store._run(blob_plans.sweep(store._settings, ""))


@pytest.fixture
def no_grace(monkeypatch):
    """Sweeps do not wait for a blob's add (tests that call ``sweep`` right after a removal)."""
    monkeypatch.setattr(blobs, "GRACE_MS", -1_000)


def test_the_same_screenshot_is_stored_once_per_prefix(make_store, r, prefix):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    windows = [store.window(f"shot-{i}", max_tokens=100_000) for i in range(3)]
    for w in windows:
        for _ in range(5):
            w.add(question(), role="user")
    assert len(blob_keys(r, prefix)) == 1
    sha = hashlib.sha256(image_url()["image_url"]["url"].split(";base64,")[1].encode()).hexdigest()  # its base64
    assert r.hget(f"{prefix}:{{shot-0}}:blobs", sha) == b"5"
    assert all(i.content == question() for w in windows for i in w.items())
    stored = r.hget(f"{prefix}:{{shot-0}}:items", windows[0].items()[0].id)
    # the reference: the sha and what the part is (media type, bytes, size, tokens at the default detail)
    ref = f"{sha}#image/png,{len(screenshot())},320x200,{parts.image_tokens(320, 200)}".encode()
    assert stored.startswith(b'{"added_at_us":') and b'"blobs":["' + ref + b'"]' in stored
    # a reference, not the payload: the data URL's head stays in the part, its base64 is the blob
    assert b'"url":"data:image/png;base64,cs-blob:' + ref + b'"' in stored and len(stored) < 500


def test_events_carry_references_never_bodies(make_store, r, prefix):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("shot-events", max_tokens=100_000)
    first = w.add(question(), role="user")
    w.add_many([{"content": question(1), "role": "user"}])
    w.build_messages()
    w.remove(first.id or "")
    entries = r.xrange(f"{prefix}:{{shot-events}}:events")
    kinds = [fields[b"event"] for _, fields in entries]
    assert kinds.count(b"item_added") == 2 and b"built" in kinds and b"item_removed" in kinds
    payloads = [image_url(seed)["image_url"]["url"][-200:].encode() for seed in (0, 1)]
    for _, fields in entries:
        raw = b"".join(k + v for k, v in fields.items())
        assert len(raw) < 1_000 and not any(p in raw for p in payloads)


def test_an_item_stored_with_a_bare_sha_reference_still_reads(make_store, r, prefix):
    """Items stored before references said what the part is (``cs-blob:<sha>`` alone) read as
    before, and count and sweep the same."""
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("bare", max_tokens=100_000)
    item = w.add(question(), role="user")
    key = f"{prefix}:{{bare}}:items"
    stored = r.hget(key, item.id)
    tail = stored.split(b'"blobs":["', 1)[1].split(b'"', 1)[0][64:]
    assert tail.startswith(b"#image/png,")
    r.hset(key, item.id, stored.replace(tail, b""))  # as an older version stored it
    assert make_store(blob_threshold_bytes=THRESHOLD).window("bare").items()[0].content == question()
    assert w.verify().ok and sweep(store) == 0 and len(blob_keys(r, prefix)) == 1


def test_a_summary_of_items_with_blobs_commits_what_it_read(make_store, r, prefix):
    """A compaction outside Redis commits only if the items are as it read them; it compares the
    stored JSON with what it read, its payloads turned back into their references exactly."""
    store = make_store(blob_threshold_bytes=THRESHOLD, summarizer=lambda items: "screens were shown")
    w = store.window("summed", max_tokens=100_000)
    for turn in range(6):
        w.add(question(turn % 2), role="user")
        w.add(f"answer {turn}", role="assistant")
    assert w.compact("summarize", target_percent=w.stats().usage_percent / 2) > 0
    (summary,) = [i for i in w.items() if "summary_of" in (i.metadata or {})]
    assert any(i.content == question(0) for i in w.archived(summary.id)) and w.verify().ok


def test_blobs_take_a_fraction_of_the_memory_of_inline_parts(make_store, r, prefix):
    def used(p: str) -> int:
        return sum(r.memory_usage(k, samples=0) or 0 for k in r.scan_iter(f"{p}:*"))

    for threshold, p in ((THRESHOLD, prefix + "-blobs"), (0, prefix + "-inline")):
        w = make_store(prefix=p, blob_threshold_bytes=threshold).window("loop", max_tokens=1_000_000)
        for turn in range(20):
            w.add(question(seed=turn % 2), role="user")  # a computer-use loop: two screens, again and again
    assert used(prefix + "-blobs") * 5 < used(prefix + "-inline")


def test_every_read_gives_the_parts_back_as_given(make_store):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("reads", max_tokens=100_000)
    audio = {"type": "input_audio", "input_audio": {"data": base64.b64encode(bytes(9000)).decode(), "format": "wav"}}
    pdf = base64.b64encode(b"%PDF-1.4 " + bytes(9000)).decode()
    document = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}}
    openai = [{"type": "text", "text": "look"}, image_url(1), audio]
    anthropic = [{"type": "text", "text": "and this"}, anthropic_image(2), document]
    first = w.add(openai, role="user")
    w.add("I see.", role="assistant")
    second = w.add(anthropic, role="user")
    assert w.get(first.id).content == openai and w.get(second.id).content == anthropic
    assert [i.content for i in w.items()] == [openai, "I see.", anthropic]
    assert [i.content for i in w.iter_items()] == [openai, "I see.", anthropic]
    assert [i.content for i in w.snapshot().items] == [openai, "I see.", anthropic]
    opts = cs.BuildOptions(reserve_for_response=0)
    to_anthropic = store.window("reads-anthropic", max_tokens=100_000)
    to_anthropic.add(question(1), role="user")
    to_anthropic.add(anthropic, role="user")
    built = to_anthropic.build_messages(opts, format="anthropic")
    messages = built["messages"] if isinstance(built, dict) else built
    assert messages[-1]["content"][-2:] == anthropic[-2:]
    assert messages[0]["content"][1]["source"]["data"] == image_url(1)["image_url"]["url"].split(",", 1)[1]
    only_openai = store.window("reads-openai", max_tokens=100_000)
    only_openai.add(openai, role="user")
    assert only_openai.build_messages(opts)[0]["content"] == openai
    cold = make_store(blob_threshold_bytes=THRESHOLD, item_cache_bytes=0).window("reads")
    assert [i.content for i in cold.items()] == [openai, "I see.", anthropic]  # a store that read nothing yet
    assert w.verify().ok


def removals():
    """How the last reference to a blob goes: (name, window options, what to do to the window)."""

    def compact(w):
        w.compact("remove_oldest", target_percent=0)

    return {
        "remove": ({}, lambda w: w.remove(w.items()[0].id)),
        "pop": ({}, lambda w: w.pop(2)),
        "eviction": ({"max_items": 2}, lambda w: [w.add(f"turn {i}", role="user") for i in range(3)]),
        "compaction": ({}, compact),
        "clear": ({}, lambda w: w.clear()),
        "delete": ({}, lambda w: w.delete()),
        "replace": ({}, lambda w: w.replace(["a fresh start"], last=None)),
    }


@pytest.mark.parametrize("how", sorted(removals()))
def test_a_blob_goes_with_its_last_reference(make_store, r, prefix, no_grace, how):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    options, act = removals()[how]
    w = store.window(f"gone-{how}", max_tokens=100_000, **options)
    w.add(question(), role="user")
    w.add("It is a screen.", role="assistant")
    other = store.window(f"keeps-{how}", max_tokens=100_000)
    other.add(question(seed=5), role="user")
    assert len(blob_keys(r, prefix)) == 2
    assert sweep(store) == 0  # both are referred to
    act(w)
    assert sweep(store) == 1
    assert len(blob_keys(r, prefix)) == 1 and other.items()[0].content == question(seed=5)
    assert store.window(f"gone-{how}").verify().ok and other.verify().ok


def test_a_cleared_tool_result_lets_its_screenshot_go(make_store, r, prefix, no_grace):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("cleared", max_tokens=100_000, default_strategy="clear_tool_results")
    call = {"id": "c1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}
    w.add_many([
        {"content": "", "role": "assistant", "metadata": {"tool_calls": [call]}},
        {"content": [anthropic_image(3)], "role": "tool", "metadata": {"tool_call_id": "c1"}},
    ])  # fmt: skip
    w.add("done", role="assistant")
    assert w.compact("clear_tool_results", target_percent=0) > 0
    assert sweep(store) == 1 and blob_keys(r, prefix) == []
    assert w.verify().ok and "cleared" in str(w.items()[1].content)


def test_an_expired_window_lets_its_blobs_go(make_store, r, prefix, no_grace):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    store.window("brief", max_tokens=100_000, ttl_seconds=1).add(question(), role="user")
    deadline = time.monotonic() + 10
    while r.exists(f"{prefix}:{{brief}}:meta") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sweep(store) == 1 and blob_keys(r, prefix) == []


def test_what_a_rewind_or_a_summary_archived_keeps_its_blobs_until_it_is_gone(make_store, r, prefix, no_grace):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("archived", max_tokens=100_000)
    w.add("first", role="user", id="q1")
    w.add(question(), role="user")
    rid = w.rewind("q1")
    assert sweep(store) == 0 and len(blob_keys(r, prefix)) == 1  # the archive refers to it
    assert w.undo_rewind(rid) == 1 and w.items()[1].content == question()
    assert w.verify().ok
    w.rewind("q1")
    w.delete()
    assert sweep(store) == 1


def test_restore_and_fork_refer_to_the_same_blobs(make_store, r, prefix, no_grace):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("parent", max_tokens=100_000)
    w.add(question(), role="user", id="q1")
    w.add("a screen", role="assistant")
    child = w.fork("child", at="q1")
    copy = store.window("copy")
    copy.restore(w.snapshot())
    assert len(blob_keys(r, prefix)) == 1
    assert child.items()[0].content == copy.items()[0].content == question()
    w.delete()
    copy.delete()
    assert sweep(store) == 0 and child.items()[0].content == question()  # the fork still refers to it
    child.delete()
    assert sweep(store) == 1 and blob_keys(r, prefix) == []


def test_the_store_releases_a_blob_within_ten_seconds_by_itself(one_server, make_store, r, prefix):
    """The background sweep (its scripts run on every server in the tests above)."""
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("by-itself", max_tokens=100_000)
    w.add(question(), role="user")
    w.delete()
    started = time.monotonic()
    while blob_keys(r, prefix) and time.monotonic() - started < 10:
        time.sleep(0.25)
    assert blob_keys(r, prefix) == [], "no sweep released the blob within 10 s"


@pytest.mark.parametrize("api", ["async"], indirect=True)
def test_the_asyncio_store_stores_reads_and_releases_blobs(make_store, r, prefix, no_grace):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("aio", max_tokens=100_000)
    w.add(question(), role="user")
    assert len(blob_keys(r, prefix)) == 1
    fresh = make_store(blob_threshold_bytes=THRESHOLD).window("aio")
    assert fresh.items()[0].content == question()
    w.delete()
    assert sweep(store) == 1


def test_a_blob_in_a_shape_no_script_writes_is_a_corrupt_window(make_store, r, prefix):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("bad-blob", max_tokens=100_000)
    item = w.add(question(), role="user")
    [data] = blob_keys(r, prefix)
    r.set(data, "data:image/png;base64,AAAA")  # another payload than its name says
    fresh = make_store(blob_threshold_bytes=THRESHOLD).window("bad-blob")
    with pytest.raises(cs.CorruptWindowError, match="SHA-256"):
        fresh.get(item.id)
    r.delete(data)
    with pytest.raises(cs.CorruptWindowError, match="missing"):
        make_store(blob_threshold_bytes=THRESHOLD).window("bad-blob").items()


def test_verify_reports_blob_counts_that_do_not_match(make_store, r, prefix):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("miscounted", max_tokens=100_000)
    w.add(question(), role="user")
    [sha] = r.hkeys(f"{prefix}:{{miscounted}}:blobs")
    r.hset(f"{prefix}:{{miscounted}}:blobs", sha, 7)
    assert any(":blobs counts" in p for p in w.verify().problems)


def test_a_blob_a_sweep_took_before_its_add_is_stored_again(make_store, r, prefix):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("late", max_tokens=100_000)
    payload = image_url()["image_url"]["url"]
    sha = blobs.sha_of(payload)
    keys = blobs.blob_keys(prefix, "", sha)
    store._run(blob_plans.put(store._settings, w._state, {sha: payload}))
    r.delete(keys.data)  # a sweep took it before the add ran
    store._run(blob_plans.noted(store._settings, w._state, {sha: payload}))
    assert r.get(keys.data) == payload.encode()


def test_small_parts_and_a_store_without_blobs_keep_parts_inline(make_store, r, prefix):
    small = [{"type": "text", "text": "tiny"}, {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]
    make_store(blob_threshold_bytes=THRESHOLD).window("inline").add(small, role="user")
    make_store(blob_threshold_bytes=0).window("inline-too").add(question(), role="user")
    assert blob_keys(r, prefix) == []
    with pytest.raises(cs.InvalidOptionsError):
        make_store(blob_threshold_bytes=-1)
    forged = [{"type": "image_url", "image_url": {"url": "cs-blob:" + "0" * 64}}]
    with pytest.raises(cs.InvalidItemError, match="cs-blob"):
        make_store().window("forged").add(forged, role="user")


def test_an_input_waiting_for_a_turn_keeps_its_blob(make_store, r, prefix, no_grace):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("waiting", max_tokens=100_000)
    with w.turn(input={"content": "first", "role": "user"}, owner="a") as turn:
        with pytest.raises(cs.TurnQueuedError), w.turn(policy="enqueue", input={"content": question(), "role": "user"}):
            pytest.fail("an enqueued caller has no turn to run")
        assert sweep(store) == 0 and len(blob_keys(r, prefix)) == 1  # the waiting input refers to it
        assert [i.content for i in turn.take_pending()] == [question()]
    assert w.items()[-1].content == question() and w.verify().ok
    assert r.hvals(f"{prefix}:{{waiting}}:blobs") == [b"1"]


def test_an_input_waiting_across_a_restore_keeps_its_blob(make_store, r, prefix, no_grace):
    """A restore replaces the window's items (and their blob counts) but not the inputs waiting
    for a turn: what they refer to stays counted, so no sweep takes it before they go in."""
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("waiting-restore", max_tokens=100_000)
    w.add("before", role="user")
    snap = w.snapshot()
    with w.turn(input={"content": "first", "role": "user"}, owner="a") as turn:
        with pytest.raises(cs.TurnQueuedError), w.turn(policy="enqueue", input={"content": question(), "role": "user"}):
            pytest.fail("an enqueued caller has no turn to run")
        w.restore(snap)
        assert sweep(store) == 0 and len(blob_keys(r, prefix)) == 1  # the waiting input still refers to it
        assert [i.content for i in turn.take_pending()] == [question()]
    assert w.items()[-1].content == question() and w.verify().ok


def test_a_blob_whose_writer_died_before_its_item_is_released(make_store, r, prefix, no_grace):
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("died", max_tokens=100_000)
    payload = image_url(7)["image_url"]["url"]
    store._run(blob_plans.put(store._settings, w._state, {blobs.sha_of(payload): payload}))  # then nothing
    assert len(blob_keys(r, prefix)) == 1
    assert sweep(store) == 1 and blob_keys(r, prefix) == []


def test_workers_adding_the_same_screenshot_at_once_store_it_once(make_store, r, prefix):
    from concurrent.futures import ThreadPoolExecutor

    def worker(n: int) -> None:
        w = make_store(blob_threshold_bytes=THRESHOLD).window(f"same-{n % 3}", max_tokens=1_000_000)
        for _ in range(5):
            w.add(question(), role="user")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(worker, range(6)))
    assert len(blob_keys(r, prefix)) == 1
    store = make_store(blob_threshold_bytes=THRESHOLD)
    for n in range(3):
        w = store.window(f"same-{n}")
        assert [i.content for i in w.items()] == [question()] * 10 and w.verify().ok


def test_a_screenshot_the_store_has_seen_is_not_sent_again(make_store, r, prefix):
    w = make_store(blob_threshold_bytes=THRESHOLD).window("sent-once", max_tokens=100_000)
    w.add(question(), role="user")
    before = int(r.info("stats")["total_net_input_bytes"])
    w.add(question(), role="user")
    assert int(r.info("stats")["total_net_input_bytes"]) - before < 8_000  # the image is ~33 KB
    r.delete(*blob_keys(r, prefix))  # gone meanwhile
    w.add(question(), role="user")  # sent again
    assert [i.content for i in w.items()] == [question()] * 3


@pytest.mark.parametrize("api", ["sync", "async"], indirect=True)  # the asyncio store too
def test_blobs_a_tenants_windows_stored_in_the_shared_keys_are_moved_into_its_own(make_store, r, prefix, monkeypatch):
    """Windows of a tenant (``a:…``) that stored blobs before blobs had scopes have them in the
    prefix's shared keys, where a tenant's user cannot read them: their reads fail until the
    operator's ``move_blobs_to_tenants``, which copies each into its holders' scopes and drops a
    shared blob no window of no tenant still holds."""
    store = make_store(blob_threshold_bytes=THRESHOLD)
    with monkeypatch.context() as old:
        old.setattr(blobs, "scope_of", lambda window_id: "")  # how blobs were kept before
        store.window("a:old", max_tokens=100_000).add(question(1), role="user")
        store.window("b:old", max_tokens=100_000).add(question(1), role="user")
        store.window("plain", max_tokens=100_000).add(question(2), role="user")
        store.window("c:old", max_tokens=100_000).add(question(2), role="user")
    shared = lambda: sorted(k for k in blob_keys(r, prefix) if k.startswith(f"{prefix}:{{#blobs"))  # noqa: E731
    assert len(shared()) == 2 and len(blob_keys(r, prefix)) == 2
    with pytest.raises(cs.CorruptWindowError, match="missing"):
        make_store(blob_threshold_bytes=THRESHOLD).window("a:old").items()
    assert store.move_blobs_to_tenants() == 3
    fresh = make_store(blob_threshold_bytes=THRESHOLD)
    assert [fresh.window(w).items()[0].content for w in ("a:old", "b:old", "plain", "c:old")] == [
        question(1), question(1), question(2), question(2)
    ]  # fmt: skip
    assert len(shared()) == 1  # the one "plain" still holds
    assert {k.split("{")[1].split("#")[0] for k in blob_keys(r, prefix)} == {"a:", "b:", "c:", ""}
    assert store.move_blobs_to_tenants() == 0


@pytest.mark.parametrize("api", ["sync", "async"], indirect=True)  # the asyncio store too
def test_verify_reads_the_blobs_the_server_holds_and_reports_each_problem(make_store, r, prefix):
    """``verify()`` reads what the server holds, never the store's cache: a blob that disappeared
    or holds other bytes is a finding (naming its key) for a store that had read the item and for
    a fresh one; neither raises."""
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("seen", max_tokens=100_000)
    w.add(question(1), role="user")
    w.add(question(2), role="user")
    assert [i.content for i in w.items()] == [question(1), question(2)] and w.verify().ok  # cached now
    one, two = (
        blobs.blob_keys(prefix, "", blobs.sha_of(parts.spelled(image_url(s)["image_url"]["url"])[1])).data
        for s in (1, 2)
    )
    r.delete(one)
    r.set(two, "data:image/png;base64,AAAA")
    for report in (w.verify(), make_store(blob_threshold_bytes=THRESHOLD).window("seen").verify()):
        assert not report.ok and report.exists
        assert sorted(report.problems) == sorted(  # those, and nothing they would make other checks say
            [f"blob {one}: missing: an item refers to it", f"blob {two}: a payload whose SHA-256 is not its name"]
        )


@pytest.mark.parametrize("api", ["sync", "async"], indirect=True)  # the asyncio store too
def test_a_part_stored_by_reference_has_a_limit_of_its_own_checked_before_any_decode(
    make_store, r, prefix, monkeypatch
):
    """An ordinary 1.8 MB screenshot is stored (its blob does not count toward the 1 MiB
    ``max_content_bytes``, which still holds for parts kept inline); a part over ``max_part_bytes``
    is refused naming the part and the limit, before any of its data is decoded, with nothing
    written."""
    big = [{"type": "text", "text": "the whole screen"}, image_url_of(screenshot(9, kb=1800))]
    w = make_store(blob_threshold_bytes=THRESHOLD).window("big", max_tokens=100_000)
    assert w.add(big, role="user").content == big and w.items()[0].content == big
    inline = make_store(blob_threshold_bytes=0).window("inline-big", max_tokens=100_000)
    with pytest.raises(cs.InvalidItemError, match="the limit is 1048576"):
        inline.add(big, role="user")
    small_limit = make_store(blob_threshold_bytes=THRESHOLD, max_part_bytes=1_000_000)
    w2 = small_limit.window("big")
    before = sorted(r.scan_iter(f"{prefix}:*"))

    def no_decode(*args, **kwargs):
        raise AssertionError("a part's data was decoded before its size was checked")

    monkeypatch.setattr(parts.base64, "b64decode", no_decode)
    with pytest.raises(
        cs.InvalidItemError, match=r"content part 1 \('image_url'\) holds 2457\d{3} bytes .* at most 1000000"
    ):
        w2.add(big, role="user")
    assert sorted(r.scan_iter(f"{prefix}:*")) == before
    with pytest.raises(cs.InvalidOptionsError, match="max_part_bytes"):
        make_store(max_part_bytes=0)


def image_url_of(png: bytes) -> dict:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}


@pytest.mark.parametrize("api", ["sync", "async"], indirect=True)  # the asyncio store too
def test_the_same_image_in_either_format_is_one_blob(make_store, r, prefix, no_grace, monkeypatch):
    """An image as an OpenAI ``image_url`` data URL and as an Anthropic base64 ``image`` is one
    blob (keyed by the base64 it holds, not by how a format spelled it); each item reads back
    exactly as given, and the blob goes once neither refers to it. Items stored when a data URL's
    blob held the whole URL read as before."""
    store = make_store(blob_threshold_bytes=THRESHOLD)
    openai, anthropic = [image_url(11)], [anthropic_image(11)]
    w = store.window("both", max_tokens=100_000)
    a, b = w.add(openai, role="user"), w.add(anthropic, role="user")
    assert len(blob_keys(r, prefix)) == 1
    fresh = make_store(blob_threshold_bytes=THRESHOLD).window("both")
    assert [i.content for i in fresh.items()] == [openai, anthropic]
    with monkeypatch.context() as old:
        old.setattr(blobs, "spelled", lambda payload: ("", payload))  # how data URLs were kept before
        w.add([image_url(12)], role="user")
    assert len(blob_keys(r, prefix)) == 2
    assert make_store(blob_threshold_bytes=THRESHOLD).window("both").items()[2].content == [image_url(12)]
    w.remove(a.id)
    assert sweep(store) == 0 and len(blob_keys(r, prefix)) == 2
    w.remove(b.id)
    assert sweep(store) == 1 and len(blob_keys(r, prefix)) == 1
    assert w.verify().ok


def test_ls_verify_shows_a_window_whose_blob_is_gone(make_store, r, prefix, redis_url, capsys):
    """``contextstore ls`` reads counters (O(1)) and shows such a window as it shows any;
    ``ls --verify`` reads each window as ``verify()`` does and names what is wrong."""
    import json

    from support import run_cli

    store = make_store(blob_threshold_bytes=THRESHOLD)
    store.window("fine", max_tokens=100_000).add(question(1), role="user")
    store.window("lost", max_tokens=100_000).add(question(2), role="user")
    lost = blobs.blob_keys(prefix, "", blobs.sha_of(parts.spelled(image_url(2)["image_url"]["url"])[1])).data
    r.delete(lost)
    shown = run_cli(capsys, redis_url, prefix, "ls", "--verify").stdout
    cells = {row[0]: row for row in ([c.strip() for c in line.split("│")[1:-1]] for line in shown.splitlines()) if row}
    assert cells["fine"][-1] == "ok" and cells["lost"][-1] == "1 problem"
    rows = {
        row["window_id"]: row
        for row in json.loads(run_cli(capsys, redis_url, prefix, "ls", "--verify", "--json").stdout)
    }
    assert rows["fine"]["problems"] == [] and rows["lost"]["problems"] == [
        f"blob {lost}: missing: an item refers to it"
    ]
    assert "problems" not in json.loads(run_cli(capsys, redis_url, prefix, "ls", "--json").stdout)[0]


def test_a_tenants_blobs_are_one_slot_and_its_sweep_reads_one_index(make_store, r, prefix):
    """The shared scope spreads its blobs over sixteen slots; a tenant's lie in one, so a sweep of
    a tenant's scope reads one index (a store may sweep thousands of tenants' scopes)."""
    store = make_store(blob_threshold_bytes=THRESHOLD)
    w = store.window("t1:shots", max_tokens=100_000)
    for seed in range(6):
        w.add(question(seed), role="user")
    keys = [k for k in blob_keys(r, prefix) if "{t1:" in k]
    assert len(keys) == 6 and {k.split("}")[0] for k in keys} == {f"{prefix}:{{t1:#blobs:0"}
    asked: list[str] = []

    def watched(plan):
        reply = None
        try:
            while True:
                request = plan.send(reply)
                asked.append(request.name)
                reply = yield request
        except StopIteration as done:
            return done.value

    store._run(watched(blob_plans.sweep(store._settings, "t1:")))
    store._run(watched(blob_plans.sweep(store._settings, "")))
    assert asked == ["blob_index"] + ["blob_index"] * 16
