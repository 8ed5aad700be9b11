"""The background compactor, sans-I/O: what ``store.run_compactor()`` decides.

A compactor follows windows' events through a consumer group (so a fleet of compactors shares
the work and a dead one's events are claimed by another). For every window with new events it
checks the usage (O(1) counters, against ``max_tokens`` as calibrated by recorded usage); at
``warn_percent`` or above it takes the window's lease (one compactor per window at a time; the
lease expires after ``lease_ms`` if its holder dies) and compacts with the window's default
strategy down to its ``compaction_target`` when one is set below ``warn_percent``, else
``max(0, warn_percent - 15)`` percent, so an
add rarely reaches ``compaction_threshold`` and never waits on a model. Events are acknowledged
once their window is handled; a window that was busy (another compactor's lease) or failed keeps
its events pending and is tried again after a back-off (and after ``claim_after_ms`` by any
compactor of the group).

May import: ``core``, ``plans``, ``types``, ``errors``; no I/O (no redis, asyncio, subprocess or
HTTP).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

from .core import streams, wire
from .core.config import config_values, creation_config
from .core.keys import validate_window_id, window_keys
from .core.layout import Meta, calibrated, calibration_of
from .core.validate import int_in
from .errors import InvalidOptionsError
from .plans.base import Plan, ScriptCall, Settings, WindowState
from .plans.compaction import compact, has_helper
from .plans.reads import read
from .types import CompactionStrategy, WindowConfig

log = logging.getLogger("contextstore")

#: the consumer group compactors share by default
COMPACTOR_GROUP = "contextstore-compactor"
#: compaction goes this many percentage points below warn_percent
BELOW_WARN = 15.0
#: longest back-off, in seconds, before a window that failed is tried again
MAX_BACKOFF_S = 60.0

DONE, NOT_NEEDED, BUSY, RETRY = "compacted", "not needed", "busy", "retry"


@dataclass
class CompactorJob:
    """One compactor's options and memory: which windows (None: every window under the prefix,
    found again each round), its group and consumer name, its lease token, and when each
    window that failed may be tried again."""

    windows: tuple[str, ...] | None
    group: str
    consumer: str
    lease_ms: int
    claim_after_ms: int
    block_ms: int
    token: str = ""
    retry_at: dict[str, float] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.token = self.token or f"{self.consumer}/{os.urandom(6).hex()}"

    def consumer_plan(self, prefix: str, cluster: bool, window_ids: Sequence[str]) -> streams.StreamPlan:
        """This round's consumer-group plan over ``window_ids`` (``cluster``: the store's client is a cluster's)."""
        return streams.consumer(
            prefix, cluster, list(window_ids), self.group, self.consumer, self.block_ms, 100, self.claim_after_ms
        )[1]

    def due(self, window_id: str, now: float) -> bool:
        """False while a window is backing off after a failure or a busy lease."""
        return now >= self.retry_at.get(window_id, 0.0)

    def handled(self, window_id: str, outcome: str | BaseException, now: float) -> bool:
        """Record an outcome; True when the window's events may be acknowledged. A window that
        was busy or failed backs off (0.5 s, doubling up to ``MAX_BACKOFF_S``); one that should
        be tried again (writers changed it under every commit) is, with its next events."""
        if outcome in (DONE, NOT_NEEDED, RETRY):
            self.retry_at.pop(window_id, None)
            self.failures.pop(window_id, None)
            return outcome != RETRY
        n = self.failures[window_id] = self.failures.get(window_id, 0) + 1
        self.retry_at[window_id] = now + min(MAX_BACKOFF_S, 0.5 * 2 ** (n - 1))
        if isinstance(outcome, BaseException):
            log.warning("compactor %s could not compact window %s: %s", self.consumer, window_id, outcome)
        return False


