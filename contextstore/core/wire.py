"""The ARGV and reply layouts of every script: the Python side of the wire contract.

Each script's header (``lua/<name>.lua``) documents its KEYS, ARGV and reply; the functions here
are the only Python code that packs those arguments or reads those replies, so the two sides
are read side by side in two files. The scripts that may create a window (``TAKES_CONFIG``)
take the handle's config first (``config_args``), used only when the window does not exist yet;
the others take only their own arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..types import CompactionStrategy, ContextItem, ItemType, PlannedItem, WindowConfig
from . import facts
from .layout import CLEARED_KEY, Meta, meta_text
from .stored import body_json, decode_item
from .validate import NewItem

_json = msgspec.json.Encoder()

Args = list[str | bytes]

#: how many arguments ``config_args`` gives (the first ARGV of the scripts of ``TAKES_CONFIG``)
CONFIG_ARGS = len(Meta.CONFIG)
#: the scripts that may create a window, so take the handle's config first
TAKES_CONFIG = frozenset({"add", "configure", "ensure", "restore"})
#: the ``WindowConfig`` attribute (the window option) each config field of :meta holds, in
#: ``Meta.CONFIG`` order
CONFIG_ATTRS = {
    Meta.MAX_TOKENS: "max_tokens",
    Meta.MAX_ITEMS: "max_items",
    Meta.ITEM_LIMIT: "item_limit",
    Meta.THRESHOLD: "compaction_threshold",
    Meta.STRATEGY: "default_strategy",
    Meta.TTL: "ttl_seconds",
    Meta.KEEP_RECENT: "keep_recent",
    Meta.CLEAR_AT_LEAST: "clear_at_least",
    Meta.CLEAR_EXCLUDE: "clear_exclude_tools",
    Meta.WARN_PERCENT: "warn_percent",
    Meta.EVENTS_MAXLEN: "events_maxlen",
    Meta.ARCHIVE_TTL: "archive_ttl_seconds",
    Meta.TARGET: "compaction_target",
}
assert tuple(CONFIG_ATTRS) == Meta.CONFIG
#: the config fields of the window options configure() may change (all but item_limit)
CONFIG_FIELDS = {attr: f for f, attr in CONFIG_ATTRS.items() if f != Meta.ITEM_LIMIT}


def text(value: Any) -> str:
    """A reply element as a str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def option_value(name: str, value: Any) -> str:
    """A window option as the scripts store it (None and 0 mean no limit / no expiry)."""
    if name == "default_strategy":
        return str(CompactionStrategy(value).value)
    if name in ("compaction_threshold", "warn_percent", "compaction_target"):
        return repr(float(value or 0))
    if name == "clear_exclude_tools":
        return " ".join(value or ())
    return str(value or 0)


def _option_from(name: str, raw: str) -> Any:
    if name == "default_strategy":
        return CompactionStrategy(raw)
    if name in ("compaction_threshold", "warn_percent"):
        return float(raw)
    if name == "compaction_target":
        return float(raw) or None
    if name == "clear_exclude_tools":
        return tuple(raw.split())
    if name in ("max_tokens", "ttl_seconds"):
        return int(raw) or None
    return int(raw)


def config_args(cfg: WindowConfig) -> Args:
    """The first ARGV of every mutating script, in ``Meta.CONFIG`` order."""
    return [option_value(name, getattr(cfg, name)) for name in CONFIG_ATTRS.values()]


def config_from(values: Sequence[Any]) -> WindowConfig:
    """A config from its values in ``Meta.CONFIG`` order (ensure's and configure's reply); a
    field a window made by an older version lacks (None) takes its default."""
    return WindowConfig(
        **{
            name: _option_from(name, Meta.DEFAULTS[f] if v is None else text(v))
            for (f, name), v in zip(CONFIG_ATTRS.items(), values, strict=True)
        }
    )


# -- the read scripts (list, build_read, fetch, peek, archived: lib/reads.lua) --------------------


