"""The driver interface: what runs plans, and the stream calls of ``core.streams``, outside a
store's own methods (in the spirit of httpx's transports).

The stores implement it (``drivers.store.StoreDriver``). The loops that follow streams, list
windows and run the compactor (``drivers.streaming``, ``drivers.listing``,
``drivers.compacting``) and a turn (``turns``) take a driver, never a store class, and use
nothing of the store but these public members. No I/O here: these are only the types.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

from .base import Plan, Settings

T = TypeVar("T")


class Driver(Protocol):
    """What a sync and an asyncio driver both offer."""

    @property
    def settings(self) -> Settings:
        """The store's settings (prefix, counter, retry policy, ...)."""

    @property
    def metrics(self) -> Any:
        """The store's metrics (``contextstore.metrics.Metrics``)."""

    @property
    def cluster(self) -> bool:
        """Whether the store's client is a Redis Cluster client."""

    @property
    def where(self) -> str:
        """The server, named without its password (errors and logs say it)."""

    @property
    def meta_match(self) -> str:
        """The SCAN pattern of the store's windows' meta keys."""

    def start(self) -> None:
        """Before any I/O: refuse a closed store, and start its embedded server if it has one."""

    def check_open(self) -> None:
        """Raise ``StoreClosedError`` once the store was closed."""

    def retry_delay(self, exc: Exception, attempt: int, call: Any, started: float) -> float:
        """Seconds to wait before sending ``call`` again after its ``attempt``-th failure
        (the first at ``started``); raises the mapped error when it must not be retried."""

    def reached(self) -> None:
        """Note that a call succeeded: from then on, failures are retried."""

    def window_ids(self, keys: Iterable[bytes | str]) -> set[str]:
        """The window ids of the meta keys SCAN found."""


class SyncDriver(Driver, Protocol):
    """A driver whose calls block."""

    def run(self, plan: Plan[T]) -> T:
        """Run ``plan`` to its result under the store's retry policy."""

    def client(self) -> Any:
        """The redis-py client stream commands go to."""


class AsyncDriver(Driver, Protocol):
    """A driver whose calls are awaited."""

    async def run(self, plan: Plan[T]) -> T:
        """Run ``plan`` to its result under the store's retry policy."""

    async def client(self) -> Any:
        """The redis-py asyncio client of the running event loop."""
