"""The openai-agents ``Session`` protocol on a contextstore window (extra
``contextstore[openai-agents]``).

```python
from agents import Agent, Runner
from contextstore.integrations.openai_agents import ContextStoreSession

session = ContextStoreSession("user-42", store, max_tokens=64_000)
await Runner.run(agent, "What did I ask before?", session=session)
```

Every Responses input item is stored as one window item that gives the item back exactly
(``metadata["openai_agents"]``), with its text as the content, so that tokens are counted and
builds read naturally. A ``function_call`` (and every other ``*_call`` with a ``call_id``) is
stored as an assistant tool call, its ``*_output`` as the tool result that answers it: they
share a group, so a budget or a compaction removes a call with its output, never one of them.

The framework's compaction (``OpenAIResponsesCompactionSession``, also under
``EncryptedSession``) finds the two hooks it looks for on a session that can replace history
atomically: ``_get_compaction_snapshot`` (the newest items, and a replacement of a suffix of them
that is refused when another writer moved the window on meanwhile) and ``_atomic_replace_items``
(the whole history at once). Each replacement is one atomic step on the shared window.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from .. import AsyncContextStore, ContextStore
from ..core.layout import CLEARED_KEY
from ..errors import InvalidOptionsError, VersionConflictError
from ..types import ContextItem, ItemType
from . import _media
from ._session import SessionWindow, usage_report
from ._turns import asession_turn

try:
    from agents.memory.session import SessionABC
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "contextstore.integrations.openai_agents needs openai-agents: pip install 'contextstore[openai-agents]'"
    ) from exc
try:  # the compaction hooks' snapshot type (openai-agents releases that compact atomically)
    from agents.memory.session import _CompactionSnapshot as _Snapshot
except ImportError:  # pragma: no cover - an older openai-agents, which never asks for a snapshot
    _Snapshot = None  # type: ignore[assignment,misc]

#: where a stored item keeps the framework's item as it was given
RAW = "openai_agents"
#: the methods through which a session stores and reads its items
_STORAGE_METHODS = ("get_items", "add_items", "pop_item", "clear_session")
_ROLE_TYPES = {
    "user": "user_message",
    "assistant": "assistant_message",
    "system": "instruction",
    "developer": "instruction",
}


def _text(value: Any) -> str:
    """The readable text of a content or output: a str, the text of its parts, else JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [p.get("text") or p.get("refusal") or "" for p in value if isinstance(p, dict)]
        if any(parts):
            return "\n".join(p for p in parts if p)
    return json.dumps(value, ensure_ascii=False, default=str) if value not in (None, "", []) else ""


def _media_rule(part: Mapping[str, Any]) -> tuple[tuple[str, ...], dict[str, Any]] | None:
    """Where a Responses part holds an image's or a file's data, and the content part it becomes."""
    kind = part.get("type")
    if kind == "input_file" and isinstance(part.get("file_data"), str):
        file = {"file_data": part["file_data"], "filename": part.get("filename") or "file"}
        return ("file_data",), {"type": "file", "file": file}
    if kind in ("input_image", "computer_screenshot") and isinstance(part.get("image_url"), str):
        detail = {"detail": part["detail"]} if part.get("detail") else {}
        return ("image_url",), {"type": "image_url", "image_url": {"url": part["image_url"], **detail}}
    return None


