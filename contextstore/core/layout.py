"""The facts Python and the Lua scripts share, owned here.

Strategies, limits, the field names of a window's ``:meta`` hash, the build-order score and
the bounds of the event stream and the request log are defined once, in this module; the type
ranks and the option defaults are ``types.py``'s. ``lua_constants()`` renders them all as
``lua/lib/constants.lua``, which is checked in so that each Lua file reads on its own
(``tests/test_lua_files.py`` fails when it is stale and says how to write it again), so the
Lua side never spells one of them itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..errors import corrupt_value
from ..types import (
    DEFAULT_ARCHIVE_TTL_SECONDS,
    DEFAULT_EVENTS_MAXLEN,
    DEFAULT_WARN_PERCENT,
    TYPE_RANKS,
    CompactionStrategy,
)

MAX_PRIORITY = 100
#: largest ``max_tokens`` and ``token_count``
MAX_TOKENS = 10**12
#: largest ``ttl_seconds``
MAX_TTL_SECONDS = 10**9
#: a window's token calibration (reported usage, §20) stays within these bounds: what the
#: provider counts per estimated token
CALIBRATION_MIN, CALIBRATION_MAX = 0.5, 4.0
#: the calibration is the largest of the last this many ratios (reported / estimated)
CALIBRATION_SAMPLES = 8
#: how many of the newest events usage.lua reads back for the ``built`` event of a version
USAGE_LOOKBACK = 256
#: tokens a chat build adds to each item's own (the message's role and separators; OpenAI's
#: guide counts 3-4): render/messages.py counts it in every build, and add.lua in the window's
#: usage where the compaction threshold and the strategies' targets look, so that a window below
#: its threshold builds whole
MESSAGE_OVERHEAD = 4
#: tokens every chat build's reply is primed with (counted once a build, in the same places)
REPLY_PRIMING = 3
#: largest store ``item_limit`` (and so ``max_items``)
MAX_ITEM_LIMIT = 200_000
#: largest store ``max_content_bytes``
MAX_CONTENT_BYTES = 512 * 1024 * 1024
#: the window's event stream is trimmed to about this many entries (``MAXLEN ~``) unless its
#: ``events_maxlen`` says otherwise; MAX_EVENTS is the largest such bound
STREAM_MAXLEN = DEFAULT_EVENTS_MAXLEN
MAX_EVENTS = 10**7
#: the ``:archive`` field listing when each entry expires: "<summary id>=<server ms> ..."
ARCHIVE_INDEX = "~expires"
#: the request log keeps the newest REQUEST_LOG_MAX requests, none older than REQUEST_LOG_TTL_MS
REQUEST_LOG_MAX = 2000
REQUEST_LOG_TTL_MS = 15 * 60 * 1000
#: the keys a big restore or fork stages its items in (stage.lua) expire this long after the last
#: part was staged: a client that stops midway leaves nothing behind for long
STAGE_TTL_MS = 10 * 60 * 1000
#: the format of the replies the scripts record, and of the arguments an ``add``'s record points
#: into (lib/requests.lua). Raise it whenever a script's reply, its record or the arguments a
#: record points into change shape: a retry that finds a request recorded in another format (by
#: another version of contextstore, during an upgrade) is not applied again and not replayed
#: either (``ReplayUnavailableError``). A record without a format is format 1 (written before
#: formats were kept). tests/test_requests.py checks one fixed run's records against
#: tests/data/records_format_<RECORD_FORMAT>.json, so a change of shape that keeps it fails.
RECORD_FORMAT = 4
#: the weights of the build-order score (``order_score``)
RANK_WEIGHT = 10**13
PRIORITY_WEIGHT = 10**10
#: every command the scripts run, each as a call of it with arguments of its arity ("K": a key of
#: the window): what an ACL user must be granted besides FCALL / EVALSHA, and what acl.lua asks
#: ``redis.acl_check_cmd`` about (given without its arguments, Redis 7.0 crashes on some of them
#: for a user with key patterns). tests/test_tenants.py keeps it equal to what lua/ calls.
SCRIPT_CALLS = (
    "del K", "exists K", "expire K 1", "get K", "hdel K f", "hexists K f", "hget K f", "hgetall K", "hincrby K f 1",
    "hkeys K", "hlen K", "hmget K f", "hscan K 0", "hset K f v", "lindex K 0", "linsert K BEFORE p v", "llen K",
    "lpop K", "lpos K v", "lrange K 0 1", "lrem K 1 v", "lset K 0 v", "ltrim K 0 1", "object encoding K", "persist K",
    "pexpire K 1", "pttl K", "rename K K", "rpush K v", "sadd K v", "scard K", "set K v", "sismember K v", "smembers K",
    "smismember K v", "srem K v", "sscan K 0", "time", "type K", "unlink K", "xadd K * f v", "xrevrange K + -",
    "zadd K 1 m", "zcard K", "zcount K 0 1", "zrange K 0 1", "zrangebyscore K 0 1", "zrem K m",
    "zrevrangebyscore K 1 0",
)  # fmt: skip


def command_name(call: str) -> str:
    """The command a ``SCRIPT_CALLS`` entry calls, as ACL rules name it ("object|encoding")."""
    words = call.split()
    return f"{words[0]}|{words[1]}" if words[0] == "object" else words[0]


#: the commands of SCRIPT_CALLS
SCRIPT_COMMANDS = tuple(command_name(c) for c in SCRIPT_CALLS)
#: most inputs that wait for a turn (win.turn(policy="enqueue")), and most bytes of them
PENDING_MAX_INPUTS = 256
PENDING_MAX_BYTES = 8 * 1024 * 1024
#: the largest seq an item may have: the build-order score keeps it below PRIORITY_WEIGHT
MAX_SEQ = PRIORITY_WEIGHT - 1


#: ``:sizes`` scores: a user or assistant message's size class (``size_class``), then its seq
SIZE_WEIGHT = PRIORITY_WEIGHT
#: the types ``:sizes`` holds: the conversation (what a build's walk reads newest first)
SIZED_TYPES = ("user_message", "assistant_message")


def size_class(tokens: int) -> int:
    """The size class of ``tokens`` stored tokens: their bit length (0 for none; class c >= 1
    holds 2^(c-1) .. 2^c - 1). ``size_score()`` of ``lua/lib/items.lua`` is the same formula."""
    return tokens.bit_length()


def class_floor(size: int) -> int:
    """The fewest stored tokens of an item of size class ``size``."""
    return 0 if size == 0 else 1 << (size - 1)


def size_score(tokens: int, seq: int) -> int:
    """A message's score in ``:sizes``: its size class, then its seq (``tests/test_shared_facts.py``
    checks the scripts write the same)."""
    return size_class(tokens) * SIZE_WEIGHT + seq


def order_score(rank: int, priority: int, seq: int) -> int:
    """An item's build-order score in ``:order``: type rank, then priority descending, then
    seq. The scripts write it (``score()`` of ``lua/lib/items.lua``, which with ``band``,
    ``seq_of`` and ``priority_of`` is the only Lua that encodes or decodes it); the item cache
    sorts by it. ``tests/test_shared_facts.py`` checks both sides agree."""
    return rank * RANK_WEIGHT + (MAX_PRIORITY - priority) * PRIORITY_WEIGHT + seq


#: the fields of an ``:attrs`` value, in order, joined by ``|``; then ``|<flags>|<group>`` when
#: either is set (flags: ``c`` once a tool result's content was cleared)
ATTRS_FIELDS = ("seq", "token_count", "priority", "type")
#: how a stored item's JSON (an ``:items`` value) begins: ``{"added_at_us":<µs>,`` then the
#: client-encoded body (content, role, source_ref, metadata). What ``:attrs`` and ``:pinned`` hold
#: is not repeated in it; a window written by 0.1 spells every field (``lua/lib/items.lua``).
STORED_HEAD = '{"added_at_us":'
#: the latest ``added_at_us`` a stored item holds (9999-12-31 23:59:59.999999 UTC: the last time a
#: Python ``datetime`` holds); the earliest is 0. Lua compares it as a double (exact to 32 µs there)
MAX_TIME_US = 253402300799999999
#: the ARGV fields of one item in add.lua (and commit.lua's summary, and a turn's pending
#: inputs): id, body, type, tokens, priority, pinned, group, tool link, letters (``wire.item_args``)
ITEM_ARGS = 9
#: what CLEAR_TOOL_RESULTS puts in place of a tool result's content
CLEARED_PLACEHOLDER = "[tool result cleared to save context]"
#: the metadata key a cleared tool result gets: {"tokens": <its tokens before>}
CLEARED_KEY = "context_cleared"


class Meta:
    """Field names of a window's ``:meta`` hash."""

    MAX_TOKENS = "max_tokens"  # 0 = no token limit
    MAX_ITEMS = "max_items"
    ITEM_LIMIT = "item_limit"
    THRESHOLD = "threshold"
    STRATEGY = "strategy"
    TTL = "ttl"  # 0 = no expiry
    TOKENS = "tokens"
    ITEMS = "items"
    SEQ = "seq"  # the last seq handed out
    COMPACTIONS = "compactions"
    FREED = "freed"
    CREATED_MS = "created_ms"
    #: when the window's lifetime began, in µs (written with ``created_ms``): names the lifetime
    #: in its ``version``, so that a window deleted and made again within a millisecond moves on
    CREATED_US = "created_us"
    ITEMS_OF = "items:"  # + type: items of that type
    TOKENS_OF = "tokens:"  # + type: tokens of that type
    KEEP_RECENT = "keep_recent"
    CLEAR_AT_LEAST = "clear_at_least"
    CLEAR_EXCLUDE = "clear_exclude"  # tool names, space-separated
    WARN_PERCENT = "warn_percent"
    EVENTS_MAXLEN = "events_maxlen"
    WARNED = "warned"  # 1 while usage is at or above warn_percent (a usage_warning was sent)
    ARCHIVE_TTL = "archive_ttl"  # seconds the items a summary replaced stay in :archive
    #: the percent of the token limit a compaction at the threshold brings usage down to (0: 15
    #: points below the threshold; never above it)
    TARGET = "target"
    SUMMARIES = "summaries"  # summaries made (the n of their ids, ctx-<seq>.<n>)
    #: changes whenever a stored item changes in place or items come back with seqs already handed
    #: out (pin, priority, cleared result, summary, undo, restore, a new lifetime), and with a config
    #: change: what a client caches of the items and config is good while the epoch stays
    #: (contextstore/core/itemcache.py)
    EPOCH = "epoch"
    #: calls that removed items by hand (remove, pop): a replayed add whose items are all gone
    #: runs again when one came since its record (lib/requests.lua), not after an eviction
    REMOVED_BY_CALLER = "removed_by_caller"
    #: lineage (§19): the window a fork was made from and the item it was made at (on the fork),
    #: and the forks made from a window, space-separated (on the window they were made from)
    PARENT = "parent"
    FORK_POINT = "fork_point"
    FORKS = "forks"
    #: reported usage (§20, lua/usage.lua): the provider's token totals and how many reports
    #: made them; the window's calibration (absent: 1.0) and the recent ratios it is the largest
    #: of, space-separated (reported / estimated tokens of one build's prompt)
    USED_INPUT = "used_input"
    USED_OUTPUT = "used_output"
    USED_CACHE_READ = "used_cache_read"
    USED_CACHE_WRITE = "used_cache_write"
    USAGE_RECORDS = "usage_records"
    CALIBRATION = "calibration"
    RATIOS = "ratios"
    #: 1 once a group holds two user or assistant messages (a caller's own groups; a tool call
    #: and its results hold one): a build's walk then counts ``max_history_items`` by reading the
    #: conversation in pages, never from ``:sizes`` alone (``plans/facts_read.py``)
    MESSAGE_GROUPS = "message_groups"

    #: what a window's ``version`` is made of (``window_version``): its lifetime (``created_us``;
    #: 0 for a window made before it was kept, until its next lifetime), the last seq handed out
    #: (every add) and the removals by hand; not compaction, summaries, pins or priorities, which
    #: change old context rather than the conversation a turn answers
    VERSION: ClassVar[tuple[str, ...]] = (CREATED_US, SEQ, REMOVED_BY_CALLER)

    #: the config fields, in the order the scripts take and answer them
    CONFIG = (
        MAX_TOKENS, MAX_ITEMS, ITEM_LIMIT, THRESHOLD, STRATEGY, TTL, KEEP_RECENT, CLEAR_AT_LEAST, CLEAR_EXCLUDE,
        WARN_PERCENT, EVENTS_MAXLEN, ARCHIVE_TTL, TARGET,
    )  # fmt: skip
    #: what vouches for a client's cached window (items, config, version; see EPOCH): a build from
    #: the cache alone has event.lua write its ``built`` event only while these hold
    BUILD_INPUTS: ClassVar[tuple[str, ...]] = (EPOCH, ITEMS, *VERSION)
    #: the counters a script keeps (besides the per-type ones, ITEMS_OF and TOKENS_OF + a type)
    COUNTERS: ClassVar[tuple[str, ...]] = (
        TOKENS, ITEMS, SEQ, COMPACTIONS, FREED, CREATED_MS, CREATED_US, WARNED, SUMMARIES, EPOCH, REMOVED_BY_CALLER,
        USED_INPUT, USED_OUTPUT, USED_CACHE_READ, USED_CACHE_WRITE, USAGE_RECORDS,
    )  # fmt: skip
    #: the usage totals, in ``UsageTotals`` order (its fields, less ``records``)
    USAGE: ClassVar[tuple[str, ...]] = (USED_INPUT, USED_OUTPUT, USED_CACHE_READ, USED_CACHE_WRITE)
    #: config fields stored as text / as floats (the others are integers)
    TEXT = (STRATEGY, CLEAR_EXCLUDE)
    FLOAT = (THRESHOLD, WARN_PERCENT, TARGET)
    #: what a config field a window created by an older version lacks stands for
    DEFAULTS: ClassVar[dict[str, str]] = {
        KEEP_RECENT: "0", CLEAR_AT_LEAST: "0", CLEAR_EXCLUDE: "", WARN_PERCENT: repr(DEFAULT_WARN_PERCENT),
        EVENTS_MAXLEN: str(STREAM_MAXLEN), ARCHIVE_TTL: str(DEFAULT_ARCHIVE_TTL_SECONDS), TARGET: "0.0",
    }  # fmt: skip


