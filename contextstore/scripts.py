"""The Lua scripts: loading ``lua/*.lua``, assembling each with the helpers it needs, and
registering them once per client.

A script file names the helper files (``lua/lib/*.lua``) it uses on its ``-- needs:`` line; a
helper names the ones it stands on the same way. ``sources()`` gives each script its full body:
the constants generated from ``layout.py``, every helper it needs (in dependency order), then
the script's own code as ``main``, run under the exactly-once request protocol.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import ContextStoreError
from .layout import lua_constants

SCRIPT_NAMES = (
    "add", "remove", "pin", "priority", "clear", "compact", "commit", "restore",
    "configure", "ensure", "delete", "event", "read", "undo", "lease", "vectors", "pop",
)  # fmt: skip

#: every helper file, each after the ones it needs; ``requests`` (run_request) is in every script
LIB_NAMES = ("core", "events", "meta", "items", "compaction", "archive", "requests")
_NEEDS = re.compile(r"^-- needs: (.*)$", re.M)


def lua_dir() -> Path:
    """``contextstore/lua`` inside an installed wheel, else ``lua/`` of a source checkout."""
    packaged = resources.files("contextstore").joinpath("lua")
    if packaged.is_dir():
        return Path(str(packaged))
    source = Path(__file__).resolve().parent.parent / "lua"
    if source.is_dir():
        return source
    raise ContextStoreError("contextstore's Lua scripts are missing from this installation")


def needs(text: str) -> set[str]:
    """The helper files a script or helper names on its ``-- needs:`` line."""
    found = _NEEDS.search(text)
    if found is None:
        raise ContextStoreError("a Lua file has no '-- needs:' line")
    return {n for n in found.group(1).split() if n in LIB_NAMES}


def _closure(direct: set[str], libs: dict[str, str]) -> list[str]:
    todo, seen = [*direct, "requests"], set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(needs(libs[name]))
    return [n for n in LIB_NAMES if n in seen]


@lru_cache(maxsize=1)
def sources() -> dict[str, str]:
    """Every script's full source, keyed by script name."""
    base = lua_dir()
    libs = {n: (base / "lib" / f"{n}.lua").read_text(encoding="utf-8") for n in LIB_NAMES}
    out = {}
    for name in SCRIPT_NAMES:
        body = (base / f"{name}.lua").read_text(encoding="utf-8")
        parts = [lua_constants(), *(libs[n] for n in _closure(needs(body), libs))]
        out[name] = "\n".join(parts) + f"\nlocal function main()\n{body}\nend\nreturn run_request(main)\n"
    return out


class ScriptRegistry:
    """redis-py ``Script`` objects for one client, registered on first use (no I/O until the
    first call; redis-py reloads a script by itself when the server answers NOSCRIPT)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._scripts: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._client.register_script(sources()[name])
        return script
