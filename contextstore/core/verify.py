"""The consistency checker behind ``ContextWindow.verify()`` and ``contextstore verify``.

It reads every key of a window in one script call (a consistent view) and reports each broken
invariant the scripts maintain, in words. It never writes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

import msgspec

from ..errors import InvalidItemError
from ..types import TYPE_RANKS, ItemType
from . import blobs, facts, parts, sizeindex, stored, toolcalls
from .layout import ARCHIVE_INDEX, ATTRS_FIELDS, CLEARED_KEY, Meta, meta_problems

_TYPES = {t.value for t in TYPE_RANKS}
#: what an item's stored JSON may hold (stored.py); the rest is in :attrs, :pinned, the hash field
_STORED_FIELDS = {"added_at_us", "blobs", "content", "role", "source_ref", "metadata"}
Say = Callable[[str], None]


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``verify()`` found. ``ok`` is True when ``problems`` is empty."""

    window_id: str
    exists: bool
    items: int
    tokens: int
    problems: list[str]

    @property
    def ok(self) -> bool:
        """True when every invariant holds."""
        return not self.problems


def _text(v: Any) -> str:
    """A reply element as text (bytes that are not UTF-8 shown escaped: ``_pairs`` reports them)."""
    return v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else str(v)


def _utf8(v: Any) -> bool:
    try:
        if isinstance(v, bytes):
            v.decode()
    except UnicodeDecodeError:
        return False
    return True


def _pairs(flat: Sequence[Any], say: Say | None = None, key: str = "", raw_values: bool = False) -> dict[str, Any]:
    """A flat field/value reply as a dict of text (``raw_values``: values as they are); with
    ``say``, each field or value that is not UTF-8 is reported."""
    out: dict[str, Any] = {}
    for i in range(0, len(flat), 2):
        field, value = flat[i], flat[i + 1]
        if say is not None and not (_utf8(field) and (raw_values or _utf8(value))):
            say(f"{key} field {_text(field)!r} holds bytes that are not UTF-8")
        out[_text(field)] = value if raw_values else _text(value)
    return out


def _int(v: object) -> int | None:
    try:
        return int(str(v))
    except ValueError:
        return None


_FIELD_CHECKS: tuple[tuple[str, Callable[[dict[str, Any]], bool]], ...] = (
    ("seq", lambda it: isinstance(it.get("seq"), int) and it["seq"] >= 1),
    ("token_count", lambda it: isinstance(it.get("token_count"), int) and it["token_count"] >= 1),
    ("priority", lambda it: isinstance(it.get("priority"), int) and 0 <= it["priority"] <= 100),
    ("type", lambda it: it.get("type") in _TYPES),
    ("content", lambda it: _content_ok(it)),
    ("group", lambda it: it.get("group") is None or isinstance(it["group"], str)),
)


def _attrs_fields(value: str) -> dict[str, Any] | None:
    """An ``:attrs`` value as item fields (None when it does not parse)."""
    parts = value.split("|", 5)
    if len(parts) not in (4, 6) or not all(p.isdigit() for p in parts[:3]):
        return None
    fields: dict[str, Any] = dict(zip(ATTRS_FIELDS[:3], map(int, parts[:3]), strict=True))
    fields.update(type=parts[3], flags=parts[4] if len(parts) == 6 else "")
    fields["group"] = (parts[5] or None) if len(parts) == 6 else None
    return fields


def _content_ok(it: dict[str, Any]) -> bool:
    """Content as an add takes it: text not blank (but a tool call's), or content parts (a part
    whose blob could not be read still holds its reference: the blob's finding names it)."""
    content = it.get("content")
    if isinstance(content, list):
        readable = [p for p in content if not _blob_reference(p)]
        try:
            parts.check(readable or content)
        except InvalidItemError:
            return False
        return True
    return isinstance(content, str) and (content.strip() != "" or bool((it.get("metadata") or {}).get("tool_calls")))


def _blob_reference(part: object) -> bool:
    """Whether ``part`` still holds a blob's reference where its data goes (``blobs.split``)."""
    try:
        return isinstance(part, dict) and bool(blobs.tokens_in([part]))
    except (KeyError, TypeError, AttributeError):
        return False