#: how each config field of a stored :meta hash is checked (lib/meta.lua's bad_config is the same):
#: an integer range, a percent (0 < x <= 100), the strategies, or any text
_INT_RANGES = {
    Meta.MAX_TOKENS: (0, MAX_TOKENS), Meta.ITEM_LIMIT: (1, MAX_ITEM_LIMIT), Meta.MAX_ITEMS: (1, MAX_ITEM_LIMIT),
    Meta.TTL: (0, MAX_TTL_SECONDS), Meta.KEEP_RECENT: (0, MAX_ITEM_LIMIT), Meta.CLEAR_AT_LEAST: (0, MAX_TOKENS),
    Meta.EVENTS_MAXLEN: (1, MAX_EVENTS), Meta.ARCHIVE_TTL: (1, MAX_TTL_SECONDS), Meta.WARNED: (0, 1),
    Meta.SEQ: (0, MAX_SEQ), Meta.MESSAGE_GROUPS: (0, 1),
}  # fmt: skip
_STRATEGIES = frozenset(s.value for s in CompactionStrategy)
_COUNTERS = frozenset(Meta.COUNTERS)
_TYPES = frozenset(t.value for t in TYPE_RANKS)
_COUNT = re.compile(r"\d{1,19}")


def _percent(raw: str) -> bool:
    try:
        value = float(raw)
    except ValueError:
        return False
    return 0 < value <= 100  # NaN compares False


