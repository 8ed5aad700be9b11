"""Key naming and id validation. The only module that knows how keys are spelled.

Every key of a window shares the Redis Cluster hash tag ``{<window_id>}``, so every script
touches a single slot. Window ids and prefixes use an alphabet without braces (which would move
the hash tag) and without glob characters (which would break SCAN and ACL key patterns).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from ..errors import InvalidWindowIdError

_ID_RE = re.compile(r"[A-Za-z0-9._\-:@/+=]{1,200}")
MAX_WINDOW_ID = 200

#: Names of the per-window keys, in the order they are passed to every script as KEYS.
KEY_NAMES = (
    "meta", "items", "order", "fifo", "pinned", "attrs", "events", "requests", "replies", "groups", "calls",
    "archive", "vectors", "lease", "turn", "blobs", "sizes",
)  # fmt: skip


class WindowKeys(NamedTuple):
    """The names of a window's keys, in the order every script takes them as KEYS."""

    meta: str
    items: str
    order: str
    fifo: str
    pinned: str
    attrs: str
    events: str
    requests: str
    replies: str
    groups: str
    calls: str
    archive: str
    vectors: str
    lease: str
    turn: str
    blobs: str
    sizes: str


def is_window_id(value: str) -> bool:
    """Whether ``value`` is a window id (1-200 characters of ``A-Z a-z 0-9 . _ - : @ / + =``)."""
    return _ID_RE.fullmatch(value) is not None


def validate_window_id(window_id: object, what: str = "window id") -> str:
    """Return ``window_id`` if it is 1-200 characters of ``A-Z a-z 0-9 . _ - : @ / + =``."""
    if not isinstance(window_id, str):
        raise InvalidWindowIdError(f"{what} must be a str, not {type(window_id).__name__}")
    if not _ID_RE.fullmatch(window_id):
        raise InvalidWindowIdError(
            f"{what} {window_id[:60]!r} must be 1-{MAX_WINDOW_ID} characters from A-Z a-z 0-9 . _ - : @ / + ="
        )
    return window_id


def window_keys(prefix: str, window_id: str) -> WindowKeys:
    """Every key of ``window_id`` under ``prefix`` (one hash tag: one cluster slot)."""
    base = f"{prefix}:{{{window_id}}}:"
    return WindowKeys(*(base + name for name in KEY_NAMES))


#: the keys of a staging that restore.lua takes after the window's, in this order (stage.lua's
#: ``-- KEYS:`` line names the same)
STAGED = ("meta", "items", "order", "fifo", "pinned", "attrs", "groups", "calls", "blobs", "sizes")


def staged_keys(keys: WindowKeys, staging: str) -> WindowKeys:
    """The keys a big restore into the window of ``keys`` stages its items in (stage.lua),
    ``staging`` naming that restore: under the window's hash tag, in no window's names (no SCAN
    for windows finds them), moved into the window's by restore.lua."""
    base = keys.meta.removesuffix("meta") + f"staged:{staging}:"
    return WindowKeys(*(base + name for name in KEY_NAMES))


def meta_pattern(prefix: str) -> str:
    """SCAN pattern matching the meta key of every window under ``prefix``."""
    return f"{prefix}:{{*}}:meta"


def window_id_from_meta_key(prefix: str, key: str) -> str | None:
    """The window id of a ``:meta`` key found by SCAN, or None if it is not one."""
    head, tail = f"{prefix}:{{", "}:meta"
    if key.startswith(head) and key.endswith(tail):
        wid = key[len(head) : -len(tail)]
        if _ID_RE.fullmatch(wid):
            return wid
    return None


def prefix_of(keys: WindowKeys) -> str:
    """The prefix of a window's keys (what comes before ``:{<window id>}:``)."""
    return keys.meta[: keys.meta.rindex(":{", 0, keys.meta.rindex("}"))]


def window_id_of(keys: Sequence[str]) -> str:
    """The window id of a window's keys (what the hash tag of the first, ``:meta``, holds)."""
    return keys[0][keys[0].index("{") + 1 : keys[0].rindex("}")]


def is_cluster(client: object) -> bool:
    """True for a redis-py cluster client (sync or asyncio)."""
    return "Cluster" in type(client).__name__
