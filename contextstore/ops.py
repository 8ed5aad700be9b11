"""One plan per operation, shared by the sync and the asyncio API.

A plan is a generator: it validates its input, then yields requests (:class:`ScriptCall` to run
a Lua script, :class:`External` to call a summarizer or relevance scorer) and receives their
replies, and finally returns the decoded result. ``sync.py`` and ``aio.py`` drive the same plans;
only the I/O differs.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import time
import zlib
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar

from . import codec, render, verify as verify_mod
from .codec import NewItem, as_str
from .errors import (
    ConfigConflictError,
    InvalidItemError,
    InvalidOptionsError,
    StrategyUnavailableError,
    WindowNotFoundError,
)
from .keys import WindowKeys, validate_window_id, window_keys
from .retry import RetryPolicy
from .scripts import CommitConflict, check
from .tokens import TokenCounter
from .types import (
    BuildOptions,
    BuiltContext,
    CompactionStrategy,
    ContextItem,
    ContextSnapshot,
    ContextWindowStats,
    ItemType,
    WindowConfig,
)

log = logging.getLogger("contextstore")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """Run Lua script ``name``. ``request`` ("<operation>:<request id>") makes a mutation
    exactly-once (see ``_lib.lua``); reads leave it empty. ``same_args`` checks that a replayed
    request id comes with the arguments it was first used with, apart from the six config
    arguments every mutation starts with (the handle's cached config, which may have changed)."""

    name: str
    keys: WindowKeys
    args: Sequence[str | bytes]
    request: str = ""
    same_args: bool = True

    def argv(self) -> list[str | bytes]:
        """ARGV as sent: the request ("<request>|<fingerprint of args>"), then the args."""
        if not self.request:
            return ["", *self.args]
        fp = _fingerprint(self.args[codec.CONFIG_ARGS:]) if self.same_args else ""
        return [f"{self.request}|{fp}", *self.args]


def _fingerprint(args: Sequence[str | bytes]) -> str:
    crc = 0
    for a in args:
        b = a if isinstance(a, bytes) else a.encode("utf-8")
        crc = zlib.crc32(b, zlib.crc32(len(b).to_bytes(8, "little"), crc))
    return f"{crc:08x}"


_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._\-:@/+=]{1,128}")


def request(op: str, request_id: object = None) -> str:
    """The request of one public call: the caller's ``request_id`` (checked) or a new one."""
    if request_id is None:
        return f"{op}:{os.urandom(12).hex()}"
    if not isinstance(request_id, str) or not _REQUEST_ID_RE.fullmatch(request_id):
        raise InvalidOptionsError(
            f"request_id must be 1-128 characters from A-Z a-z 0-9 . _ - : @ / + =, not {request_id!r}"
        )
    return f"{op}:{request_id}"


