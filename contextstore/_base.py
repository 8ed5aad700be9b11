"""What the sync and the asyncio stores share: settings, script registration, error mapping,
and URL redaction. Only driving a plan (``sync.py`` / ``aio.py``) differs between them."""

from __future__ import annotations

import logging
import os
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis.exceptions

from . import ops, scripts
from .embedded import EmbeddedServer
from .errors import (
    ContextStoreError,
    InvalidOptionsError,
    PermissionDeniedError,
    StoreOutOfMemoryError,
    StoreUnavailableError,
)
from .keys import window_id_from_meta_key
from .retry import RetryPolicy, retryable
from .tokens import resolve_counter

S = TypeVar("S", bound="StoreBase")
log = logging.getLogger("contextstore")

DEFAULTS: dict[str, Any] = {
    "prefix": "ctx",
    "token_counter": None,
    "item_limit": 1000,
    "max_content_bytes": 1_048_576,
    "summarizer": None,
    "relevance_scorer": None,
    "retry": RetryPolicy(),
}


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


def make_settings(opts: dict[str, Any]) -> ops.Settings:
    unknown = set(opts) - set(DEFAULTS)
    if unknown:
        raise InvalidOptionsError(f"unknown store option(s): {', '.join(sorted(unknown))}")
    o = {**DEFAULTS, **opts}
    ops.validate_settings(o["prefix"], o["item_limit"], o["max_content_bytes"])
    if o["retry"] is not None and not isinstance(o["retry"], RetryPolicy):
        raise InvalidOptionsError(f"retry must be a RetryPolicy or None, not {o['retry']!r}")
    return ops.Settings(
        prefix=o["prefix"],
        counter=resolve_counter(o["token_counter"]),
        item_limit=o["item_limit"],
        max_content_bytes=o["max_content_bytes"],
        summarizer=o["summarizer"],
        relevance_scorer=o["relevance_scorer"],
        retry=o["retry"],
    )


def store_error(exc: Exception, where: str) -> ContextStoreError:
    """Map a redis-py exception to ours (the caller raises it ``from exc``)."""
    rx = redis.exceptions
    text = str(exc)
    if isinstance(exc, rx.OutOfMemoryError) or text.startswith("OOM ") or "-OOM " in text:
        return StoreOutOfMemoryError(
            f"Redis at {where} is out of memory (maxmemory reached, nothing evictable); "
            f"nothing was changed: {text}"
        )
    if isinstance(exc, (rx.NoPermissionError, rx.AuthenticationError, rx.AuthorizationError)) or (
        "NOPERM" in text
    ):
        return PermissionDeniedError(f"Redis at {where} denied access: {text}")
    if isinstance(exc, (rx.ConnectionError, rx.TimeoutError, OSError)):
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


class StoreBase:
    """Construction shared by ``ContextStore`` and ``AsyncContextStore``; a subclass names the
    redis-py client class it uses (``redis.Redis`` or ``redis.asyncio.Redis``)."""

    _redis_class: ClassVar[Any]
    _retry_class: ClassVar[Any]

    @classmethod
    def _no_retry(cls) -> Any:
        from redis.backoff import NoBackoff

        return cls._retry_class(NoBackoff(), 0)

    def __init__(self, client: Any, **options: Any) -> None:
        self._owns_client = bool(options.pop("_owns_client", False))
        where = options.pop("_where", None)
        self._server: EmbeddedServer | None = options.pop("_server", None)
        self._settings = make_settings(options)
        self._client = client
        self._scripts = ScriptRegistry(client)
        self._where = where or describe_client(client)

    @classmethod
    def from_url(cls: type[S], url: str, **options: Any) -> S:
        """Connect to ``redis://``, ``rediss://`` or ``unix://`` URLs (credentials included)."""
        try:
            # no retries inside redis-py: the store's RetryPolicy retries (safely, by request id)
            client = cls._redis_class.from_url(url, retry=cls._no_retry())
        except (ValueError, TypeError) as exc:
            raise InvalidOptionsError(f"invalid Redis URL {redact_url(str(url))}: {scrub(str(exc), str(url))}") from None
        return cls(client, _owns_client=True, _where=redact_url(url), **options)

    @classmethod
    def embedded(cls: type[S], path: str | os.PathLike[str] | None = None, **options: Any) -> S:
        """Use the bundled ``redis-server`` (AOF on, unix socket, data under ``path``), started
        on the first operation, or reused if it already runs there."""
        server = EmbeddedServer(path)
        client = cls._redis_class(unix_socket_path=server.socket_path, retry=cls._no_retry())
        return cls(client, _owns_client=True, _where=server.url, _server=server, **options)

    @classmethod
    def from_env(cls: type[S], **options: Any) -> S:
        """``CONTEXTSTORE_URL`` if it is set, else :meth:`embedded`."""
        url = os.environ.get("CONTEXTSTORE_URL")
        return cls.from_url(url, **options) if url else cls.embedded(**options)

    def _retry_delay(self, exc: Exception, attempt: int, call: ops.ScriptCall) -> float:
        """Seconds to wait before sending ``call`` again after its ``attempt``-th failure, or
        raise the mapped error when ``exc`` is not retryable or the attempts are used up."""
        policy = self._settings.retry
        if policy is None or not retryable(exc):
            raise store_error(exc, self._where) from exc
        if attempt >= policy.attempts:
            if attempt > 1:  # retries are routine (DEBUG); giving up is worth one WARNING
                log.warning("gave up on %s on %s after %d attempts: %s: %s", call.name, self._where,
                            attempt, type(exc).__name__, exc)
            raise store_error(exc, self._where) from exc
        delay = policy.delay(attempt)
        log.debug("retrying %s on %s in %.3fs (attempt %d of %d failed: %s: %s)", call.name,
                  self._where, delay, attempt, policy.attempts, type(exc).__name__, exc)
        return delay

    def _ensure_server(self) -> None:
        if self._server is not None and not self._server.started_here:
            self._server.ensure_running()  # blocking, once per process

    def _window_id(self, key: bytes | str) -> str | None:
        return window_id_from_meta_key(self._settings.prefix, key.decode() if isinstance(key, bytes) else key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._where}, prefix={self._settings.prefix!r})"
