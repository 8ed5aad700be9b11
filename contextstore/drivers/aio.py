"""The asyncio API: AsyncContextStore and AsyncContextWindow, driving the same plans as the
sync API; only the I/O is awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from functools import cached_property, partial
from typing import Any, BinaryIO, TypeVar

import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
from typing_extensions import Unpack

from .. import compactor, turns
from ..core import streams
from ..core.retry import Attempts
from ..core.streams import EventBatch
from ..core.verify import VerifyReport
from ..events import Event, OtherEvent
from ..plans import blobs as blob_plans
from ..plans import build as build_plans
from ..plans import chat as chat_plans
from ..plans import compaction as compaction_plans
from ..plans import fork as fork_plans
from ..plans import items as item_plans
from ..plans import rewind as rewind_plans
from ..plans import snapshot as snapshot_plans
from ..plans import summaries as summary_plans
from ..plans import usage as usage_plans
from ..plans import window as window_plans
from ..plans.base import External, PlainRead, Plan, ScriptCall, WindowState
from ..types import (
    BuildOptions,
    BuiltContext,
    BuiltMessages,
    ChatFormat,
    CompactionPlan,
    CompactionStrategy,
    Content,
    ContextItem,
    ContextSnapshot,
    ContextWindowStats,
    ItemFields,
    Lineage,
    WindowConfig,
    WindowOptions,
)
from . import admin, blob_io, compacting, listing, streaming
from .durability import arun_replicated
from .loops import LoopClients, loop_error
from .plain_reads import aplain_read, ascripted_read
from .redis_failures import REDIS_EXCEPTIONS
from .scripts import ScriptRegistry
from .store import FileSink, StoreBase

T = TypeVar("T")


class AsyncContextStore(StoreBase):
    """The asyncio twin of ``ContextStore``: same names, awaitable. Usable
    from any event loop (one Redis client per loop, see ``docs/guide.md``)."""

    _redis_class = redis.asyncio.Redis
    _cluster_class = redis.asyncio.cluster.RedisCluster
    _retry_class = redis.asyncio.retry.Retry

    @cached_property
    def _blob_sweeper(self) -> blob_io.AsyncSweeper:
        return blob_io.AsyncSweeper(self._driver)

    @cached_property
    def _loops(self) -> LoopClients:
        registry = partial(ScriptRegistry, functions=self._functions)
        return LoopClients(self._client, self._owns_client, registry, self._client_factory)

    async def _run(self, plan: Plan[T]) -> T:
        self._driver.start()
        try:
            request = next(plan)
            while True:
                request = plan.send(await self._execute(request))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def _stream_client(self) -> Any:
        return (await self._loops.current()).client

    async def _execute(self, request: ScriptCall | External | PlainRead) -> Any:
        if isinstance(request, External):
            return await request.acall()
        tries = Attempts(self._driver.retry_delay, request)
        current = await self._loops.current()
        while True:
            try:
                reply = self._answered(request, await self._once(request, current))
                return await blob_io.ainline(self._driver, self._blob_sweeper, request, reply, current.client)
            except REDIS_EXCEPTIONS as exc:
                delay = tries.failed(exc)
            except RuntimeError as exc:  # a caller's client bound to another (or a closed) loop
                raise loop_error(self._where, exc) from exc
            await asyncio.sleep(delay)

    async def _once(self, request: ScriptCall | PlainRead, current: Any) -> Any:
        """One attempt on this loop's client: the plain commands, or the script (and WAIT when
        writes must replicate)."""
        if isinstance(request, PlainRead) and self._cluster:
            return await ascripted_read(request.commands, request.then, current.scripts)
        if isinstance(request, PlainRead):
            return await aplain_read(current.client, request.commands, request.then, current.scripts)
        keys, argv, durable, scripts = list(request.keys), request.argv(), self._durable(request), current.scripts
        if (probe := self._permissions.due(request)) is not None:  # before a write, when due
            checked = await scripts.arun(probe.name, keys, probe.argv())
            self._permissions.settle(checked, self._where)
        if durable is not None:
            return await arun_replicated(current.client, scripts, request, durable)
        return await scripts.arun(request.name, keys, argv)

    async def window(
        self, window_id: str, *, create: bool = True, **config: Unpack[WindowOptions]
    ) -> AsyncContextWindow:
        """Attach to ``window_id``, creating it with the given config if missing (``create=False``:
        ``WindowNotFoundError`` instead). The options passed (not None) must match the stored config
        (``ConfigConflictError``). A new window without limits is a 50-item sliding window."""
        state = await self._run(window_plans.open_window(self._settings, window_id, dict(config), create))
        return AsyncContextWindow(self, state)

    def handle(self, window_id: str, **config: Unpack[WindowOptions]) -> AsyncContextWindow:
        """A handle without I/O (no config check, not awaited): its first mutation creates the window if missing."""
        return AsyncContextWindow(self, window_plans.handle_state(self._settings, window_id, dict(config)))

    async def windows(self) -> list[str]:
        """Sorted ids of every window under this store's prefix (every primary of a cluster)."""
        return await listing.awindows(self._driver)

    async def load_scripts(self) -> list[str]:
        """Load contextstore's scripts on the server, every node of a cluster (an operator's step
        where ACL users may not load code: docs/reliability.md, "Tenants"); returns what was
        loaded. Stores load what they lack by themselves where their user may."""
        return await admin.aload_scripts(self._driver)

    async def move_blobs_to_tenants(self) -> int:
        """Move the blobs that tenants' windows (ids ``<tenant>:...``) stored in the prefix's shared
        keys before blobs had scopes into their tenant's keys: an operator's step, once after the
        upgrade, as a user who reaches every key. How many blobs were copied."""
        return await self._run(blob_plans.moved_to_tenants(self._settings))

    async def tenant_acl(self, tenant: str) -> list[str]:
        """The ACL rules that confine a user to ``tenant``'s windows (ids ``<tenant>:...``) on
        this server and deny it every way to change the code other tenants run: for
        ``ACL SETUSER <user> on ><password> <rules>``."""
        return await admin.atenant_acl(self._driver, tenant)

    async def check_user(self, user: str, *, tenant: str | None = None) -> list[str]:
        """What the server's ACL user ``user`` lacks of what contextstore needs (an operator's
        check): the commands the scripts run (``ACL GETUSER``) and, on Redis 7+ and Valkey
        (``ACL DRYRUN``), a read and a write of every kind of key ``tenant``'s calls touch
        (default: the tenant of the user's name); a key outside the tenant that it may reach is
        named "not refused: ...". Empty when all is as ``tenant_acl`` says."""
        return await admin.acheck_user(self._driver, user, tenant)

    def consume(
        self, window_ids: str | Sequence[str], group: str, consumer: str, *, block_ms: int | None = None,
        count: int = 100, claim_after_ms: int = 30_000,
    ) -> AsyncIterator[EventBatch]:  # fmt: skip
        """Batches of the windows' events for ``consumer`` of consumer group ``group`` (made if
        missing, starting at the oldest event kept): each event goes to one consumer of the
        group; events another consumer left unacknowledged for ``claim_after_ms`` are handed
        over. Call ``await batch.ack()`` when handled. ``block_ms``: see ``ContextWindow.events``."""
        where = (self._settings.prefix, self._cluster, window_ids)
        group, plan = streams.consumer(*where, group, consumer, block_ms, count, claim_after_ms)
        return streaming.abatches(self._driver, group, plan)

    async def run_compactor(
        self, windows: str | Sequence[str] | None = None, *, stop: asyncio.Event | None = None,
        group: str = compactor.COMPACTOR_GROUP, consumer: str | None = None, lease_ms: int = 120_000,
        claim_after_ms: int = 30_000, block_ms: int = 1000,
    ) -> None:  # fmt: skip
        """Compact windows (None: every window under the prefix) in the background until ``stop``
        is set: at ``warn_percent``, with their default strategy, one compactor per window at a time
        (a lease of ``lease_ms``, longer than your slowest summary); ``contextstore.compactor``.
        Summaries are awaited: give the store an async summarizer (``OpenAISummarizer`` has one)."""
        job = compactor.new_job(windows, group, consumer, lease_ms, claim_after_ms, block_ms)
        await compacting.arun(self._driver, job, stop)

    async def close(self) -> None:
        """Close the clients this store made (the asyncio store makes one per event loop), never a
        caller's; later calls raise ``StoreClosedError``."""
        self._closed = True
        self._blob_sweeper.stop()
        self._metrics.close()
        await self._loops.close()

    async def __aenter__(self) -> AsyncContextStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncContextWindow:
    """The asyncio twin of ``ContextWindow``; read its numbers from
    ``await win.stats()``."""

    def __init__(self, store: AsyncContextStore, state: WindowState) -> None:
        self._store = store
        self._state = state
        self._settings = store._settings

    def turn(self, *, policy: str = "reject", lease_ms: int = 30_000, input: Any = None,
             owner: str | None = None) -> turns.AsyncTurn:  # fmt: skip
        """A turn lease on the window (``async with win.turn(...) as turn``): see ``contextstore.turns``."""
        return turns.AsyncTurn(self, self._store._driver, self._state, policy, lease_ms, input, owner)

    async def turn_status(self) -> turns.TurnStatus:
        """The window's running turn (``owner`` "" when none holds the lease) and the inputs
        waiting for a turn (``contextstore show`` prints them)."""
        return await self._store._run(turns.status_plan(self._state))

    @property
    def window_id(self) -> str:
        """The window's id."""
        return self._state.window_id

    async def _timed(self, plan: Plan[T], record: Callable[[str, float], None]) -> T:
        started = time.perf_counter()
        result = await self._store._run(plan)
        record(self._state.window_id, (time.perf_counter() - started) * 1000)
        return result

    async def add(
        self, content_or_item: Content | ContextItem | None = None, *, request_id: str | None = None,
        expect_version: str | None = None, **fields: Unpack[ItemFields],
    ) -> ContextItem:  # fmt: skip
        """Add one item (its content, a str or content parts, first or as ``content=``); returns it
        as stored (id, seq, added_at, token_count filled in). Evicts the oldest unpinned item at
        ``max_items``, compacts at the token threshold; ``ContextWindowFullError`` if it cannot fit."""
        entry = [(content_or_item, dict(fields))]
        plan = item_plans.add(self._settings, self._state, entry, request_id, expect_version=expect_version)
        return (await self._timed(plan, self._store._metrics.add_latency)).items[0]

    async def replace(
        self, items: list[Any], *, last: int | None = None, expect_ids: Sequence[str] | None = None,
        request_id: str | None = None, expect_version: str | None = None, format: str = "openai",
        model: str | None = None,
    ) -> int:  # fmt: skip
        """Replace the newest ``last`` items (None: every item, pinned too) with ``items`` in
        one atomic step, so no reader sees the history half-replaced; how many were added.
        ``expect_ids``: exactly these newest items (arrival order), else ``VersionConflictError``,
        as when ``expect_version`` (a build's or stats' ``version``) is not the window's.
        ``format``, ``model``: as ``add_many`` (a provider's compacted history, as it came)."""
        batch = item_plans.entries(items, format, model)
        plan = item_plans.replace(self._settings, self._state, batch, last, request_id, expect_ids, expect_version)
        return (await self._timed(plan, self._store._metrics.add_latency)).added

    async def add_many(self, items: list[Any], *, format: str = "openai", model: str | None = None,
                       request_id: str | None = None, expect_version: str | None = None) -> int:  # fmt: skip
        """Add several items all-or-nothing; returns how many were added. ``format``: messages
        as a provider's API takes and returns them ("anthropic", "responses", "gemini"; from
        ``model``, kept with their reasoning: ``core.formats_in``)."""
        batch = item_plans.entries(items, format, model)
        plan = item_plans.add(self._settings, self._state, batch, request_id, expect_version=expect_version)
        return (await self._timed(plan, self._store._metrics.add_latency)).added if batch else 0

    async def get(self, item_id: str) -> ContextItem | None:
        """The item with this id, or None."""
        return await self._store._run(item_plans.get(self._state, item_id))

    async def remove(self, item_id: str, *, request_id: str | None = None) -> bool:
        """Remove an item; False if it is absent."""
        return await self._store._run(item_plans.remove(self._state, item_id, request_id))

    async def pop(self, count: int = 1, *, request_id: str | None = None) -> list[ContextItem]:
        """Remove and return the ``count`` newest items (arrival order, pinned or not), newest
        first, atomically; [] on an empty window."""
        return await self._store._run(item_plans.pop(self._state, count, request_id))

    async def pin(self, item_id: str, *, request_id: str | None = None) -> bool:
        """Pin an item (never evicted or compacted); False if it is absent."""
        return await self._store._run(item_plans.set_pinned(self._state, item_id, True, request_id))

    async def unpin(self, item_id: str, *, request_id: str | None = None) -> bool:
        """Unpin an item; False if it is absent."""
        return await self._store._run(item_plans.set_pinned(self._state, item_id, False, request_id))

    async def update_priority(self, item_id: str, priority: int, *, request_id: str | None = None) -> bool:
        """Set an item's priority (0-100); False if it is absent."""
        return await self._store._run(item_plans.update_priority(self._state, item_id, priority, request_id))

    async def items(self, types: Any = None, limit: int | None = None) -> list[ContextItem]:
        """Items in arrival order; ``limit`` keeps the most recent N after filtering."""
        return await self._store._run(item_plans.items(self._state, types, limit))

    def iter_items(self, types: Any = None, *, page_size: int = item_plans.ITERATE_PAGE) -> AsyncIterator[ContextItem]:
        """Every item in arrival order (of ``types``), read ``page_size`` at a time: client memory and
        each call's work follow the page, not the window. Each page goes on after the last seq the
        previous one saw, so an item that stays in the window throughout comes exactly once, and
        items added meanwhile come too (unlike ``items()``, the pages are not one snapshot)."""
        wanted, size = item_plans.check_iteration(types, page_size)
        return self._pages(wanted, size)

    async def _pages(self, wanted: str | None, size: int) -> AsyncIterator[ContextItem]:
        after = 0
        while after >= 0:
            page, after = await self._store._run(item_plans.iterate(self._state, wanted, after, size))
            for item in page:
                yield item

    async def ordered_items(self, types: Any = None, *, offset: int = 0, limit: int | None = None) -> list[ContextItem]:
        """Items in build order: type rank, priority desc, arrival. ``offset`` / ``limit``: only
        the places ``offset`` .. ``offset + limit - 1`` of that order (of them, those of
        ``types``), read alone: a page of a big window costs what the page holds."""
        return await self._store._run(item_plans.ordered_items(self._state, types, offset=offset, limit=limit))

    async def pinned_items(self) -> list[ContextItem]:
        """The pinned items, in build order."""
        return await self._store._run(item_plans.ordered_items(self._state, None, pinned_only=True))

    async def clear(self, include_pinned: bool = False, *, request_id: str | None = None) -> int:
        """Remove every unpinned item (every item with ``include_pinned``); returns how many."""
        return await self._store._run(item_plans.clear(self._state, include_pinned, request_id))

    async def compact(
        self, strategy: CompactionStrategy | str | None = None, target_percent: float = 70.0, *,
        query: str | None = None, request_id: str | None = None,
    ) -> int:  # fmt: skip
        """Remove (or summarize) unpinned items until usage <= target_percent; tokens freed."""
        plan = compaction_plans.compact(self._settings, self._state, strategy, target_percent, query, request_id)
        return await self._store._run(plan)

    async def archived(self, summary_id: str) -> list[ContextItem]:
        """The items summary ``summary_id`` replaced, as they were, in arrival order ([] once
        ``archive_ttl_seconds`` passed, or for an id that is no summary)."""
        return await self._store._run(summary_plans.archived(self._state, summary_id))

    async def undo_summary(self, summary_id: str, *, request_id: str | None = None) -> int:
        """Put back what summary ``summary_id`` replaced and remove it, atomically; how many
        items came back. Refused (``ContextWindowFullError``, ``SummaryNotFoundError``,
        ``DuplicateItemError``) with nothing changed if they no longer fit or cannot come back."""
        return await self._store._run(summary_plans.undo_summary(self._state, summary_id, request_id))

    async def rewind(self, to: str, *, expect_version: str | None = None, request_id: str | None = None) -> str:
        """Remove every item added after item ``to``, pinned too; the rewind id ``undo_rewind`` takes."""
        return await self._store._run(rewind_plans.rewind(self._state, to, expect_version, request_id))

    async def undo_rewind(self, rewind_id: str, *, expect_version: str | None = None,
                          request_id: str | None = None) -> int:  # fmt: skip
        """Put back what rewind ``rewind_id`` took, as it was; how many items came back."""
        return await self._store._run(rewind_plans.undo_rewind(self._state, rewind_id, expect_version, request_id))

    async def fork(self, new_id: str, *, at: str | None = None) -> AsyncContextWindow:
        """A new window ``new_id`` with this one's items up to item ``at`` (or version ``at``, or now)."""
        state = await self._store._run(fork_plans.fork(self._settings, self._state, new_id, at))
        return AsyncContextWindow(self._store, state)

    async def record_usage(
        self, version: str, *, input_tokens: int, output_tokens: int = 0, cache_read_tokens: int = 0,
        cache_write_tokens: int = 0, model: str | None = None, request_id: str | None = None,
    ) -> float:  # fmt: skip
        """Record what the provider reported for the build of ``version`` (once per request id);
        the window's token calibration after it (``stats().token_calibration``)."""
        counts = (input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
        calibration = await self._store._run(usage_plans.record_usage(self._state, version, counts, model, request_id))
        self._store._metrics.usage_reported(self.window_id, counts, model)
        return calibration

    async def lineage(self) -> Lineage:
        """Where this window was forked from, and the forks made from it."""
        return await self._store._run(fork_plans.lineage(self._state))

    async def build(self, options: BuildOptions | None = None) -> str:
        """The prompt within the token budget (see ``build_structured``)."""
        return (await self.build_structured(options)).content

    async def build_structured(self, options: BuildOptions | None = None) -> BuiltContext:
        """The prompt within the token budget, with the ids included, excluded and omitted."""
        plan = build_plans.build(self._settings, self._state, options)
        return await self._timed(plan, self._store._metrics.build_latency)

    async def build_messages(
        self, options: BuildOptions | None = None, format: ChatFormat = "openai"
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """Chat messages within the token budget: a list for OpenAI's ``messages=``, or
        ``{"system", "messages"}`` for Anthropic's ``messages.create(**built, ...)``."""
        return (await self.build_messages_structured(options, format)).messages

    async def build_messages_structured(
        self, options: BuildOptions | None = None, format: ChatFormat = "openai"
    ) -> BuiltMessages:
        """Chat messages within the token budget, with the ids included, excluded and omitted."""
        plan = chat_plans.build_messages(self._settings, self._state, options, format)
        return await self._timed(plan, self._store._metrics.build_latency)

    async def plan_compaction(self, strategy: CompactionStrategy | str | None = None, target_percent: float = 70.0,
                              *, query: str | None = None) -> CompactionPlan:  # fmt: skip
        """What ``compact()`` would do now (a dry run that changes nothing)."""
        plan = compaction_plans.plan_compaction(self._settings, self._state, strategy, target_percent, query)
        return await self._store._run(plan)

    async def to_markdown(self, types: Any = None, limit: int | None = None, language: str | None = None) -> str:
        """The window as markdown (``## Context``, one fenced block per item, arrival order)."""
        return await self._store._run(build_plans.to_markdown(self._state, types, limit, language))

    async def snapshot(self) -> ContextSnapshot:
        """The window's config and items at one moment."""
        return await self._store._run(snapshot_plans.snapshot(self._state))

    async def write_snapshot(self, fp: BinaryIO) -> int:
        """Write ``snapshot()``'s JSON to ``fp`` (binary, seekable) a page of items at a time, in bounded
        memory; written again from where it stood if the window changes. How many items it wrote."""
        return await self._store._run(snapshot_plans.write_snapshot(self._state, FileSink(fp)))

    async def restore(self, snapshot: ContextSnapshot, *, request_id: str | None = None, dry_run: bool = False) -> None:
        """Replace the window's items and config with the snapshot's, atomically, after checking
        it as an add checks items (``dry_run=True``: only check it; no I/O)."""
        await self._store._run(snapshot_plans.restore(self._settings, self._state, snapshot, request_id, dry_run))

    def events(self, since: str | None = None, *, block_ms: int | None = None) -> AsyncIterator[Event | OtherEvent]:
        """The window's events in order, typed: after ``since`` (a stream entry id; ``"0"``: the oldest kept; None: only
        events that come after this call). ``block_ms=None`` yields what is there and stops; ``N`` waits up to N ms for
        each next event and stops when none came; ``0`` follows the window for ever."""
        plan = streams.follow(self.window_id, self._state.keys.events, since, block_ms)
        return streaming.avalues(self._store._driver, plan)

    async def verify(self) -> VerifyReport:
        """Read every key of the window and report each broken invariant (never writes)."""
        return await self._store._run(window_plans.verify(self._state))

    async def stats(self) -> ContextWindowStats:
        """The window's counters, read in O(1)."""
        return await self._store._run(window_plans.stats(self._state))

    async def configure(self, *, request_id: str | None = None, **changes: Unpack[WindowOptions]) -> WindowConfig:
        """Change the stored config for every worker, atomically (only the options passed).
        ``max_tokens=None`` removes the token limit; ``ttl_seconds=None`` the expiry."""
        return await self._store._run(window_plans.configure(self._state, dict(changes), request_id))

    async def delete(self, *, request_id: str | None = None) -> bool:
        """Delete the window; True if it existed."""
        return await self._store._run(window_plans.delete(self._state, request_id))

    def __repr__(self) -> str:
        return f"AsyncContextWindow({self._state.window_id!r})"
