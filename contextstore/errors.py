"""The exception tree, and the one place where failures become exceptions.

Every error the library raises derives from ``ContextStoreError``, and every exception
pickles with its fields (``unit``, ``current``, ``conflicts``, ...), so it crosses
``multiprocessing`` pools and task queues intact. Below the tree, two tables map what can fail
to these exceptions: ``SCRIPT_ERRORS`` (the status codes the Lua scripts answer) and
``REDIS_ERRORS`` (redis-py's exceptions, with whether a retry may help).
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable, Sequence
from typing import Any

import redis.exceptions as rx


def _rebuild(cls: type[ContextStoreError], args: tuple[Any, ...], state: dict[str, Any]) -> ContextStoreError:
    """Unpickle an exception without calling its ``__init__`` (whose arguments differ from
    ``args``, the message): the same class, message and fields as the pickled one."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class ContextStoreError(Exception):
    """Base class of every error raised by contextstore."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class InvalidItemError(ContextStoreError, ValueError):
    """An item (content, type, priority, metadata, token count, id) failed validation."""


class ToolCallLinkError(InvalidItemError):
    """A tool call id is already taken (in the window, or twice in one call), or a tool result
    answers a call the window does not hold (or names another group than its call's)."""


class InvalidWindowIdError(ContextStoreError, ValueError):
    """A window id (or a key prefix) is empty, too long, or uses characters outside the alphabet."""


class InvalidOptionsError(ContextStoreError, ValueError):
    """A window config value, a build option or a call argument is out of range."""


class DuplicateItemError(ContextStoreError, ValueError):
    """A caller-given item id already exists in the window with different content."""


class ContextWindowFullError(ContextStoreError):
    """The item cannot be added: the window is full and nothing may be evicted or compacted.

    ``unit`` is ``"items"`` or ``"tokens"``; ``current`` and ``max`` are measured in that unit,
    ``requested`` is what the rejected add needed. For an add refused for tokens,
    ``pinned_tokens`` and ``kept_tokens`` say what no compaction could touch: the pinned items,
    and the ``keep_recent`` newest conversation units besides them (unpinning, a lower
    ``keep_recent`` or a larger ``max_tokens`` frees room).
    """

    def __init__(
        self, unit: str, current: int, max: int, requested: int, pinned_tokens: int = 0, kept_tokens: int = 0
    ) -> None:
        self.unit = unit
        self.current = current
        self.max = max
        self.requested = requested
        self.pinned_tokens = pinned_tokens
        self.kept_tokens = kept_tokens
        held = ""
        if pinned_tokens or kept_tokens:
            held = (
                f"; no compaction may touch {pinned_tokens} tokens of pinned items and {kept_tokens} of the "
                f"keep_recent newest conversation units (unpin items, lower keep_recent or raise max_tokens)"
            )
        super().__init__(f"context window full ({unit}): current={current}, max={max}, requested={requested}{held}")


class BudgetTooSmallError(ContextStoreError):
    """The pinned items alone exceed the token budget of a build (or, in a chat build, the
    pinned items and the newest user message, which a chat build always includes).
    ``pinned_tokens`` is what those need; ``needs`` says what they are."""

    def __init__(self, pinned_tokens: int, budget: int, needs: str = "pinned items") -> None:
        self.pinned_tokens = pinned_tokens
        self.budget = budget
        self.needs = needs
        super().__init__(f"{needs} need {pinned_tokens} tokens but the build budget is {budget}")


class NoConversationError(ContextStoreError, LookupError):
    """An Anthropic chat build has no message to send: no user or assistant message of the
    window is in it (there is none, the options leave them out, or none fits the budget). The
    Messages API refuses an empty ``messages`` list."""


class ConfigConflictError(ContextStoreError):
    """``store.window(...)`` was passed a config value that differs from the stored config."""

    def __init__(self, window_id: str, conflicts: dict[str, tuple[object, object]]) -> None:
        self.window_id = window_id
        self.conflicts = conflicts
        detail = ", ".join(f"{k}: passed {p!r}, stored {s!r}" for k, (p, s) in conflicts.items())
        super().__init__(f"window {window_id!r} exists with another config ({detail})")


class WindowNotFoundError(ContextStoreError, LookupError):
    """``store.window(window_id, create=False)`` found no window with that id."""

    def __init__(self, window_id: str) -> None:
        self.window_id = window_id
        super().__init__(f"window {window_id!r} does not exist")


class StrategyUnavailableError(ContextStoreError):
    """SUMMARIZE or SELECTIVE was asked for but the store has no summarizer / relevance scorer."""


class SummaryNotFoundError(ContextStoreError, LookupError):
    """``undo_summary()`` of a summary whose archive entry expired (or never existed), or that
    is no longer in the window."""

    def __init__(self, summary_id: str, reason: str) -> None:
        self.summary_id = summary_id
        self.reason = reason
        super().__init__(f"cannot undo summary {summary_id!r}: {reason}")


class HelperError(ContextStoreError):
    """A summarizer or relevance scorer failed; the window is unchanged. The helper's own
    exception is the ``__cause__``."""


class SummarizerError(HelperError):
    """The summarizer failed (a model endpoint's error status, a timeout, an empty answer)."""


class RelevanceScorerError(HelperError):
    """The relevance scorer (or the embedding function behind it) failed or answered badly."""


class StoreUnavailableError(ContextStoreError):
    """Redis could not be reached. The message names the URL without its password."""


class StoreClosedError(ContextStoreError):
    """The store (or the store of this window) was closed: every call after ``close()`` raises
    this; make a new store."""


class ReplicationTimeoutError(ContextStoreError):
    """A store with ``durability="replicated"`` applied a write, but fewer than ``required``
    replicas confirmed it within ``timeout_ms`` (``WAIT``). The write is applied once and kept:
    do not repeat it as new. ``acknowledged_by`` is how many replicas did confirm it."""

    def __init__(self, acknowledged_by: int, required: int, timeout_ms: int) -> None:
        self.acknowledged_by = acknowledged_by
        self.required = required
        self.timeout_ms = timeout_ms
        super().__init__(
            f"the write was applied but only {acknowledged_by} of {required} replica(s) confirmed it "
            f"within {timeout_ms} ms"
        )


class StoreOutOfMemoryError(ContextStoreError):
    """Redis refused a write: it reached ``maxmemory`` and its policy evicts nothing
    (``noeviction``). The call changed nothing; free memory (remove, clear, compact, delete)
    or raise ``maxmemory``."""


class PermissionDeniedError(ContextStoreError):
    """Redis refused the credentials, or the ACL user may not touch this window's keys or run
    the command (a tenant confined to its own key pattern, see ``docs/reliability.md``)."""


class CorruptWindowError(ContextStoreError):
    """A script found a window's keys in a shape the scripts never write (changed by hand or by
    another program); nothing was written. ``contextstore verify <window>`` says what is wrong."""


class ScriptError(ContextStoreError):
    """A script answered a status code this version does not know (a mismatched deployment)."""


class VersionConflictError(ContextStoreError):
    """A conditional write found the window moved on since it was read (its ``version`` is not
    ``expect_version``, or the newest items are not the ones to replace): nothing was written.
    ``current_version``: the window's, when it was the version."""

    def __init__(self, message: str, current_version: str = "") -> None:
        super().__init__(message)
        self.current_version = current_version


class CommitConflict(ContextStoreError):
    """Internal: items changed between the read and the commit of an outside-Redis compaction
    (the plan reads again and decides again)."""


# -- Lua status codes -------------------------------------------------------------------------

ErrorFactory = Callable[[Sequence[str], type[ContextStoreError]], ContextStoreError]

_TOOLCALL_PROBLEMS = {
    "duplicate": "tool call id {!r} is already in the window",
    "unknown": "tool_result answers tool call {!r}, which is not in the window (nor in this add)",
    "group": "tool_result for tool call {!r} names another group than its call's",
}

#: status code of a script's error reply {'!', CODE, detail...} -> the exception it raises;
#: each factory gets the details and the exception class the call uses for a bad argument
SCRIPT_ERRORS: dict[str, ErrorFactory] = {
    "FULL": lambda d, _: ContextWindowFullError(d[0], *(int(x) for x in d[1:6])),
    "DUPLICATE": lambda d, _: DuplicateItemError(f"item id {d[0]!r} exists with other content"),
    "CONFLICT": lambda d, _: CommitConflict(d[0] if d else ""),
    "MOVED": lambda d, _: VersionConflictError(f"the window moved on: {' '.join(d)}", *d[1:2]),  # version, current
    "REUSED": lambda d, _: InvalidOptionsError(f"request id {d[0]!r} was already used for a different call"),
    "BADARG": lambda d, badarg: badarg(f"rejected by the server: {' '.join(d)}"),
    "CORRUPT": lambda d, _: CorruptWindowError(f"item {d[0]!r} is stored in a shape the scripts never write"),
    "TOOLCALL": lambda d, _: ToolCallLinkError(_TOOLCALL_PROBLEMS.get(d[0], "{}").format(d[1] if len(d) > 1 else "")),
    "NOSUMMARY": lambda d, _: SummaryNotFoundError(
        d[0], "its archive entry expired or never existed" if d[1] == "archive" else "it is no longer in the window"
    ),
    "INUSE": lambda d, _: DuplicateItemError(f"cannot undo the summary: {d[0]} {d[1]!r} is in the window again"),
}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def raise_for_reply(reply: Any, badarg: type[ContextStoreError] = InvalidItemError) -> Any:
    """Return ``reply``, or raise the exception its status code maps to."""
    if isinstance(reply, list) and reply and _text(reply[0]) == "!":
        code, details = _text(reply[1]), [_text(x) for x in reply[2:]]
        factory = SCRIPT_ERRORS.get(code)
        if factory is None:
            raise ScriptError(f"{code}: {' '.join(details)}")
        raise factory(details, badarg)
    return reply


# -- redis-py exceptions ----------------------------------------------------------------------


def _is_oom(exc: BaseException) -> bool:
    # inside a script, Redis 6.2 reports OOM as "ERR Error running script ... -OOM ..."
    text = str(exc)
    return isinstance(exc, rx.OutOfMemoryError) or text.startswith("OOM ") or "-OOM " in text


def _is_denied(exc: BaseException) -> bool:
    denied = (rx.NoPermissionError, rx.AuthenticationError, rx.AuthorizationError)
    return isinstance(exc, denied) or "NOPERM" in str(exc)


def _is_cluster_unreachable(exc: BaseException) -> bool:
    # no node answered while the cluster client re-read the slot map (a failover, a restart);
    # its other RedisClusterExceptions (cross-slot keys, ...) are mistakes that retrying repeats
    return isinstance(exc, rx.RedisClusterException) and "cannot be connected" in str(exc)


def _is_busy(exc: BaseException) -> bool:
    # a script running too long elsewhere answers BUSY; it ends (or is killed) on its own
    return isinstance(exc, rx.ResponseError) and str(exc).startswith("BUSY")


#: the outcome is unknown, or the server asked us to come back: retry (by request id, safely)
_COME_BACK = (
    rx.ConnectionError,
    rx.TimeoutError,
    rx.ReadOnlyError,
    rx.TryAgainError,
    rx.ClusterDownError,
    rx.NoScriptError,
    OSError,
    # a cluster client gave up following redirections (TTL exhausted: the slot is migrating or
    # failing over) or found a slot no node serves yet: the command did not run
    rx.ClusterError,
    rx.SlotNotCoveredError,
    # MOVED / ASK reached us: only from the node a replicated write talks to directly
    rx.AskError,
)

#: redis-py exception (by predicate) -> (retryable, the exception to raise when giving up),
#: first match wins; the factory gets the exception and a password-free name of the server
REDIS_ERRORS: list[tuple[Callable[[BaseException], bool], bool, Callable[[BaseException, str], ContextStoreError]]] = [
    (
        _is_oom,
        False,
        lambda e, where: StoreOutOfMemoryError(
            f"Redis at {where} is out of memory (maxmemory reached, nothing evictable); nothing was changed: {e}"
        ),
    ),
    (_is_denied, False, lambda e, where: PermissionDeniedError(f"Redis at {where} denied access: {e}")),
    (_is_busy, True, lambda e, where: ContextStoreError(f"Redis at {where} is busy running a script: {e}")),
    (
        lambda e: isinstance(e, _COME_BACK) or _is_cluster_unreachable(e),
        True,
        lambda e, where: StoreUnavailableError(f"Redis at {where} is unavailable: {e}"),
    ),
    (lambda e: True, False, lambda e, where: ContextStoreError(f"Redis at {where} answered with an error: {e}")),
]

#: what redis-py raises (the shells catch these and map them with ``from_redis``)
REDIS_EXCEPTIONS = (rx.RedisError, rx.RedisClusterException, OSError)


def _entry(exc: BaseException) -> tuple[bool, Callable[[BaseException, str], ContextStoreError]]:
    for matches, retry, factory in REDIS_ERRORS:
        if matches(exc):
            return retry, factory
    raise AssertionError("REDIS_ERRORS ends with a catch-all")  # pragma: no cover


#: what the operating system says when nothing listens where a client connects: a first contact
#: that fails so is reported at once (retries are for a server that was reached and went away)
_REFUSALS = {errno.ECONNREFUSED, errno.ENOENT, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL}


def is_refusal(exc: BaseException | None, cluster: bool = False) -> bool:
    """True when ``exc`` (or its cause) says nothing listens there (refused, no socket, unknown host or
    network); on a cluster only "no node reachable" does: a node in the slot map is failing over."""
    if cluster and not isinstance(exc, rx.RedisClusterException):
        return False
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, socket.gaierror) or (isinstance(exc, OSError) and exc.errno in _REFUSALS):
            return True
        if isinstance(exc, rx.ConnectionError) and any(f"Error {n} " in str(exc) for n in _REFUSALS):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def is_retryable(exc: BaseException) -> bool:
    """True when sending the same request again may succeed (its outcome is unknown, or the
    server asked to come back later)."""
    return _entry(exc)[0]


def from_redis(exc: BaseException, where: str) -> ContextStoreError:
    """The contextstore exception for a redis-py one (the caller raises it ``from exc``)."""
    return _entry(exc)[1](exc, where)


def from_helper(exc: BaseException, kind: str) -> ContextStoreError:
    """The error for a ``kind`` helper ("summarizer" or "relevance scorer") that raised (the
    caller chains it); a contextstore error it raised itself passes as it is."""
    if isinstance(exc, ContextStoreError):
        return exc
    cls = SummarizerError if kind == "summarizer" else RelevanceScorerError
    return cls(f"the {kind} raised {type(exc).__name__}: {exc}")
