"""Microsoft Agent Framework's history provider on contextstore windows (extra
``contextstore[agent-framework]``).

```python
from agent_framework import Agent
from contextstore.integrations.agent_framework import ContextStoreChatMessageStore

history = ContextStoreChatMessageStore(store, max_tokens=64_000)
agent = Agent(client=chat_client, instructions="Be brief.", context_providers=[history])
session = agent.create_session(session_id="user-42")
```

Agent Framework 1.x keeps a conversation through a ``HistoryProvider`` (``get_messages`` /
``save_messages`` per session id); this class is one, keeping each session in one window. Each
message is one window item that gives the message back exactly (its ``to_dict()`` in
``metadata["agent_framework"]``), with its text as the content. An assistant message's
``function_call`` contents and the tool message answering them (``function_result`` contents)
form one group.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from .. import AsyncContextStore, ContextStore
from ..core.layout import CLEARED_KEY
from ..core.parts import text_of
from ..errors import VersionConflictError
from ..types import ContextItem
from . import _media
from ._session import REPLACE_BACKOFF, SessionWindow, usage_report

try:
    from agent_framework import HistoryProvider, Message
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "contextstore.integrations.agent_framework needs agent-framework: pip install 'contextstore[agent-framework]'"
    ) from exc

#: where a stored item keeps the message as ``Message.to_dict()`` gives it
RAW = "agent_framework"
#: the session a call without one uses (as the framework's file and Redis providers do)
DEFAULT_SESSION = "default"
#: how long the window of a session whose id the framework generated lives after its last write
#: (``generated_session_ttl_seconds``): one day
GENERATED_SESSION_TTL_S = 86_400
_TYPES = {"user": "user_message", "assistant": "assistant_message", "system": "instruction", "tool": "tool_result"}


def _media_rule(content: Mapping[str, Any]) -> tuple[tuple[str, ...], dict[str, Any]] | None:
    """Where an Agent Framework content holds an image's, an audio clip's or a file's data (a
    ``data`` content: a base64 ``data:`` URI), and the content part it becomes."""
    uri, media_type = content.get("uri"), str(content.get("media_type") or "")
    if content.get("type") != "data" or not isinstance(uri, str) or not uri.startswith("data:"):
        return None
    if media_type.startswith("image/"):
        return ("uri",), {"type": "image_url", "image_url": {"url": uri}}
    return ("uri",), {"type": "file", "file": {"file_data": uri, "filename": "file"}}


def to_window_item(message: Message, linked: bool = True) -> dict[str, Any]:
    """One message as ``add_many`` takes it (``linked=False``: tool calls not paired). Its
    images and files (``data`` contents) become content parts beside its text (``_media``); the
    message kept to give it back holds no copy of their data."""
    raw = _json_safe(message.to_dict())
    lean, media, where = _media.split(raw.get("contents"), _media_rule, nested="items")  # a result's items
    if media:
        raw = {**raw, "contents": lean}
    role = str(raw.get("role", "user"))
    contents = [c for c in raw.get("contents", []) if isinstance(c, dict)]
    calls = [
        {"id": c["call_id"], "type": "function", "function": {"name": c.get("name", ""), "arguments": _args(c)}}
        for c in contents
        if c.get("type") == "function_call" and isinstance(c.get("call_id"), str)
    ]
    results = [
        c["call_id"] for c in contents if c.get("type") == "function_result" and isinstance(c.get("call_id"), str)
    ]
    meta: dict[str, Any] = {RAW: raw, _media.MEDIA: where} if media else {RAW: raw}
    text = message.text or ("\n".join(str(c.get("result", "")) for c in contents) if results else "")
    entry: dict[str, Any] = {
        "type": _TYPES.get(role, "other"), "role": role, "content": _media.content(text, media) if media else text,
    }  # fmt: skip
    if linked and role == "assistant" and calls:
        meta["tool_calls"] = calls
    elif linked and role == "tool" and results:
        meta["tool_call_id"] = results[0]
        entry["content"] = entry["content"] or "\n".join(str(c.get("result", "")) for c in contents)
    elif role == "tool":
        entry["role"] = None  # answers no call in the window: not paired
    if not entry["content"] and "tool_calls" not in meta:
        entry["content"] = f"[{role} message]"
    return {**entry, "metadata": meta}


#: how a float JSON has no number for (NaN, an infinity) is kept in a message: {FLOAT: "nan"}
FLOAT = "__contextstore_float__"


def _json_safe(value: Any) -> Any:
    """``value`` with each NaN and infinity as ``{FLOAT: repr}`` (the framework's own providers
    keep them in ``additional_properties``; stored JSON has no number for them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return {FLOAT: repr(value)}
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _floats_back(value: Any) -> Any:
    """``_json_safe`` undone."""
    if isinstance(value, dict):
        if len(value) == 1 and value.get(FLOAT) in ("nan", "inf", "-inf"):
            return float(value[FLOAT])
        return {k: _floats_back(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats_back(v) for v in value]
    return value


def _entries(messages: Sequence[Message], linked: bool) -> list[dict[str, Any]]:
    return [to_window_item(m, linked) for m in messages]


def _identity(message: Message) -> tuple[str, ...]:
    """What tells two messages apart, as the framework's providers tell them (its message id,
    else its role and contents)."""
    if getattr(message, "message_id", None) is not None:
        return ("id", str(message.message_id))
    contents = [c.to_dict() for c in message.contents or []]
    return ("content", str(message.role), json.dumps(contents, sort_keys=True, ensure_ascii=False, default=str))


def new_messages(existing: Sequence[Message], incoming: Sequence[Message]) -> list[Message]:
    """The messages of ``incoming`` after its overlap with ``existing``: the rule of the
    framework's built-in providers (agent-framework-core 1.23, ``filter_new_messages``), so a host
    that sends the whole conversation each run, or only what is new, stores each message once,
    while a user repeating the same words without a message id is kept."""
    if not existing:
        return list(incoming)
    old, new = [_identity(m) for m in existing], [_identity(m) for m in incoming]
    for i in range(len(new) - len(old) + 1):
        if new[i : i + len(old)] == old:
            if i == 0 and len(existing) == 1 and existing[-1].role == "user" and old[-1][0] != "id":
                break  # a repeated input without an id matters more than a possible replay
            return list(incoming[i + len(old) :])
    for overlap in range(min(len(old), len(new)), 0, -1):
        if old[-overlap:] != new[:overlap]:
            continue
        if overlap == 1 and existing[-1].role == "user" and old[-1][0] != "id":
            continue
        return list(incoming[overlap:])
    return list(incoming)


def _generated(session_id: str) -> bool:
    """Whether ``session_id`` is an id ``AgentSession`` generated (``str(uuid.uuid4())``)."""
    try:
        return str(uuid.UUID(session_id, version=4)) == session_id
    except ValueError:
        return False


def _args(content: dict[str, Any]) -> str:
    args = content.get("arguments", "")
    return args if isinstance(args, str) else json.dumps(args, default=str)


#: where a provider's cache counts may sit in ``UsageDetails`` besides its own fields (as the
#: framework's telemetry reads them): reads, then writes
_CACHE_KEYS = (
    ("cache_read_input_token_count", "openai.cached_input_tokens", "anthropic.cache_read_input_tokens",
     "prompt/cached_tokens"),
    ("cache_creation_input_token_count", "openai.cache_write_tokens", "anthropic.cache_creation_input_tokens",
     "prompt/cache_write_tokens"),
)  # fmt: skip


def usage_of(usage: Mapping[str, Any], response_id: object) -> dict[str, Any]:
    """``record_usage``'s keywords for the framework's ``UsageDetails``: ``input_token_count``
    counts every prompt token (as OpenTelemetry's ``gen_ai.usage.input_tokens`` does), of which
    the cache's reads and writes are told apart; the request id the response's id."""
    read, wrote = (next((usage[k] for k in keys if usage.get(k)), 0) for keys in _CACHE_KEYS)
    counts = (usage.get("input_token_count"), usage.get("output_token_count"), read, wrote)
    return usage_report(*counts, None, response_id)


def from_window_item(item: ContextItem) -> Message:
    """The message back, as added (a cleared tool result's text is its placeholder)."""
    raw = (item.metadata or {}).get(RAW)
    if raw is None:  # an item some other writer added to the window
        return Message(role=item.role or "user", contents=[text_of(item.content)])
    if (item.metadata or {}).get(CLEARED_KEY):
        return Message(role=raw.get("role", "tool"), contents=[text_of(item.content)])
    if (item.metadata or {}).get(_media.MEDIA) and isinstance(item.content, list):
        raw = {**raw, "contents": _media.joined(raw["contents"], item.metadata[_media.MEDIA], item.content)}  # type: ignore[index]
    return Message.from_dict(_floats_back(raw))


class ContextStoreChatMessageStore(HistoryProvider):
    """An Agent Framework history provider whose sessions are contextstore windows: shared
    safely by every process, kept within a token budget (``window_config`` over
    ``SESSION_DEFAULTS``), each save one atomic step. Constructing it does no I/O.

    ``agent.run()`` without a session makes a session with a new random id each time (a UUID4,
    as does ``agent.create_session()`` without an id): such a window expires
    ``generated_session_ttl_seconds`` (a day) after its last write instead of being kept for
    ever; a session id of the caller's, or ``ttl_seconds`` in the window config, is kept as
    configured. ``None`` keeps generated sessions too."""

    DEFAULT_SOURCE_ID = "contextstore"

    def __init__(
        self,
        store: ContextStore | AsyncContextStore,
        *,
        source_id: str | None = None,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
        skip_excluded: bool = False,
        generated_session_ttl_seconds: int | None = GENERATED_SESSION_TTL_S,
        **window_config: Any,
    ) -> None:
        super().__init__(
            source_id or self.DEFAULT_SOURCE_ID,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        #: as the framework's own providers: leave out the messages its compaction marked excluded
        self.skip_excluded = skip_excluded
        self._store, self._config = store, window_config
        self._generated_config = dict(window_config)
        if generated_session_ttl_seconds is not None and window_config.get("ttl_seconds") is None:
            self._generated_config["ttl_seconds"] = generated_session_ttl_seconds

    def session(self, session_id: str | None) -> SessionWindow:
        """The window of ``session_id`` (no I/O). A session whose id the framework generated (a
        UUID4, as ``AgentSession()`` makes for ``agent.run()`` without a session) gets
        ``ttl_seconds=generated_session_ttl_seconds`` unless the window config sets one."""
        session_id = DEFAULT_SESSION if session_id is None else session_id
        config = self._generated_config if _generated(session_id) else self._config
        return SessionWindow(session_id, self._store, **config)

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Message]:
        """The session's messages, oldest first (without those the framework's compaction marked
        ``_excluded`` when ``skip_excluded``)."""
        messages = [from_window_item(i) for i in await self.session(session_id).aitems()]
        if self.skip_excluded:
            messages = [m for m in messages if not (m.additional_properties or {}).get("_excluded", False)]
        return messages

    async def save_messages(
        self, session_id: str | None, messages: Sequence[Message], *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        """Append the messages the session does not hold yet (``new_messages``: a host that sends
        the whole conversation each run stores each message once) in one atomic step, on the
        version it read: a writer in between makes it read again."""
        window, started, attempt = self.session(session_id), time.monotonic(), 0
        while messages:
            attempt += 1
            version = await window.aversion()
            stored = [from_window_item(i) for i in await window.aitems()]
            new = new_messages(stored, messages)
            if not new:
                return
            try:
                await window.aadd(partial(_entries, new), expect_version=version or None)
                return
            except VersionConflictError:
                wait = REPLACE_BACKOFF.next_delay(attempt, started)
                if wait is None:
                    raise VersionConflictError(f"save to {session_id!r}: the window kept moving on") from None
                await asyncio.sleep(wait)

    async def after_run(self, *, agent: Any, session: Any, context: Any, state: dict[str, Any]) -> None:
        """Store the run's messages (``HistoryProvider.after_run``), then record what its
        response's ``usage_details`` report (``record_usage``, once per ``response_id``), for the
        session's window as it is then."""
        await super().after_run(agent=agent, session=session, context=context, state=state)
        response = context.response
        usage = getattr(response, "usage_details", None)
        if usage:
            report = usage_of(usage, getattr(response, "response_id", None))
            await self.session(context.session_id).arecord_usage([report])

    async def clear(self, session_id: str) -> None:
        """Remove every message of the session (its window's config stays)."""
        await self.session(session_id).acall("clear", include_pinned=True)
