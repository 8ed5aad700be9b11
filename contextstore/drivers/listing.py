"""``listing.windows(driver)``: SCAN every primary for the windows' meta keys, and scan again while a
cluster's slots move (``core/topology.py``); a failed pass is retried under the store's policy, like
a script call. The sync and asyncio forms differ only in awaiting."""

from __future__ import annotations

from typing import Any

from ..core.keys import is_cluster
from ..core.streams import StreamCall
from ..core.topology import WINDOW_SCAN_PASSES, Layout, layout_of
from ..plans.driver import AsyncDriver, SyncDriver
from .streaming import aretried, retried

#: what ``windows()`` retries, as its log lines name it
WINDOWS_SCAN = StreamCall("scan", {})
_NODES = ("CLUSTER NODES",)


def _layout(client: Any) -> Layout | None:
    return layout_of(client.execute_command(*_NODES, target_nodes="primaries")) if is_cluster(client) else ()


def _passes(driver: SyncDriver) -> list[str]:
    found: set[str] = set()
    client = driver.client()
    for _ in range(WINDOW_SCAN_PASSES):
        before = _layout(client)
        found.update(driver.window_ids(client.scan_iter(match=driver.meta_match, count=1000)))
        if before is not None and before == _layout(client):
            break
    return sorted(found)


def windows(driver: SyncDriver) -> list[str]:
    """Sorted ids of every window under the store's prefix (every primary of a cluster)."""
    driver.start()
    return retried(driver, WINDOWS_SCAN, lambda: _passes(driver))  # type: ignore[no-any-return]


async def _alayout(client: Any) -> Layout | None:
    if not is_cluster(client):
        return ()
    return layout_of(await client.execute_command(*_NODES, target_nodes="primaries"))


async def _apasses(driver: AsyncDriver, client: Any) -> list[str]:
    found: set[str] = set()
    for _ in range(WINDOW_SCAN_PASSES):
        before = await _alayout(client)
        found.update(driver.window_ids([k async for k in client.scan_iter(match=driver.meta_match, count=1000)]))
        if before is not None and before == await _alayout(client):
            break
    return sorted(found)


async def awindows(driver: AsyncDriver) -> list[str]:
    """``windows`` for the asyncio store."""
    driver.start()
    client = await driver.client()
    return await aretried(driver, WINDOWS_SCAN, lambda: _apasses(driver, client))  # type: ignore[no-any-return]