def to_window_item(item: dict[str, Any], linked: bool = True) -> dict[str, Any]:
    """One Responses input item as ``add_many`` takes it (``linked=False``: a tool call or
    output kept as a plain item, not paired). Its images and files become content parts
    (``_media``); the rest of it is kept as it came, to give it back exactly."""
    kind = item.get("type") or ("message" if "role" in item else "item")
    call_id = item.get("call_id")
    field = "output" if isinstance(item.get("output"), (dict, list)) else "content"
    lean, media, where = _media.split(item.get(field), _media_rule)
    meta: dict[str, Any] = {RAW: {**item, field: lean}, _media.MEDIA: [field, where]} if media else {RAW: item}
    if not linked and call_id:
        entry = {"type": "other", "content": _text(item.get("output", item.get("arguments"))) or f"[{kind}]"}
    elif kind == "message" or (kind != "item" and "role" in item and not call_id):
        role = str(item.get("role", "user"))
        content = _media.content(_text_of(lean) if media else _text(item.get("content")), media)
        entry = {"type": _ROLE_TYPES.get(role, "other"), "role": role, "content": content}
    elif call_id and kind.endswith("_output"):
        meta["tool_call_id"] = call_id
        text = _text_of(lean) if isinstance(lean, list) else ""  # a screenshot object holds no text
        output = _media.content(text if media else _text(item.get("output")), media)
        entry = {"type": "tool_result", "role": "tool", "content": output}
    elif call_id:
        arguments = item.get("arguments", item.get("input", item.get("action", "")))
        call = {
            "id": call_id,
            "type": "function",
            "function": {
                "name": str(item.get("name", kind)),
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments, default=str),
            },
        }
        meta["tool_calls"] = [call]
        entry = {"type": "assistant_message", "role": "assistant", "content": ""}
    else:  # reasoning, web and file search calls, item references, compaction items, ...
        summary = item.get("summary") if kind == "reasoning" else None
        entry = {"type": "other", "content": _text(summary) if summary else json.dumps(item, default=str)}
    if not entry["content"] and entry["type"] != "assistant_message":
        entry["content"] = f"[{kind}]"
    return {**entry, "metadata": meta}


def to_window_items(items: list[Any], linked: bool = True) -> list[dict[str, Any]]:
    """Responses input items as ``add_many`` takes them (``to_window_item`` each). A reasoning
    item shares the group of the item after it in the same call (its function call's, or a group
    of their own with a message): the Responses API refuses a reasoning item without the item it
    preceded, so a budget or a compaction keeps or removes them together."""
    given = [dict(i) for i in items]
    entries = [to_window_item(i, linked) for i in given]
    for n in range(len(entries) - 2, -1, -1) if linked else ():
        if given[n].get("type") != "reasoning":
            continue
        after = entries[n + 1]
        calls = after["metadata"].get("tool_calls") or []
        group = after.get("group") or (calls[0]["id"] if len(calls) == 1 else None)
        if group is None and after.get("type") == "assistant_message":
            group = after["group"] = f"reasoning:{given[n].get('id') or n}"
        if group is not None:
            entries[n]["group"] = group
    return entries


def from_window_item(item: ContextItem) -> Any:
    """The framework's item back, exactly as given (a cleared tool output carries the
    placeholder that replaced it)."""
    meta = item.metadata or {}
    raw = meta.get(RAW)
    if raw is None:  # an item some other writer added to the window: as a plain message
        return {"role": item.role or "user", "content": item.content}
    if meta.get(CLEARED_KEY) and isinstance(raw, dict) and "output" in raw:
        return {**raw, "output": item.content}
    if meta.get(_media.MEDIA) and isinstance(item.content, list):
        field, where = meta[_media.MEDIA]
        return {**raw, field: _media.joined(raw[field], where, item.content)}
    return raw


def _text_of(content: Any) -> str:
    """The text parts of a message's content (its media are parts of their own)."""
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return _text(content)


