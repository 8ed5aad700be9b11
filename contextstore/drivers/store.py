"""What the sync and the asyncio stores share: their options, construction (``from_url``,
``embedded``, ``from_env``), and when to retry. Only driving a plan (``sync.py`` /
``aio.py``) differs between them."""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, BinaryIO, ClassVar, Generic, TypeVar, overload

from typing_extensions import Unpack

from ..core.config import StoreLimits, StoreOptions, checked, durability_of
from ..core.keys import is_cluster, meta_pattern, validate_window_id, window_id_from_meta_key, window_id_of
from ..core.layout import SCRIPT_CALLS
from ..core.retry import RetryPolicy
from ..core.streams import StreamCall
from ..core.tokens import resolve_counter
from ..core.urls import check_options, cluster_url, describe_client, redact_url, url_options, url_problem
from ..core.validate import known_names
from ..core.wire import unwrap_mutation
from ..errors import InvalidOptionsError, PermissionDeniedError, StoreClosedError
from ..metrics import Metrics
from ..plans.base import PlainRead, Plan, ScriptCall, Settings
from .embedded import EmbeddedServer
from .redis_failures import REDIS_EXCEPTIONS, from_redis, is_refusal, is_retryable
from .scripts import ScriptRegistry

S = TypeVar("S", bound="StoreBase")
T = TypeVar("T")
log = logging.getLogger("contextstore")
_DEFAULT_RETRY = RetryPolicy()


def make_settings(options: StoreOptions) -> Settings:
    """The settings of a store from its options (``InvalidOptionsError`` on a bad one)."""
    known_names("store option", options, StoreOptions.__annotations__)
    prefix = validate_window_id(options.get("prefix", "ctx"), "prefix")
    given = {k: v for k, v in options.items() if k in StoreLimits.__struct_fields__}
    limits: StoreLimits = checked(StoreLimits, given, "store option")
    retry = options.get("retry", _DEFAULT_RETRY)
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise InvalidOptionsError(f"retry must be a RetryPolicy or None, not {retry!r}")
    return Settings(
        prefix=prefix,
        counter=resolve_counter(options.get("token_counter")),
        item_limit=limits.item_limit,
        max_content_bytes=limits.max_content_bytes,
        item_cache_bytes=limits.item_cache_bytes,
        blob_threshold=limits.blob_threshold_bytes,
        max_part_bytes=limits.max_part_bytes,
        summarizer=options.get("summarizer"),
        relevance_scorer=options.get("relevance_scorer"),
        retry=retry,
        durability=durability_of(options.get("durability", "none"), options.get("replicas"), options.get("timeout_ms")),
    )


def _name(call: ScriptCall | StreamCall | PlainRead) -> str:
    return call.method if isinstance(call, StreamCall) else call.name


