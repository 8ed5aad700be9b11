"""Data types of the public API: enums and msgspec Structs.

May import: ``usage`` (the reported-usage types ``ContextWindowStats`` holds); no I/O (no
redis, asyncio, subprocess or HTTP).
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Literal, TypedDict

import msgspec
from msgspec import Meta

from .usage import UsageTotals

#: the defaults of a window's options, owned here (layout.py hands them to the scripts, config.py
#: to new windows, and the structs below take them)
DEFAULT_THRESHOLD = 85.0
DEFAULT_WARN_PERCENT = 75.0
DEFAULT_EVENTS_MAXLEN = 10_000
DEFAULT_ARCHIVE_TTL_SECONDS = 86_400

#: the formats ``build_messages`` builds and ``add_many`` takes (contract §21): Chat Completions
#: messages, Anthropic's Messages API, OpenAI's Responses input items, Gemini's ``contents``
ChatFormat = Literal["openai", "anthropic", "responses", "gemini"]
CHAT_FORMATS: tuple[ChatFormat, ...] = ("openai", "anthropic", "responses", "gemini")


class ItemType(str, Enum):
    """What an item is. The rank (``ItemType.rank``) decides its place in a built prompt."""

    SYSTEM_PROMPT = "system_prompt"
    INSTRUCTION = "instruction"
    RETRIEVED_DOCUMENT = "retrieved_document"
    WORKING_MEMORY = "working_memory"
    TOOL_RESULT = "tool_result"
    USER_MESSAGE = "user_message"
    ASSISTANT_MESSAGE = "assistant_message"
    CODE = "code"
    FILE = "file"
    TEXT = "text"
    ERROR = "error"
    REPL_HISTORY = "repl_history"
    CUSTOM = "custom"
    OTHER = "other"

    @classmethod
    def _missing_(cls, value: object) -> ItemType | None:
        # seed 002 spells its types with hyphens (``repl-history``)
        if isinstance(value, str) and "-" in value:
            try:
                return cls(value.replace("-", "_"))
            except ValueError:
                return None
        return None

    @property
    def rank(self) -> int:
        """Default build rank: lower comes first."""
        return TYPE_RANKS[self]

    def __str__(self) -> str:
        return self.value


TYPE_RANKS: dict[ItemType, int] = {
    ItemType.SYSTEM_PROMPT: 0,
    ItemType.INSTRUCTION: 1,
    ItemType.RETRIEVED_DOCUMENT: 2,
    ItemType.WORKING_MEMORY: 3,
    ItemType.TOOL_RESULT: 4,
    ItemType.USER_MESSAGE: 5,
    ItemType.ASSISTANT_MESSAGE: 6,
    ItemType.CODE: 2,
    ItemType.FILE: 2,
    ItemType.TEXT: 2,
    ItemType.ERROR: 4,
    ItemType.REPL_HISTORY: 4,
    ItemType.CUSTOM: 99,
    ItemType.OTHER: 99,
}

HISTORY_TYPES = frozenset({ItemType.USER_MESSAGE, ItemType.ASSISTANT_MESSAGE})


class CompactionStrategy(str, Enum):
    """How ``compact()`` chooses what to remove."""

    REMOVE_OLDEST = "remove_oldest"
    REMOVE_LOW_PRIORITY = "remove_low_priority"
    SUMMARIZE = "summarize"
    SELECTIVE = "selective"
    CLEAR_TOOL_RESULTS = "clear_tool_results"

    @property
    def server_side(self) -> bool:
        """True for the strategies that run entirely inside Redis."""
        return self not in (CompactionStrategy.SUMMARIZE, CompactionStrategy.SELECTIVE)

    def __str__(self) -> str:
        return self.value


#: the type an item takes from its chat role when no type is given
ROLE_TYPES: dict[str, ItemType] = {
    "user": ItemType.USER_MESSAGE,
    "assistant": ItemType.ASSISTANT_MESSAGE,
    "system": ItemType.SYSTEM_PROMPT,
    "developer": ItemType.SYSTEM_PROMPT,
    "tool": ItemType.TOOL_RESULT,
}


#: an item's content: a str, or a list of content parts in OpenAI's or Anthropic's shape (text,
#: images, audio, files, documents: ``core/parts.py``)
Content = str | list[dict[str, Any]]


class ContextItem(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One item of a context window.

    On input ``token_count=0`` means "count it" and ``id=None`` means "generate ``ctx-<seq>``".
    Items read back from the store always carry ``id``, ``seq``, ``added_at`` and ``token_count``.
    An item is not tracked by Python's garbage collector (a store's item cache holds many): its
    content and metadata are JSON values, which hold no reference cycles.
    """

    content: Content
    type: ItemType = ItemType.CODE
    priority: int = 50
    token_count: int = 0
    pinned: bool = False
    role: str | None = None
    source_ref: str | None = None
    metadata: dict[str, Any] | None = None
    id: str | None = None
    added_at: datetime | None = None
    seq: int = 0
    #: items sharing a group (a tool call and its results) are kept or dropped together
    group: str | None = None


class BuildOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Options of ``build()`` / ``build_structured()``. The defaults include every section,
    the 10 most recent conversation messages, and keep 1000 tokens free for the answer."""

    include_system_prompt: bool = True
    include_instructions: bool = True
    include_recent_history: bool = True
    max_history_items: Annotated[int, Meta(ge=0)] = 10
    include_relevant_memory: bool = True
    query: str | None = None
    section_separator: str = "\n\n---\n\n"
    #: how an item with a role is rendered: must contain ``{content}`` once (``{role}`` optional)
    message_format: str | None = None
    reserve_for_response: Annotated[int, Meta(ge=0)] = 1000
    max_tokens: Annotated[int, Meta(ge=1)] | None = None
    #: "sections" (rank groups), "priority" (rank, priority, arrival) or "arrival" (system and
    #: instruction items first, then arrival order: a window that only grew keeps its prefix)
    order: Literal["sections", "priority", "arrival"] = "sections"
    compact: bool = False
    exact_tokens: bool = False
    #: build_messages(format="anthropic"): cache breakpoints on the system block, the last message
    #: and before where the latest and the next clearing compaction start (see the guide)
    cache_control: bool = False
    #: what a chat build counts of a provider's reasoning kept in the window (thinking blocks,
    #: reasoning items, thought signatures), in that provider's format (another leaves it out):
    #: "all_turns" (every turn's, as current models keep them) or "current_turn" (only what came
    #: after the newest user message, as models that drop earlier turns' reasoning count it)
    reasoning_context: Literal["all_turns", "current_turn"] = "all_turns"
    #: the model a chat build is for: a provider's own part another model produced (its ``model``
    #: says so) is left out as another provider's is; None sends every model's
    model: str | None = None


class BuiltContext(msgspec.Struct, frozen=True, kw_only=True):
    """A prompt built within a token budget, with what went in and what did not.

    Every item of the window is in exactly one of three lists: ``included_item_ids``,
    ``excluded_item_ids`` (a candidate that did not fit the budget) and ``omitted_item_ids``
    (left out by the options: an ``include_*`` flag or ``max_history_items``), except that a
    build from the window's facts (a store without an item cache, a ``max_tokens`` of its own)
    lists in ``omitted_item_ids`` only what it read: not the conversation older than
    ``max_history_items`` reaches."""

    content: str
    total_tokens: int
    included_item_ids: list[str]
    excluded_item_ids: list[str]
    was_compacted: bool = False
    tokens_freed_by_compaction: int = 0
    omitted_item_ids: list[str] = []
    #: the excluded items newer than every unpinned item the build took (arrival order): the
    #: window holds more than the build budget lets in (see ``docs/guide.md``, budgets)
    dropped_newest: list[str] = []
    #: the window's version as the build read it: pass it as ``expect_version`` to write only
    #: while no other writer added or removed items since (``docs/turns.md``)
    version: str = ""


class BuiltMessages(msgspec.Struct, frozen=True, kw_only=True):
    """Chat messages built within a token budget: ``messages`` is the list OpenAI's chat API
    takes (``format="openai"``), the ``{"system", "messages"}`` dict of Anthropic's
    (``format="anthropic"``), the ``input`` list of OpenAI's Responses API (``"responses"``) or
    the ``{"system_instruction", "contents"}`` dict of Gemini's (``"gemini"``); the ids say what
    went in, what did not fit, and what the options (or an incomplete tool-call group) left out.
    A build chosen from the window's facts (a store without an item cache, a ``max_tokens`` of
    its own) lists in ``omitted_item_ids`` only what it read: not the conversation older than
    ``max_history_items`` reaches; and one whose budget stopped its read lists in
    ``excluded_item_ids`` (and ``dropped_newest``) only what it read, not the older messages
    that could not fit what the budget left (see ``docs/guide.md``)."""

    messages: list[dict[str, Any]] | dict[str, Any]
    format: ChatFormat
    total_tokens: int
    included_item_ids: list[str]
    excluded_item_ids: list[str]
    omitted_item_ids: list[str] = []
    was_compacted: bool = False
    tokens_freed_by_compaction: int = 0
    #: the excluded items newer than every unpinned item the build took (see ``BuiltContext``)
    dropped_newest: list[str] = []
    #: the window's version as the build read it (see ``BuiltContext``)
    version: str = ""


class ArchivedSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What a summary replaced, as a snapshot carries it: the items (arrival order) that
    ``undo_summary(summary_id)`` would put back, until ``expires_at`` (UTC)."""

    summary_id: str
    expires_at: datetime
    items: list[ContextItem] = []


