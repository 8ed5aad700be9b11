"""Content parts (images, audio, files, documents beside text): stored and given back as they
came, built as each chat API takes them, converted to the other format where an equivalent
exists and refused by name where none does; an image counted by its size, not its encoding."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextstore as cs
from contextstore.core import parts

from support import dump_window


def png(width: int, height: int) -> bytes:
    """A PNG's signature and header (IHDR) for an image of that size, and an empty image chunk."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


SHOT = b64(png(1280, 800))
OPENAI_PARTS: list[dict[str, Any]] = [
    {"type": "text", "text": "What is in this picture?"},
    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{SHOT}", "detail": "high"}},
]
ANTHROPIC_PARTS: list[dict[str, Any]] = [
    {"type": "text", "text": "And this one?"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": SHOT}},
]


def test_parts_of_either_format_come_back_as_they_were_given(store):
    w = store.window("parts", max_tokens=50_000)
    a = w.add(OPENAI_PARTS, role="user")
    w.add("a cat", role="assistant")
    w.add_many([{"role": "user", "content": ANTHROPIC_PARTS}])
    assert w.get(a.id).content == OPENAI_PARTS
    assert [i.content for i in w.items()] == [OPENAI_PARTS, "a cat", ANTHROPIC_PARTS]
    copy = store.window("parts-copy")
    copy.restore(w.snapshot())
    assert [i.content for i in copy.items()] == [OPENAI_PARTS, "a cat", ANTHROPIC_PARTS]
    assert w.add(content=ANTHROPIC_PARTS, role="user").content == ANTHROPIC_PARTS  # content= as a keyword
    with pytest.raises(cs.InvalidOptionsError, match="content is given twice"):
        w.add("text", content=ANTHROPIC_PARTS, role="user")


def test_a_build_sends_its_own_formats_parts_as_stored_and_converts_the_others(store):
    w = store.window("built", max_tokens=50_000)
    w.add(OPENAI_PARTS, role="user")
    w.add("a cat", role="assistant")
    w.add(ANTHROPIC_PARTS, role="user")
    opts = cs.BuildOptions(reserve_for_response=0)
    openai = w.build_messages(opts)
    assert openai[0]["content"] == OPENAI_PARTS  # as stored: no key added
    assert openai[2]["content"] == [
        {"type": "text", "text": "And this one?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{SHOT}"}},
    ]
    anthropic = w.build_messages(opts, format="anthropic")["messages"]
    assert anthropic[0]["content"] == [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": SHOT}},
    ]
    assert anthropic[2]["content"] == ANTHROPIC_PARTS
    built = w.build(opts)
    assert "[image/png 1280x800" in built and "sha256" not in built  # a text build names what it cannot show