class StoreBase:
    """Construction shared by ``ContextStore`` and ``AsyncContextStore``; a subclass names the
    redis-py client class it uses (``redis.Redis`` or ``redis.asyncio.Redis``)."""

    _redis_class: ClassVar[Any]
    _cluster_class: ClassVar[Any]
    _retry_class: ClassVar[Any]

    def __init__(self, client: Any, **options: Unpack[StoreOptions]) -> None:
        if not callable(getattr(client, "execute_command", None)):
            hint = ": for a URL, use from_url(url)" if isinstance(client, (str, bytes)) else ""
            name = type(self).__name__
            raise InvalidOptionsError(f"{name}(client) takes a redis-py client, not {type(client).__name__}{hint}")
        self._settings = make_settings(options)
        self._metrics = Metrics(options.get("meter_provider"))
        self._client = client
        self._owns_client = False
        self._server: EmbeddedServer | None = None
        self._client_factory: Callable[[], Any] | None = None  # makes another client like ours
        self._where = describe_client(client)
        self._functions = options.get("functions")
        if self._functions not in (None, True, False):
            raise InvalidOptionsError(f"functions must be None, True or False, not {self._functions!r}")
        self._scripts = ScriptRegistry(client, self._functions)
        self._cluster = is_cluster(client)
        self._settings.plain_reads = not self._cluster
        self._permissions = PermissionCheck()
        self._reached = False  # a call has succeeded: from then on, failures are retried
        self._closed = False
        self._driver = StoreDriver(self)

    @classmethod
    def _owning(cls: type[S], client: Any, where: str, server: EmbeddedServer | None, options: StoreOptions) -> S:
        """A store over a client it made itself (it closes it), named ``where`` in errors."""
        store = cls(client, **options)
        store._owns_client, store._where, store._server = True, where, server
        return store

    @classmethod
    def _no_retry(cls) -> Any:
        from redis.backoff import NoBackoff

        return cls._retry_class(NoBackoff(), 0)

    @classmethod
    def from_url(cls: type[S], url: str, **options: Unpack[StoreOptions]) -> S:
        """Connect to a ``redis://``, ``rediss://`` or ``unix://`` URL (credentials included);
        ``?cluster=true`` makes a Redis Cluster client (the URL names any node). No I/O until
        the first operation, except that a sync cluster client reads the slot map at once (and
        raises ``StoreUnavailableError`` when no node answers)."""
        try:
            plain, cluster = cluster_url(str(url))
            check_options(plain, url_options(plain))
            kind = cls._cluster_class if cluster else cls._redis_class
            # no retries inside redis-py: the store's RetryPolicy retries (safely, by request id)
            client = kind.from_url(plain, retry=cls._no_retry())
            factory = partial(kind.from_url, plain, retry=cls._no_retry())
        except (ValueError, TypeError) as exc:
            raise InvalidOptionsError(
                f"invalid Redis URL {redact_url(str(url))}: {url_problem(exc, str(url))}"
            ) from None
        except REDIS_EXCEPTIONS as exc:
            raise from_redis(exc, redact_url(url)) from exc
        store = cls._owning(client, redact_url(url), None, options)
        store._client_factory = factory  # the asyncio store makes one client per event loop
        return store

    @classmethod
    def embedded(cls: type[S], path: str | os.PathLike[str] | None = None, **options: Unpack[StoreOptions]) -> S:
        """Use the embedded server (``EmbeddedServer``: Valkey; AOF on, unix socket, data under ``path``), started
        on the first operation, or reused if it already runs there."""
        server = EmbeddedServer(path)
        client = cls._redis_class(unix_socket_path=server.socket_path, retry=cls._no_retry())
        return cls._owning(client, server.url, server, options)

    @classmethod
    def from_env(cls: type[S], **options: Unpack[StoreOptions]) -> S:
        """``CONTEXTSTORE_URL`` if it is set, else ``embedded()``."""
        url = os.environ.get("CONTEXTSTORE_URL")
        return cls.from_url(url, **options) if url else cls.embedded(**options)

    def _run(self, plan: Plan[Any]) -> Any:
        """Run ``plan``: the sync store blocks, the asyncio one returns a coroutine."""
        raise NotImplementedError

    def _stream_client(self) -> Any:
        """The client stream commands go to (the asyncio store's: a coroutine)."""
        raise NotImplementedError

    def _durable(self, call: ScriptCall) -> Any:
        """The durability a call waits for: the store's, for a mutation; None for a read."""
        return self._settings.durability if call.request else None

    def _answered(self, call: ScriptCall | PlainRead, reply: Any) -> Any:
        """A reply as its plan takes it: a mutation's counters go to the metrics."""
        self._reached = True
        if not isinstance(call, ScriptCall) or not call.request:
            return reply
        inner, counters = unwrap_mutation(reply)
        self._metrics.changed(window_id_of(call.keys), counters)
        return inner

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._where}, prefix={self._settings.prefix!r})"


class FileSink:
    """``write_snapshot``'s sink over a binary file (``plans.snapshot.SnapshotSink``): it starts
    again where the file stood when it was given."""

    def __init__(self, fp: BinaryIO) -> None:
        try:
            ok = fp.writable() and fp.seekable() and not isinstance(fp, io.TextIOBase)
        except (AttributeError, ValueError, OSError):  # not a file, or a closed one
            ok = False
        if not ok:
            raise InvalidOptionsError(
                f"write_snapshot needs a binary file open for writing that can seek (it starts again on a "
                f"race), not {type(fp).__name__}: open(path, 'wb') or io.BytesIO()"
            )
        self._fp, self._start = fp, fp.tell()

    def write(self, data: bytes) -> object:
        """Append ``data`` to the file."""
        return self._fp.write(data)

    def restart(self) -> None:
        """Back to where the file stood, dropping what was written since."""
        self._fp.seek(self._start)
        self._fp.truncate()


class PermissionCheck:
    """Whether the store's ACL user may run every command the scripts use, asked of the server
    (acl.lua: ``redis.acl_check_cmd``) before the store's first write and again every
    ``EVERY_S`` seconds before a write: a user who lacks one gets ``PermissionDeniedError``
    naming it before anything is written, where the script would otherwise be stopped by Redis
    part-way through its writes."""

    EVERY_S = 60.0

    def __init__(self) -> None:
        self._next = 0.0  # time.monotonic() when it is due

    def due(self, call: ScriptCall) -> ScriptCall | None:
        """The check to run before ``call`` (a write, when the check is due), else None."""
        if not call.request or time.monotonic() < self._next:
            return None
        return ScriptCall("acl", call.keys, list(SCRIPT_CALLS))

    def settle(self, reply: Any, where: str) -> None:
        """Take the check's reply: raise ``PermissionDeniedError`` for commands the user of the
        server at ``where`` lacks."""
        lacking = [x.decode() if isinstance(x, bytes) else str(x) for x in reply]
        if lacking:
            raise PermissionDeniedError(
                f"the Redis user at {where} may not run {', '.join(lacking)}, which contextstore's scripts "
                "run; nothing was written (grant them: contextstore admin acl prints the rules)"
            )
        self._next = time.monotonic() + self.EVERY_S


