"""The exception tree, and the one place where failures become exceptions.

Every error the library raises derives from ``ContextStoreError``, and every exception
pickles with its fields (``unit``, ``current``, ``conflicts``, ...), so it crosses
``multiprocessing`` pools and task queues intact. Below the tree, two tables map what can fail
to these exceptions: ``SCRIPT_ERRORS`` (the status codes the Lua scripts answer) and
``REDIS_ERRORS`` in ``drivers/redis_failures.py`` (redis-py's exceptions, with whether a retry may help).

May import: nothing else of contextstore; no I/O (no redis, asyncio, subprocess or HTTP).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def _rebuild(cls: type[ContextStoreError], args: tuple[Any, ...], state: dict[str, Any]) -> ContextStoreError:
    """Unpickle an exception without calling its ``__init__`` (whose arguments differ from
    ``args``, the message): the same class, message and fields as the pickled one."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class ContextStoreError(Exception):
    """Base class of every error raised by contextstore."""

    #: the code a Lua script refused the call with (e.g. ``"REUSED"``: a request id already used
    #: for a different call); None for an error raised before or outside a script
    code: str | None = None

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
    ``keep_recent`` or a larger ``max_tokens`` frees room). For tokens, ``max`` is the window's
    limit in estimated tokens: ``max_tokens`` through its token calibration (``record_usage``).
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
    """A helper outside Redis failed or answered badly: the summarizer (a model endpoint's error
    status, a timeout, an empty answer) or the relevance scorer (or the embedding function behind
    it). The window is unchanged; the message names the helper, and the helper's own exception,
    if any, is the ``__cause__``."""


class StoreUnavailableError(ContextStoreError):
    """Redis could not be reached. The message names the URL without its password."""