def _whole_item(
    iid: str, raw: bytes | str, attrs: dict[str, str], pinned: set[str], say: Say
) -> tuple[dict[str, Any], list[str]] | None:
    """One item as the scripts send it (its stored JSON with its :attrs and pin) and its bad
    stored fields; None (and said) when either does not parse, None (unsaid: a structure check
    reports it) without attrs."""
    try:
        it = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        say(f"item {iid!r}: its JSON does not parse ({type(exc).__name__})")
        return None
    if not isinstance(it, dict):
        say(f"item {iid!r}: bad field(s) object")
        return None
    if iid not in attrs:
        return None
    fields = _attrs_fields(attrs[iid])
    if fields is None:
        say(f":attrs of {iid!r} ({attrs[iid]!r}) does not parse")
        return None
    written_by_0_1 = "priority" in it  # 0.1 spelled every field in the JSON; :attrs holds them now
    bad = ["id"] if written_by_0_1 and it.get("id") != iid else []
    if not written_by_0_1:
        bad += [] if stored.time_ok(it.get("added_at_us")) else ["added_at_us"]
        twice = sorted(set(it) - _STORED_FIELDS)
        if twice:
            say(f"item {iid!r}: its stored JSON repeats {', '.join(twice)}, which other keys hold")
    it.update(fields, id=iid, pinned=iid in pinned)
    return it, bad


def _check_letters(iid: str, it: dict[str, Any], say: Say) -> None:
    """The letters a build reads (``core.facts``) agree with the item's body; an item stored
    before they were kept has none, which is sound (builds then read its window whole)."""
    kept = it["flags"].replace(facts.CLEARED, "")
    if not kept:
        return
    said = facts.letters(
        ItemType(it["type"]), it.get("role"), it.get("metadata"), it.get("source_ref"), it["group"], it["content"]
    )
    if kept != said:
        say(f":attrs of {iid!r} hold the letters {kept!r} where its body says {said!r}")


def _decoded_items(
    raw_items: dict[str, bytes | str], attrs: dict[str, str], pinned: set[str], say: Say
) -> dict[str, dict[str, Any]]:
    """The items whose JSON and attrs parse and whose fields are sound (each other one reported)."""
    items: dict[str, dict[str, Any]] = {}
    for iid, raw in raw_items.items():
        whole = _whole_item(iid, raw, attrs, pinned, say)
        if whole is None:
            continue
        it, bad = whole
        bad += [name for name, ok in _FIELD_CHECKS if not ok(it)]
        if bad:
            say(f"item {iid!r}: bad field(s) {', '.join(bad)}")
            continue
        try:
            meta = it.get("metadata")
            if meta is not None and not isinstance(meta, dict):
                raise InvalidItemError("metadata is not a JSON object")
            toolcalls.calls_of(ItemType(it["type"]), meta)
            toolcalls.result_call_id(ItemType(it["type"]), it.get("role"), meta)
        except InvalidItemError as exc:
            say(f"item {iid!r}: {exc}")
            continue
        if ("c" in it["flags"]) != (CLEARED_KEY in (it.get("metadata") or {})):
            say(f":attrs of {iid!r} and its metadata disagree on whether it was cleared")
        _check_letters(iid, it, say)
        items[iid] = it
        if iid.startswith("ctx-") and iid[4:].isdigit() and int(iid[4:]) != it["seq"]:
            say(f"item {iid!r}: generated id does not match its seq {it['seq']}")
    return items


def _check_structures(
    ids: set[str],
    fifo: list[str],
    order: dict[str, float],
    pinned: set[str],
    attrs: dict[str, str],
    say: Say,
) -> None:
    """Every structure lists exactly the stored ids (:pinned: only stored ids)."""
    if len(fifo) != len(set(fifo)):
        say(":fifo lists an id twice")
    for name, got in ((":fifo", set(fifo)), (":order", set(order)), (":attrs", set(attrs)), (":pinned", pinned)):
        if got - ids:
            say(f"{name} has ids that are not in :items: {sorted(got - ids)[:5]}")
        if ids - got and name != ":pinned":
            say(f"{name} lacks ids that are in :items: {sorted(ids - got)[:5]}")


def _check_order(
    meta: dict[str, str],
    fifo: list[str],
    order: dict[str, float],
    scores: dict[str, str],
    items: dict[str, dict[str, Any]],
    say: Say,
) -> None:
    """Arrival order, seqs and build-order scores agree with the items."""
    seqs = [items[i]["seq"] for i in fifo if i in items]
    if any(a >= b for a, b in pairwise(seqs)):
        say(":fifo is not in strictly increasing seq order")
    if len({it["seq"] for it in items.values()}) != len(items):
        say("two items share a seq")
    top = _int(meta.get(Meta.SEQ, "0"))
    if top is not None and any(it["seq"] > top for it in items.values()):
        say(f"the seq counter ({top}) is behind an item's seq")
    for iid in items:
        if iid in order and iid in scores and order[iid] != float(scores[iid]):
            say(f":order score of {iid!r} is {order[iid]:.0f}, its type, priority and seq give {scores[iid]}")