@dataclass(frozen=True, slots=True)
class External:
    """Call a user helper (summarizer, scorer); the runner awaits it if it returns an awaitable."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]


Plan = Generator["ScriptCall | External", Any, T]


@dataclass(slots=True)
class Settings:
    """Store-wide settings every plan needs."""

    prefix: str
    counter: TokenCounter
    item_limit: int
    max_content_bytes: int
    summarizer: Any = None
    relevance_scorer: Any = None
    retry: RetryPolicy | None = None
    joint_count: Callable[[str], int] = field(init=False)  # memoised counter.count (build joints)

    def __post_init__(self) -> None:
        self.joint_count = render.cached_count(self.counter)


@dataclass(slots=True)
class WindowState:
    """What a window handle knows: its id, keys, and the config it last saw (used to recreate
    the window if it was deleted or expired)."""

    window_id: str
    keys: WindowKeys
    config: WindowConfig


def validate_settings(prefix: object, item_limit: object, max_content_bytes: object) -> None:
    validate_window_id(prefix, "prefix")
    for name, v, hi in (("item_limit", item_limit, 100_000), ("max_content_bytes", max_content_bytes, 512 * 1024 * 1024)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
            raise InvalidOptionsError(f"{name} must be an int from 1 to {hi}, not {v!r}")


# -- reading -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Read:
    meta: dict[str, str]
    pinned: int
    raw: list[bytes | str]

    @property
    def exists(self) -> bool:
        return bool(self.meta)


def _read(w: WindowState, mode: str, types: str = "", limit: int = -1, item_id: str = "") -> Plan[_Read]:
    args = [mode, item_id] if mode == "get" else [mode, types, str(limit)]
    reply = check((yield ScriptCall("read", w.keys, args)))
    flat = reply[0]
    meta = {as_str(flat[i]): as_str(flat[i + 1]) for i in range(0, len(flat), 2)}
    return _Read(meta, int(reply[1]), list(reply[2]))


def _config_of(r: _Read, w: WindowState) -> WindowConfig:
    if not r.exists:
        return w.config
    m = r.meta
    return codec.config_from_reply(
        [m["max_tokens"], m["max_items"], m["item_limit"], m["threshold"], m["strategy"], m["ttl"]]
    )


def _types_arg(types: object) -> str | None:
    """The read script's type filter: "" for all types, None when nothing can match (``[]``)."""
    if types is None:
        return ""
    if isinstance(types, (str, ItemType)):
        types = [types]
    if not isinstance(types, Iterable):
        raise InvalidOptionsError(f"types must be an ItemType, a str or a list of them, not {types!r}")
    out = []
    for t in types:
        try:
            out.append(ItemType(t).value)
        except ValueError:
            raise InvalidOptionsError(f"unknown item type {t!r}") from None
    return ",".join(out) if out else None


def _limit_arg(limit: object) -> int:
    if limit is None:
        return -1
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidOptionsError(f"limit must be None or an int >= 0, not {limit!r}")
    return limit


def _item_id(item_id: object) -> str:
    if not isinstance(item_id, str) or not item_id:
        raise InvalidItemError(f"item id must be a non-empty str, not {item_id!r}")
    return item_id


# -- window ----------------------------------------------------------------------------------


def open_window(st: Settings, window_id: object, passed: dict[str, Any], create: object = True) -> Plan[WindowState]:
    """Attach to a window: create it with ``passed`` if it is missing (``create=True``), else
    raise ``WindowNotFoundError``; a passed value that differs from the stored config raises
    ``ConfigConflictError``."""
    wid = validate_window_id(window_id)
    if not isinstance(create, bool):
        raise InvalidOptionsError(f"create must be a bool, not {create!r}")
    values = codec.validate_config_values(
        {k: v for k, v in passed.items() if v is not None}, st.item_limit
    )
    wanted = codec.creation_config(values, st.item_limit)
    w = WindowState(wid, window_keys(st.prefix, wid), wanted)
    if create:
        reply = check((yield ScriptCall("ensure", w.keys, codec.config_args(wanted))), InvalidOptionsError)
        stored = codec.config_from_reply(reply[1:])
    else:
        r = yield from _read(w, "meta")
        if not r.exists:
            raise WindowNotFoundError(wid)
        stored = _config_of(r, w)
    conflicts = {k: (v, getattr(stored, k)) for k, v in values.items() if getattr(stored, k) != v}
    if conflicts:
        raise ConfigConflictError(wid, conflicts)
    w.config = stored
    return w


def configure(st: Settings, w: WindowState, changes: dict[str, Any], request_id: object = None) -> Plan[WindowConfig]:
    req = request("configure", request_id)
    if "max_items" in changes and changes["max_items"] is None:
        raise InvalidOptionsError("max_items cannot be None in configure()")
    values = codec.validate_config_values(changes, w.config.item_limit)
    args: list[str | bytes] = codec.config_args(w.config)
    names = {"max_tokens": "max_tokens", "max_items": "max_items", "compaction_threshold": "threshold",
             "default_strategy": "strategy", "ttl_seconds": "ttl"}
    for k, v in values.items():
        if k == "default_strategy":
            s = v.value
        elif k == "compaction_threshold":
            s = repr(float(v))
        else:
            s = str(v or 0)
        args += [names[k], s]
    reply = check((yield ScriptCall("configure", w.keys, args, req)), InvalidOptionsError)
    w.config = codec.config_from_reply(reply)
    return w.config