class ContextStoreSession(SessionABC):
    """An openai-agents session whose history is a contextstore window: shared safely by every
    process that opens the same ``session_id``, kept within a token budget (``window_config``
    over ``SESSION_DEFAULTS``), each call one atomic step. Works on a ``ContextStore`` (calls
    run in a worker thread) or an ``AsyncContextStore``. Constructing it does no I/O."""

    def __init__(
        self,
        session_id: str,
        store: ContextStore | AsyncContextStore,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **window_config: Any,
    ) -> None:
        self.session_id = session_id
        self.session_settings = coerce_session_settings(session_settings) if session_settings else SessionSettings()
        self._session = SessionWindow(session_id, store, **window_config)
        self._main = self._session.window.window_id  # the session's own window (``window_for``)

    @property
    def window(self) -> Any:
        """The session's window (``ContextWindow`` or ``AsyncContextWindow``)."""
        return self._session.window

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The latest ``limit`` items (default: ``session_settings.limit``; None: all) in order."""
        return [
            from_window_item(i) for i in await self._session.aitems(resolve_session_limit(limit, self.session_settings))
        ]

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` in one atomic step."""
        if items:
            await self._session.aadd(lambda linked: to_window_items(items, linked))

    async def record_usage(self, usage: Any, *, model: str | None = None, request_id: str | None = None) -> None:
        """Record what a run's model calls cost as the provider reported it: openai-agents'
        ``Usage`` (``result.context_wrapper.usage``; its ``input_tokens`` count the ones read from
        and written to the cache, ``input_tokens_details.cached_tokens`` and, with OpenAI's newer
        SDKs, ``cache_write_tokens``), for the window as it is now (``record_usage``).
        Once per ``request_id`` (e.g. ``result.last_response_id``); ``stats().usage`` sums them. A
        ``model`` or ``request_id`` ``record_usage`` refuses, or a ``usage`` without the token
        counts, raises ``InvalidOptionsError`` with nothing recorded."""
        if not all(isinstance(getattr(usage, n, None), int) for n in ("input_tokens", "output_tokens")):
            raise InvalidOptionsError(
                f"usage must be openai-agents' Usage (result.context_wrapper.usage), not {usage!r:.80}"
            )
        details = getattr(usage, "input_tokens_details", None)
        cached = (getattr(details, "cached_tokens", 0), getattr(details, "cache_write_tokens", 0))
        report = usage_report(usage.input_tokens, usage.output_tokens, *cached, None, None)
        await self._session.arecord_usage([{**report, "model": model, "request_id": request_id}])

    def turn(
        self, *, policy: str = "reject", lease_ms: int = 30_000, input: Any = None, owner: str | None = None
    ) -> AbstractAsyncContextManager[Any]:
        """``async with session.turn(...)``: the session's turn lease (``docs/turns.md``) around a
        run. Every ``add_items`` of this session from this task (the ``Runner``'s saves) is fenced
        by the turn: ``TurnLostError`` and nothing stored once another turn took over or the lease
        ran out. ``policy`` says what happens when another turn runs (``reject``, ``enqueue``,
        ``interrupt``, ``rollback``); ``input`` (a str or Responses input items) is added as the
        turn starts, or enqueued (``TurnQueuedError``): then run with ``Runner.run(agent, [],
        session=session)``, which reads it from the session. Yields the window's turn."""
        given = [input] if isinstance(input, (str, dict)) else list(input or [])
        entries = [to_window_item({"role": "user", "content": i} if isinstance(i, str) else dict(i)) for i in given]
        return asession_turn(self._session, policy=policy, lease_ms=lease_ms, input=entries or None, owner=owner)

    async def create_branch_from_turn(self, turn_number: int, branch_name: str | None = None) -> str:
        """A branch of the conversation, as ``AdvancedSQLiteSession`` makes one: a fork of the
        current branch (``win.fork()``) holding what came before user turn ``turn_number`` (1:
        the first user message), so that the turn can go another way; it becomes the current
        branch. Returns its id (``branch_name``, or ``turn_<n>_<k>``); its window is
        ``<session_id>/branch/<id>``."""
        stored = await self._session.acall("items")
        turns = [n for n, i in enumerate(stored) if i.role == "user" and i.type is not ItemType.TOOL_RESULT]
        if isinstance(turn_number, bool) or not isinstance(turn_number, int) or not 1 <= turn_number <= len(turns):
            raise InvalidOptionsError(
                f"turn_number must be from 1 to {len(turns)} (the user turns), not {turn_number!r}"
            )
        forks = (await self._session.acall("lineage")).forks
        branch = branch_name or f"turn_{turn_number}_{len(forks) + 1}"
        wid, before = self._branch_window(branch), turns[turn_number - 1]
        child = await self._session.acall("fork", wid, at=stored[before - 1].id if before else None)
        if not before:  # nothing came before the first turn: the branch starts empty
            await self._session.acall("clear", True, _on=child)
        self._session.window = child
        return branch

    async def switch_to_branch(self, branch_id: str) -> None:
        """Make ``branch_id`` (``"main"``: the session's own window) the branch every call of
        this session reads and writes; ``InvalidOptionsError`` when there is no such branch."""
        window = self._session.store.handle(self._branch_window(branch_id), **self._session.config)
        if branch_id != "main" and not (await self._session.acall("stats", _on=window)).version:
            raise InvalidOptionsError(f"session {self.session_id!r} has no branch {branch_id!r}")
        self._session.window = window

    async def list_branches(self) -> list[dict[str, Any]]:
        """Every branch of the session, ``"main"`` first then as they were made (branches of
        branches too), each with ``branch_id``, ``message_count`` and ``is_current``."""
        out, todo, prefix = [], ["main"], f"{self._main}/branch/"
        while todo:
            branch = todo.pop(0)
            window = self._session.store.handle(self._branch_window(branch), **self._session.config)
            stats = await self._session.acall("stats", _on=window)
            current = self._session.window.window_id == window.window_id
            out.append({"branch_id": branch, "message_count": stats.total_items, "is_current": current})
            forks = (await self._session.acall("lineage", _on=window)).forks
            todo += [f.removeprefix(prefix) for f in forks if f.startswith(prefix)]
        return out

    def _branch_window(self, branch_id: str) -> str:
        return self._main if branch_id == "main" else f"{self._main}/branch/{branch_id}"

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item (None when the session is empty), atomically."""
        popped = await self._session.acall("pop", 1)
        return from_window_item(popped[0]) if popped else None

    async def clear_session(self) -> None:
        """Remove every item of the session (its window's config stays)."""
        await self._session.acall("clear", include_pinned=True)

    async def _atomic_replace_items(self, items: list[Any]) -> bool:
        """The whole history replaced by ``items`` in one atomic step (the framework's
        compaction hook): no reader sees it half-replaced, and a crash leaves the old or the new.
        False (the framework then clears and adds) on a subclass that changes how items are
        stored or read, whose methods a replacement here would bypass."""
        if not self._stores_plainly():
            return False
        await self._session.aadd(lambda linked: to_window_items(items, linked), "replace")
        return True

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[Any], bool] | None = None
    ) -> Any | None:
        """The framework's compaction hook: the newest ``limit`` items (``complete`` when they
        are all the history) and ``replace_suffix(start, output)``, which swaps the snapshot's
        items from ``start`` on for ``output`` in one atomic step, or answers False with nothing
        changed when the newest items are no longer those (another writer moved the window on).
        ``prune_prefix`` (``EncryptedSession``'s expired items): after a replacement, the oldest
        items for which it holds are removed. None (no snapshot) on a subclass that changes how
        items are stored or read."""
        if _Snapshot is None or limit <= 0 or not self._stores_plainly():
            return None
        stored = await self._session.aitems(limit + 1)  # one read: one more than asked says there is more
        rows = stored[-limit:]
        snapshot_items = [from_window_item(i) for i in rows]

        async def replace_suffix(start: int, output: list[Any]) -> bool:
            expected = rows[start:]
            if not expected:
                return False
            try:
                await self._session.aadd(
                    lambda linked: to_window_items(output, linked),
                    "replace",
                    expect_ids=[i.id for i in expected],
                )
            except VersionConflictError:
                return False
            if prune_prefix is not None:
                await self._prune(prune_prefix, limit)
            return True

        return _Snapshot(snapshot_items, len(stored) <= limit, replace_suffix)

    def _stores_plainly(self) -> bool:
        """Whether this session stores and reads items as ``ContextStoreSession`` does (a
        subclass may override a storage method: the hooks must not bypass it, as the framework's
        own sessions refuse them to subclasses)."""
        cls = type(self)
        return all(getattr(cls, m) is getattr(ContextStoreSession, m) for m in _STORAGE_METHODS)

    async def _prune(self, expired: Callable[[Any], bool], page: int) -> None:
        """Remove the oldest items while ``expired`` holds for them (each removal atomic)."""
        while True:
            oldest = (await self._session.acall("items"))[:page]
            gone = 0
            for item in oldest:
                if not expired(from_window_item(item)):
                    return
                gone += bool(await self._session.acall("remove", item.id))
            if not oldest or gone == 0:
                return