def _check_counters(meta: dict[str, str], raw_count: int, items: dict[str, dict[str, Any]], say: Say) -> int:
    """The meta hash's counters equal the items' sums; returns the tokens of the items."""
    tokens: int = sum(it["token_count"] for it in items.values())
    if _int(meta.get(Meta.TOKENS)) != tokens:
        say(f":meta tokens is {meta.get(Meta.TOKENS)}, the items sum to {tokens}")
    if _int(meta.get(Meta.ITEMS)) != raw_count:
        say(f":meta items is {meta.get(Meta.ITEMS)}, :items holds {raw_count}")
    by_type: dict[str, dict[str, int]] = {}
    for it in items.values():
        c = by_type.setdefault(it["type"], {Meta.ITEMS_OF: 0, Meta.TOKENS_OF: 0})
        c[Meta.ITEMS_OF] += 1
        c[Meta.TOKENS_OF] += it["token_count"]
    for kind in (Meta.ITEMS_OF, Meta.TOKENS_OF):
        for k, v in meta.items():
            if k.startswith(kind) and _int(v) != by_type.get(k[len(kind) :], {}).get(kind, 0):
                say(f":meta {k} is {v}, the items give {by_type.get(k[len(kind) :], {}).get(kind, 0)}")
        for t in by_type:
            if f"{kind}{t}" not in meta:
                say(f":meta lacks the counter {kind}{t}")
    cap, limit = _int(meta.get(Meta.MAX_ITEMS)), _int(meta.get(Meta.ITEM_LIMIT))
    if cap is not None and raw_count > cap:
        say(f"holds {raw_count} items, max_items is {cap}")
    if cap is not None and limit is not None and cap > limit:
        say(f"max_items {cap} is above item_limit {limit}")
    return tokens


def _check_groups(items: dict[str, dict[str, Any]], groups: dict[str, str], calls: dict[str, str], say: Say) -> None:
    """:groups lists each group's members in arrival order; :calls maps each tool call of a
    stored call message to its group and tool."""
    want_groups: dict[str, list[tuple[int, str]]] = {}
    want_calls: dict[str, str] = {}
    for iid, it in items.items():
        group = it.get("group")
        if group:
            want_groups.setdefault(group, []).append((it["seq"], iid))
            tool_calls = (it.get("metadata") or {}).get("tool_calls") if it["type"] == "assistant_message" else None
            for call in tool_calls or []:
                want_calls[call["id"]] = f"{group} {call['function']['name']}"
    want = {g: " ".join(i for _, i in sorted(members)) for g, members in want_groups.items()}
    for g in sorted(set(want) | set(groups)):
        if want.get(g) != groups.get(g):
            say(f":groups of {g!r} is {groups.get(g)!r}, the items give {want.get(g)!r}")
    for c in sorted(set(want_calls) | set(calls)):
        if want_calls.get(c) != calls.get(c):
            say(f":calls of {c!r} is {calls.get(c)!r}, the items give {want_calls.get(c)!r}")


_RECORD = re.compile(rb"[0-9a-f]*(\|\d+)?\n")


def _check_side_keys(turn: dict[str, str], replies: dict[str, Any], archive: dict[str, str], say: Say) -> None:
    """The running turn, the pending inputs, the request records and the archive hold what the
    scripts write."""
    for name in ("until", "lease", "started"):
        if name in turn and not turn[name].isdigit():
            say(f":turn field {name!r} is {turn[name]!r}, not a time in ms")
    for field, value in turn.items():
        if field != "pending" and not field.startswith("p:"):
            continue
        try:
            found = msgspec.json.decode(value)
            groups = found if field == "pending" else [found]
            ok = isinstance(groups, list) and all(
                isinstance(g, list) and all(isinstance(v, str) for v in g) for g in groups
            )
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            ok = False
        if not ok:
            say(f":turn field {field!r} is not an input waiting for a turn")
    for rid, record in replies.items():
        head = _RECORD.match(record)
        try:
            whole = head is not None and isinstance(msgspec.json.decode(record[head.end() :]), dict)
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            whole = False
        if not whole:  # (a record of another format is sound: a retry of it is refused, typed)
            say(f":replies field {rid!r} is not a request record")
    for sid, entry in archive.items():
        if sid == ARCHIVE_INDEX:
            continue
        try:
            rows = msgspec.json.decode(entry).get("items")
            ok = isinstance(rows, list) and all(_archived_row(r) for r in rows)
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError, AttributeError):
            ok = False
        if not ok:
            say(f":archive field {sid!r} is not the items a summary or a rewind took")