class Lineage(msgspec.Struct, frozen=True, kw_only=True):
    """Where a window comes from and what came from it (``win.lineage()``): the window it was
    forked from and the item it was forked at (None for a window that is no fork), and the ids
    of the windows forked from it, oldest first."""

    parent: str | None = None
    fork_point: str | None = None
    forks: list[str] = []


class ContextSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A window's config and items at one moment. Encode it with ``msgspec.json.encode``.

    ``archive`` holds what the window's summaries replaced (``undo_summary`` can put it back),
    each entry with the absolute time it expires: ``restore()`` keeps the entries whose time has
    not passed, with that same expiry, and drops the others."""

    format_version: int = 1
    window_id: str
    created_at: datetime
    max_tokens: int | None = None
    max_items: int | None = None
    compaction_threshold: float = DEFAULT_THRESHOLD
    default_strategy: CompactionStrategy = CompactionStrategy.REMOVE_LOW_PRIORITY
    ttl_seconds: int | None = None
    items: list[ContextItem] = []
    keep_recent: int = 0
    clear_at_least: int = 0
    clear_exclude_tools: list[str] = []
    warn_percent: float = DEFAULT_WARN_PERCENT
    events_maxlen: int = DEFAULT_EVENTS_MAXLEN
    archive_ttl_seconds: int = DEFAULT_ARCHIVE_TTL_SECONDS
    archive: list[ArchivedSummary] = []
    compaction_target: float | None = None


class ContextWindowStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of a window, read in O(1) from what the scripts maintain.

    ``current_tokens`` are estimates (the items' ``token_count``); ``usage_percent`` and
    ``available_tokens`` are calibrated: through ``token_calibration``, what the provider counts
    per estimated token (``record_usage``; 1.0 until usage is recorded)."""

    window_id: str
    total_items: int
    pinned_items: int
    current_tokens: int
    max_tokens: int | None
    max_items: int
    available_tokens: int | None
    usage_percent: float
    compaction_threshold: float
    default_strategy: CompactionStrategy
    items_by_type: dict[ItemType, int]
    tokens_by_type: dict[ItemType, int]
    compaction_count: int
    total_tokens_freed: int
    #: the window's version (see ``BuiltContext.version``; "" when the window does not exist)
    version: str = ""
    #: what the provider reported for the window's builds (``record_usage``)
    usage: UsageTotals = UsageTotals()
    #: provider tokens per estimated token (clamped to 0.5-4.0; 1.0 until usage is recorded)
    token_calibration: float = 1.0


class WindowConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The config a window keeps in Redis (internal, but handy to read)."""

    max_tokens: int | None
    max_items: int
    compaction_threshold: float
    default_strategy: CompactionStrategy
    ttl_seconds: int | None
    item_limit: int
    #: compaction never removes or clears the newest N conversation units
    keep_recent: int = 0
    #: every compaction frees at least this many tokens (past its target if need be);
    #: CLEAR_TOOL_RESULTS clears nothing when all it may clear frees less
    clear_at_least: int = 0
    #: CLEAR_TOOL_RESULTS never clears the results of these tools
    clear_exclude_tools: tuple[str, ...] = ()
    #: a usage_warning event when usage crosses this percent of max_tokens
    warn_percent: float = DEFAULT_WARN_PERCENT
    #: the event stream is trimmed to about this many entries
    events_maxlen: int = DEFAULT_EVENTS_MAXLEN
    #: the items a summary replaced stay in the window's archive this long
    archive_ttl_seconds: int = DEFAULT_ARCHIVE_TTL_SECONDS
    #: a compaction at the threshold brings usage down to this percent (None: 15 points below
    #: ``compaction_threshold``; never above it)
    compaction_target: float | None = None


class WindowOptions(TypedDict, total=False):
    """The window options of ``store.window(...)`` and ``win.configure(...)`` (all keyword).

    To ``window()``, an option not passed (or passed as None) is not compared with the stored
    config; a new window gets ``max_tokens=None`` (no token limit), ``max_items`` 50 (or the
    store's ``item_limit`` when ``max_tokens`` is set), ``compaction_threshold=85.0``,
    ``default_strategy=REMOVE_LOW_PRIORITY``, ``ttl_seconds=None`` (no expiry),
    ``keep_recent=0``, ``clear_at_least=0``, ``clear_exclude_tools=()``, ``warn_percent=75.0``,
    ``events_maxlen=10000``, ``archive_ttl_seconds=86400`` and ``compaction_target=None`` (15
    points below the threshold). To
    ``configure()``, only the options passed change; ``max_tokens=None`` removes the token limit
    and ``ttl_seconds=None`` the expiry.
    """

    max_tokens: int | None
    max_items: int | None
    compaction_threshold: float | None
    default_strategy: CompactionStrategy | str | None
    ttl_seconds: int | None
    keep_recent: int | None
    clear_at_least: int | None
    clear_exclude_tools: list[str] | tuple[str, ...] | None
    warn_percent: float | None
    events_maxlen: int | None
    archive_ttl_seconds: int | None
    compaction_target: float | None


class ItemFields(TypedDict, total=False):
    """The keywords of ``add()`` (and of an ``add_many`` dict besides ``content``; ``add()``
    takes ``content=`` too, in place of its first argument).

    Defaults: ``type="code"`` (or the type a chat ``role`` implies: ``user`` → user_message,
    ``assistant`` → assistant_message, ``system`` / ``developer`` → system_prompt, ``tool`` →
    tool_result), ``priority=50``, ``pinned=False``, ``role=None``,
    ``source_ref=None``, ``metadata=None``, ``token_count=None`` (counted on add), ``id=None``
    (generated as ``ctx-<seq>``), ``group=None`` (a tool call's defaults to its call id, a tool
    result's to the group of its call).
    """

    content: Content
    type: ItemType | str
    priority: int
    pinned: bool
    role: str | None
    source_ref: str | None
    metadata: dict[str, Any] | None
    token_count: int | None
    id: str | None
    group: str | None


class PlannedItem(msgspec.Struct, frozen=True, kw_only=True):
    """One item a compaction would act on: ``action`` is ``"remove"``, ``"clear"`` (content
    replaced by the placeholder) or ``"summarize"``; ``tokens_freed`` is what that frees."""

    id: str
    type: ItemType
    tokens: int
    action: str
    tokens_freed: int
    group: str | None = None


class CompactionPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What ``compact()`` would do now (``plan_compaction()``: a dry run that changes nothing)."""

    strategy: CompactionStrategy
    items: list[PlannedItem]
    tokens_freed: int
    usage_percent_after: float
