"""Plain reads: a plan's commands in one MULTI/EXEC, with a read script queued last when the
plan needs one, sync and asyncio; and what to do when the server refuses them (at maxmemory, or
lacking the script). A cluster's client sends no MULTI (redis-py's asyncio cluster client has
none): it runs the same commands in one call of commands.lua, then the script alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis

from ..core.wire import text as wire_text
from ..errors import corrupt_value
from .redis_failures import is_oom


def _queued(pipe: Any, commands: Sequence[Sequence[Any]], then: Any, scripts: Any) -> Any:
    """``pipe`` with ``commands`` and, last, the script call ``then`` (if any) queued."""
    for words in commands:
        pipe.execute_command(*words)
    if then is not None:
        pipe.execute_command(*scripts.words(then.name, list(then.keys), then.argv()))
    return pipe


def _refused(exc: redis.exceptions.ResponseError, then: Any, scripts: Any) -> bool:
    """After the transaction raised ``exc``: False when the server is at maxmemory (it refuses
    every queued command, reads too: the plan reads with scripts instead); True when it refused
    ``then`` as it was queued (an ``FCALL`` it does not know: run each alone); else ``exc``."""
    if is_oom(exc):
        return False
    if then is None or not scripts.missing(exc):
        raise exc
    return True


def _lacks(replies: list[Any], then: Any, scripts: Any) -> bool:
    """Whether the last reply says the server lacks the script ``then`` (run it alone, loading it)."""
    return then is not None and isinstance(replies[-1], Exception) and bool(scripts.missing(replies[-1]))


def _raised(replies: list[Any], commands: Sequence[Sequence[Any]]) -> list[Any]:
    """``replies``, unless one is an error: raised, as ``CorruptWindowError`` for a key of another
    type than the scripts write (as a script reports it)."""
    for at, reply in enumerate(replies):
        if isinstance(reply, Exception):
            if at < len(commands) and str(reply).startswith("WRONGTYPE"):
                key = wire_text(commands[at][1])
                raise corrupt_value(key, "", "another type than the scripts write") from reply
            raise reply
    return replies


def _pairs(flat: list[Any]) -> dict[Any, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


#: a reply of commands.lua -> the reply as redis-py parses the command's own (in a MULTI too)
_SHAPES: dict[str, Callable[[Any], Any]] = {
    "GET": lambda r: r,
    "HGETALL": _pairs,
    "SMEMBERS": set,
    "HSCAN": lambda r: (int(r[0]), _pairs(r[1])),
    "ZCOUNT": int,
    "ZCARD": int,
}


def _script_args(commands: Sequence[Sequence[Any]]) -> tuple[list[Any], list[Any]]:
    """KEYS and ARGV of commands.lua for ``commands`` (each ``(verb, key, *words)``)."""
    keys: list[Any] = []
    argv: list[Any] = [""]  # no request
    for verb, key, *words in commands:
        if key not in keys:
            keys.append(key)
        argv += [verb, keys.index(key) + 1, len(words), *words]
    return keys, argv


def _shaped(commands: Sequence[Sequence[Any]], replies: list[Any]) -> list[Any]:
    """commands.lua's ``replies`` in the shapes redis-py gives each command's (errors as they are)."""
    pairs = zip(commands, replies, strict=True)
    return [r if isinstance(r, Exception) else _SHAPES.get(c[0], list)(r) for c, r in pairs]


def scripted_read(commands: Sequence[Sequence[Any]], then: Any, scripts: Any) -> list[Any]:
    """``plain_read`` for a cluster's client: ``commands`` in one call of commands.lua (as atomic
    as the transaction), then ``then`` alone. That is as safe for the ``built`` event: it is
    written only while the window's meta is what the plan read before the commands, and a meta
    that held through both calls means a window that did not change between them."""
    keys, argv = _script_args(commands)
    replies = _shaped(commands, scripts.run("commands", keys, argv)) if commands else []
    if then is not None:
        replies.append(scripts.run(then.name, list(then.keys), then.argv()))
    return _raised(replies, commands)


async def ascripted_read(commands: Sequence[Sequence[Any]], then: Any, scripts: Any) -> list[Any]:
    """``scripted_read`` for an asyncio cluster client."""
    keys, argv = _script_args(commands)
    replies = _shaped(commands, await scripts.arun("commands", keys, argv)) if commands else []
    if then is not None:
        replies.append(await scripts.arun(then.name, list(then.keys), then.argv()))
    return _raised(replies, commands)


def plain_read(
    client: Any, commands: Sequence[Sequence[Any]], then: Any = None, scripts: Any = None
) -> list[Any] | None:
    """``commands`` in one MULTI/EXEC on ``client``; their replies, or None when the server is at
    maxmemory: Redis then refuses every command queued in a MULTI, reads too, while a read script
    still runs, so the plan reads with scripts instead (``PlainRead``). ``then``: a script call
    (a ``ScriptCall`` without request) queued last in the same transaction, its reply last; when
    the server lacks it (``scripts``: the ``ScriptRegistry``), it is loaded and run alone after."""
    try:
        replies: list[Any] = _queued(client.pipeline(transaction=True), commands, then, scripts).execute(
            raise_on_error=False
        )
    except redis.exceptions.ResponseError as exc:
        if not _refused(exc, then, scripts):
            return None
        alone = plain_read(client, commands)
        if alone is None:
            return None
        replies = [*alone, exc]
    if _lacks(replies, then, scripts):
        replies[-1] = scripts.run(then.name, list(then.keys), then.argv())
    return _raised(replies, commands)


async def aplain_read(
    client: Any, commands: Sequence[Sequence[Any]], then: Any = None, scripts: Any = None
) -> list[Any] | None:
    """``plain_read`` for an asyncio client."""
    try:
        replies: list[Any] = await _queued(client.pipeline(transaction=True), commands, then, scripts).execute(
            raise_on_error=False
        )
    except redis.exceptions.ResponseError as exc:
        if not _refused(exc, then, scripts):
            return None
        alone = await aplain_read(client, commands)
        if alone is None:
            return None
        replies = [*alone, exc]
    if _lacks(replies, then, scripts):
        replies[-1] = await scripts.arun(then.name, list(then.keys), then.argv())
    return _raised(replies, commands)
