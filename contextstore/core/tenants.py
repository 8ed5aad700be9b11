"""Tenants: the ACL rules that confine a Redis user to one tenant's windows and deny it every way
to change the code other tenants' calls run, and the check that a user holds every command the
scripts need, and that it reaches every kind of key its calls touch and no key outside its tenant
(``key_checks``: commands that ``ACL DRYRUN`` runs as the user). Pure functions: the
``contextstore admin`` verbs read the server and print.

A tenant's windows are those whose id starts with ``<tenant>:``; its user reaches only their
keys (``<prefix>:{<tenant>:*}*``) and runs contextstore's scripts, never code of its own: no
``EVAL``, ``SCRIPT LOAD``, ``FUNCTION LOAD|DELETE|FLUSH|RESTORE`` (all of ``@scripting`` but the
calls of loaded code by name or digest), so an operator loads the scripts (``admin load``).
Arbitrary Lua reaches across users on unpatched servers (CVE-2025-46818), so it is no tenant's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ..errors import InvalidOptionsError
from .blobs import blob_keys, sweep_lock
from .keys import KEY_NAMES, window_keys
from .layout import SCRIPT_COMMANDS

_TENANT = re.compile(r"[A-Za-z0-9._\-@+=]{1,100}")

#: how a tenant's user calls the loaded code: by digest (EVALSHA) and by name (FCALL), read-only
#: calls as such
CALLS = ("evalsha", "evalsha_ro", "fcall", "fcall_ro")
#: what a tenant may not do besides @dangerous: list other tenants' keys, or switch databases
DENIED = ("scan", "randomkey", "select", "dbsize")


def checked_tenant(tenant: str) -> str:
    """``tenant`` if it is 1-100 characters from ``A-Z a-z 0-9 . _ - @ + =``, else
    ``InvalidOptionsError``."""
    if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
        raise InvalidOptionsError(f"a tenant is 1-100 characters from A-Z a-z 0-9 . _ - @ + =, not {tenant!r}")
    return tenant


def tenant_rules(prefix: str, tenant: str) -> list[str]:
    """The ``ACL SETUSER <user>`` rules (after ``on`` and the password) for ``tenant``'s user."""
    checked_tenant(tenant)
    return [
        "resetkeys",
        f"~{prefix}:{{{tenant}:*}}*",
        "resetchannels",
        "+@all",
        "-@dangerous",
        "-@scripting",
        *(f"+{c}" for c in CALLS),
        *(f"-{c}" for c in DENIED),
    ]


def needed_commands() -> tuple[str, ...]:
    """Every command a user of contextstore runs: the calls of the scripts and what they run."""
    return (*CALLS, *SCRIPT_COMMANDS)


def _expand(token: str, categories: Mapping[str, Iterable[str]], everything: set[str]) -> set[str]:
    name = token[1:].lower()
    if name == "@all":
        return set(everything)
    if name.startswith("@"):
        return {c.lower() for c in categories.get(name[1:], ())}
    return {name}


def granted(rules: str, categories: Mapping[str, Iterable[str]], everything: set[str]) -> set[str]:
    """The commands (and ``command|sub`` subcommands) an ACL user's command rules, as ``ACL
    GETUSER`` shows them (``+@all -@dangerous +evalsha ...``), allow: each rule applied in turn to
    ``everything`` (every command and subcommand the server has) given its ``categories``."""
    allowed: set[str] = set()
    for token in rules.split():
        if token in ("allcommands", "+@all"):
            allowed = set(everything)
        elif token in ("nocommands", "-@all"):
            allowed = set()
        elif token[:1] in "+-":
            names = _expand(token, categories, everything)
            names |= {n for n in everything if n.split("|")[0] in names and "|" in n and "|" not in token}
            allowed = allowed | names if token[0] == "+" else allowed - names
    return allowed


def lacking(rules: str, categories: Mapping[str, Iterable[str]], everything: set[str]) -> list[str]:
    """The commands contextstore needs that an ACL user's rules deny (``granted``). A subcommand
    the server does not list goes with its command."""
    allowed = granted(rules, categories, everything)

    def ok(name: str) -> bool:
        return name in allowed or (name not in everything and name.split("|")[0] in allowed)

    return [c for c in needed_commands() if not ok(c)]


#: an all-zero sha: the blob key a check names (no payload hashes to it)
_NO_SHA = "0" * 64


def key_checks(prefix: str, tenant: str) -> tuple[list[tuple[str, tuple[str, ...]]], list[tuple[str, tuple[str, ...]]]]:
    """What ``check-user`` asks ``ACL DRYRUN`` for ``tenant``'s user: (what, command) pairs the
    user must be allowed, a read (``TYPE``) and a write (``DEL``) of every kind of key its calls
    touch (each key of a window, its blobs, their index and sweep lock); and pairs it must be
    refused, the same on keys outside its tenant (a window of no tenant, the blobs of no
    tenant). Both commands are among those the scripts run, so a refusal names a key."""
    window = window_keys(prefix, f"{checked_tenant(tenant)}:check-user")
    blob = blob_keys(prefix, f"{tenant}:", _NO_SHA)
    own = [*(f":{name} of its windows" for name in KEY_NAMES), "its blobs", "its blobs' index", "its blobs' sweep lock"]
    own_keys = [*window, blob.data, blob.registry, sweep_lock(prefix, f"{tenant}:")]
    outside = [window_keys(prefix, "check-user").items, blob_keys(prefix, "", _NO_SHA).data]
    others = ["the :items of a window of no tenant", "the blobs of no tenant"]

    def both(whats: list[str], keys: Iterable[str]) -> list[tuple[str, tuple[str, ...]]]:
        pairs = zip(whats, keys, strict=True)
        return [
            (f"{op} {what} ({key.replace(_NO_SHA, '<sha>')})", (cmd, key)) for what, key in pairs for op, cmd in _OPS
        ]

    return both(own, own_keys), both(others, outside)


_OPS = (("read", "TYPE"), ("write", "DEL"))
