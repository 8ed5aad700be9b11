"""llama-index's ``BaseChatStore`` on contextstore windows (extra ``contextstore[llama-index]``).

```python
from llama_index.core.memory import ChatMemoryBuffer
from contextstore.integrations.llama_index import ContextStoreChatStore

chat_store = ContextStoreChatStore(store, max_tokens=32_000)
memory = ChatMemoryBuffer.from_defaults(chat_store=chat_store, chat_store_key="user-42")
```

Each key is one window (the key must be a valid window id). Each message is one window item that
gives the message back exactly (its ``model_dump(mode="json")`` in ``metadata["llama_index"]``),
with its text as the content. An assistant message with OpenAI-style ``tool_calls`` in
``additional_kwargs`` and the tool messages that answer them (``tool_call_id``) form one group.
``set_messages`` replaces the history in one atomic step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from functools import partial
from typing import Any

from .. import AsyncContextStore, ContextStore
from ..core.layout import CLEARED_KEY, MAX_ITEM_LIMIT
from ..types import ContextItem
from . import _media
from ._session import SessionWindow, run_in_thread, session_for, stored_as_entry

try:
    from llama_index.core.llms import ChatMessage
    from llama_index.core.storage.chat_store.base import BaseChatStore
    from pydantic import PrivateAttr
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "contextstore.integrations.llama_index needs llama-index-core: pip install 'contextstore[llama-index]'"
    ) from exc

#: where a stored item keeps the message as ``model_dump(mode="json")`` gives it
RAW = "llama_index"
_TYPES = {"user": "user_message", "assistant": "assistant_message", "system": "instruction", "tool": "tool_result"}


def _calls(message: ChatMessage) -> list[dict[str, Any]]:
    calls = message.additional_kwargs.get("tool_calls") or []
    dumped = [c if isinstance(c, dict) else getattr(c, "model_dump", lambda: {})() for c in calls]
    ok = dumped and all(isinstance(c.get("id"), str) and isinstance(c.get("function"), dict) for c in dumped)
    return [{"id": c["id"], "type": "function", "function": c["function"]} for c in dumped] if ok else []


def _media_rule(block: Mapping[str, Any]) -> tuple[tuple[str, ...], dict[str, Any]] | None:
    """Where a llama-index block holds an image's, a document's or an audio clip's data (base64,
    as ``model_dump(mode="json")`` writes it), and the content part it becomes."""
    kind = block.get("block_type")
    if kind == "image" and isinstance(block.get("image"), str) and block.get("image_mimetype"):
        source = {"type": "base64", "media_type": block["image_mimetype"], "data": block["image"]}
        return ("image",), {"type": "image", "source": source}
    if kind == "document" and isinstance(block.get("data"), str):
        source = {
            "type": "base64",
            "media_type": block.get("document_mimetype") or "application/pdf",
            "data": block["data"],
        }
        return ("data",), {"type": "document", "source": source}
    if kind == "audio" and isinstance(block.get("audio"), str) and block.get("format"):
        return ("audio",), {"type": "input_audio", "input_audio": {"data": block["audio"], "format": block["format"]}}
    return None


def to_window_item(message: ChatMessage, linked: bool = True) -> dict[str, Any]:
    """One message as ``add_many`` takes it (``linked=False``: tool calls not paired). Its
    images, documents and audio become content parts beside its text (``_media``); the message
    kept to give it back holds no copy of their data."""
    raw = message.model_dump(mode="json")
    role = str(raw.get("role", "user"))
    lean, media, where = _media.split(raw.get("blocks"), _media_rule)
    meta: dict[str, Any] = {RAW: {**raw, "blocks": lean}, _media.MEDIA: where} if media else {RAW: raw}
    text = message.content or ""
    entry: dict[str, Any] = {
        "type": _TYPES.get(role, "other"), "role": role, "content": _media.content(text, media) if media else text,
    }  # fmt: skip
    calls = _calls(message) if linked and role == "assistant" else []
    call_id = message.additional_kwargs.get("tool_call_id")
    if calls:
        meta["tool_calls"] = calls
    elif linked and role == "tool" and isinstance(call_id, str):
        meta["tool_call_id"] = call_id
    elif role == "tool":
        entry["role"] = None  # answers no call in the window: not paired
    if not entry["content"] and not calls:
        entry["content"] = f"[{role} message]"
    return {**entry, "metadata": meta}


def _again(item: ContextItem) -> dict[str, Any]:
    """A stored item's ``add_many`` keywords, to store it again after an insertion: a message
    this store wrote goes through its message (exact round trip), any other item as it is."""
    if RAW in (item.metadata or {}):
        again = to_window_item(from_window_item(item))
        return {**again, "pinned": item.pinned, "priority": item.priority}
    return stored_as_entry(item)


def from_window_item(item: ContextItem) -> ChatMessage:
    """The message back, exactly as added (a cleared tool result carries its placeholder)."""
    raw = (item.metadata or {}).get(RAW)
    if raw is None:  # an item some other writer added to the window
        return ChatMessage(role=item.role or "user", content=item.content)
    if (item.metadata or {}).get(_media.MEDIA) and isinstance(item.content, list):
        raw = {**raw, "blocks": _media.joined(raw["blocks"], item.metadata[_media.MEDIA], item.content)}  # type: ignore[index]
    message = ChatMessage.model_validate(raw)
    if (item.metadata or {}).get(CLEARED_KEY):
        message = ChatMessage(role=message.role, content=item.content, additional_kwargs=message.additional_kwargs)
    return message


class ContextStoreChatStore(BaseChatStore):
    """A llama-index chat store whose keys are contextstore windows: shared safely by every
    process, kept within a token budget (``window_config`` over ``SESSION_DEFAULTS``), each call
    one atomic step (``set_messages`` too). Constructing it does no I/O."""

    _store: Any = PrivateAttr()
    _config: dict[str, Any] = PrivateAttr()

    def __init__(self, store: ContextStore | AsyncContextStore, **window_config: Any) -> None:
        super().__init__()
        self._store, self._config = store, window_config

    @classmethod
    def class_name(cls) -> str:
        """The name llama-index's serialisation knows this store by."""
        return "ContextStoreChatStore"

    def _session(self, key: str) -> SessionWindow:
        return SessionWindow(key, self._store, **self._config)

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Replace the key's messages in one atomic step (no reader sees it empty)."""
        self._session(key).add(lambda linked: [to_window_item(m, linked) for m in messages], "replace")

    def get_messages(self, key: str) -> list[ChatMessage]:
        """The key's messages, oldest first."""
        return [from_window_item(i) for i in self._session(key).items()]

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        """Append one message, or insert it where ``list.insert(idx, message)`` would (moved
        back to the start of a tool call's group that it would split), in one atomic step that
        stores the later messages again after it; racing writers lose nothing (it reads again)."""
        session = self._session(key)
        if idx is None:
            session.add(lambda linked: [to_window_item(message, linked)])
        else:
            session.insert(idx, lambda linked: to_window_item(message, linked), _again)

    async def async_add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        """The async form of ``add_message``."""
        await asyncio.to_thread(self.add_message, key, message, idx)

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """Remove and return every message of the key, atomically (None when there were none)."""
        popped = self._session(key).call("pop", MAX_ITEM_LIMIT)
        return [from_window_item(i) for i in reversed(popped)] or None

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Remove and return the message at ``idx`` (None when there is none)."""
        s = self._session(key)
        items = s.items()
        if not 0 <= idx < len(items) or not s.call("remove", items[idx].id):
            return None
        return from_window_item(items[idx])

    def delete_last_message(self, key: str) -> ChatMessage | None:
        """Remove and return the newest message, atomically (None when there is none)."""
        popped = self._session(key).call("pop", 1)
        return from_window_item(popped[0]) if popped else None

    def get_keys(self) -> list[str]:
        """Every key (window) under the store's prefix (a key too long to name its window is read
        from the window's newest message; an empty such window has none)."""
        store = self._store

        def newest(window_id: str) -> list[ContextItem]:
            if isinstance(store, ContextStore):
                return store.handle(window_id).items(limit=1)
            return run_in_thread(lambda: store.handle(window_id).items(limit=1))

        windows = store.windows() if isinstance(store, ContextStore) else run_in_thread(store.windows)
        keys = [session_for(w, partial(newest, w)) for w in windows]
        return [k for k in keys if k is not None]
