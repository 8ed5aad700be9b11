"""Reading windows' event streams, sans-I/O: following one window, and consumer groups.

Like the plans, these are generators. They yield ``StreamCall`` (a redis-py client method to
run, its reply sent back), ``Sleep`` (wait, then go on) and ``Deliver`` (hand events, or a batch,
to the caller); ``drivers/streaming.py`` drives them for both stores.

``block_ms`` has the same meaning in both: ``None`` reads what is there and stops; ``N > 0``
waits up to N ms for more each time and stops when none came; ``0`` waits for ever (Redis's
``BLOCK 0``).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidOptionsError
from ..events import Event, OtherEvent, decode
from .validate import int_in

_NAME = re.compile(r"[A-Za-z0-9._\-:@/+=]{1,128}")
_ENTRY_ID = re.compile(r"\d+(-\d+)?|0|\$")
#: how often a consumer polls streams it cannot read in one blocking call (cluster, several slots)
POLL_SECONDS = 0.05


@dataclass(frozen=True, slots=True)
class StreamCall:
    """Run ``client.<method>(*args, **kwargs)``; errors whose text starts with one of ``ignore``
    answer None instead of raising."""

    method: str
    kwargs: dict[str, Any]
    ignore: tuple[str, ...] = ()
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds``, then go on."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Deliver:
    """Hand ``value`` to the caller."""

    value: Any


@dataclass(slots=True)
class Delivery:
    """Events for a consumer, and what acknowledging them takes: stream key -> entry ids."""

    events: list[Event | OtherEvent]
    pending: dict[str, list[str]] = field(default_factory=dict)


StreamPlan = Generator["StreamCall | Sleep | Deliver", Any, None]
RoundPlan = Generator["StreamCall | Sleep | Deliver", Any, bool]  # a part of a plan: anything came?


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def check_block(block_ms: object) -> int | None:
    """``block_ms``: None or an int >= 0."""
    return None if block_ms is None else int_in("block_ms", block_ms, 0)


def check_since(since: object) -> str:
    """``since``: None (new events only), or a stream entry id ("0" for the oldest kept)."""
    if since is None:
        return "$"
    if not isinstance(since, str) or not _ENTRY_ID.fullmatch(since):
        raise InvalidOptionsError(
            f"since must be None or a stream entry id like '0' or '1700000000000-0', not {since!r}"
        )
    return since


def check_name(what: str, value: object) -> str:
    """A consumer group or consumer name."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidOptionsError(f"{what} must be 1-128 characters from A-Z a-z 0-9 . _ - : @ / + =, not {value!r}")
    return value


def _entries(reply: Any) -> list[tuple[str, str, dict[Any, Any]]]:
    """(stream key, entry id, fields) of an XREAD / XREADGROUP reply (RESP2 or RESP3 shape)."""
    streams = reply.items() if isinstance(reply, dict) else (reply or [])
    out = []
    for key, entries in streams:
        rows = entries[0] if isinstance(reply, dict) and entries and isinstance(entries[0], list) else entries
        out += [(_text(key), _text(eid), fields) for eid, fields in rows if eid is not None]
    return out


def follow(window_id: str, key: str, since: object, block_ms: object, count: int = 100) -> StreamPlan:
    """Every event of one window after ``since``, in order (arguments checked now)."""
    return _follow(window_id, key, check_since(since), check_block(block_ms), count)


def _follow(window_id: str, key: str, last: str, block: int | None, count: int) -> StreamPlan:
    while True:
        reply = yield StreamCall("xread", {"streams": {key: last}, "count": count, "block": block})
        entries = _entries(reply)
        if not entries and block != 0:
            return
        for _, eid, fields in entries:
            yield Deliver(decode(window_id, eid, fields or {}))
        if entries:
            last = entries[-1][1]


def _delivery(windows: dict[str, str], entries: Sequence[tuple[str, str, Any]]) -> Delivery:
    got = Delivery([])
    for key, eid, fields in entries:
        got.pending.setdefault(key, []).append(eid)
        if fields is not None:  # an entry trimmed away while pending: acknowledged, not delivered
            got.events.append(decode(windows[key], eid, fields))
    return got


def _reads(windows: dict[str, str], start: str, one_call: bool) -> list[dict[str, str]]:
    """The ``streams=`` of the XREADGROUP calls reading every window's stream from ``start``:
    one call, or one per stream (a cluster's streams live in several slots)."""
    return [dict.fromkeys(windows, start)] if one_call else [{k: start} for k in windows]


def _new_rows(windows: dict[str, str], group_args: dict[str, Any], block: int | None, one_call: bool) -> RoundPlan:
    """One round of new events (XREADGROUP ``>``), delivered; returns whether any came."""
    got = False
    for streams in _reads(windows, ">", one_call):
        reply = yield StreamCall("xreadgroup", {**group_args, "streams": streams, "block": block if one_call else None})
        rows = _entries(reply)
        if rows:
            got = True
            yield Deliver(_delivery(windows, rows))
    return got


