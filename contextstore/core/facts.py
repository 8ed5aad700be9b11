"""What a chat build needs of an item besides its ``:attrs`` numbers, kept as letters in its
``:attrs`` flags, so that a build can choose from ``:attrs`` alone and read the bodies of the
items it takes only (``plans/chat.py``).

The client writes the letters with every item it stores (add, summary, restore); the scripts
keep them as they are and add one of their own, ``c`` (a cleared tool result). They say:

- the item's chat role (``role_class``, one upper-case letter, always there: an item without
  one was stored before the letters were kept): ``S`` system, ``U`` user, ``A`` assistant,
  ``T`` tool (a result naming its call), ``X`` context (rendered under a header);
- ``K``: an assistant message whose one tool call has its group's name as id (the group a call
  takes when none is given); ``Q``: a tool result answering the call named as its group (add.lua
  writes ``Q``, or ``L``, when it gives a result its call's group);
- ``L``: other tool links (several calls in one message, a group of the caller's): the build
  needs the body to pair them, and reads it with the facts (``needs_body``);
- ``R``: a context item with a ``source_ref``, whose header (and so its cost) needs the body,
  read with the facts too;
- ``N``: an assistant message holding a provider's reasoning (native parts with tokens of their
  own, ``core/native.py``): what it costs depends on the build's format and turn, so its body is
  read with the facts too.

``stub`` makes from an id's ``:attrs`` value and pin an item without content whose role, calls
and results are the stored item's, so that choosing (``render/select.py``) and costing
(``render/messages.py``) give for it what they give for the stored item.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..types import Content, ContextItem, ItemType
from . import native

#: the store's own flag: the tool result's content was cleared (CLEAR_TOOL_RESULTS)
CLEARED = "c"
CALLS_GROUP = "K"
ANSWERS_GROUP = "Q"
OTHER_LINK = "L"
HEADER_SOURCE = "R"
REASONING = "N"
#: a chat role -> its letter
ROLE_LETTERS = {"system": "S", "user": "U", "assistant": "A", "tool": "T", "context": "X"}
_ROLES = {v: k for k, v in ROLE_LETTERS.items()}
#: the letters whose item a build cannot cost or pair without its body
NEEDS_BODY = frozenset(OTHER_LINK + HEADER_SOURCE + REASONING)

_SYSTEM_TYPES = (ItemType.SYSTEM_PROMPT, ItemType.INSTRUCTION)
_BY_TYPE = {ItemType.USER_MESSAGE: "user", ItemType.ASSISTANT_MESSAGE: "assistant"}


def role_class(item_type: ItemType, role: str | None, metadata: Mapping[str, Any] | None) -> str:
    """An item's chat role: ``system``, ``user``, ``assistant``, ``tool`` or ``context``
    (rendered as text under a header; see ``render/messages.py``)."""
    if role in ("system", "developer") or (role is None and item_type in _SYSTEM_TYPES):
        return "system"
    if item_type is ItemType.TOOL_RESULT or role == "tool":
        return "tool" if "tool_call_id" in (metadata or {}) else "context"
    if role in ("user", "assistant"):
        return role
    return _BY_TYPE.get(item_type, "context") if role is None else "context"


def call_ids(item_type: ItemType, role: str | None, metadata: Mapping[str, Any] | None) -> list[str]:
    """The ids of the tool calls an item makes as a chat message ([] unless it is an assistant
    message in the assistant role with ``metadata["tool_calls"]``)."""
    if item_type is not ItemType.ASSISTANT_MESSAGE or role_class(item_type, role, metadata) != "assistant":
        return []
    return [c["id"] for c in (metadata or {}).get("tool_calls") or ()]


def letters(
    item_type: ItemType,
    role: str | None,
    metadata: Mapping[str, Any] | None,
    source_ref: str | None,
    group: str | None,
    content: Content = "",
) -> str:
    """The letters the client stores for an item (without ``c``). A tool result whose group is
    not known yet (None: add.lua gives it its call's) gets its link letter from add.lua."""
    kind = role_class(item_type, role, metadata)
    out = ROLE_LETTERS[kind]
    calls = call_ids(item_type, role, metadata)
    if calls:
        out += CALLS_GROUP if calls == [group] else OTHER_LINK
    elif kind == "tool" and group is not None:
        out += ANSWERS_GROUP if (metadata or {}).get("tool_call_id") == group else OTHER_LINK
    if kind == "context" and source_ref:
        out += HEADER_SOURCE
    if native.reasons(content):
        out += REASONING
    return out


def of_item(item: ContextItem) -> str:
    """``letters`` of a stored item (its group known), without ``c``."""
    return letters(item.type, item.role, item.metadata, item.source_ref, item.group, item.content)


def stored_letters(attrs: str) -> str:
    """The client's letters in an ``:attrs`` value (without the store's ``c``; "" when none)."""
    parts = attrs.split("|", 5)
    return parts[4].replace(CLEARED, "") if len(parts) == 6 else ""


def needs_body(attrs: str) -> bool:
    """Whether the item of an ``:attrs`` value is chosen and costed only with its body (its
    letters say so, ``NEEDS_BODY``, or it is a tool result whose link add.lua has not written),
    rather than not at all (a value without letters, or in a shape no script writes)."""
    parts = attrs.split("|", 5)
    if len(parts) != 6 or _ROLES.get(parts[4][:1]) is None:
        return False
    flags = parts[4]
    return bool(NEEDS_BODY.intersection(flags)) or (flags[:1] == ROLE_LETTERS["tool"] and ANSWERS_GROUP not in flags)


def stub(item_id: str, attrs: str, pinned: bool) -> ContextItem | None:
    """An item without content that a build chooses and costs as it would the stored one, from
    its ``:attrs`` value; None when its letters are missing or say the body is needed."""
    parts = attrs.split("|", 5)
    if len(parts) != 6:
        return None
    seq, tokens, priority, kind, flags, group = parts
    role = _ROLES.get(flags[:1])
    if role is None or NEEDS_BODY.intersection(flags):
        return None
    metadata: dict[str, Any] | None = None
    if CALLS_GROUP in flags:
        metadata = {"tool_calls": [{"id": group}]}
    elif ANSWERS_GROUP in flags:
        metadata = {"tool_call_id": group}
    elif role == "tool":
        return None  # a result whose link add.lua has not written
    try:
        return ContextItem(
            content="",
            type=ItemType(kind),
            priority=int(priority),
            token_count=int(tokens),
            pinned=pinned,
            role=role,  # "context": no chat role, and no type's either (role_class)
            metadata=metadata,
            id=item_id,
            seq=int(seq),
            group=group or None,
        )
    except ValueError:
        return None
