"""The Lua scripts: loading ``lua/*.lua``, assembling them, and running them on a client.

A script file names the helper files (``lua/lib/*.lua``) it uses on its ``-- needs:`` line; a
helper names the ones it stands on the same way, and a name with no file raises
(``tests/test_lua_files.py`` checks that every helper a file calls is in the files it needs).
Two assemblies of the same files (the server floor is Redis 7.0 / Valkey 7.2):

- ``library()``: one function library (``FUNCTION LOAD``, ``FCALL``): the constants
  (``lib/constants.lua``), every helper and each script's own helpers (above its ``-- main:``
  line, ``split_main``) are defined once, when the library is loaded, and each call only runs its
  script's main part. (Defining them on every call costs a script 25-40 µs of server time, more
  than many scripts' own work.)
- ``sources()``: one EVAL script each (``EVALSHA``: a cluster client, or a user who may not load
  functions): the helper files it needs (in dependency order), its own helpers, then its main
  part as ``main``, all defined on every call; it first checks the floor (``FLOOR_CHECK``), which
  a server without functions cannot have checked by refusing ``FUNCTION LOAD``.

Either way the body runs under the exactly-once request protocol (``run_request``), which first
binds the call's keys and arguments and starts its state afresh; a script that takes no request
(``REQUESTLESS``: the reads and the ``built`` event) runs under ``run_plain``, which only binds
them. A script is sent the window keys its header's ``-- KEYS:`` line names (``key_slots``; all
seventeen when it says "the window keys"; a blob script's, as given), and ``in_place`` (lib/calls.lua)
puts each in its place.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import redis.exceptions as rx

from ..core.keys import KEY_NAMES, is_cluster
from ..errors import ContextStoreError

T = TypeVar("T")

SCRIPT_NAMES = (
    "add", "remove", "pin", "priority", "clear", "compact", "commit", "restore",
    "configure", "ensure", "delete", "event", "undo", "lease", "vectors", "pop", "turn", "acl",
    "list", "fetch", "peek", "archived", "dump", "rewind", "forked", "stage",
    "usage", "blob_put", "blob_drop", "blob_index", "blob_counts", "commands",
)  # fmt: skip

#: the scripts that read a window, each for one job (lib/reads.lua: what they share), and those a
#: sweep of the blobs reads with
READS = frozenset({"list", "fetch", "peek", "archived", "dump", "blob_index", "blob_counts", "commands"})
#: scripts that take no request (reads, the ``built`` event, a restore's staged parts): they record no reply, so they
#: run under ``run_plain`` (lib/calls.lua) and carry none of the request protocol (lib/requests.lua)
REQUESTLESS = READS | {"event", "acl", "blob_put", "blob_drop", "stage"}

#: every helper file, each after the ones it needs
LIB_NAMES = (
    "constants",
    "core",
    "calls",
    "events",
    "meta",
    "items",
    "rows",
    "reads",
    "turns",
    "compaction",
    "archive",
    "requests",
)
_NEEDS = re.compile(r"^-- needs: (.*)$", re.M)
_MAIN = re.compile(r"^-- main:", re.M)


@cache
def lua_dir() -> Path:
    """``contextstore/lua`` inside an installed wheel, else ``lua/`` of a source checkout (found
    once: each look costs the package's resource lookup, ~0.5 ms)."""
    packaged = resources.files("contextstore").joinpath("lua")
    if packaged.is_dir():
        return Path(str(packaged))
    source = Path(__file__).resolve().parents[2] / "lua"
    if source.is_dir():
        return source
    raise ContextStoreError("contextstore's Lua scripts are missing from this installation")


def needs(text: str) -> set[str]:
    """The helper files a script or helper names on its ``-- needs:`` line (``(nothing)``: none);
    a name that is no helper file raises."""
    found = _NEEDS.search(text)
    if found is None:
        raise ContextStoreError(f"a Lua file has no '-- needs:' line: {text[:80]!r}")
    named = set(found.group(1).split()) - {"(nothing)"}
    if unknown := named - set(LIB_NAMES):
        raise ContextStoreError(f"a Lua file needs {sorted(unknown)}, which lua/lib/ does not have: {text[:80]!r}")
    return named


def closure(direct: set[str], libs: dict[str, str]) -> list[str]:
    """The helper files ``direct`` names and those they need, in ``LIB_NAMES`` order."""
    todo, seen = list(direct), set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(needs(libs[name]))
    return [n for n in LIB_NAMES if n in seen]


#: helper files that no other helper file needs, only scripts: the function library defines them
#: in a block with the scripts that need them rather than at its top, where Lua allows a function
#: (the library's load step is one) 200 locals in all, the scripts' own helpers included
SCOPED = ("reads", "compaction", "archive", "rows")
#: read-only scripts: ``FCALL_RO`` (a replica may serve them); the library registers them so
READ_ONLY = READS | {"acl"}
#: scripts that free memory, registered to run when the server is at maxmemory (a function is
#: refused there unless it says so; EVAL scripts run, and only their growing writes are refused)
FREES_MEMORY = frozenset({"remove", "pop", "clear", "delete", "compact"})


def _libs() -> tuple[Path, dict[str, str]]:
    base = lua_dir()
    return base, {n: (base / "lib" / f"{n}.lua").read_text(encoding="utf-8") for n in LIB_NAMES}


def runner(name: str) -> str:
    """The Lua function that runs script ``name``'s main for one call: ``run_plain``
    (lib/calls.lua) for a script that takes no request, else ``run_request`` (lib/requests.lua)."""
    return "run_plain" if name in REQUESTLESS else "run_request"


_KEYS = re.compile(
    r"^-- KEYS: (?:the window keys|([a-z]+(?:, [a-z]+)*) \(of the window keys|[a-z, ]+ \(of a blob's keys)", re.M
)


@cache
def key_slots(name: str) -> tuple[int, ...] | None:
    """The places (0-based, in ``keys.KEY_NAMES``) of the window keys script ``name`` takes, as
    its header's ``-- KEYS:`` line names them; None for all of them (or for a script on a blob's
    keys, which takes them as given). A header without such a line, or naming a key the window
    lacks, raises."""
    body = (lua_dir() / f"{name}.lua").read_text(encoding="utf-8")
    found = _KEYS.search(body)
    if found is None:
        raise ContextStoreError(f"lua/{name}.lua has no '-- KEYS:' line naming the window keys it takes")
    if found.group(1) is None:
        return None
    named = found.group(1).split(", ")
    if unknown := set(named) - set(KEY_NAMES):
        raise ContextStoreError(f"lua/{name}.lua takes keys the window lacks: {sorted(unknown)}")
    return tuple(KEY_NAMES.index(n) for n in named)


def _bound(name: str, keys: str) -> str:
    """Lua for the call's keys in their places of the window keys (``in_place``, lib/calls.lua)."""
    slots = key_slots(name)
    return keys if slots is None else f"in_place({keys}, {{{', '.join(str(s + 1) for s in slots)}}})"


def carried(name: str, body: str, libs: dict[str, str]) -> list[str]:
    """The helper files script ``name`` carries as an EVAL script: those its ``-- needs:`` line
    names, those they need, and the file of its runner."""
    return closure(needs(body) | {"calls" if name in REQUESTLESS else "requests"}, libs)


def split_main(text: str) -> tuple[str, str]:
    """A script's text as (its helpers, its main part), split at its ``-- main:`` line (all main
    when it has none). In a function library the helpers are defined once, when the library is
    loaded, each script's in a ``do`` block of its own; only the main part runs per call. (A
    helper defined inside the main part would be made again on every call: ~0.4 µs each.) The
    helpers may use the library's names and the call's ``KEYS`` / ``ARGV``, never a local of the
    main part, and run nothing at load time: a library's load step has no ``string`` or
    ``cjson``."""
    found = _MAIN.search(text)
    if found is None:
        return "", text
    return text[: found.start()], text[found.start() :]


#: the first lines of every EVAL script: a server below the floor (Redis 6.2 and older have no
#: ``redis.REDIS_VERSION_NUM``) answers ``UNSUPPORTED_SERVER <its version>`` and runs nothing
#: (``redis_failures.below_floor``); the function library needs no check (``FUNCTION LOAD`` is 7+)
FLOOR_CHECK = (
    "if (redis.REDIS_VERSION_NUM or 0) < 0x070000 then\n"
    "  local ok, info = pcall(redis.call, 'INFO', 'server')\n"
    "  local version = ok and type(info) == 'string' and string.match(info, 'redis_version:([%d%.]+)')\n"
    "  return redis.error_reply('UNSUPPORTED_SERVER ' .. (version or ''))\nend\n"
)


def evaluated(definition: str) -> str:
    """An EVAL script that runs ``run(KEYS, ARGV)``, the function the Lua chunk ``definition``
    returns (its locals are the function's own: Lua allows a function 200), after the floor
    check. Every call defines what ``definition`` holds (a server keeps nothing between EVALs)."""
    return f"{FLOOR_CHECK}local run = (function()\n{definition}\nend)()\nreturn run(KEYS, ARGV)\n"


@lru_cache(maxsize=1)
def sources() -> dict[str, str]:
    """Every script's full source for EVAL, keyed by script name, run through ``evaluated``: the
    helper files it needs (``closure``: a script defines every helper it carries on each call, so
    it carries only those files), then its own helpers (in a function of their own: Lua allows a
    function 200 locals) and its main part as ``main``."""
    base, libs = _libs()
    out = {}
    for name in SCRIPT_NAMES:
        body = (base / f"{name}.lua").read_text(encoding="utf-8")
        helpers = "\n".join(libs[n] for n in carried(name, body, libs))
        own, main = split_main(body)
        main = f"local main = (function()\n{own}\nreturn function()\n{main}\nend\nend)()\n"
        run = f"return function(keys, args) return {runner(name)}(main, {_bound(name, 'keys')}, args) end\n"
        out[name] = evaluated(f"local KEYS, ARGV = {{}}, {{}}\n{helpers}\n{main}{run}")
    return out


@lru_cache(maxsize=1)
def library() -> tuple[str, dict[str, str]]:
    """The function library: every helper defined when it is loaded (a helper
    file of ``SCOPED`` once for each set of scripts that needs it, in a block with them), and
    one function per script, named after the library's digest so that two versions can be
    loaded side by side. Returns the source and the function name of each script."""
    base, libs = _libs()
    groups: dict[tuple[str, ...], list[str]] = {}  # the scoped helper files a script needs -> its blocks
    for name in SCRIPT_NAMES:
        text = (base / f"{name}.lua").read_text(encoding="utf-8")
        helpers, main = split_main(text)
        scoped = tuple(n for n in carried(name, text, libs) if n in SCOPED)
        groups.setdefault(scoped, []).append(f"do\n{helpers}\nMAINS[{name!r}] = function()\n{main}\nend\nend")
    blocks = [
        "\n".join(["do", *(libs[n] for n in scoped), *mains, "end"]) if scoped else "\n".join(mains)
        for scoped, mains in groups.items()
    ]
    top = [libs[n] for n in LIB_NAMES if n not in SCOPED]
    body = "\n".join(["local KEYS, ARGV = {}, {}", *top, "local MAINS = {}", *blocks])
    digest = hashlib.sha1(body.encode()).hexdigest()[:12]
    names = {name: f"cs_{digest}_{name}" for name in SCRIPT_NAMES}
    registrations = [
        f"redis.register_function{{function_name = '{names[name]}', "
        f"callback = function(keys, args) return {runner(name)}(MAINS[{name!r}], {_bound(name, 'keys')}, args) end"
        + (
            ", flags = {'no-writes'}"
            if name in READ_ONLY
            else ", flags = {'allow-oom'}"
            if name in FREES_MEMORY
            else ""
        )
        + "}"
        for name in SCRIPT_NAMES
    ]
    return f"#!lua name=contextstore_{digest}\n{body}\n" + "\n".join(registrations) + "\n", names


def not_loaded(exc: BaseException) -> rx.NoPermissionError:
    """The refusal of a user who may not load scripts, on a server that lacks this version's
    (the store maps it to ``PermissionDeniedError``): what an operator does about it."""
    return rx.NoPermissionError(
        f"{exc} (the server lacks contextstore's scripts of this version, {library_name()}, and this user may not "
        "load them: an operator runs `contextstore admin load`)"
    )


def library_name() -> str:
    """The function library's name: ``contextstore_<digest of its source>``."""
    return library()[0].split(maxsplit=2)[1].removeprefix("name=")


class ScriptRegistry:
    """How one client runs the scripts: one function library (``FCALL`` / ``FCALL_RO``, loaded
    once with ``FUNCTION LOAD``: by the first call that finds it missing, or by an operator where
    the user may not load code), else one ``EVALSHA`` script each (a server below the floor,
    which the script then refuses, ``functions=False``, or a cluster client: redis-py routes an
    ``FCALL`` by asking a node for its keys, ``COMMAND GETKEYS``, on every call, and fails before
    routing when that node is down; an ``EVALSHA``'s keys it reads itself). No I/O until the first
    call, which finds out: a call whose function or script the server lacks (``Function not
    found``, ``NOSCRIPT``, an unknown ``FCALL``) loads it and runs again (``missing`` /
    ``load``), so a flush, a restart or a failover to a server without them is repaired by the
    call that meets it."""

    def __init__(self, client: Any, functions: bool | None = None) -> None:
        self._client = client
        #: "functions", "eval", or "auto" until the server has answered
        self.mode = "eval" if functions is False or is_cluster(client) else "auto"
        self._scripts: dict[str, Any] = {}

    def script(self, name: str) -> Any:
        """The redis-py ``Script`` of ``name`` (EVAL mode)."""
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._client.register_script(sources()[name])
        return script

    def words(self, name: str, keys: list[str], argv: list[Any]) -> list[Any]:
        """The command that runs script ``name`` with those of the window's ``keys`` it takes
        (``key_slots``): ``FCALL`` / ``FCALL_RO`` (a read-only script), or ``EVALSHA`` (which a
        replica runs too, as long as the script writes nothing)."""
        slots = key_slots(name)
        if slots is not None:
            keys = [keys[s] for s in slots]
        if self.mode == "eval":
            return ["EVALSHA", self.script(name).sha, len(keys), *keys, *argv]
        return ["FCALL_RO" if name in READ_ONLY else "FCALL", library()[1][name], len(keys), *keys, *argv]

    @staticmethod
    def missing(exc: BaseException) -> bool:
        """Whether ``exc`` says the server lacks the script or function (or functions): load
        what the call needs and run it again."""
        if isinstance(exc, rx.NoScriptError):
            return True
        text = str(exc)
        return isinstance(exc, rx.ResponseError) and (
            "Function not found" in text or "unknown command 'FCALL" in text or "unknown command `FCALL" in text
        )

    def _settle(self, exc: BaseException) -> None:
        """After ``FUNCTION LOAD ... REPLACE`` failed with ``exc``: a server without functions
        (below the floor) runs ``EVALSHA`` from now on, whose script refuses it (``FLOOR_CHECK``);
        a user who may not load functions is told who loads them (``not_loaded``: the operator's
        library is what it runs); else ``exc`` is raised."""
        text = str(exc)
        if "unknown command" in text:
            self.mode = "eval"
        elif isinstance(exc, rx.NoPermissionError) or "NOPERM" in text:
            raise not_loaded(exc) from exc
        else:
            raise exc

    def load(self, target: Any, name: str) -> None:
        """Load what running ``name`` needs on ``target`` (the client, or the node that serves
        the call): the library (and learn that the server has functions), else the script. Having
        learnt that scripts run by ``EVALSHA``, it loads nothing: the script may be there (an
        operator's ``load_scripts``), and a call that finds it missing loads it."""
        if self.mode != "eval":
            try:
                target.function_load(library()[0], replace=True)
                self.mode = "functions"
            except rx.ResponseError as exc:
                self._settle(exc)
            return
        if self.mode == "eval":
            try:
                target.script_load(sources()[name])
            except rx.NoPermissionError as exc:
                raise not_loaded(exc) from exc

    async def aload(self, target: Any, name: str) -> None:
        """``load`` for an asyncio client (or node)."""
        if self.mode != "eval":
            try:
                await target.function_load(library()[0], replace=True)
                self.mode = "functions"
            except rx.ResponseError as exc:
                self._settle(exc)
            return
        if self.mode == "eval":
            try:
                await target.script_load(sources()[name])
            except rx.NoPermissionError as exc:
                raise not_loaded(exc) from exc

    def calling(self, send: Callable[[list[Any]], T], target: Any, name: str, keys: list[str], argv: list[Any]) -> T:
        """``send(words)`` of script ``name``, loading on ``target`` what the server lacks: at
        most twice (the library, or learning the server has none; then the script)."""
        for _ in range(2):
            try:
                return send(self.words(name, keys, argv))
            except rx.ResponseError as exc:
                if not self.missing(exc):
                    raise
            self.load(target, name)
        return send(self.words(name, keys, argv))

    async def acalling(
        self, send: Callable[[list[Any]], Awaitable[T]], target: Any, name: str, keys: list[str], argv: list[Any]
    ) -> T:
        """``calling`` for an asyncio client (or node)."""
        for _ in range(2):
            try:
                return await send(self.words(name, keys, argv))
            except rx.ResponseError as exc:
                if not self.missing(exc):
                    raise
            await self.aload(target, name)
        return await send(self.words(name, keys, argv))

    def run(self, name: str, keys: list[str], argv: list[Any]) -> Any:
        """Run script ``name`` through the client's own command path (a cluster routes it by
        its keys), loading it when the server lacks it."""
        return self.calling(lambda words: self._client.execute_command(*words), self._client, name, keys, argv)

    async def arun(self, name: str, keys: list[str], argv: list[Any]) -> Any:
        """``run`` for an asyncio client."""
        return await self.acalling(lambda words: self._client.execute_command(*words), self._client, name, keys, argv)
