"""The consistency checker behind ``ContextWindow.verify()`` and ``contextstore verify``.

It reads every key of a window in one script call (a consistent view) and reports each broken
invariant the scripts maintain, in words. It never writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from .codec import as_str
from .types import ItemType

_RANK = {t.value: t.rank for t in ItemType}


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``verify()`` found. ``ok`` is True when ``problems`` is empty."""

    window_id: str
    exists: bool
    items: int
    tokens: int
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    return {as_str(flat[i]): as_str(flat[i + 1]) for i in range(0, len(flat), 2)}


def _int(v: object) -> int | None:
    try:
        return int(str(v))
    except ValueError:
        return None


def check(window_id: str, reply: Sequence[Any]) -> VerifyReport:
    """Check read.lua's ``all`` reply: {meta, npinned, items, fifo, order, pinned, attrs}."""
    meta = _pairs(reply[0])
    raw_items = _pairs(reply[2])
    fifo = [as_str(x) for x in reply[3]]
    order_flat = reply[4]
    order = [(as_str(order_flat[i]), float(order_flat[i + 1])) for i in range(0, len(order_flat), 2)]
    pinned = {as_str(x) for x in reply[5]}
    attrs = _pairs(reply[6])
    problems: list[str] = []
    say = problems.append

    if not meta:
        if raw_items or fifo or order or pinned or attrs:
            say("item keys exist without a :meta hash (a window half-deleted or half-created)")
        return VerifyReport(window_id=window_id, exists=False, items=0, tokens=0, problems=problems)

    for f in ("max_items", "item_limit", "threshold", "strategy", "tokens", "items", "seq"):
        if f not in meta:
            say(f":meta lacks the field {f!r}")

    items: dict[str, dict[str, Any]] = {}
    for iid, raw in raw_items.items():
        try:
            it = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            say(f"item {iid!r}: its JSON does not parse")
            continue
        bad = [
            f for f, ok in (
                ("id", isinstance(it, dict) and it.get("id") == iid),
                ("seq", isinstance(it.get("seq"), int) and it["seq"] >= 1),
                ("token_count", isinstance(it.get("token_count"), int) and it["token_count"] >= 1),
                ("priority", isinstance(it.get("priority"), int) and 0 <= it["priority"] <= 100),
                ("type", it.get("type") in _RANK),
                ("pinned", isinstance(it.get("pinned"), bool)),
                ("content", isinstance(it.get("content"), str) and it["content"].strip() != ""),
            ) if not ok
        ] if isinstance(it, dict) else ["object"]
        if bad:
            say(f"item {iid!r}: bad field(s) {', '.join(bad)}")
            continue
        items[iid] = it
        if iid.startswith("ctx-") and iid[4:].isdigit() and int(iid[4:]) != it["seq"]:
            say(f"item {iid!r}: generated id does not match its seq {it['seq']}")

    ids = set(raw_items)
    if len(fifo) != len(set(fifo)):
        say(":fifo lists an id twice")
    for name, got in ((":fifo", set(fifo)), (":order", {i for i, _ in order}), (":attrs", set(attrs))):
        if got - ids:
            say(f"{name} has ids that are not in :items: {sorted(got - ids)[:5]}")
        if ids - got:
            say(f"{name} lacks ids that are in :items: {sorted(ids - got)[:5]}")
    want_pinned = {i for i, it in items.items() if it["pinned"]}
    if pinned != want_pinned:
        say(f":pinned disagrees with the items' pinned flags (extra {sorted(pinned - want_pinned)[:5]}, "
            f"missing {sorted(want_pinned - pinned)[:5]})")

    seqs = [items[i]["seq"] for i in fifo if i in items]
    if any(a >= b for a, b in zip(seqs, seqs[1:])):
        say(":fifo is not in strictly increasing seq order")
    if len({it["seq"] for it in items.values()}) != len(items):
        say("two items share a seq")
    top = _int(meta.get("seq", "0"))
    if top is not None and any(it["seq"] > top for it in items.values()):
        say(f"the seq counter ({top}) is behind an item's seq")

    for iid, it in items.items():
        want = f"{it['seq']}|{it['token_count']}|{it['priority']}|{it['type']}"
        if iid in attrs and attrs[iid] != want:
            say(f":attrs of {iid!r} is {attrs[iid]!r}, the item says {want!r}")
    for iid, sc in order:
        it = items.get(iid)
        if it is not None:
            want_score = _RANK[it["type"]] * 1e13 + (100 - it["priority"]) * 1e10 + it["seq"]
            if sc != want_score:
                say(f":order score of {iid!r} is {sc:.0f}, its type, priority and seq give {want_score:.0f}")

    tokens = sum(it["token_count"] for it in items.values())
    if _int(meta.get("tokens")) != tokens:
        say(f":meta tokens is {meta.get('tokens')}, the items sum to {tokens}")
    if _int(meta.get("items")) != len(raw_items):
        say(f":meta items is {meta.get('items')}, :items holds {len(raw_items)}")
    by_type: dict[str, list[int]] = {}
    for it in items.values():
        c = by_type.setdefault(it["type"], [0, 0])
        c[0] += 1
        c[1] += it["token_count"]
    for k, v in meta.items():
        kind, _, t = k.partition(":")
        if t and kind in ("items", "tokens"):
            want_n = by_type.get(t, [0, 0])[0 if kind == "items" else 1]
            if _int(v) != want_n:
                say(f":meta {k} is {v}, the items give {want_n}")
    for t in by_type:
        for kind in ("items", "tokens"):
            if f"{kind}:{t}" not in meta:
                say(f":meta lacks the counter {kind}:{t}")

    cap, limit = _int(meta.get("max_items")), _int(meta.get("item_limit"))
    if cap is not None and len(raw_items) > cap:
        say(f"holds {len(raw_items)} items, max_items is {cap}")
    if cap is not None and limit is not None and cap > limit:
        say(f"max_items {cap} is above item_limit {limit}")
    return VerifyReport(window_id=window_id, exists=True, items=len(raw_items), tokens=tokens, problems=problems)