def _ratio(raw: str) -> bool:
    try:
        value = float(raw)
    except ValueError:
        return False
    return CALIBRATION_MIN <= value <= CALIBRATION_MAX  # NaN compares False


def calibration_of(meta: Mapping[str, str]) -> float:
    """A window's token calibration from its (checked) :meta hash: 1.0 until usage was recorded."""
    return float(meta.get(Meta.CALIBRATION) or 1.0)


def calibrated(limit: int, calibration: float) -> int:
    """Estimated tokens within ``limit`` tokens as the provider counts them (at least 1)."""
    return max(1, math.floor(limit / calibration)) if calibration != 1.0 else limit


def meta_problems(meta: Mapping[str, str]) -> list[tuple[str, str]]:
    """Each field of a window's :meta hash (as read, text) that holds what no script writes, with
    what is wrong: a config value out of its range, a counter that is not a count. Fields this
    version does not know are left alone (a newer version may write them)."""
    found = []
    for field, raw in meta.items():
        if field in (Meta.THRESHOLD, Meta.WARN_PERCENT):
            if not _percent(raw):
                found.append((field, "not a percent from 0 to 100"))
        elif field == Meta.STRATEGY:
            if raw not in _STRATEGIES:
                found.append((field, "not a compaction strategy"))
        elif field == Meta.CLEAR_EXCLUDE:
            continue
        elif field == Meta.TARGET:
            if not _percent(raw) and raw not in ("0", Meta.DEFAULTS[Meta.TARGET]):  # (Lua writes 0 as "0")
                found.append((field, "not a percent from 0 to 100"))
        elif field in (Meta.CALIBRATION, Meta.RATIOS):
            if not all(_ratio(r) for r in raw.split(" ")) or (field == Meta.CALIBRATION and " " in raw):
                found.append((field, f"not a ratio from {CALIBRATION_MIN} to {CALIBRATION_MAX}"))
        elif field.startswith((Meta.ITEMS_OF, Meta.TOKENS_OF)) and field.partition(":")[2] not in _TYPES:
            found.append((field, "the counter of a type there is not"))
        elif field in _INT_RANGES or field in _COUNTERS or field.startswith((Meta.ITEMS_OF, Meta.TOKENS_OF)):
            low, high = _INT_RANGES.get(field, (0, 2**63 - 1))
            if not _COUNT.fullmatch(raw) or not low <= int(raw) <= high:
                found.append((field, f"not an integer from {low} to {high}"))
    limit = meta.get(Meta.ITEM_LIMIT, "")
    cap = meta.get(Meta.MAX_ITEMS, "")
    if _COUNT.fullmatch(cap) and _COUNT.fullmatch(limit) and int(cap) > int(limit):
        found.append((Meta.MAX_ITEMS, f"above the window's item_limit ({limit})"))
    return found