def test_a_caller_changing_what_a_build_gave_it_changes_no_later_build(store):
    """A caching store's builds hand out copies of the stored parts and tool calls: a caller that
    edits the messages it got (say, adds its own cache mark or redacts a part) changes nothing
    the store's next build sends."""
    w = store.window("edited", max_tokens=50_000)
    w.add(OPENAI_PARTS, role="user")
    w.add(ANTHROPIC_PARTS, role="user")
    w.add_many([
        {"content": "", "role": "assistant", "metadata": {"tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}]}},
        {"content": [{"type": "text", "text": "found"}], "role": "tool", "metadata": {"tool_call_id": "c1"}},
    ])  # fmt: skip
    opts = cs.BuildOptions(reserve_for_response=0)
    for fmt in ("openai", "anthropic"):
        first = w.build_messages(opts, format=fmt)
        expected = json.loads(json.dumps(first))
        for value in _dicts(first):  # every dict the build handed out, nested ones too
            value["edited"] = True
        assert w.build_messages(opts, format=fmt) == expected, fmt


def _dicts(value: Any) -> list[dict[str, Any]]:
    """Every dict in ``value``, at any depth."""
    if isinstance(value, dict):
        return [value] + [d for v in value.values() for d in _dicts(v)]
    return [d for v in value for d in _dicts(v)] if isinstance(value, list) else []


def test_a_build_marks_copies_and_changes_no_stored_part(make_store):
    """Cache breakpoints and the trimmed end of a final assistant turn go on copies of the blocks:
    a store's later builds are what a store that never built sends (its item cache holds the
    parts as stored). With ``cache_control`` the build's breakpoints replace those a stored part
    carries (the API takes four at most); without, parts go as stored."""
    mark = {"type": "ephemeral"}
    w = make_store().window("marks")
    w.add([{"type": "text", "text": "You are terse."}], role="system")
    w.add([{"type": "text", "text": "look", "cache_control": mark}], role="user")
    w.add([{"type": "text", "text": "seen.  "}], role="assistant")
    w.add([{"type": "text", "text": "and?"}, {"type": "text", "text": "now", "cache_control": mark}], role="user")
    w.add([{"type": "text", "text": "done.  "}], role="assistant")
    opts = cs.BuildOptions(reserve_for_response=0)
    marked = w.build_messages(cs.BuildOptions(reserve_for_response=0, cache_control=True), format="anthropic")
    blocks = [*marked["system"], *(b for t in marked["messages"] for b in t["content"])]
    assert [n for n, b in enumerate(blocks) if "cache_control" in b] == [0, len(blocks) - 1]
    assert blocks[-1]["text"] == "done."
    plain = w.build_messages(opts, format="anthropic")
    fresh = make_store().window("marks").build_messages(opts, format="anthropic")
    assert plain == fresh and plain["system"] == [{"type": "text", "text": "You are terse."}]
    assert plain["messages"][0]["content"] == [{"type": "text", "text": "look", "cache_control": mark}]
    assert plain["messages"][1]["content"] == [{"type": "text", "text": "seen.  "}]  # not last: as stored
    last = [{"type": "text", "text": "and?"}, {"type": "text", "text": "now", "cache_control": mark}]
    assert [i.content for i in w.items()][2:] == [
        [{"type": "text", "text": "seen.  "}],
        last,
        [{"type": "text", "text": "done.  "}],
    ]


@pytest.mark.parametrize(
    "part, fmt",
    [
        ({"type": "input_audio", "input_audio": {"data": b64(b"RIFF...."), "format": "wav"}}, "anthropic"),
        ({"type": "file", "file": {"file_id": "file-abc"}}, "anthropic"),
        ({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": b64(b"%PDF")}},
         "openai"),
        ({"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}, "anthropic"),  # not https
    ],
    ids=["audio", "file", "document", "plain http image"],
)  # fmt: skip
def test_a_part_without_an_equivalent_is_refused_by_name(store, part, fmt):
    w = store.window("refused", max_tokens=50_000)
    w.add([{"type": "text", "text": "look"}, part], role="user")
    w.build_messages(cs.BuildOptions(reserve_for_response=0), format="openai" if fmt == "anthropic" else "anthropic")
    with pytest.raises(cs.InvalidItemError, match=repr(part["type"])):
        w.build_messages(cs.BuildOptions(reserve_for_response=0), format=fmt)


def test_a_tool_result_holds_an_image_for_anthropic_and_text_for_openai(store):
    w = store.window("tool-image", max_tokens=50_000)
    call = {"id": "shot_1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}
    w.add("take a screenshot", role="user")
    w.add_many([
        {"content": "", "role": "assistant", "metadata": {"tool_calls": [call]}},
        {"content": ANTHROPIC_PARTS, "role": "tool", "metadata": {"tool_call_id": "shot_1"}},
    ])  # fmt: skip
    opts = cs.BuildOptions(reserve_for_response=0)
    turns = w.build_messages(opts, format="anthropic")["messages"]
    result = turns[-1]["content"][0]
    assert result["type"] == "tool_result" and result["content"] == ANTHROPIC_PARTS
    with pytest.raises(cs.InvalidItemError, match="type 'image_url', which an OpenAI tool message cannot carry"):
        w.build_messages(opts)


BAD_PARTS = {
    "unknown type": [{"type": "hologram", "data": "x"}],
    "not a dict": ["just text"],
    "empty list": [],
    "malformed base64": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}],
    "a header that lies": [{"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": SHOT}}],
    "no header at all": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(b"not an image")}}
    ],
    "text without text": [{"type": "text"}],
    "NaN": [{"type": "text", "text": "x", "weight": float("nan")}],
    "too large": [{"type": "text", "text": "x" * (2 << 20)}],  # over max_content_bytes (1 MiB)
}


