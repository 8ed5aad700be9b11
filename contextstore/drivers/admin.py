"""What an operator does for a deployment whose ACL users may not load code themselves (tenants:
docs/reliability.md): ``load_scripts`` loads contextstore's scripts on a server (every node of a
cluster): the function library to every primary (a replica gets it by replication), every
script for ``EVALSHA`` to every node (``SCRIPT LOAD`` is neither replicated nor persisted).
``tenant_acl`` gives a tenant user's ACL rules, and ``check_user`` what a user lacks of the
commands contextstore runs and (``ACL DRYRUN``) of the keys its tenant's calls touch, and which
keys outside its tenant it reaches (``core/tenants.py``). The sync and asyncio forms differ only
in awaiting."""

from __future__ import annotations

from typing import Any

import redis.exceptions as rx

from ..core import tenants
from ..core.keys import is_cluster
from ..core.streams import StreamCall
from ..errors import InvalidOptionsError
from ..plans.driver import AsyncDriver, SyncDriver
from .scripts import SCRIPT_NAMES, library, library_name, sources
from .streaming import aretried, retried

#: what ``load_scripts()`` retries, as its log lines name it
LOAD_SCRIPTS = StreamCall("load_scripts", {})
#: what reading a server's ACL and commands retries
READ_ACL = StreamCall("acl", {})


def _where(client: Any, nodes: str) -> dict[str, Any]:
    return {"target_nodes": nodes} if is_cluster(client) else {}


def _replica(exc: rx.RedisError) -> bool:
    """A read-only replica refuses ``FUNCTION LOAD``: it gets the library from its primary."""
    return isinstance(exc, rx.ReadOnlyError) or "READONLY" in str(exc)


def _loaded(functions: bool) -> list[str]:
    return [f"function library {library_name()}"] * functions + [f"{len(SCRIPT_NAMES)} scripts for EVALSHA"]


def _load(client: Any) -> list[str]:
    try:
        client.execute_command("FUNCTION", "LOAD", "REPLACE", library()[0], **_where(client, "primaries"))
        functions = True
    except rx.RedisError as exc:
        if not _replica(exc):
            raise
        functions = False
    for source in sources().values():
        client.execute_command("SCRIPT", "LOAD", source, **_where(client, "all"))
    return _loaded(functions)


def load_scripts(driver: SyncDriver) -> list[str]:
    """Load every script on the store's server (every node of a cluster); what was loaded."""
    driver.start()
    return retried(driver, LOAD_SCRIPTS, lambda: _load(driver.client()))  # type: ignore[no-any-return]


async def _aload(client: Any) -> list[str]:
    try:
        await client.execute_command("FUNCTION", "LOAD", "REPLACE", library()[0], **_where(client, "primaries"))
        functions = True
    except rx.RedisError as exc:
        if not _replica(exc):
            raise
        functions = False
    for source in sources().values():
        await client.execute_command("SCRIPT", "LOAD", source, **_where(client, "all"))
    return _loaded(functions)


async def aload_scripts(driver: AsyncDriver) -> list[str]:
    """``load_scripts`` for the asyncio store."""
    driver.start()
    client = await driver.client()
    return await aretried(driver, LOAD_SCRIPTS, lambda: _aload(client))  # type: ignore[no-any-return]


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _user_rules(getuser: Any) -> str:
    """The command rules of an ``ACL GETUSER`` reply (redis-py answers a dict of its fields)."""
    fields = {_text(k): v for k, v in getuser.items()}
    return _text(fields.get("commands", b""))


def _everything(commands: Any, categories: dict[str, list[str]]) -> set[str]:
    """Every command (``COMMAND``, parsed by redis-py: name -> info) and subcommand."""
    return {_text(c).lower() for c in commands} | {n for members in categories.values() for n in members}


def _key_findings(own: list[Any], outside: list[Any], replies: list[Any]) -> list[str]:
    """What ``ACL DRYRUN``'s replies (to ``own`` then ``outside``) say is wrong."""
    found = [what for (what, _), r in zip(own, replies, strict=False) if _text(r) != "OK"]
    reached = zip(outside, replies[len(own) :], strict=True)
    found += [f"not refused: {what}" for (what, _), r in reached if _text(r) == "OK"]
    return found


def _check(client: Any, user: str, tenant: str, prefix: str) -> list[str]:
    getuser = client.execute_command("ACL", "GETUSER", user)
    if getuser is None:
        raise InvalidOptionsError(f"the server has no ACL user {user!r}")
    names = [_text(c) for c in client.execute_command("ACL", "CAT")]
    categories = {c: [_text(x).lower() for x in client.execute_command("ACL", "CAT", c)] for c in names}
    everything = _everything(client.command(), categories)
    lacking = tenants.lacking(_user_rules(getuser), categories, everything)
    own, outside = tenants.key_checks(prefix, tenant)
    replies = [client.execute_command("ACL", "DRYRUN", user, *cmd) for _, cmd in (*own, *outside)]
    return lacking + _key_findings(own, outside, replies)


def check_user(driver: SyncDriver, user: str, tenant: str | None = None) -> list[str]:
    """What ACL user ``user`` lacks of the commands contextstore runs and of the keys
    ``tenant``'s calls touch (default: the tenant named as the user), and which keys outside
    the tenant it reaches ("not refused: ..."); needs ACL GETUSER and ACL DRYRUN."""
    tenant = tenants.checked_tenant(user if tenant is None else tenant)
    driver.start()
    prefix = driver.settings.prefix
    return retried(driver, READ_ACL, lambda: _check(driver.client(), user, tenant, prefix))  # type: ignore[no-any-return]


def tenant_acl(driver: SyncDriver, tenant: str) -> list[str]:
    """The ACL rules of ``tenant``'s user on the store's server (``tenants.tenant_rules``)."""
    return tenants.tenant_rules(driver.settings.prefix, tenant)


async def _acheck(client: Any, user: str, tenant: str, prefix: str) -> list[str]:
    getuser = await client.execute_command("ACL", "GETUSER", user)
    if getuser is None:
        raise InvalidOptionsError(f"the server has no ACL user {user!r}")
    names = [_text(c) for c in await client.execute_command("ACL", "CAT")]
    categories = {c: [_text(x).lower() for x in await client.execute_command("ACL", "CAT", c)] for c in names}
    everything = _everything(await client.command(), categories)
    lacking = tenants.lacking(_user_rules(getuser), categories, everything)
    own, outside = tenants.key_checks(prefix, tenant)
    replies = [await client.execute_command("ACL", "DRYRUN", user, *cmd) for _, cmd in (*own, *outside)]
    return lacking + _key_findings(own, outside, replies)


async def acheck_user(driver: AsyncDriver, user: str, tenant: str | None = None) -> list[str]:
    """``check_user`` for the asyncio store."""
    tenant = tenants.checked_tenant(user if tenant is None else tenant)
    driver.start()
    client, prefix = await driver.client(), driver.settings.prefix
    return await aretried(driver, READ_ACL, lambda: _acheck(client, user, tenant, prefix))  # type: ignore[no-any-return]


async def atenant_acl(driver: AsyncDriver, tenant: str) -> list[str]:
    """``tenant_acl`` for the asyncio store."""
    return tenants.tenant_rules(driver.settings.prefix, tenant)