class StoreDriver:
    """A store as the driver interface of ``plans.driver`` sees it: what the loops outside the
    store (streams, listing, the compactor, turns) use, under public names. The store's own
    plan loops use it too: retries, the closed check and the embedded server live here."""

    def __init__(self, store: StoreBase) -> None:
        self._store = store

    @property
    def settings(self) -> Settings:
        """The store's settings."""
        return self._store._settings

    @property
    def metrics(self) -> Metrics:
        """The store's metrics."""
        return self._store._metrics

    @property
    def cluster(self) -> bool:
        """Whether the store's client is a Redis Cluster client."""
        return self._store._cluster

    @property
    def where(self) -> str:
        """The server, named without its password."""
        return self._store._where

    def run(self, plan: Plan[Any]) -> Any:
        """Run ``plan`` on the store (blocking, or a coroutine to await)."""
        return self._store._run(plan)

    def client(self) -> Any:
        """The client stream commands go to (for the asyncio store, a coroutine)."""
        return self._store._stream_client()

    def reached(self) -> None:
        """Note that a call succeeded: from then on, failures are retried."""
        self._store._reached = True

    def retry_delay(
        self, exc: Exception, attempt: int, call: ScriptCall | StreamCall | PlainRead, started: float
    ) -> float:
        """Seconds to wait before sending ``call`` again after its ``attempt``-th failure (the
        first at ``started``), or raise the mapped error when ``exc`` is not retryable or the
        attempts or the policy's deadline are spent."""
        store = self._store
        policy = store._settings.retry
        if policy is None or not is_retryable(exc) or (isinstance(call, ScriptCall) and not call.retries):
            raise from_redis(exc, store._where) from exc
        if not store._reached and is_refusal(exc, store._cluster):  # nothing listens there: no use waiting
            raise from_redis(exc, store._where) from exc
        delay = policy.next_delay(attempt, started)
        if delay is None:
            if attempt > 1:  # retries are routine (DEBUG); giving up is worth one WARNING
                log.warning(
                    "gave up on %s on %s after %d attempts: %s: %s",
                    _name(call),
                    store._where,
                    attempt,
                    type(exc).__name__,
                    exc,
                )
            raise from_redis(exc, store._where) from exc
        if attempt == 1:  # once per call: what it waits for (the CLI shows this line)
            log.info("waiting for Redis at %s (%s: %s)", store._where, type(exc).__name__, exc)
        log.debug(
            "retrying %s on %s in %.3fs (attempt %d of %d failed: %s: %s)",
            _name(call),
            store._where,
            delay,
            attempt,
            policy.attempts,
            type(exc).__name__,
            exc,
        )
        return delay

    def check_open(self) -> None:
        """Raise ``StoreClosedError`` once ``close()`` was called."""
        if self._store._closed:
            raise StoreClosedError(f"the store of {self._store._where} is closed")

    def start(self) -> None:
        """Before any I/O: refuse a closed store, and start the embedded server if it is ours."""
        self.check_open()
        if self._store._server is not None and not self._store._server.started_here:
            self._store._server.ensure_running()  # blocking, once per process

    @property
    def meta_match(self) -> str:
        """The SCAN pattern of this store's windows' meta keys."""
        return meta_pattern(self._store._settings.prefix)

    def window_ids(self, keys: Iterable[bytes | str]) -> set[str]:
        """The window ids of meta keys that SCAN found."""
        found = set()
        for key in keys:
            wid = window_id_from_meta_key(self._store._settings.prefix, key.decode() if isinstance(key, bytes) else key)
            if wid is not None:
                found.add(wid)
        return found


class StatField(Generic[T]):
    """A read-only attribute of a sync window that reads one field of its ``stats()``."""

    def __init__(self, field: str, doc: str) -> None:
        self.field, self.__doc__ = field, doc

    @overload
    def __get__(self, window: None, owner: type) -> StatField[T]: ...
    @overload
    def __get__(self, window: Any, owner: type) -> T: ...
    def __get__(self, window: Any, owner: type) -> StatField[T] | T:
        return self if window is None else getattr(window.stats(), self.field)
