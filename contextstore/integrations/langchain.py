"""LangChain's ``BaseChatMessageHistory`` on a contextstore window (extra
``contextstore[langchain]``).

```python
from langchain_core.runnables.history import RunnableWithMessageHistory
from contextstore.integrations.langchain import ContextStoreChatMessageHistory

chain = RunnableWithMessageHistory(
    prompt | model,
    lambda session_id: ContextStoreChatMessageHistory(session_id, store, max_tokens=32_000),
)
```

Each message is one window item that gives the message back exactly (its ``message_to_dict``
form in ``metadata["langchain"]``), with its text as the content. An ``AIMessage`` with tool
calls is stored as an assistant tool call and each ``ToolMessage`` as the tool result that
answers it, so a budget or a compaction removes a call with its results, never one of them. A
call id already in the window, or a result whose call is not there, is kept as a plain message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any

from .. import AsyncContextStore, ContextStore
from ..core.layout import CLEARED_KEY
from ..types import ContextItem
from . import _media
from ._session import SessionWindow, usage_report
from ._turns import asession_turn, session_turn

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import AIMessage, BaseMessage, message_to_dict, messages_from_dict
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "contextstore.integrations.langchain needs langchain-core: pip install 'contextstore[langchain]'"
    ) from exc

#: where a stored item keeps the message as ``message_to_dict`` gives it
RAW = "langchain"
_TYPES = {"human": "user_message", "ai": "assistant_message", "system": "instruction", "tool": "tool_result"}
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_MEDIA_TYPES = ("image_url", "image", "file")


#: a provider's reasoning among an AI message's content blocks (Anthropic's, OpenAI's, LangChain's
#: standard block): kept with the message as it came, never in the item's text
_REASONING_TYPES = ("thinking", "redacted_thinking", "reasoning")


def _text(content: Any) -> str:
    """A message's text: a str, the text of its blocks (reasoning left out), else its JSON."""
    if isinstance(content, str):
        return content
    shown = [p for p in content if not (isinstance(p, dict) and p.get("type") in _REASONING_TYPES)]
    parts = [p if isinstance(p, str) else p.get("text", "") for p in shown if isinstance(p, (str, dict))]
    return "\n".join(p for p in parts if p) or (json.dumps(shown, default=str) if shown else "")


def _media_rule(block: Mapping[str, Any]) -> tuple[tuple[str, ...], dict[str, Any]] | None:
    """Where a LangChain content block holds an image's or a file's data (OpenAI's ``image_url``,
    the standard ``image`` / ``file`` blocks with base64 data), and the content part it becomes."""
    kind, url = block.get("type"), block.get("image_url")
    if kind == "image_url":
        if isinstance(url, Mapping):
            detail = {"detail": url["detail"]} if url.get("detail") else {}
            return ("image_url", "url"), {"type": "image_url", "image_url": {"url": url.get("url"), **detail}}
        return ("image_url",), {"type": "image_url", "image_url": {"url": url}}
    key = "base64" if isinstance(block.get("base64"), str) else "data" if block.get("source_type") == "base64" else None
    if kind in ("image", "file") and key and isinstance(block.get("mime_type"), str):
        source = {"type": "base64", "media_type": block["mime_type"], "data": block[key]}
        return (key,), {"type": "image" if kind == "image" else "document", "source": source}
    return None


def to_window_item(message: BaseMessage, linked: bool = True) -> dict[str, Any]:
    """One message as ``add_many`` takes it (``linked=False``: tool calls not paired). Its images
    and files become content parts beside its text (``_media``); the message kept to give it back
    holds no copy of their data."""
    raw = message_to_dict(message)
    kind = raw["type"]
    lean, media, where = _media.split(message.content, _media_rule)
    meta: dict[str, Any] = {RAW: raw}
    if media:
        meta = {RAW: {**raw, "data": {**raw["data"], "content": lean}}, _media.MEDIA: where}
    text = _text([b for b in lean if not (isinstance(b, dict) and b.get("type") in _MEDIA_TYPES)]) if media else ""
    entry = {
        "type": _TYPES.get(kind, "other"),
        "role": _ROLES.get(kind, getattr(message, "role", None)),
        "content": _media.content(text, media) if media else _text(message.content),
    }
    calls = getattr(message, "tool_calls", None) or []
    if linked and calls and all(c.get("id") for c in calls):
        meta["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["args"], default=str)},
            }
            for c in calls
        ]
    elif linked and kind == "tool" and getattr(message, "tool_call_id", None):
        meta["tool_call_id"] = message.tool_call_id  # type: ignore[attr-defined]
    elif kind == "tool":
        entry["role"] = None  # a result that answers no call in the window: not paired
    if not entry["content"] and "tool_calls" not in meta:
        entry["content"] = f"[{kind} message]"
    return {**entry, "metadata": meta}


