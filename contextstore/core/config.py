"""Window config and store options as typed, constrained values.

``ConfigValues`` declares every window option with its bounds; ``config_values()`` checks what
a caller passed against it (one place for every "int, not bool, in range" of the config) and
``creation_config()`` gives a new window its full ``WindowConfig``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

import msgspec
from msgspec import UNSET, Meta, UnsetType

from ..errors import InvalidOptionsError, ReplicationTimeoutError
from ..types import (
    DEFAULT_ARCHIVE_TTL_SECONDS,
    DEFAULT_THRESHOLD,
    DEFAULT_WARN_PERCENT,
    CompactionStrategy,
    WindowConfig,
)
from . import blobs
from .itemcache import DEFAULT_CACHE_BYTES
from .layout import MAX_CONTENT_BYTES, MAX_EVENTS, MAX_ITEM_LIMIT, MAX_TOKENS, MAX_TTL_SECONDS, STREAM_MAXLEN
from .retry import RetryPolicy
from .tokens import TokenCounter
from .validate import int_in, unknown_name

#: what a window gets when its creator passes nothing
DEFAULT_MAX_ITEMS = 50
DEFAULT_STRATEGY = CompactionStrategy.REMOVE_LOW_PRIORITY

MaxTokens = Annotated[int, Meta(ge=1, le=MAX_TOKENS)]
MaxItems = Annotated[int, Meta(ge=1, le=MAX_ITEM_LIMIT)]
Threshold = Annotated[float, Meta(gt=0, le=100)]
TtlSeconds = Annotated[int, Meta(ge=1, le=MAX_TTL_SECONDS)]
KeepRecent = Annotated[int, Meta(ge=0, le=MAX_ITEM_LIMIT)]
ClearAtLeast = Annotated[int, Meta(ge=0, le=MAX_TOKENS)]
EventsMaxlen = Annotated[int, Meta(ge=1, le=MAX_EVENTS)]
#: a tool (function) name as OpenAI and Anthropic spell them
ToolName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]


class ConfigValues(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Window options a caller passed; ``UNSET`` where they passed nothing. ``None`` means "no
    limit" for ``max_tokens`` and "no expiry" for ``ttl_seconds``."""

    max_tokens: MaxTokens | UnsetType | None = UNSET
    max_items: MaxItems | UnsetType | None = UNSET
    compaction_threshold: Threshold | UnsetType = UNSET
    default_strategy: CompactionStrategy | UnsetType = UNSET
    ttl_seconds: TtlSeconds | UnsetType | None = UNSET
    keep_recent: KeepRecent | UnsetType | None = UNSET
    clear_at_least: ClearAtLeast | UnsetType | None = UNSET
    clear_exclude_tools: tuple[ToolName, ...] | UnsetType | None = UNSET
    warn_percent: Threshold | UnsetType = UNSET
    events_maxlen: EventsMaxlen | UnsetType = UNSET
    archive_ttl_seconds: TtlSeconds | UnsetType = UNSET
    compaction_target: Threshold | UnsetType | None = UNSET

    def passed(self) -> dict[str, Any]:
        """The options that were passed, by name."""
        return {f: v for f in self.__struct_fields__ if (v := getattr(self, f)) is not UNSET}


class StoreLimits(msgspec.Struct, kw_only=True):
    """The numeric store options."""

    item_limit: MaxItems = 1000
    max_content_bytes: Annotated[int, Meta(ge=1, le=MAX_CONTENT_BYTES)] = 1_048_576
    item_cache_bytes: Annotated[int, Meta(ge=0)] = DEFAULT_CACHE_BYTES
    blob_threshold_bytes: Annotated[int, Meta(ge=0, le=MAX_CONTENT_BYTES)] = blobs.DEFAULT_THRESHOLD
    max_part_bytes: Annotated[int, Meta(ge=1, le=MAX_CONTENT_BYTES)] = blobs.DEFAULT_MAX_PART_BYTES


_PATH = re.compile(r" - at `\$\.(\w+)`$")
_UNKNOWN = re.compile(r"unknown field `(\w+)`")


def checked(kind: type[msgspec.Struct], given: dict[str, Any], what: str) -> Any:
    """``given`` converted to ``kind``, or ``InvalidOptionsError`` naming the option, its value
    and the rule it broke."""
    try:
        return msgspec.convert(given, kind)
    except UnicodeEncodeError as exc:  # a str holding a lone surrogate
        raise InvalidOptionsError(f"invalid {what}: a value is not UTF-8 text ({exc})") from None
    except msgspec.ValidationError as exc:
        text = str(exc)
        unknown = _UNKNOWN.search(text)
        if unknown is not None:
            raise unknown_name(what, unknown.group(1), kind.__struct_fields__) from None
        found = _PATH.search(text)
        if found is None:
            raise InvalidOptionsError(f"invalid {what}: {text}") from None
        name = found.group(1)
        rule = text[: found.start()]
        raise InvalidOptionsError(f"invalid {what} {name}={given.get(name)!r}: {rule[:1].lower()}{rule[1:]}") from None


def config_values(given: dict[str, Any], item_limit: int) -> ConfigValues:
    """Check window options (``InvalidOptionsError`` on the first bad one); ``max_items`` may not
    exceed the store's ``item_limit``."""
    values: ConfigValues = checked(ConfigValues, given, "window option")
    if isinstance(values.max_items, int) and values.max_items > item_limit:
        raise InvalidOptionsError(
            f"max_items must be at most the store's item_limit ({item_limit}), not {values.max_items}"
        )
    return values


