"""Session and chat-history backends for agent frameworks, each an optional extra that imports
its framework only when its module is imported:

- ``contextstore.integrations.openai_agents.ContextStoreSession`` (``contextstore[openai-agents]``)
- ``contextstore.integrations.langchain.ContextStoreChatMessageHistory`` (``contextstore[langchain]``)
- ``contextstore.integrations.llama_index.ContextStoreChatStore`` (``contextstore[llama-index]``)
- ``contextstore.integrations.agent_framework.ContextStoreChatMessageStore``
  (``contextstore[agent-framework]``)

Each keeps a framework session in one window (keyed by the session id under the store's prefix),
gives back exactly what the framework stored, stores tool calls the way the conversation API
does (so groups, budgets and compaction never split a call from its results), and creates its
windows with the explicit limits of ``SESSION_DEFAULTS`` unless told otherwise.

May import: the public package (``contextstore``), ``core``, ``turns``, ``types``, ``errors``;
never the drivers.
"""

from ._session import SESSION_DEFAULTS, SessionWindow

__all__ = ["SESSION_DEFAULTS", "SessionWindow"]
