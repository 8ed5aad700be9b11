"""What the sync and the asyncio stores share: settings, script registration, error mapping,
and URL redaction. Only driving a plan (``sync.py`` / ``aio.py``) differs between them."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis.exceptions

from . import ops, scripts
from .errors import ContextStoreError, InvalidOptionsError, StoreUnavailableError
from .tokens import resolve_counter

DEFAULTS: dict[str, Any] = {
    "prefix": "ctx",
    "token_counter": None,
    "item_limit": 1000,
    "max_content_bytes": 1_048_576,
    "summarizer": None,
    "relevance_scorer": None,
}


def redact_url(url: str) -> str:
    """The URL without its password (``redis://user:***@host``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


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


def make_settings(opts: dict[str, Any]) -> ops.Settings:
    unknown = set(opts) - set(DEFAULTS)
    if unknown:
        raise InvalidOptionsError(f"unknown store option(s): {', '.join(sorted(unknown))}")
    o = {**DEFAULTS, **opts}
    ops.validate_settings(o["prefix"], o["item_limit"], o["max_content_bytes"])
    return ops.Settings(
        prefix=o["prefix"],
        counter=resolve_counter(o["token_counter"]),
        item_limit=o["item_limit"],
        max_content_bytes=o["max_content_bytes"],
        summarizer=o["summarizer"],
        relevance_scorer=o["relevance_scorer"],
    )


def store_error(exc: Exception, where: str) -> ContextStoreError:
    """Map a redis-py exception to ours (the caller raises it ``from exc``)."""
    if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)):
        return StoreUnavailableError(f"Redis at {where} is unavailable: {exc}")
    return ContextStoreError(f"Redis at {where} answered with an error: {exc}")


REDIS_ERRORS = (redis.exceptions.RedisError, OSError)


class ScriptRegistry:
    """``register_script`` objects for one client, created on first use (no I/O until then)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._scripts: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        s = self._scripts.get(name)
        if s is None:
            s = self._scripts[name] = self._client.register_script(scripts.sources()[name])
        return s


def helper_failed(exc: Exception) -> ContextStoreError:
    return ContextStoreError(f"the summarizer / relevance scorer raised {type(exc).__name__}: {exc}")