def usage_reports(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """``record_usage``'s keywords for each AI message that carries ``usage_metadata`` (LangChain's
    ``input_tokens`` counts the cache's reads and writes too, ``input_token_details`` tells them
    apart; the model from ``response_metadata["model_name"]``, the request id the message's id)."""
    reports = []
    for message in messages:
        usage = message.usage_metadata if isinstance(message, AIMessage) else None
        if not usage:
            continue
        details = usage.get("input_token_details") or {}
        model = (message.response_metadata or {}).get("model_name")
        counts = (usage.get("input_tokens"), usage.get("output_tokens"))
        cached = (details.get("cache_read"), details.get("cache_creation"))
        reports.append(usage_report(*counts, *cached, model, message.id))
    return reports


def from_window_item(item: ContextItem) -> BaseMessage:
    """The message back, exactly as added (a cleared tool result carries its placeholder)."""
    raw = (item.metadata or {}).get(RAW)
    if raw is None:  # an item some other writer added to the window
        raw = {
            "type": {"user": "human", "assistant": "ai"}.get(item.role or "", "human"),
            "data": {"content": item.content},
        }
    if (item.metadata or {}).get(CLEARED_KEY):
        raw = {**raw, "data": {**raw["data"], "content": item.content}}
    elif (item.metadata or {}).get(_media.MEDIA) and isinstance(item.content, list):
        content = _media.joined(raw["data"]["content"], item.metadata[_media.MEDIA], item.content)  # type: ignore[index]
        raw = {**raw, "data": {**raw["data"], "content": content}}
    return messages_from_dict([raw])[0]


class ContextStoreChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history whose messages live in a contextstore window: shared safely by
    every process with the same ``session_id``, kept within a token budget (``window_config``
    over ``SESSION_DEFAULTS``), each call one atomic step. Sync and async methods work on a
    ``ContextStore`` or an ``AsyncContextStore``. Constructing it does no I/O."""

    def __init__(self, session_id: str, store: ContextStore | AsyncContextStore, **window_config: Any) -> None:
        self.session_id = session_id
        self._session = SessionWindow(session_id, store, **window_config)

    @property
    def window(self) -> Any:
        """The session's window (``ContextWindow`` or ``AsyncContextWindow``)."""
        return self._session.window

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """Every message, oldest first."""
        return [from_window_item(i) for i in self._session.items()]

    async def aget_messages(self) -> list[BaseMessage]:
        """Every message, oldest first."""
        return [from_window_item(i) for i in await self._session.aitems()]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` in one atomic step; then what each AI message's ``usage_metadata``
        reports is recorded (``record_usage``, once per message id) for the window as it was
        before the step: the one the model was given."""
        if messages:
            reports = usage_reports(messages)
            version = self._session.version() if reports else ""
            self._session.add(lambda linked: [to_window_item(m, linked) for m in messages])
            self._session.record_usage(reports, version)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """The async form of ``add_messages``."""
        if messages:
            reports = usage_reports(messages)
            version = await self._session.aversion() if reports else ""
            await self._session.aadd(lambda linked: [to_window_item(m, linked) for m in messages])
            await self._session.arecord_usage(reports, version)

    def turn(
        self, *, policy: str = "reject", lease_ms: int = 30_000, input: Any = None, owner: str | None = None
    ) -> AbstractContextManager[Any]:
        """``with history.turn(...)``: the session's turn lease (``docs/turns.md``) around a run
        (a ``RunnableWithMessageHistory.invoke``). Every ``add_messages`` of a history of this
        store and session id from this context (the histories ``get_session_history`` makes) is
        fenced by the turn: nothing stored once another turn took over or the lease ran out, and
        ``TurnLostError`` as the turn ends (the chain only logs its history's errors). ``policy``:
        ``reject``, ``enqueue``, ``interrupt`` or ``rollback``; ``input`` (messages) is added as
        the turn starts, or enqueued (``TurnQueuedError``).
        A ``ContextStore`` only (``aturn`` on either store). Yields the window's turn."""
        return session_turn(self._session, True, **self._turn_args(policy, lease_ms, input, owner))

    def aturn(
        self, *, policy: str = "reject", lease_ms: int = 30_000, input: Any = None, owner: str | None = None
    ) -> AbstractAsyncContextManager[Any]:
        """``async with history.aturn(...)``: ``turn`` for async code (``ainvoke``)."""
        return asession_turn(self._session, True, **self._turn_args(policy, lease_ms, input, owner))

    @staticmethod
    def _turn_args(policy: str, lease_ms: int, input: Any, owner: str | None) -> dict[str, Any]:
        given = [input] if isinstance(input, BaseMessage) else list(input or [])
        entries = [to_window_item(m) for m in given]
        return {"policy": policy, "lease_ms": lease_ms, "input": entries or None, "owner": owner}

    def clear(self) -> None:
        """Remove every message (the window's config stays)."""
        self._session.call("clear", include_pinned=True)

    async def aclear(self) -> None:
        """Remove every message (the window's config stays)."""
        await self._session.acall("clear", include_pinned=True)