class ReadReply(msgspec.Struct):
    """A read script's reply: the meta hash (empty: no window), the pinned count, the items' entries
    (``stored.decode_item`` puts them together; None for an id the window no longer holds);
    for a build's read (``plans/build_read.py``), the items already decoded (stubs of some: their
    facts) and the store's cache entry of the window at their epoch."""

    meta: dict[str, str]
    pinned: int
    raw: list[Any]
    decoded: list[ContextItem] | None = None
    cached: Any = None

    @property
    def exists(self) -> bool:
        """True when the window exists."""
        return bool(self.meta)

    def config(self, fallback: WindowConfig) -> WindowConfig:
        """The stored config, or ``fallback`` for a missing window."""
        if not self.exists:
            return fallback
        return config_from([self.meta.get(f) for f in Meta.CONFIG])

    def items(self) -> list[ContextItem]:
        """The items read, decoded."""
        if self.decoded is not None:
            return self.decoded
        return [decode_item(entry) for entry in self.raw]

    def counter(self, field: str) -> int:
        """A counter of the meta hash (0 when absent)."""
        return int(self.meta.get(field, 0))


def list_args(order: str, types: str = "", limit: int = -1) -> Args:
    """The head of list.lua's ARGV: the order (fifo, order, pinned), type filter, most recent N
    (``plans/reads.py`` adds the page)."""
    return [order, types, str(limit)]


def fetch_args(budget: int, ids: Sequence[str]) -> Args:
    """fetch.lua's ARGV: most bytes of JSON (0: any), the ids."""
    return [str(budget), *ids]


def archived_args(summary_id: str = "") -> Args:
    """archived.lua's ARGV: the items a summary replaced, or ("") every unexpired archive entry
    ("<summary id>=<server ms it expires>")."""
    return [summary_id]


def decode_read(reply: Sequence[Any]) -> ReadReply:
    """The reply of a read script (lib/reads.lua; any but dump.lua)."""
    return ReadReply(meta_text(reply[0]), int(reply[1]), list(reply[2]))


# -- add.lua, commit.lua -------------------------------------------------------------------------


def item_args(item: NewItem) -> Args:
    """The ARGV fields of one item (add.lua, commit.lua): id, body, type, tokens, priority,
    pinned, group, tool link, the letters a build reads (``facts.letters``)."""
    return [
        item.id or "",
        body_json(item),
        item.type.value,
        str(item.token_count),
        str(item.priority),
        "1" if item.pinned else "0",
        item.group or "",
        tool_link(item),
        facts.letters(item.type, item.role, item.metadata, item.source_ref, item.group, item.content),
    ]


def tool_link(item: NewItem) -> str:
    """An item's tool link as the scripts take it: ``C:<name>=<call id> ...`` for a tool call,
    ``R:<call id>`` for a tool result, "" for other items."""
    if item.tool_calls:
        return "C:" + " ".join(f"{name}={call_id}" for name, call_id in item.tool_calls)
    return f"R:{item.tool_call_id}" if item.tool_call_id else ""


def add_args(
    cfg: WindowConfig, items: Sequence[NewItem], placeholder_tokens: int, replace: str = "", defer_after: int = 0,
    conditions: str = "") -> Args:  # fmt: skip
    """add.lua's ARGV: config, the cleared placeholder's tokens, what to replace ('' nothing,
    'all', or the count of newest items), most items a compaction inside the add may act on
    before it asks to compact first (0: never), the conditions (the version the window must
    have, the turn: lib/turns.lua), the items."""
    args = [*config_args(cfg), str(placeholder_tokens), replace, str(defer_after), conditions, str(len(items))]
    for item in items:
        args += item_args(item)
    return args


class AddReply(msgspec.Struct):
    """add.lua's reply: what it added, evicted and compacted; ``trigger``: the tokens in the
    window when its first compaction began (0: none); ``freed``: what the compactions freed."""

    added: int
    evicted: int
    compactions: int
    trigger: int
    freed: int
    items: list[ContextItem]


class CompactFirst(msgspec.Struct):
    """add.lua's answer when the caller should compact before the add (nothing was written): the
    strategy and target percent of the compaction the add would have run, and the tokens in the
    window then."""

    strategy: str
    target_percent: float
    tokens: int


