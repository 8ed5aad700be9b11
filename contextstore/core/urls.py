"""Naming a Redis server without its password: in errors, reprs and logs."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def cluster_url(url: str) -> tuple[str, bool]:
    """The URL without its ``cluster=`` query parameter, and whether that parameter asked for a
    Redis Cluster client (``?cluster=true``). ``ValueError`` for another value."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    flags = [v.lower() for k, v in query if k == "cluster"]
    if not flags:
        return url, False
    if any(f not in _TRUE + _FALSE for f in flags):
        raise ValueError(f"cluster= must be true or false, not {flags[0]!r}")
    rest = urlencode([(k, v) for k, v in query if k != "cluster"])
    return urlunsplit(parts._replace(query=rest)), flags[-1] in _TRUE


def _userinfo(url: str) -> tuple[str, str, str] | None:
    """(user, password, host:port) of a URL with ``user:password@``; None without a password or
    when the URL does not parse at all."""
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        return None
    userinfo, at, hostport = netloc.rpartition("@")
    user, colon, password = userinfo.partition(":")
    return (user, password, hostport) if at and colon else None


def redact_url(url: str) -> str:
    """The URL without its password (``redis://user:***@host``), even when other parts of it
    are malformed."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    info = _userinfo(url)
    if info is None:
        return url
    return urlunsplit(parts._replace(netloc=f"{info[0]}:***@{info[2]}"))


def scrub(text: str, url: str) -> str:
    """``text`` with the URL's password (if any) replaced by ``***``."""
    info = _userinfo(url)
    return text.replace(info[1], "***") if info and info[1] else text


def describe_client(client: Any) -> str:
    """A password-free description of where a client connects."""
    try:
        kw = client.connection_pool.connection_kwargs
    except AttributeError:
        nodes = getattr(client, "startup_nodes", None)
        if nodes:
            return "redis-cluster://" + ",".join(f"{n.host}:{n.port}" for n in nodes)
        return type(client).__name__
    if kw.get("path"):
        return f"unix://{kw['path']}"
    return f"redis://{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"