@pytest.mark.parametrize("name", list(BAD_PARTS))
def test_bad_parts_are_refused_with_nothing_written(store, r, prefix, name):
    w = store.window("bad", max_tokens=50_000)
    w.add("before", role="user")
    before = dump_window(r, prefix, "bad")
    with pytest.raises(cs.InvalidItemError):
        w.add(BAD_PARTS[name], role="user")
    with pytest.raises(cs.InvalidItemError):
        w.add_many(["fine", {"content": BAD_PARTS[name], "role": "user"}])
    assert dump_window(r, prefix, "bad") == before


@pytest.mark.parametrize(
    "size, detail, expected",
    [
        ((1024, 1024), "auto", 1399),  # Anthropic's 1024*1024/750 beats OpenAI's 4 tiles (765)
        ((512, 512), "low", 350),  # 512*512/750 beats OpenAI's 85
        ((4000, 1000), "high", 820),  # Anthropic's 1568x392 beats OpenAI's 2048x512 in 4 tiles (765)
    ],
)
def test_an_image_counts_what_the_providers_charge_for_its_size(store, size, detail, expected):
    w = store.window("tokens", max_tokens=50_000)
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(png(*size))}", "detail": detail}}
    assert w.add([image], role="user").token_count == expected == parts.image_tokens(*size, detail)
    by_url = w.add([{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}], role="user")
    assert by_url.token_count == parts.UNKNOWN_IMAGE_TOKENS
    assert w.stats().current_tokens == expected + parts.UNKNOWN_IMAGE_TOKENS


def test_a_tool_result_of_parts_is_cleared_and_a_retried_add_is_not_a_duplicate(store):
    w = store.window("clearing", max_tokens=50_000)
    call = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    w.add("look", role="user")
    items = [
        {"content": "", "role": "assistant", "metadata": {"tool_calls": [call]}},
        {"content": OPENAI_PARTS, "role": "tool", "metadata": {"tool_call_id": "c1"}, "id": "shot"},
    ]
    w.add_many(items)
    assert w.add_many(items[1:]) == 0  # the same caller id and parts: a safe retry, nothing added
    w.add("and now?", role="user")
    assert w.compact("clear_tool_results", target_percent=1) > 0
    cleared = w.get("shot")
    assert isinstance(cleared.content, str) and cleared.metadata["tool_call_id"] == "c1"
    assert w.verify().ok


def test_stored_parts_no_add_would_take_are_a_corrupt_window(store, r, prefix):
    w = store.window("corrupt-parts", max_tokens=50_000)
    item = w.add(OPENAI_PARTS, role="user")
    key = f"{prefix}:{{corrupt-parts}}:items"
    body = json.loads(r.hget(key, item.id))
    body["content"] = [{"type": "hologram"}]
    r.hset(key, item.id, json.dumps(body))
    with pytest.raises(cs.CorruptWindowError):
        w.items()


def test_verify_takes_sound_parts_and_reports_bad_ones(store, r, prefix):
    w = store.window("verified-parts", max_tokens=50_000)
    item = w.add(ANTHROPIC_PARTS, role="user")
    assert w.verify().ok
    key = f"{prefix}:{{verified-parts}}:items"
    body = json.loads(r.hget(key, item.id))
    body["content"] = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "@@"}}]
    r.hset(key, item.id, json.dumps(body))
    assert any("bad field(s) content" in p for p in w.verify().problems)