def meta_text(meta: Mapping[Any, Any] | Sequence[Any]) -> dict[str, str]:
    """A :meta hash as a script (field, value, ...) or a plain read (a dict) returns it, as text,
    every field checked: ``CorruptWindowError`` for one that holds what no script writes (bytes
    that are not UTF-8, a config value out of range, a counter that is not a count)."""
    pairs = meta.items() if isinstance(meta, Mapping) else zip(meta[::2], meta[1::2], strict=True)
    try:
        found = {_text(f): _text(v) for f, v in pairs}
    except UnicodeDecodeError:
        raise corrupt_value(":meta", "", "bytes that are not UTF-8") from None
    for field, what in meta_problems(found):
        raise corrupt_value(":meta", field, what)
    return found


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def build_inputs(meta: Mapping[str, str]) -> dict[str, str]:
    """The ``Meta.BUILD_INPUTS`` fields of a decoded meta hash: what a build's ``built`` event
    checks the window still holds (event.lua)."""
    return {f: meta.get(f, "") for f in Meta.BUILD_INPUTS}


def window_version(meta: Mapping[str, object]) -> str:
    """The window's ``version`` (§17) from its meta hash: the ``Meta.VERSION`` fields joined by
    ``.`` ("" for a missing window); lib/meta.lua's ``window_version`` makes the same."""
    if not meta:
        return ""
    return ".".join(str(int(float(str(meta.get(f) or 0)))) for f in Meta.VERSION)


