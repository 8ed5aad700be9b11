"""What every plan shares: the requests a plan yields, the store settings and window state it
works on, request ids, and the read of a window."""

from __future__ import annotations

import inspect
import secrets
import zlib
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..core import blobs, wire
from ..core.config import Durability
from ..core.itemcache import DEFAULT_CACHE_BYTES, ItemCache
from ..core.keys import WindowKeys
from ..core.layout import CLEARED_PLACEHOLDER
from ..core.retry import RetryPolicy
from ..core.sizes import ItemLimits
from ..core.tokens import TokenCounter
from ..core.validate import request_id as checked_request_id
from ..errors import InvalidOptionsError, from_helper
from ..render.prompt import cached_count
from ..types import WindowConfig

T = TypeVar("T")


def _fingerprint(args: Sequence[str | bytes]) -> str:
    crc = 0
    for a in args:
        b = a if isinstance(a, bytes) else a.encode("utf-8")
        crc = zlib.crc32(b, zlib.crc32(len(b).to_bytes(8, "little"), crc))
    return f"{crc:08x}"


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """Run Lua script ``name`` with the window's keys and ``args``.

    ``request`` ("<operation>:<request id>") makes a mutation exactly-once (lib/requests.lua);
    reads leave it empty. ``same_args`` checks that a replayed request id comes with the
    arguments it was first used with, apart from the config arguments a script that may create
    the window starts with (``wire.TAKES_CONFIG``: the handle's cached config, which may have
    changed)."""

    name: str
    #: the window's keys (or a script's own, as a blob's)
    keys: Sequence[str]
    args: Sequence[str | bytes]
    request: str = ""
    same_args: bool = True
    #: whether the store's retry policy applies (False: one attempt, as ending a turn whose body
    #: already waited out an outage)
    retries: bool = True
    #: whether the store puts back the payloads of the blobs the reply refers to (False: the
    #: reply as the server holds it, blob tokens and all: verify's reads)
    inline: bool = True

    def argv(self) -> list[str | bytes]:
        """ARGV as sent: the request ("<request>|<fingerprint of args>"), then the args."""
        if not self.request:
            return ["", *self.args]
        config = wire.CONFIG_ARGS if self.name in wire.TAKES_CONFIG else 0
        fp = _fingerprint(self.args[config:]) if self.same_args else ""
        return [f"{self.request}|{fp}", *self.args]


@dataclass(frozen=True, slots=True)
class External:
    """Call a helper (``kind``: "summarizer" or "relevance scorer"). The sync store calls ``fn``;
    the async store calls ``async_fn`` when there is one, else ``fn``, and awaits what it returns
    if that is awaitable. What it raises becomes ``errors.from_helper(exc, kind)``."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kind: str = "summarizer"
    async_fn: Callable[..., Any] | None = None

    def call(self) -> Any:
        """Call the helper (the sync store); a coroutine is refused: it needs the async store."""
        try:
            result = self.fn(*self.args)
        except Exception as exc:
            raise from_helper(exc, self.kind) from exc
        if inspect.isawaitable(result):
            getattr(result, "close", lambda: None)()
            raise InvalidOptionsError(f"an async {self.kind} needs AsyncContextStore")
        return result

    async def acall(self) -> Any:
        """Call the helper (the async store), preferring its async variant."""
        try:
            result = (self.async_fn or self.fn)(*self.args)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            raise from_helper(exc, self.kind) from exc
        return result


@dataclass(frozen=True, slots=True)
class PlainRead:
    """Run ``commands`` (each a tuple of words) in one MULTI/EXEC on the window's node; the
    reply is the list of their replies, or None when the server is at maxmemory (it refuses
    commands queued in a MULTI then, reads too: the plan reads with a script instead). Plain
    commands: the server sends what its keys hold at C speed, and the transaction makes it one
    consistent read; ``then`` adds one requestless script (the ``built`` event) to it."""

    commands: tuple[tuple[Any, ...], ...]
    name: str = "read"
    #: a script without a request (the ``built`` event) run in the same transaction, after the
    #: commands: its reply comes last (a server that lacks it runs it alone, right after)
    then: ScriptCall | None = None


Plan = Generator["ScriptCall | External | PlainRead", Any, T]


def helper_call(helper: Any, method: str, args: tuple[Any, ...], kind: str) -> External:
    """The ``External`` that calls ``helper.<method>`` (or ``helper`` itself when it is a plain
    function), with ``helper.a<method>`` as the async variant when it has one."""
    fn = getattr(helper, method, None)
    if not callable(fn):
        if not callable(helper):
            raise InvalidOptionsError(f"{helper!r} has no {method}() and is not callable")
        fn = helper
    async_fn = getattr(helper, f"a{method}", None)
    return External(fn, args, kind, async_fn if callable(async_fn) else None)


def new_request(operation: str, request_id: object = None) -> str:
    """The request of one public call: the caller's ``request_id`` (checked) or a fresh one."""
    # 72 random bits in 12 characters: unique among the requests a window's log keeps
    rid = secrets.token_urlsafe(9) if request_id is None else checked_request_id(request_id)
    return f"{operation}:{rid}"


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
    durability: Durability | None = None  # durability="replicated": WAIT after each write
    plain_reads: bool = False  # whole-window reads may be plain commands (a client that is not a cluster's)
    item_cache_bytes: int = DEFAULT_CACHE_BYTES  # what item_cache keeps (store option; 0: nothing)
    #: content parts with a payload this large are stored once per prefix as blobs (0: never)
    blob_threshold: int = blobs.DEFAULT_THRESHOLD
    #: the most bytes one part stored by reference may hold (store option ``max_part_bytes``)
    max_part_bytes: int = blobs.DEFAULT_MAX_PART_BYTES
    blob_cache: blobs.BlobCache = field(init=False)  # the blobs' payloads this store has read
    joint_count: Callable[[str], int] = field(init=False)  # memoised counter.count (build joints)
    item_cache: ItemCache = field(init=False)  # the items builds have read (itemcache.py)
    _placeholder_tokens: int = field(init=False, default=0)

    def item_limits(self) -> ItemLimits:
        """The limits ``validate.new_item`` checks an item's size against."""
        return ItemLimits(self.max_content_bytes, self.blob_threshold, self.max_part_bytes)

    def __post_init__(self) -> None:
        self.joint_count = cached_count(self.counter)
        self.item_cache = ItemCache(self.item_cache_bytes)
        self.blob_cache = blobs.BlobCache()

    @property
    def placeholder_tokens(self) -> int:
        """Tokens of the text CLEAR_TOOL_RESULTS puts in place of a result (counted once)."""
        if not self._placeholder_tokens:
            self._placeholder_tokens = max(1, self.counter.count(CLEARED_PLACEHOLDER))
        return self._placeholder_tokens


@dataclass(slots=True)
class WindowState:
    """What a window handle knows: its id, keys, and the config it last saw (used to recreate
    the window if it was deleted or expired)."""

    window_id: str
    keys: WindowKeys
    config: WindowConfig
    #: whole-window reads may be plain commands (``Settings.plain_reads``; plans/reads.py)
    plain_reads: bool = False