def creation_config(values: ConfigValues, item_limit: int) -> WindowConfig:
    """The config a new window gets from the options its creator passed: no limits at all is a
    50-item sliding window; ``max_tokens`` alone caps items at ``item_limit``."""
    max_tokens = values.max_tokens or None
    max_items = values.max_items or None
    if max_items is None:
        max_items = DEFAULT_MAX_ITEMS if max_tokens is None else item_limit
    threshold = values.compaction_threshold
    strategy = values.default_strategy
    tools = values.clear_exclude_tools
    return WindowConfig(
        max_tokens=max_tokens,
        max_items=max_items,
        compaction_threshold=DEFAULT_THRESHOLD if isinstance(threshold, UnsetType) else threshold,
        default_strategy=DEFAULT_STRATEGY if isinstance(strategy, UnsetType) else strategy,
        ttl_seconds=values.ttl_seconds or None,
        item_limit=item_limit,
        keep_recent=values.keep_recent or 0,
        clear_at_least=values.clear_at_least or 0,
        clear_exclude_tools=tools if isinstance(tools, tuple) else (),
        warn_percent=DEFAULT_WARN_PERCENT if isinstance(values.warn_percent, UnsetType) else values.warn_percent,
        events_maxlen=STREAM_MAXLEN if isinstance(values.events_maxlen, UnsetType) else values.events_maxlen,
        archive_ttl_seconds=DEFAULT_ARCHIVE_TTL_SECONDS
        if isinstance(values.archive_ttl_seconds, UnsetType)
        else values.archive_ttl_seconds,
        compaction_target=values.compaction_target or None,
    )


class StoreOptions(TypedDict, total=False):
    """The keyword options every store constructor takes (all optional)."""

    #: key prefix of every window (the window-id alphabet); default "ctx"
    prefix: str
    #: None (tiktoken cl100k_base), an encoding name, a ``TokenCounter`` or a callable str -> int
    token_counter: TokenCounter | str | Callable[[str], int] | None
    #: hard cap on the items of any window, and the default max_items of a token window; 1000
    item_limit: int
    #: largest item content in UTF-8 bytes; 1 MiB
    max_content_bytes: int
    #: content bytes of the windows' items the store keeps after reading them, so that a build
    #: reads only what changed (least recently built windows go first); 64 MiB, 0: keep nothing
    item_cache_bytes: int
    #: a content part whose payload (a data: URL, base64 data) has at least this many bytes is
    #: stored once per prefix as a blob, by reference; 16 KiB, 0: never
    blob_threshold_bytes: int
    #: the most bytes of data (as given: a data: URL, base64) one part stored by reference may
    #: hold; such parts count here, not toward max_content_bytes; 20 MiB (OpenAI's and Gemini's
    #: limit of an image or inline data; Anthropic takes images of up to 5 MB)
    max_part_bytes: int
    #: what SUMMARIZE calls: ``summarize(items) -> str`` (or a callable, or their async forms)
    summarizer: Any
    #: what SELECTIVE calls: ``score(query, items) -> list[float]`` (or a callable, or async)
    relevance_scorer: Any
    #: how failures whose outcome is unknown are retried; None: never
    retry: RetryPolicy | None
    #: an OpenTelemetry MeterProvider for the store's metrics (default: the global one)
    meter_provider: Any
    #: "none" (default: a write is acknowledged once the primary has it) or "replicated"
    durability: str
    #: with durability="replicated": how many replicas must confirm each write (default 1)
    replicas: int
    #: with durability="replicated": how long a write waits for them (default 1000 ms)
    timeout_ms: int
    #: None (default): run the scripts as one function library where the server has functions
    #: (Redis 7+, Valkey), else EVALSHA; False: always EVALSHA
    functions: bool | None


#: the values of the ``durability`` store option
DURABILITY_LEVELS = ("none", "replicated")
#: how long a write waits for its replicas by default
DEFAULT_TIMEOUT_MS = 1000


@dataclass(frozen=True, slots=True)
class Durability:
    """Wait after each write until ``replicas`` replicas have it, at most ``timeout_ms``."""

    replicas: int = 1
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    def check(self, reply: Any, acknowledged: int) -> None:
        """Raise ``ReplicationTimeoutError`` when a script that wrote (its reply is not an
        error table) reached fewer replicas than asked."""
        failed = isinstance(reply, list) and bool(reply) and reply[0] in (b"!", "!")
        if acknowledged < self.replicas and not failed:
            raise ReplicationTimeoutError(acknowledged, self.replicas, self.timeout_ms)


def durability_of(level: object, replicas: object, timeout_ms: object) -> Durability | None:
    """The store's durability from its options (None: acknowledge as soon as the primary has it)."""
    if level not in DURABILITY_LEVELS:
        raise InvalidOptionsError(f"durability must be one of {', '.join(DURABILITY_LEVELS)}, not {level!r}")
    if level == "none":
        if replicas is not None or timeout_ms is not None:
            raise InvalidOptionsError('replicas and timeout_ms apply only with durability="replicated"')
        return None
    return Durability(
        int_in("replicas", 1 if replicas is None else replicas, 1, 100),
        int_in("timeout_ms", DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms, 1, 3_600_000),
    )
