"""contextstore: shared LLM context windows in Redis.

Every mutation is one atomic Lua script on the Redis server, so any number of agent workers can
share one window safely. See the README and ``docs/``.
"""

import logging

from . import events as events
from .core.retry import RetryPolicy
from .core.streams import EventBatch
from .core.tokens import TiktokenCounter, TokenCounter
from .core.verify import VerifyReport
from .core.version import __version__ as __version__
from .drivers.aio import AsyncContextStore, AsyncContextWindow
from .drivers.embedded import EmbeddedServer
from .drivers.sync import ContextStore, ContextWindow
from .errors import (
    BudgetTooSmallError,
    ConfigConflictError,
    ContextStoreError,
    ContextWindowFullError,
    CorruptWindowError,
    DuplicateItemError,
    HelperError,
    InvalidItemError,
    InvalidOptionsError,
    InvalidWindowIdError,
    NoConversationError,
    PermissionDeniedError,
    ReplayUnavailableError,
    ReplicationTimeoutError,
    StoreClosedError,
    StoreOutOfMemoryError,
    StoreUnavailableError,
    StrategyUnavailableError,
    SummaryNotFoundError,
    ToolCallLinkError,
    TurnBusyError,
    TurnLostError,
    TurnQueuedError,
    UnsupportedServerError,
    VersionConflictError,
    WindowNotFoundError,
)
from .events import Event, OtherEvent
from .relevance import BM25Scorer, EmbeddingScorer, RelevanceScorer
from .summarize import ExtractiveSummarizer, OpenAISummarizer, Summarizer
from .turns import AsyncTurn, Turn
from .types import (
    ArchivedSummary,
    BuildOptions,
    BuiltContext,
    BuiltMessages,
    CompactionPlan,
    CompactionStrategy,
    ContextItem,
    ContextSnapshot,
    ContextWindowStats,
    ItemFields,
    ItemType,
    Lineage,
    PlannedItem,
    WindowOptions,
)
from .usage import Prices, UsageTotals

__all__ = [
    "ArchivedSummary",
    "AsyncContextStore",
    "AsyncContextWindow",
    "AsyncTurn",
    "BM25Scorer",
    "BudgetTooSmallError",
    "BuildOptions",
    "BuiltContext",
    "BuiltMessages",
    "CompactionPlan",
    "CompactionStrategy",
    "ConfigConflictError",
    "ContextItem",
    "ContextSnapshot",
    "ContextStore",
    "ContextStoreError",
    "ContextWindow",
    "ContextWindowFullError",
    "ContextWindowStats",
    "CorruptWindowError",
    "DuplicateItemError",
    "EmbeddedServer",
    "EmbeddingScorer",
    "Event",
    "EventBatch",
    "ExtractiveSummarizer",
    "HelperError",
    "InvalidItemError",
    "InvalidOptionsError",
    "InvalidWindowIdError",
    "ItemFields",
    "ItemType",
    "Lineage",
    "NoConversationError",
    "OpenAISummarizer",
    "OtherEvent",
    "PermissionDeniedError",
    "PlannedItem",
    "Prices",
    "RelevanceScorer",
    "ReplayUnavailableError",
    "ReplicationTimeoutError",
    "RetryPolicy",
    "StoreClosedError",
    "StoreOutOfMemoryError",
    "StoreUnavailableError",
    "StrategyUnavailableError",
    "Summarizer",
    "SummaryNotFoundError",
    "TiktokenCounter",
    "TokenCounter",
    "ToolCallLinkError",
    "Turn",
    "TurnBusyError",
    "TurnLostError",
    "TurnQueuedError",
    "UnsupportedServerError",
    "UsageTotals",
    "VerifyReport",
    "VersionConflictError",
    "WindowNotFoundError",
    "WindowOptions",
]

# A library logs; the application decides where logs go. Without this, Python's last-resort
# handler would print the library's warnings on stderr of every program that uses it.
logging.getLogger("contextstore").addHandler(logging.NullHandler())
