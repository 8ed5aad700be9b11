"""``durability="replicated"``: a mutation is acknowledged only once replicas have it.

Redis replicates asynchronously, so a primary that fails right after answering can take an
acknowledged write with it. With this option every mutating script is followed, on the same
connection and in the same write (a pipeline of two commands), by ``WAIT <replicas>
<timeout_ms>``, which returns how many replicas have everything that connection wrote. Fewer
than asked raises ``ReplicationTimeoutError``: the write is applied (once), it is only not known
to be on a replica. WAIT must run on the connection that ran the script, so on a cluster the pair
goes to the node that owns the window's slot, over that node's own connection pool.
"""

from __future__ import annotations

from typing import Any

import redis.exceptions as rx

from ..core.config import Durability
from ..core.keys import is_cluster


def _wait(d: Durability) -> list[Any]:
    return ["WAIT", d.replicas, d.timeout_ms]


def _paired(client: Any, words: list[Any], d: Durability) -> Any:
    """A pipeline (sync or asyncio) of ``client`` holding the script, then WAIT: one connection,
    one write."""
    pipe = client.pipeline(transaction=False)
    pipe.execute_command(*words)
    pipe.execute_command(*_wait(d))
    return pipe


def _outcome(replies: list[Any]) -> tuple[Any, int]:
    """The script's reply and the WAIT count; the first error raised once both were read."""
    for r in replies:
        if isinstance(r, Exception):
            raise r
    return replies[0], int(replies[1])


def _sync_target(client: Any, key: str) -> Any:
    """The ``redis.Redis`` that serves ``key``: the client, or its slot's primary on a cluster."""
    return client.get_node_from_key(key).redis_connection if is_cluster(client) else client


def _sync_pair(target: Any, words: list[Any], d: Durability) -> tuple[Any, int]:
    """The script's reply and the WAIT count, from one pipeline on ``target``."""
    return _outcome(_paired(target, words, d).execute(raise_on_error=False))


def run_replicated(client: Any, scripts: Any, call: Any, d: Durability) -> Any:
    """Run ``call`` (a ``ScriptCall``, with the ``ScriptRegistry``) and WAIT on one connection of
    the node that owns its keys; its reply."""
    name, keys, argv = call.name, list(call.keys), call.argv()
    target = _sync_target(client, keys[0])
    try:
        reply, acked = scripts.calling(lambda words: _sync_pair(target, words, d), target, name, keys, argv)
    except (rx.AskError, rx.ConnectionError, rx.TimeoutError):
        if is_cluster(client):
            client.nodes_manager.initialize()  # the slot moved or its node failed: look again
        raise
    d.check(reply, acked)
    return reply


async def _async_pair(client: Any, words: list[Any], keys: list[str], d: Durability) -> tuple[Any, int]:
    """The script and WAIT in one write on one connection: a pipeline, or on a cluster (whose
    pipeline would route the keyless WAIT anywhere) a connection of the node that owns ``keys``."""
    if not is_cluster(client):
        return _outcome(await _paired(client, words, d).execute(raise_on_error=False))
    node = client.get_node_from_key(keys[0])
    conn = node.acquire_connection()
    try:
        await conn.send_packed_command(conn.pack_commands([words, _wait(d)]))
        replies: list[Any] = []
        for _ in range(2):
            try:
                replies.append(await conn.read_response())
            except rx.ResponseError as exc:  # a whole reply was read: keep reading
                replies.append(exc)
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        node.release(conn)
    return _outcome(replies)


class _NodeLoader:
    """``function_load`` / ``script_load`` on one node of an asyncio cluster client."""

    def __init__(self, node: Any) -> None:
        self.node = node

    async def function_load(self, code: str, replace: bool = False) -> Any:
        return await self.node.execute_command("FUNCTION", "LOAD", *(["REPLACE"] if replace else []), code)

    async def script_load(self, code: str) -> Any:
        return await self.node.execute_command("SCRIPT", "LOAD", code)


async def arun_replicated(client: Any, scripts: Any, call: Any, d: Durability) -> Any:
    """``run_replicated`` for the asyncio clients."""
    name, keys, argv = call.name, list(call.keys), call.argv()
    if is_cluster(client):
        await client.initialize()
    loader = _NodeLoader(client.get_node_from_key(keys[0])) if is_cluster(client) else client
    try:
        send = lambda words: _async_pair(client, words, keys, d)  # noqa: E731
        reply, acked = await scripts.acalling(send, loader, name, keys, argv)
    except (rx.AskError, rx.ConnectionError, rx.TimeoutError):
        if is_cluster(client):
            await client.nodes_manager.initialize()
        raise
    d.check(reply, acked)
    return reply