def test_a_pop_of_stored_parts_in_no_shape_an_add_writes_removes_nothing(store, r, prefix):
    w = store.window("pop-parts", max_tokens=50_000)
    w.add("older", role="user")
    item = w.add(OPENAI_PARTS, role="user")
    key = f"{prefix}:{{pop-parts}}:items"
    body = json.loads(r.hget(key, item.id))
    body["content"] = {"type": "text", "text": "an object, not a list"}
    r.hset(key, item.id, json.dumps(body))
    before = dump_window(r, prefix, "pop-parts")
    with pytest.raises(cs.CorruptWindowError):
        w.pop()
    assert dump_window(r, prefix, "pop-parts") == before


@pytest.mark.parametrize("api", ["sync"], indirect=True)  # the command runs the sync API
def test_the_command_shows_a_part_as_a_label_and_writes_its_data(store, redis_url, prefix, tmp_path, capsys):
    from contextstore import cli

    w = store.window("shown", max_tokens=50_000)
    item = w.add(OPENAI_PARTS, role="user")

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["--url", redis_url, "--prefix", prefix, *argv])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = run("show", "shown")
    assert code == 0 and "What is in this picture?" in out and "[image/png" not in out  # the first line only
    code, out, _ = run("get", "shown", item.id or "")
    sha = hashlib.sha256(SHOT.encode()).hexdigest()  # the base64 of the payload: its blob's name
    assert code == 0 and f"[image/png 1280x800 {len(png(1280, 800))} B sha256:{sha[:12]}…]" in out
    assert SHOT not in out
    target = tmp_path / "shot.png"
    code, out, _ = run("get", "shown", item.id or "", "--part", "1", "--out", str(target))
    assert code == 0 and target.read_bytes() == png(1280, 800)
    code, out, _ = run("get", "shown", item.id or "", "--part", "0")
    assert code == 0 and out == "What is in this picture?\n"
    code, _, err = run("get", "shown", item.id or "", "--part", "1")
    assert code == 2 and "give --out FILE" in err
    code, _, err = run("get", "shown", item.id or "", "--part", "5", "--out", str(target))
    assert code == 2 and "has 2 content part(s)" in err


def test_a_message_that_takes_text_only_refuses_other_parts_by_name(store):
    w = store.window("text-only", max_tokens=50_000)
    w.add("draw me a cat", role="user")
    w.add(ANTHROPIC_PARTS, role="assistant")
    opts = cs.BuildOptions(reserve_for_response=0)
    with pytest.raises(cs.InvalidItemError, match="part of type 'image', which an assistant message cannot carry"):
        w.build_messages(opts, format="anthropic")
    with pytest.raises(cs.InvalidItemError, match="part of type 'image_url', which an OpenAI assistant message"):
        w.build_messages(opts)
    text_only = store.window("text-parts", max_tokens=50_000)
    text_only.add([{"type": "text", "text": "be brief"}], role="system")
    text_only.add([{"type": "text", "text": "hi"}], role="assistant")
    text_only.add("hello", role="user")
    assert text_only.build_messages(opts)[0] == {"role": "system", "content": [{"type": "text", "text": "be brief"}]}
    built = text_only.build_messages(opts, format="anthropic")
    assert built["system"] == [{"type": "text", "text": "be brief"}]


def test_built_messages_are_what_each_providers_sdk_types_take(store, one_server):
    """The payloads validate against the ``openai`` and ``anthropic`` packages' own typed params
    (nothing dropped: what validates is exactly what was built)."""
    pydantic = pytest.importorskip("pydantic")
    chat = pytest.importorskip("openai.types.chat")
    anthropic_types = pytest.importorskip("anthropic.types")
    w = store.window("typed", max_tokens=50_000)
    call = {"id": "shot_1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}
    w.add("You are terse.", type="system_prompt", pinned=True)
    w.add(OPENAI_PARTS, role="user")
    w.add("a cat", role="assistant")
    w.add(ANTHROPIC_PARTS, role="user")
    w.add_many([
        {"content": "", "role": "assistant", "metadata": {"tool_calls": [call]}},
        {"content": "saved as shot.png", "role": "tool", "metadata": {"tool_call_id": "shot_1"}},
    ])  # fmt: skip
    opts = cs.BuildOptions(reserve_for_response=0)

    def plain(value: Any) -> Any:  # iterating a lazily validated iterable (the parts) validates it
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value if isinstance(value, str) or not hasattr(value, "__iter__") else [plain(v) for v in value]

    def valid(kind: Any, payload: Any) -> Any:
        adapter = pydantic.TypeAdapter(kind)  # alive while its lazy iterables are read
        return plain(adapter.validate_python(payload, strict=True))

    openai_messages = w.build_messages(opts)
    assert valid(list[chat.ChatCompletionMessageParam], openai_messages) == openai_messages
    built = w.build_messages(cs.BuildOptions(reserve_for_response=0, cache_control=True), format="anthropic")
    assert valid(list[anthropic_types.MessageParam], built["messages"]) == built["messages"]
    assert valid(list[anthropic_types.TextBlockParam], built["system"]) == built["system"]
    assert any(p["type"] == "image" for m in built["messages"] for p in m["content"] if isinstance(m["content"], list))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30,
)