def _lua_table(pairs: Mapping[str, object]) -> str:
    return "{" + ", ".join(f"{k} = {_lua_value(v)}" for k, v in pairs.items()) + "}"


def _lua_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return "'" + v + "'"
    return str(v)


def lua_constants() -> str:
    """Lua source defining every shared fact as a local of the script."""
    meta = {k: v for k, v in vars(Meta).items() if k.isupper() and isinstance(v, str)}
    config = ", ".join(f"'{f}'" for f in Meta.CONFIG)
    server_side = {s.value: True for s in CompactionStrategy if s.server_side}
    return "\n".join(
        [
            "-- lib/constants.lua: the facts shared with Python, generated from contextstore/core/layout.py",
            "-- by lua_constants(): do not edit (tests/test_lua_files.py says how to write it again).",
            "-- needs: (nothing)",
            f"local RANK = {_lua_table({t.value: r for t, r in TYPE_RANKS.items()})}",
            f"local STRATEGIES = {_lua_table({s.value: True for s in CompactionStrategy})}",
            f"local SERVER_SIDE = {_lua_table(server_side)}",
            f"local F = {_lua_table(meta)}",
            "local VERSION_FIELDS = {" + ", ".join(f"'{f}'" for f in Meta.VERSION) + "}",
            f"local MAX_PRIORITY, MAX_TOKENS, MAX_TTL_SECONDS, MAX_ITEM_LIMIT = "
            f"{MAX_PRIORITY}, {MAX_TOKENS}, {MAX_TTL_SECONDS}, {MAX_ITEM_LIMIT}",
            f"local RANK_WEIGHT, PRIORITY_WEIGHT, MAX_SEQ = {RANK_WEIGHT}, {PRIORITY_WEIGHT}, {MAX_SEQ}",
            "local SIZED = {" + ", ".join(f"{t} = {SIZE_WEIGHT}" for t in SIZED_TYPES) + "}",
            f"local STREAM_MAXLEN, MAX_EVENTS = {STREAM_MAXLEN}, {MAX_EVENTS}",
            f"local REQUEST_LOG_MAX, REQUEST_LOG_TTL_MS, RECORD_FORMAT = "
            f"{REQUEST_LOG_MAX}, {REQUEST_LOG_TTL_MS}, {RECORD_FORMAT}",
            f"local STAGE_TTL_MS = {STAGE_TTL_MS}",
            f"local N_CONFIG = {len(Meta.CONFIG)}",
            f"local CONFIG_FIELDS = {{{config}}}",
            f"local CONFIG_TEXT = {_lua_table({f: True for f in Meta.TEXT})}",
            f"local CONFIG_FLOAT = {_lua_table({f: True for f in Meta.FLOAT})}",
            f"local CONFIG_DEFAULTS = {_lua_table(Meta.DEFAULTS)}",
            f"local ARCHIVE_INDEX = '{ARCHIVE_INDEX}'",
            f"local CLEARED = {{placeholder = '{CLEARED_PLACEHOLDER}', key = '{CLEARED_KEY}'}}",
            f"local STORED_HEAD, MAX_TIME_US = '{STORED_HEAD}', {MAX_TIME_US}",
            f"local ITEM_ARGS = {ITEM_ARGS}",
            f"local USAGE = {{calibration_min = {CALIBRATION_MIN}, calibration_max = {CALIBRATION_MAX}, "
            f"samples = {CALIBRATION_SAMPLES}, lookback = {USAGE_LOOKBACK}, message_overhead = {MESSAGE_OVERHEAD}, "
            f"reply_priming = {REPLY_PRIMING}}}",
            f"local PENDING = {{max_inputs = {PENDING_MAX_INPUTS}, max_bytes = {PENDING_MAX_BYTES}}}",
            "",
        ]
    )