def decode_add(reply: Sequence[Any]) -> AddReply | CompactFirst:
    """add.lua's reply: {'ok', added, evicted, compactions, trigger, freed, stored JSON...}, or
    {'compact', strategy, target percent, tokens}."""
    if text(reply[0]) == "compact":
        return CompactFirst(text(reply[1]), float(reply[2]), int(reply[3]))
    added, evicted, compactions, trigger, freed = (int(x) for x in reply[1:6])
    return AddReply(added, evicted, compactions, trigger, freed, [decode_item(j) for j in reply[6:]])


class Counters(msgspec.Struct):
    """What every mutation answers besides its reply: the window's counters after it, and the
    compactions (and tokens they freed) this call ran."""

    tokens: int
    items: int
    max_tokens: int  # the token limit through the window's calibration (in estimated tokens; 0: none)
    compactions: int
    freed: int
    invalidated: int = 0  # prompt tokens from each compaction's first change on (the cache lost)


def unwrap_mutation(reply: Sequence[Any]) -> tuple[Any, Counters]:
    """A mutating script's reply {reply, tokens, items, max_tokens, compactions, freed, invalidated}."""
    return reply[0], Counters(*(int(x) for x in reply[1:7]))


def commit_args(strategy: CompactionStrategy, chosen: Sequence[tuple[str, str]], summary: NewItem | None) -> Args:
    """commit.lua's ARGV: the strategy, (id, sha1 of the JSON read) per item, the summary."""
    args = [strategy.value, str(len(chosen))]
    for item_id, sha in chosen:
        args += [item_id, sha]
    return args + (item_args(summary) if summary is not None else [])


def decode_commit(reply: Sequence[Any]) -> tuple[int, str]:
    """commit.lua's reply: tokens freed (net of the summary), the summary's id ("" without one)."""
    return int(reply[0]), text(reply[1])


def undo_args(summary_id: str) -> Args:
    """undo.lua's ARGV."""
    return [summary_id]


def lease_args(op: str, token: str, ms: int = 0) -> Args:
    """lease.lua's ARGV: acquire (for ``ms``) or release, by the compactor's token."""
    return [op, token, str(ms)]


# -- the other mutations ---------------------------------------------------------------------------


def one_item_args(item_id: str, *extra: str) -> Args:
    """ARGV of remove.lua, pin.lua (extra: '1'/'0'), priority.lua (extra: the priority) and
    pop.lua (the count in place of an id)."""
    return [item_id, *extra]


def clear_args(include_pinned: bool) -> Args:
    """clear.lua's ARGV."""
    return ["1" if include_pinned else "0"]


def compact_args(
    strategy: CompactionStrategy,
    target_percent: float,
    most: int,
    continued: bool,
    placeholder_tokens: int,
    dry_run: bool = False,
    earlier: int = 0,
) -> Args:
    """compact.lua's ARGV: strategy, target percent, most items this call, continues a call,
    the cleared placeholder's tokens, dry run, tokens the compaction's earlier calls freed."""
    flags = ["1" if continued else "0", str(placeholder_tokens), "1" if dry_run else "0", str(earlier)]
    return [strategy.value, repr(float(target_percent)), str(most), *flags]


def decode_compact(reply: Sequence[Any]) -> tuple[int, bool]:
    """compact.lua's reply: (tokens freed, more to do)."""
    return int(reply[0]), bool(int(reply[1]))


def decode_dry_run(reply: Sequence[Any]) -> tuple[int, list[PlannedItem]]:
    """compact.lua's dry-run reply: (tokens freed, what happens to each item)."""
    planned = [
        PlannedItem(
            id=text(r[1]),
            type=ItemType(text(r[2])),
            tokens=int(r[3]),
            action=text(r[0]),
            tokens_freed=int(r[4]),
            group=text(r[5]) or None,
        )
        for r in reply[1]
    ]
    return int(reply[0]), planned


def configure_args(cfg: WindowConfig, changes: dict[str, Any]) -> Args:
    """configure.lua's ARGV: field/value pairs of the changed options."""
    args = config_args(cfg)
    for name, value in changes.items():
        args += [CONFIG_FIELDS[name], option_value(name, value)]
    return args