def _check_blob_counts(raw_items: dict[str, Any], archive: dict[str, str], counts: dict[str, str], say: Say) -> None:
    """``:blobs`` counts, for each blob, the items and archived rows whose stored JSON refers to
    it (what a sweep of the prefix's blobs trusts: a count too low loses a blob)."""
    refs = _blob_refs(raw_items, archive)
    if counts != {sha: str(n) for sha, n in refs.items()}:
        say(f":blobs counts {dict(sorted(counts.items()))} blob references, the items and archive hold {dict(refs)}")


def referenced_blobs(reply: Sequence[Any]) -> list[str]:
    """The shas of the blobs that the items and archived rows of dump.lua's ``reply`` refer to."""
    return sorted(_blob_refs(_pairs(reply[2], raw_values=True), _pairs(reply[13])))


def _blob_refs(raw_items: dict[str, Any], archive: dict[str, str]) -> Counter[str]:
    """How many items and archived rows refer to each blob."""
    refs: Counter[str] = Counter()
    for raw in raw_items.values():
        refs.update(blobs.refs_of(raw if isinstance(raw, bytes) else str(raw).encode()))
    for sid, entry in archive.items():
        if sid == ARCHIVE_INDEX:
            continue
        try:
            rows = msgspec.json.decode(entry).get("items") or []
            refs.update(sha for row in rows for sha in blobs.refs_of(str(row[0]).encode()))
        except (msgspec.DecodeError, RecursionError, AttributeError, IndexError, TypeError):
            continue  # _check_side_keys reports it
    return refs


def _archived_row(row: object) -> bool:
    """An archive row as the scripts write it: [stored JSON, attrs(, id(, "p": pinned))]."""
    return (
        isinstance(row, list)
        and len(row) in (2, 3, 4)
        and all(isinstance(x, str) for x in row)
        and (len(row) < 4 or row[3] == "p")
        and _attrs_fields(row[1]) is not None
    )


def inspect_window(window_id: str, reply: Sequence[Any]) -> VerifyReport:
    """Check dump.lua's reply: {meta, npinned, items, fifo, order, pinned, attrs, scores,
    groups, calls, vectors, turn, replies, archive, keys of another type, blob counts, sizes}."""
    problems: list[str] = []
    say = problems.append
    for key in reply[14]:
        say(f"{_text(key)} holds another type than the scripts write")
    meta, raw_items = _pairs(reply[0], say, ":meta"), _pairs(reply[2], say, ":items", raw_values=True)
    for field, what in meta_problems(meta):
        say(f":meta field {field!r} is {meta[field]!r}: {what}")
    fifo = [_text(x) for x in reply[3]]
    order = {_text(reply[4][i]): float(reply[4][i + 1]) for i in range(0, len(reply[4]), 2)}
    pinned, attrs, scores = {_text(x) for x in reply[5]}, _pairs(reply[6], say, ":attrs"), _pairs(reply[7])
    _check_side_keys(_pairs(reply[11], say, ":turn"), _pairs(reply[12], raw_values=True), _pairs(reply[13]), say)
    if not meta:
        if raw_items or fifo or order or pinned or attrs:
            say("item keys exist without a :meta hash (a window half-deleted or half-created)")
        return VerifyReport(window_id=window_id, exists=False, items=0, tokens=0, problems=problems)
    for f in (Meta.MAX_ITEMS, Meta.ITEM_LIMIT, Meta.THRESHOLD, Meta.STRATEGY, Meta.TOKENS, Meta.ITEMS, Meta.SEQ):
        if f not in meta:
            say(f":meta lacks the field {f!r}")
    items = _decoded_items(raw_items, attrs, pinned, say)
    _check_structures(set(raw_items), fifo, order, pinned, attrs, say)
    _check_order(meta, fifo, order, scores, items, say)
    _check_groups(items, _pairs(reply[8]), _pairs(reply[9]), say)
    stale = {_text(x) for x in reply[10]} - set(raw_items)
    if stale:
        say(f":vectors has vectors of ids that are not in :items: {sorted(stale)[:5]}")
    tokens = _check_counters(meta, len(raw_items), items, say)
    _check_blob_counts(raw_items, _pairs(reply[13]), _pairs(reply[15]) if len(reply) > 15 else {}, say)
    problems += sizeindex.problems(
        {_text(k): v for k, v in _pairs(reply[16] if len(reply) > 16 else []).items()}, items
    )
    return VerifyReport(window_id=window_id, exists=True, items=len(raw_items), tokens=tokens, problems=problems)