def delete(w: WindowState, request_id: object = None) -> Plan[bool]:
    return bool((yield ScriptCall("delete", w.keys, [], request("delete", request_id))))


# -- items -----------------------------------------------------------------------------------


def _validate_many(st: Settings, entries: Sequence[tuple[object, dict[str, Any]]]) -> list[NewItem]:
    items = [codec.validate_item(obj, max_content_bytes=st.max_content_bytes, **kw) for obj, kw in entries]
    seen: set[str] = set()
    for it in items:
        if it.id is not None:
            if it.id in seen:
                raise InvalidItemError(f"item id {it.id!r} appears twice in one call")
            seen.add(it.id)
    todo = [i for i, it in enumerate(items) if it.token_count == 0]
    if todo:
        counts = st.counter.count_many([items[i].content for i in todo])
        for i, n in zip(todo, counts, strict=True):
            items[i].token_count = max(1, n)
    return items


_ITEM_FIELDS = frozenset({"type", "priority", "pinned", "role", "source_ref", "metadata", "token_count", "id"})


def entries(items: object) -> list[tuple[object, dict[str, Any]]]:
    """``add_many`` input (str, ContextItem or dict of add() keywords) → (item, keywords)."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InvalidItemError("add_many() takes a list of str, ContextItem or dict")
    out: list[tuple[object, dict[str, Any]]] = []
    for entry in items:
        if isinstance(entry, dict):
            kw = dict(entry)
            if "content" not in kw:
                raise InvalidItemError("an add_many dict needs 'content'")
            content = kw.pop("content")
            bad = set(kw) - _ITEM_FIELDS
            if bad:
                raise InvalidItemError(f"unknown item field(s): {', '.join(sorted(map(str, bad)))}")
            out.append((content, kw))
        else:
            out.append((entry, {}))
    return out


def add(st: Settings, w: WindowState, entries: Sequence[tuple[object, dict[str, Any]]],
        request_id: object = None) -> Plan[tuple[int, list[ContextItem]]]:
    req = request("add", request_id)
    items = _validate_many(st, entries)
    args: list[str | bytes] = codec.config_args(w.config) + [str(len(items))]
    for it in items:
        args += codec.item_args(it)
    reply = check((yield ScriptCall("add", w.keys, args, req)))
    added, evicted, compactions = int(reply[1]), int(reply[2]), int(reply[3])
    stored = [codec.decode_item(j) for j in reply[4:]]
    if log.isEnabledFor(logging.DEBUG):
        for got in stored:
            log.debug("added context item %s type=%s tokens=%d to window %s", got.id, got.type.value,
                      got.token_count, w.window_id)
    if evicted or compactions:
        log.info("window %s: adding %d item(s) evicted %d and ran %d compaction(s)", w.window_id,
                 added, evicted, compactions)
    return added, stored


def get(w: WindowState, item_id: object) -> Plan[ContextItem | None]:
    r = yield from _read(w, "get", item_id=_item_id(item_id))
    return codec.decode_item(r.raw[0]) if r.raw else None


def remove(w: WindowState, item_id: object, request_id: object = None) -> Plan[bool]:
    req = request("remove", request_id)
    args = codec.config_args(w.config) + [_item_id(item_id)]
    return bool(check((yield ScriptCall("remove", w.keys, args, req))))


def set_pinned(w: WindowState, item_id: object, pinned: bool, request_id: object = None) -> Plan[bool]:
    req = request("pin" if pinned else "unpin", request_id)
    args = codec.config_args(w.config) + [_item_id(item_id), "1" if pinned else "0"]
    return bool(check((yield ScriptCall("pin", w.keys, args, req))))


def update_priority(w: WindowState, item_id: object, priority: object, request_id: object = None) -> Plan[bool]:
    req = request("priority", request_id)
    p = codec.validate_priority(priority)
    args = codec.config_args(w.config) + [_item_id(item_id), str(p)]
    return bool(check((yield ScriptCall("priority", w.keys, args, req))))


def items(w: WindowState, types: object = None, limit: object = None) -> Plan[list[ContextItem]]:
    t, n = _types_arg(types), _limit_arg(limit)
    if n == 0 or t is None:
        return []
    r = yield from _read(w, "fifo", t, n)
    return [codec.decode_item(j) for j in r.raw]


def ordered_items(w: WindowState, types: object = None, pinned_only: bool = False) -> Plan[list[ContextItem]]:
    t = _types_arg(types)
    if t is None:
        return []
    r = yield from _read(w, "pinned" if pinned_only else "order", t)
    return [codec.decode_item(j) for j in r.raw]


def clear(w: WindowState, include_pinned: object = False, request_id: object = None) -> Plan[int]:
    req = request("clear", request_id)
    if not isinstance(include_pinned, bool):
        raise InvalidOptionsError("include_pinned must be a bool")
    args = codec.config_args(w.config) + ["1" if include_pinned else "0"]
    return int(check((yield ScriptCall("clear", w.keys, args, req))))


# -- compaction ------------------------------------------------------------------------------


def _strategy(value: object) -> CompactionStrategy | None:
    if value is None:
        return None
    try:
        return CompactionStrategy(value)
    except ValueError:
        raise InvalidOptionsError(f"unknown compaction strategy {value!r}") from None


def _helper(obj: Any, method: str) -> Callable[..., Any]:
    fn = getattr(obj, method, None)
    if callable(fn):
        return fn  # type: ignore[no-any-return]
    if callable(obj):
        return obj  # type: ignore[no-any-return]
    raise InvalidOptionsError(f"{obj!r} has no {method}() and is not callable")


#: most items one compact script call removes; compact() calls it again until the target
COMPACT_CHUNK = 2000


def compact(st: Settings, w: WindowState, strategy: object = None, target_percent: object = 70.0,
            query: str | None = None, request_id: object = None) -> Plan[int]:
    req = request("compact", request_id)
    s = _strategy(strategy)
    if isinstance(target_percent, bool) or not isinstance(target_percent, (int, float)) or not (
        0 <= target_percent <= 100
    ):
        raise InvalidOptionsError(f"target_percent must be a number from 0 to 100, not {target_percent!r}")
    if query is not None and not isinstance(query, str):
        raise InvalidOptionsError("query must be a str or None")
    if s is not None:
        _require_helper(st, s)
    if s is None:
        r = yield from _read(w, "meta")
        s = _config_of(r, w).default_strategy
        _require_helper(st, s)
    if s.server_side:
        freed, part = 0, 0
        while True:  # each part removes at most COMPACT_CHUNK items: one script stays short
            args = codec.config_args(w.config) + [s.value, repr(float(target_percent)), str(COMPACT_CHUNK),
                                                  "1" if part else "0"]
            got, more = check((yield ScriptCall("compact", w.keys, args, f"{req}/{part}" if part else req)))
            freed += int(got)
            part += 1
            if not int(more):
                break
    else:
        freed = yield from _compact_outside(st, w, s, float(target_percent), query, req)
    if freed:
        log.info("compacted window %s: strategy=%s, freed=%d tokens", w.window_id, s.value, freed)
    return freed


def _require_helper(st: Settings, s: CompactionStrategy) -> None:
    if s is CompactionStrategy.SUMMARIZE and st.summarizer is None:
        raise StrategyUnavailableError("SUMMARIZE needs a summarizer: ContextStore(..., summarizer=...)")
    if s is CompactionStrategy.SELECTIVE and st.relevance_scorer is None:
        raise StrategyUnavailableError(
            "SELECTIVE needs a relevance scorer: ContextStore(..., relevance_scorer=...)"
        )


def _sha1(raw: bytes | str) -> str:
    return hashlib.sha1(raw if isinstance(raw, bytes) else raw.encode("utf-8")).hexdigest()


def _compact_outside(st: Settings, w: WindowState, s: CompactionStrategy, target_percent: float,
                     query: str | None, req: str, attempts: int = 3) -> Plan[int]:
    """SUMMARIZE / SELECTIVE: read, decide outside Redis, commit only if nothing changed.

    Every commit attempt carries the call's request: only a successful commit is recorded, so
    a repeated call returns that commit's result even though it would now choose other items
    (hence ``same_args=False``)."""
    for _ in range(attempts):
        r = yield from _read(w, "fifo")
        cfg = _config_of(r, w)
        if not r.exists or cfg.max_tokens is None:
            return 0
        tokens = int(r.meta.get("tokens", 0))
        target = math.floor(cfg.max_tokens * target_percent / 100)
        if tokens <= target:
            return 0
        pairs = [(codec.decode_item(raw), raw) for raw in r.raw]
        cands = [(it, raw) for it, raw in pairs if not it.pinned]
        summary: NewItem | None = None
        if s is CompactionStrategy.SUMMARIZE:
            cands.sort(key=lambda p: (p[0].priority, p[0].seq))
        else:
            q = query
            if q is None:
                users = [it for it, _ in pairs if it.type is ItemType.USER_MESSAGE]
                q = users[-1].content if users else None
            scorer = _helper(st.relevance_scorer, "score")
            scores = yield External(scorer, (q, [it for it, _ in cands]))
            scores = list(scores)
            if len(scores) != len(cands) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in scores
            ):
                raise InvalidOptionsError("relevance scorer must return one finite number per item")
            order = sorted(range(len(cands)), key=lambda i: (scores[i], cands[i][0].seq))
            cands = [cands[i] for i in order]
        chosen, freed = [], 0
        for it, raw in cands:
            if tokens - freed <= target:
                break
            chosen.append((it, raw))
            freed += it.token_count
        if not chosen:
            return 0
        if s is CompactionStrategy.SUMMARIZE:
            fn = _helper(st.summarizer, "summarize")
            text = yield External(fn, ([it for it, _ in chosen],))
            summary = codec.validate_item(
                text,
                max_content_bytes=st.max_content_bytes,
                type=ItemType.WORKING_MEMORY,
                priority=max(it.priority for it, _ in chosen),
                metadata={"summary_of": [it.id for it, _ in chosen]},
            )
            summary.token_count = max(1, st.counter.count(summary.content))
            if summary.token_count >= freed:
                log.warning("summary of %d items is not smaller than them; window %s left as it was",
                            len(chosen), w.window_id)
                return 0
        args: list[str | bytes] = codec.config_args(w.config) + [s.value, str(len(chosen))]
        for it, raw in chosen:
            args += [it.id or "", _sha1(raw)]
        if summary is not None:
            args += codec.item_args(summary)
        try:
            return int(check((yield ScriptCall("commit", w.keys, args, req, same_args=False))))
        except CommitConflict:
            continue  # another worker changed the window meanwhile: decide again
    log.warning("compaction of window %s gave up after %d conflicting attempts", w.window_id, attempts)
    return 0


# -- build -----------------------------------------------------------------------------------


def build(st: Settings, w: WindowState, options: object = None) -> Plan[BuiltContext]:
    o = render.validate_options(options)
    t0 = time.perf_counter()
    r = yield from _read(w, "order")
    cfg = _config_of(r, w)
    budget = _budget(o, cfg, w.window_id)
    items = [codec.decode_item(j) for j in r.raw]
    render.check_pinned(items, o, budget, st.joint_count)
    freed = 0
    if o.compact and budget is not None and int(r.meta.get("tokens", 0)) > budget:
        freed = yield from compact(st, w, cfg.default_strategy if _has_helper(st, cfg.default_strategy)
                                   else CompactionStrategy.REMOVE_LOW_PRIORITY, 70.0, o.query)
        if freed:
            r = yield from _read(w, "order")
            items = [codec.decode_item(j) for j in r.raw]
    content, total, included, excluded, omitted = render.build(items, o, budget, st.counter, st.joint_count)
    ms = (time.perf_counter() - t0) * 1000
    log.debug("built context for window %s: %d items, %d tokens", w.window_id, len(included), total)
    yield ScriptCall("event", w.keys, [
        "built", "items_included", str(len(included)), "items_excluded", str(len(excluded)),
        "items_omitted", str(len(omitted)), "total_tokens", str(total), "was_compacted",
        "1" if freed else "0", "build_time_ms", f"{ms:.3f}",
    ])  # no request id: a retry may log a second `built` event, which is harmless
    return BuiltContext(
        content=content,
        total_tokens=total,
        included_item_ids=[i.id or "" for i in included],
        excluded_item_ids=excluded,
        was_compacted=freed > 0,
        tokens_freed_by_compaction=freed,
        omitted_item_ids=omitted,
    )


def _budget(o: BuildOptions, cfg: WindowConfig, window_id: str) -> int | None:
    """Tokens the prompt may take: the limit (this build's, else the window's) minus the
    reserve; None without a limit. A reserve that leaves no room at all is an error naming
    both options, not an empty prompt."""
    limit = o.max_tokens if o.max_tokens is not None else cfg.max_tokens
    if limit is None:
        return None
    if o.reserve_for_response >= limit:
        whose = "BuildOptions.max_tokens" if o.max_tokens is not None else f"the max_tokens of window {window_id!r}"
        raise InvalidOptionsError(
            f"reserve_for_response={o.reserve_for_response} leaves no room for a prompt: {whose} "
            f"is {limit}; pass BuildOptions(reserve_for_response=N) with N < {limit} "
            f"(tokens kept free for the model's answer), or a larger max_tokens")
    return limit - o.reserve_for_response


def _has_helper(st: Settings, s: CompactionStrategy) -> bool:
    return s.server_side or (s is CompactionStrategy.SUMMARIZE and st.summarizer is not None) or (
        s is CompactionStrategy.SELECTIVE and st.relevance_scorer is not None
    )


def to_markdown(w: WindowState, types: object = None, limit: object = None, language: object = None) -> Plan[str]:
    if language is not None and not isinstance(language, str):
        raise InvalidOptionsError("language must be a str or None")
    got = yield from items(w, types, limit)
    return render.to_markdown(got, language)


# -- snapshot, restore, stats ----------------------------------------------------------------


def snapshot(w: WindowState) -> Plan[ContextSnapshot]:
    r = yield from _read(w, "fifo")
    cfg = _config_of(r, w)
    return ContextSnapshot(
        window_id=w.window_id,
        created_at=datetime.now(timezone.utc),
        max_tokens=cfg.max_tokens,
        max_items=cfg.max_items,
        compaction_threshold=cfg.compaction_threshold,
        default_strategy=cfg.default_strategy,
        ttl_seconds=cfg.ttl_seconds,
        items=[codec.decode_item(j) for j in r.raw],
    )


def restore(st: Settings, w: WindowState, snap: object, request_id: object = None) -> Plan[None]:
    req = request("restore", request_id)
    if not isinstance(snap, ContextSnapshot):
        raise InvalidOptionsError(f"restore() takes a ContextSnapshot, not {type(snap).__name__}")
    if snap.format_version != 1:
        raise InvalidOptionsError(f"unsupported snapshot format_version {snap.format_version!r}")
    cfg_values = codec.validate_config_values(
        {"max_tokens": snap.max_tokens, "max_items": snap.max_items,
         "compaction_threshold": snap.compaction_threshold, "default_strategy": snap.default_strategy,
         "ttl_seconds": snap.ttl_seconds}, w.config.item_limit)
    if cfg_values["max_items"] is None:
        raise InvalidOptionsError("snapshot max_items must be set")
    if len(snap.items) > w.config.item_limit:
        raise InvalidOptionsError(f"snapshot holds {len(snap.items)} items; item_limit is {w.config.item_limit}")
    ids: set[str] = set()
    seqs: set[int] = set()
    rows: list[str | bytes] = []
    if not isinstance(snap.items, list) or not all(
        isinstance(i, ContextItem) and isinstance(i.seq, int) and not isinstance(i.seq, bool)
        for i in snap.items
    ):
        raise InvalidItemError("snapshot items must be a list of ContextItem with int seq")
    for it in sorted(snap.items, key=lambda i: i.seq):
        if not isinstance(it.id, str) or not 1 <= len(it.id) <= codec.MAX_CALLER_ID or any(c.isspace() for c in it.id):
            raise InvalidItemError(f"snapshot item id {it.id!r} is invalid")
        if isinstance(it.seq, bool) or not isinstance(it.seq, int) or it.seq < 1:
            raise InvalidItemError(f"snapshot item {it.id!r} needs an int seq >= 1")
        if it.id in ids or it.seq in seqs:
            raise InvalidItemError(f"snapshot repeats item id {it.id!r} or seq {it.seq}")
        ids.add(it.id)
        seqs.add(it.seq)
        norm = codec.validate_item(
            it.content, max_content_bytes=st.max_content_bytes, type=it.type, priority=it.priority,
            pinned=it.pinned, role=it.role, source_ref=it.source_ref, metadata=it.metadata,
            token_count=it.token_count)
        full = ContextItem(content=it.content, type=norm.type, priority=norm.priority,
                           token_count=norm.token_count, pinned=it.pinned, role=it.role,
                           source_ref=it.source_ref, metadata=norm.metadata, id=it.id,
                           added_at=it.added_at, seq=it.seq)
        rows += [it.id, codec.stored_json(full), str(it.seq), str(it.token_count), str(it.priority),
                 norm.type.value, "1" if it.pinned else "0"]
    c = cfg_values
    args: list[str | bytes] = codec.config_args(w.config) + [
        str(c["max_tokens"] or 0), str(c["max_items"]), repr(float(c["compaction_threshold"])),
        c["default_strategy"].value, str(c["ttl_seconds"] or 0), str(len(snap.items))] + rows
    check((yield ScriptCall("restore", w.keys, args, req)), InvalidOptionsError)
    w.config = WindowConfig(max_tokens=c["max_tokens"], max_items=c["max_items"],
                            compaction_threshold=c["compaction_threshold"],
                            default_strategy=c["default_strategy"], ttl_seconds=c["ttl_seconds"],
                            item_limit=w.config.item_limit)
    return None


def stats(w: WindowState) -> Plan[ContextWindowStats]:
    r = yield from _read(w, "meta")
    cfg = _config_of(r, w)
    m = r.meta
    tokens = int(m.get("tokens", 0))
    by_items: dict[ItemType, int] = {}
    by_tokens: dict[ItemType, int] = {}
    for k, v in m.items():
        kind, _, tname = k.partition(":")
        if tname and int(v) and kind in ("items", "tokens"):
            (by_items if kind == "items" else by_tokens)[ItemType(tname)] = int(v)
    mt = cfg.max_tokens
    return ContextWindowStats(
        window_id=w.window_id,
        total_items=int(m.get("items", 0)),
        pinned_items=r.pinned,
        current_tokens=tokens,
        max_tokens=mt,
        max_items=cfg.max_items,
        available_tokens=None if mt is None else max(0, mt - tokens),
        usage_percent=0.0 if not mt else tokens * 100.0 / mt,
        compaction_threshold=cfg.compaction_threshold,
        default_strategy=cfg.default_strategy,
        items_by_type=by_items,
        tokens_by_type=by_tokens,
        compaction_count=int(m.get("compactions", 0)),
        total_tokens_freed=int(m.get("freed", 0)),
    )


def verify(w: WindowState) -> Plan[verify_mod.VerifyReport]:
    reply = check((yield ScriptCall("read", w.keys, ["all", "", "-1"])))
    return verify_mod.check(w.window_id, reply)