RestoredRow = tuple[ContextItem, bytes, NewItem]
#: a snapshot's archive entry for restore.lua: summary id, server ms it expires, its items
ArchiveEntry = tuple[str, int, Sequence[RestoredRow]]


def _stored_fields(item: ContextItem, raw: bytes, pinned: Args) -> Args:
    """id, stored JSON, seq, tokens, priority, type, ``pinned`` ([] or one flag), flags, group."""
    flags = facts.of_item(item) + (facts.CLEARED if CLEARED_KEY in (item.metadata or {}) else "")
    head: Args = [item.id or "", raw, str(item.seq), str(item.token_count), str(item.priority), item.type.value]
    return [*head, *pinned, flags, item.group or ""]


#: how many items' fields one argument of restore.lua carries at most, and about how many bytes
#: (one item may pass it): a command's arguments are few at any size (a server sets up a
#: script's ARGV in time that grows with their count: 80,000 arguments took Redis 7 0.2 s), and
#: each stays far below the 512 MB a bulk string may have
ROWS_AN_ARGUMENT = 1000
BYTES_AN_ARGUMENT = 1 << 20


#: how many items a call of restore.lua or stage.lua writes at most: a restore of more stages
#: them in parts first (each call holds the shard for ~40 ms at most, not seconds)
ROWS_A_CALL = ROWS_AN_ARGUMENT


def restore_args(items: Sequence[RestoredRow], archive: Sequence[ArchiveEntry] = (), staged: int = 0) -> Args:
    """restore.lua's ARGV after the caller's and the snapshot's config: how many items were
    staged before (``stage_args``), the item count, then the items' rows (``_item_rows``); then
    the archive entries (summary id, expiry ms, item count, then the rows of its items the same
    way: id, stored JSON, seq, tokens, priority, type, flags, group)."""
    args = [str(staged), *_item_rows(items), str(len(archive))]
    for summary_id, expires_ms, archived in archive:
        args += [summary_id, str(expires_ms), str(len(archived))]
        args += _packed([_stored_fields(item, raw, []) for item, raw, _ in archived])
    return args


def stage_args(before: int, items: Sequence[RestoredRow]) -> Args:
    """stage.lua's ARGV for a part of a restore's items: how many were staged before, then the
    part's count and rows (``_item_rows``)."""
    return [str(before), *_item_rows(items)]


def _item_rows(items: Sequence[RestoredRow]) -> Args:
    """The item count, then the items' rows (the JSON array of each one's id, stored JSON, seq,
    tokens, priority, type, pinned, flags, group, tool link) ``ROWS_AN_ARGUMENT`` to an argument."""
    rows = [
        [*_stored_fields(item, raw, ["1" if item.pinned else "0"]), tool_link(checked)] for item, raw, checked in items
    ]
    return [str(len(items)), *_packed(rows)]


def _packed(rows: list[Args]) -> list[bytes]:
    """Rows of strings as arguments, each a JSON array of rows: at most ``ROWS_AN_ARGUMENT`` of
    them, and no more once it holds ``BYTES_AN_ARGUMENT``."""
    out: list[bytes] = []
    chunk: list[bytes] = []
    size = 0
    for row in rows:
        encoded = _json.encode([f.decode() if isinstance(f, bytes) else f for f in row])
        if chunk and (len(chunk) == ROWS_AN_ARGUMENT or size + len(encoded) > BYTES_AN_ARGUMENT):
            out.append(b"[" + b",".join(chunk) + b"]")
            chunk, size = [], 0
        chunk.append(encoded)
        size += len(encoded)
    if chunk:
        out.append(b"[" + b",".join(chunk) + b"]")
    return out


def event_args(name: str, fields: dict[str, str], held: dict[str, str] | None = None) -> Args:
    """event.lua's ARGV: the meta field/value pairs the window must hold (``held``), the event name, its fields."""
    flat = [x for pair in (held or {}).items() for x in pair]
    return [str(len(flat) // 2), *flat, name, *(x for pair in fields.items() for x in pair)]
