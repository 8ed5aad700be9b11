"""Loads the Lua scripts (``lua/*.lua``), and turns their error replies into typed exceptions.

Each script is registered once per client with ``register_script``; redis-py's Script objects
run EVALSHA and reload the script by themselves when the server answers NOSCRIPT.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from .codec import as_str
from .errors import (
    ContextStoreError,
    ContextWindowFullError,
    DuplicateItemError,
    InvalidItemError,
    InvalidOptionsError,
)

SCRIPT_NAMES = (
    "add", "remove", "pin", "priority", "clear", "compact", "commit", "restore",
    "configure", "ensure", "delete", "event", "read",
)  # fmt: skip


def _lua_dir() -> Path:
    """``contextstore/lua`` inside an installed wheel, else ``lua/`` of a source checkout."""
    packaged = resources.files("contextstore").joinpath("lua")
    if packaged.is_dir():
        return Path(str(packaged))
    source = Path(__file__).resolve().parent.parent / "lua"
    if source.is_dir():
        return source
    raise ContextStoreError("contextstore's Lua scripts are missing from this installation")


@lru_cache(maxsize=1)
def sources() -> dict[str, str]:
    """Every script's full source: the shared ``_lib.lua``, then the script's body as ``main``,
    run under the request protocol (``run_request``, see ``_lib.lua``)."""
    d = _lua_dir()
    lib = (d / "_lib.lua").read_text(encoding="utf-8")
    return {
        n: f"{lib}\nlocal function main()\n{(d / f'{n}.lua').read_text(encoding='utf-8')}\nend\n"
        "return run_request(main)\n"
        for n in SCRIPT_NAMES
    }


class ScriptError(ContextStoreError):
    """A script refused its arguments or found the window's keys in an unexpected shape."""


class CommitConflict(ContextStoreError):
    """Internal: items changed between the read and the commit of an outside-Redis compaction."""


def check(reply: Any, badarg: type[ContextStoreError] = InvalidItemError) -> Any:
    """Raise the typed exception for an error reply ``{'!', CODE, ...}``; else return it."""
    if isinstance(reply, list) and reply and as_str(reply[0]) == "!":
        code = as_str(reply[1])
        rest = [as_str(x) for x in reply[2:]]
        if code == "FULL":
            return_unit, current, maximum, requested = rest
            raise ContextWindowFullError(return_unit, int(current), int(maximum), int(requested))
        if code == "DUPLICATE":
            raise DuplicateItemError(f"item id {rest[0]!r} exists with other content")
        if code == "CONFLICT":
            raise CommitConflict(rest[0] if rest else "")
        if code == "REUSED":
            raise InvalidOptionsError(f"request id {rest[0]!r} was already used for a different call")
        if code == "BADARG":
            raise badarg(f"rejected by the server: {' '.join(rest)}")
        raise ScriptError(f"{code}: {' '.join(rest)}")
    return reply
