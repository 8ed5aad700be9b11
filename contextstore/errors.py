"""The exception tree. Every error the library raises derives from :class:`ContextStoreError`.

Every exception pickles with its fields (``unit``, ``current``, ``conflicts``, ...), so it
crosses ``multiprocessing`` pools and task queues intact.
"""

from __future__ import annotations

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

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class InvalidItemError(ContextStoreError, ValueError):
    """An item (content, type, priority, metadata, token count, id) failed validation."""


class InvalidWindowIdError(ContextStoreError, ValueError):
    """A window id (or a key prefix) is empty, too long, or uses characters outside the alphabet."""


class InvalidOptionsError(ContextStoreError, ValueError):
    """A window config value, a build option or a call argument is out of range."""


class DuplicateItemError(ContextStoreError, ValueError):
    """A caller-given item id already exists in the window with different content."""


class ContextWindowFullError(ContextStoreError):
    """The item cannot be added: the window is full and nothing may be evicted or compacted.

    ``unit`` is ``"items"`` or ``"tokens"``; ``current`` and ``max`` are measured in that unit,
    ``requested`` is what the rejected add needed.
    """

    def __init__(self, unit: str, current: int, max: int, requested: int) -> None:  # noqa: A002
        self.unit = unit
        self.current = current
        self.max = max
        self.requested = requested
        super().__init__(
            f"context window full ({unit}): current={current}, max={max}, requested={requested}"
        )


class BudgetTooSmallError(ContextStoreError):
    """The pinned items alone exceed the token budget of a build."""

    def __init__(self, pinned_tokens: int, budget: int) -> None:
        self.pinned_tokens = pinned_tokens
        self.budget = budget
        super().__init__(
            f"pinned items need {pinned_tokens} tokens but the build budget is {budget}"
        )


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


class StoreUnavailableError(ContextStoreError):
    """Redis could not be reached. The message names the URL without its password."""


class StoreOutOfMemoryError(ContextStoreError):
    """Redis refused a write: it reached ``maxmemory`` and its policy evicts nothing
    (``noeviction``). The call changed nothing; free memory (remove, clear, compact, delete)
    or raise ``maxmemory``."""


class PermissionDeniedError(ContextStoreError):
    """Redis refused the credentials, or the ACL user may not touch this window's keys or run
    the command (a tenant confined to its own key pattern, see ``docs/reliability.md``)."""