def _claimed_rows(windows: dict[str, str], group: str, consumer: str, count: int, claim_after_ms: int) -> RoundPlan:
    """One round of claims (XAUTOCLAIM) of events left unacknowledged too long, delivered."""
    got = False
    for key in windows:
        args = {
            "name": key,
            "groupname": group,
            "consumername": consumer,
            "min_idle_time": claim_after_ms,
            "start_id": "0-0",
            "count": count,
        }
        claimed = yield StreamCall("xautoclaim", args)
        rows = [(key, _text(eid), fields) for eid, fields in (claimed[1] if claimed else []) if eid is not None]
        if rows:
            got = True
            yield Deliver(_delivery(windows, rows))
    return got


def consume(
    windows: dict[str, str],
    group: str,
    consumer: str,
    block_ms: object,
    count: int,
    claim_after_ms: int,
    one_call: bool,
) -> StreamPlan:
    """Batches of events for ``consumer`` of ``group`` over the streams of ``windows`` (stream
    key -> window id): first its own unacknowledged events, then, each round, events other
    consumers left unacknowledged for ``claim_after_ms``, and new ones. ``one_call``: all the
    streams can be read in one blocking call (not a cluster with several slots)."""
    return _consume(windows, group, consumer, check_block(block_ms), count, claim_after_ms, one_call)


def _consume(
    windows: dict[str, str],
    group: str,
    consumer: str,
    block: int | None,
    count: int,
    claim_after_ms: int,
    one_call: bool,
) -> StreamPlan:
    for key in windows:  # a group that does not exist yet starts at the oldest event kept
        yield StreamCall(
            "xgroup_create", {"name": key, "groupname": group, "id": "0", "mkstream": True}, ignore=("BUSYGROUP",)
        )
    group_args = {"groupname": group, "consumername": consumer, "count": count}
    for streams in _reads(windows, "0", one_call):  # what this consumer had pending
        own = _entries((yield StreamCall("xreadgroup", {**group_args, "streams": streams})))
        if own:
            yield Deliver(_delivery(windows, own))
    waited = 0.0  # ms spent polling without a new event (several slots of a cluster)
    while True:
        claimed = yield from _claimed_rows(windows, group, consumer, count, claim_after_ms)
        new = yield from _new_rows(windows, group_args, block, one_call)
        if claimed or new:
            waited = 0.0
        elif block is None or (block > 0 and (one_call or waited >= block)):
            return
        elif not one_call:
            yield Sleep(POLL_SECONDS)
            waited += POLL_SECONDS * 1000


class EventBatch(list[Event | OtherEvent]):
    """A batch of events for a consumer; ``ack()`` acknowledges them all (``await batch.ack()``
    on the asyncio store), after which the group never hands them out again."""

    def __init__(self, events: list[Event | OtherEvent], ack: Any) -> None:
        super().__init__(events)
        self._ack = ack

    def ack(self) -> Any:
        """Acknowledge every event of the batch (a coroutine on the asyncio store)."""
        return self._ack()


def consumer_windows(window_ids: object, keys_of: Any) -> dict[str, str]:
    """Stream key -> window id for ``window_ids`` (one id or several)."""
    from .keys import validate_window_id

    ids = [window_ids] if isinstance(window_ids, str) else window_ids
    if not isinstance(ids, (list, tuple, set, frozenset)) or not ids:
        raise InvalidOptionsError(f"window_ids must be a window id or a non-empty list of them, not {window_ids!r}")
    return {keys_of(validate_window_id(w)).events: w for w in ids}


def consumer(
    prefix: str,
    cluster: bool,
    window_ids: object,
    group: object,
    name: object,
    block_ms: object,
    count: object,
    claim_after_ms: object,
) -> tuple[str, StreamPlan]:
    """The checked group name and the plan of ``store.consume`` (arguments checked now);
    ``cluster``: the store's client is a cluster's, whose streams may live in several slots."""
    from .keys import window_keys

    windows = consumer_windows(window_ids, lambda w: window_keys(prefix, w))
    n, claim = int_in("count", count, 1, 10_000), int_in("claim_after_ms", claim_after_ms, 0)
    group = check_name("group", group)
    one_call = len(windows) == 1 or not cluster
    return group, consume(windows, group, check_name("consumer", name), block_ms, n, claim, one_call)


def acknowledge(group: str, pending: dict[str, list[str]]) -> list[StreamCall]:
    """The XACKs that acknowledge a delivery."""
    return [StreamCall("xack", {}, args=(key, group, *ids)) for key, ids in pending.items() if ids]