def new_job(
    windows: object, group: object, consumer: object, lease_ms: object, claim_after_ms: object, block_ms: object
) -> CompactorJob:
    """A compactor's options, checked (``InvalidOptionsError``)."""
    ids = None
    if windows is not None:
        listed = [windows] if isinstance(windows, str) else windows
        if not isinstance(listed, (list, tuple, set, frozenset)) or not listed:
            raise InvalidOptionsError(f"windows must be None, a window id or a non-empty list of them, not {windows!r}")
        ids = tuple(validate_window_id(w) for w in listed)
    name = consumer if consumer is not None else f"{socket.gethostname()}-{os.getpid()}"
    return CompactorJob(
        windows=ids,
        group=streams.check_name("group", group),
        consumer=streams.check_name("consumer", name),
        lease_ms=int_in("lease_ms", lease_ms, 1),
        claim_after_ms=int_in("claim_after_ms", claim_after_ms, 0),
        block_ms=int_in("block_ms", block_ms, 1),
    )


def by_window(delivery: streams.Delivery) -> dict[str, dict[str, list[str]]]:
    """The windows a delivery holds events of, each with what acknowledging them takes."""
    out: dict[str, dict[str, list[str]]] = {e.window_id: {} for e in delivery.events}
    for key, ids in delivery.pending.items():  # also entries trimmed away while pending
        out.setdefault(key[key.index("{") + 1 : key.rindex("}")], {})[key] = ids
    return out


def tend(settings: Settings, job: CompactorJob, window_id: str) -> Plan[str]:
    """Compact ``window_id`` under its lease if its usage is at ``warn_percent`` or above:
    ``compacted``, ``not needed`` (below it, or the window is gone), ``busy`` (another
    compactor holds the lease) or ``retry`` (nothing could be freed, e.g. every commit met a
    window that writers had changed meanwhile: try again after a back-off). Releases the lease
    it took; if the plan fails midway, the caller releases it (``release``), else it expires
    after ``lease_ms``."""
    defaults = creation_config(config_values({}, settings.item_limit), settings.item_limit)
    state = WindowState(window_id, window_keys(settings.prefix, window_id), defaults)
    if not (yield from _over_warning(state)):
        return NOT_NEEDED
    if not int((yield ScriptCall("lease", state.keys, wire.lease_args("acquire", job.token, job.lease_ms)))):
        return BUSY
    outcome = DONE
    if (yield from _over_warning(state)):  # another compactor may have finished meanwhile
        strategy = state.config.default_strategy
        if not has_helper(settings, strategy):
            log.warning("window %s: %s needs a helper this compactor lacks", window_id, strategy.value)
            strategy = CompactionStrategy.REMOVE_LOW_PRIORITY
        freed = yield from compact(settings, state, strategy, target_of(state.config))
        log.info("compactor %s compacted window %s: %s freed %d tokens", job.consumer, window_id, strategy.value, freed)
        if not freed and (yield from _over_warning(state)):
            outcome = RETRY
    yield from release(settings, window_id, job.token)
    return outcome


def target_of(config: WindowConfig) -> float:
    """The percent a compactor compacts down to: the window's ``compaction_target`` when one is
    set below its ``warn_percent`` (a target above it would free nothing), else ``BELOW_WARN``
    points below ``warn_percent``."""
    if config.compaction_target is not None and config.compaction_target < config.warn_percent:
        return config.compaction_target
    return max(0.0, config.warn_percent - BELOW_WARN)


def _over_warning(state: WindowState) -> Plan[bool]:
    """True when the window exists and uses ``warn_percent`` or more of its ``max_tokens`` as
    calibrated by the usage recorded (reads its stored config into ``state``)."""
    found = yield from read(state, "meta")
    state.config = cfg = found.config(state.config)
    if not (found.exists and cfg.max_tokens):
        return False
    limit = calibrated(cfg.max_tokens, calibration_of(found.meta))
    return found.counter(Meta.TOKENS) * 100 >= cfg.warn_percent * limit


def release(settings: Settings, window_id: str, token: str) -> Plan[bool]:
    """Drop the window's lease if ``token`` holds it."""
    keys = window_keys(settings.prefix, window_id)
    return bool(int((yield ScriptCall("lease", keys, wire.lease_args("release", token)))))