class UnsupportedServerError(ContextStoreError):
    """The server is older than the floor: contextstore runs on Redis >= 7.0 and Valkey >= 7.2.
    The message names the floor and the server's version; nothing was written."""


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
    """A window's keys hold a value in a shape contextstore never writes (changed by hand or by
    another program), found before anything was written: the call changed nothing. ``key`` and
    ``field`` name the value (a hash field, or "" for a whole key); ``verify()`` (and
    ``contextstore verify <window>``) lists every such problem; ``restore()`` of a snapshot or
    ``delete()`` repairs the window."""

    def __init__(self, message: str, key: str = "", field: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.field = field


def corrupt_value(key: str, field: str, what: str) -> CorruptWindowError:
    """The error for a stored value in a shape no script writes: ``key`` (its ``field``) is ``what``."""
    where = f"{key} field {field!r}" if field else key or "a key of the window"
    return CorruptWindowError(
        f"{where} holds a value contextstore never writes ({what}); nothing was changed", key, field
    )


class ScriptError(ContextStoreError):
    """A script answered a status code this version does not know (a mismatched deployment)."""


class VersionConflictError(ContextStoreError):
    """A conditional write found the window moved on since it was read (its ``version`` is not
    ``expect_version``, or the newest items are not the ones to replace): nothing was written.
    ``current_version``: the window's, when it was the version."""

    def __init__(self, message: str, current_version: str = "") -> None:
        super().__init__(message)
        self.current_version = current_version


class ReplayUnavailableError(ContextStoreError):
    """A retried request (its ``request_id`` seen before) was applied once already, by another
    version of contextstore whose recorded reply this version cannot read (a retry that crossed
    an upgrade, within the request log's 15 minutes): it is not applied again, and its first
    reply cannot be given. ``request_id``: the recorded request ("<operation>:<request id>")."""

    def __init__(self, message: str, request_id: str = "") -> None:
        super().__init__(message)
        self.request_id = request_id


class TurnBusyError(ContextStoreError):
    """``win.turn(policy="reject")`` found another turn holding the window's lease: nothing was
    written. ``owner`` is the running turn's owner, ``retry_after_ms`` how long its lease runs."""

    def __init__(self, message: str, owner: str = "", retry_after_ms: int = 0) -> None:
        super().__init__(message)
        self.owner = owner
        self.retry_after_ms = retry_after_ms


class TurnQueuedError(TurnBusyError):
    """``win.turn(policy="enqueue", input=...)`` found another turn running: the input was stored
    as pending (``pending`` inputs wait now), for the running turn or the next one to take. Not a
    failure of the request: nothing is lost, and this caller has no turn to run."""

    def __init__(self, message: str, pending: int = 0) -> None:
        super().__init__(message)
        self.pending = pending


class TurnLostError(ContextStoreError):
    """A write through a turn whose lease ran out or was taken over (``interrupt``,
    ``rollback``, or another turn after it expired): nothing was stored. ``reason``: "expired",
    "taken over" or "window gone"."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


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
    # an outside-Redis compaction's items changed between its read and its commit (the plan
    # reads again and decides again; a caller never sees it)
    "CONFLICT": lambda d, _: VersionConflictError(f"the items to compact changed: {' '.join(d)}"),
    "MOVED": lambda d, _: VersionConflictError(f"the window moved on: {' '.join(d)}", *d[1:2]),  # version, current
    "REUSED": lambda d, _: InvalidOptionsError(f"request id {d[0]!r} was already used for a different call"),
    "RECORDED": lambda d, _: ReplayUnavailableError(
        f"request {d[0]!r} was applied once already, by a version of contextstore that recorded its reply in "
        f"format {d[1]} (this version reads {d[2]}): not applied again, and its reply cannot be replayed",
        d[0],
    ),
    "BADARG": lambda d, badarg: badarg(f"rejected by the server: {' '.join(d)}"),
    "CORRUPT": lambda d, _: corrupt_value(*[*d, "", "", ""][:3]),
    "TOOLCALL": lambda d, _: ToolCallLinkError(_TOOLCALL_PROBLEMS.get(d[0], "{}").format(d[1] if len(d) > 1 else "")),
    "NOSUMMARY": lambda d, _: SummaryNotFoundError(
        d[0], "its archive entry expired or never existed" if d[1] == "archive" else "it is no longer in the window"
    ),
    "TURNBUSY": lambda d, _: TurnBusyError(f"another turn ({d[0]}) holds the window for {d[1]} ms", d[0], int(d[1])),
    "QUEUED": lambda d, _: TurnQueuedError(f"a turn is running: the input waits as pending ({d[0]} in all)", int(d[0])),
    "QUEUEFULL": lambda d, _: TurnBusyError(
        f"another turn ({d[0]}) holds the window and {d[2]} inputs ({d[3]} bytes) already wait for a turn: the "
        f"input was not stored (at most {d[4]} inputs, {d[5]} bytes wait)",
        d[0],
        int(d[1]),
    ),
    "TURNLOST": lambda d, _: TurnLostError(f"the turn lost its lease ({d[0]}): nothing was stored", d[0]),
    "INUSE": lambda d, _: DuplicateItemError(f"cannot put the items back: {d[0]} {d[1]!r} is in the window again"),
    "NOITEM": lambda d, _: InvalidOptionsError(f"item {d[0]!r} is not in the window"),
    "EXISTS": lambda d, _: InvalidOptionsError("a window with the fork's id exists already: fork into a new id"),
    "SPLIT": lambda d, _: InvalidOptionsError(
        f"that would cut tool-call group {d[0]!r} apart: go back to an item before or after the whole group"
    ),
    "NOTVERSION": lambda d, _: InvalidOptionsError(
        f"version {d[0]!r} is not one this window reported (another window's, or from before it was made "
        f"again): pass the version of a build of this window"
    ),
    "NOREWIND": lambda d, _: InvalidOptionsError(
        f"no rewind {d[0]!r} to undo: unknown, undone already, or its archive_ttl_seconds passed"
    ),
}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def is_error(reply: Any) -> bool:
    """Whether a script's ``reply`` is an error reply ``{'!', CODE, detail...}``."""
    return isinstance(reply, list) and bool(reply) and _text(reply[0]) == "!"


def raise_for_reply(reply: Any, badarg: type[ContextStoreError] = InvalidItemError) -> Any:
    """Return ``reply``, or raise the exception its status code maps to."""
    if is_error(reply):
        code, details = _text(reply[1]), [_text(x) for x in reply[2:]]
        factory = SCRIPT_ERRORS.get(code)
        if factory is None:
            raise ScriptError(f"{code}: {' '.join(details)}")
        error = factory(details, badarg)
        error.code = code
        raise error
    return reply


def from_helper(exc: BaseException, kind: str) -> ContextStoreError:
    """The error for a ``kind`` helper ("summarizer" or "relevance scorer") that raised (the
    caller chains it); a contextstore error it raised itself passes as it is."""
    if isinstance(exc, ContextStoreError):
        return exc
    return HelperError(f"the {kind} raised {type(exc).__name__}: {exc}")