def _containers(value: Any) -> list[Any]:
    """Every dict and list in a JSON value, itself first."""
    if isinstance(value, dict):
        return [value, *(c for v in value.values() for c in _containers(v))]
    if isinstance(value, list):
        return [value, *(c for v in value for c in _containers(v))]
    return []


@given(_JSON)
def test_a_copy_of_a_json_value_equals_it_and_shares_no_container(value):
    """``parts.copied`` (what builds hand out instead of stored parts and tool calls): equal to the
    value, and no dict or list of it is one of the value's, so a caller changing the copy changes
    nothing stored."""
    got = parts.copied(value)
    assert got == value
    mine = {id(c) for c in _containers(value)}
    assert not any(id(c) in mine for c in _containers(got))


def _real_images() -> dict[str, bytes]:
    """A small photo-like image in each format whose wholeness is checked, made by Pillow."""
    import io
    import random

    from PIL import Image

    noise = random.Random(7).randbytes(96 * 64 * 3)
    image, made = Image.frombytes("RGB", (96, 64), noise), {}
    for fmt, media_type in (("PNG", "image/png"), ("JPEG", "image/jpeg"), ("GIF", "image/gif"), ("WEBP", "image/webp")):
        out = io.BytesIO()
        image.save(out, fmt)
        made[media_type] = out.getvalue()
    return made


def _flipped(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


IMAGES = _real_images()
BROKEN_IMAGES = {
    "a PNG cut to its first 2,000 bytes": ("image/png", IMAGES["image/png"][:2000], "cut short"),
    "a PNG with one data byte flipped": ("image/png", _flipped(IMAGES["image/png"], 100), "fails its CRC"),
    "a PNG without IEND": ("image/png", IMAGES["image/png"][:-12], "no IEND"),
    "a JPEG cut in its scan": ("image/jpeg", IMAGES["image/jpeg"][:-400], "no end of image"),
    "a GIF without its trailer": ("image/gif", IMAGES["image/gif"][:-1], "no trailer"),
    "a WebP shorter than its RIFF length": ("image/webp", IMAGES["image/webp"][:-100], "RIFF header says"),
}


@pytest.mark.parametrize("name", list(BROKEN_IMAGES))
def test_an_image_is_checked_whole_and_a_broken_one_refused_naming_the_part(store, r, prefix, name):
    """What a provider refuses is refused at ``add`` (in either format's shape), naming the part
    and what is wrong, with nothing written; the same image whole is taken."""
    media_type, data, cause = BROKEN_IMAGES[name]
    shapes = [
        lambda d: {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{b64(d)}"}},
        lambda d: {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": b64(d)}},
    ]
    w = store.window("whole", max_tokens=50_000)
    for shape in shapes:
        w.add([{"type": "text", "text": "look"}, shape(IMAGES[media_type])], role="user")
        before = dump_window(r, prefix, "whole")
        with pytest.raises(
            cs.InvalidItemError, match=rf"content part 1 \('image(_url)?'\) is an image .* not whole: .*{cause}"
        ):
            w.add([{"type": "text", "text": "look"}, shape(data)], role="user")
        assert dump_window(r, prefix, "whole") == before
