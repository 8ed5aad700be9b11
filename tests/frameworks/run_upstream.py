"""Run a framework's own tests of its chat-history protocol against contextstore's adapter.

Downloads the framework's source distribution at the installed version (PyPI), installs its
test dependencies into the current environment, swaps the framework's in-memory class for the
contextstore one (a pytest plugin written next to the tests; nothing is copied into this
repository) and prints passed/failed. The tests run against an embedded server.

    python tests/frameworks/run_upstream.py langchain

Wired: LangChain (its chat-history and runnable-history tests), openai-agents (its session
tests, run against ``SQLiteSession``'s constructor, and its compaction-session tests) and
llama-index (its ``SimpleChatStore`` tests, run against ``ContextStoreChatStore``) and Agent
Framework (its session and agent tests, with ``InMemoryHistoryProvider`` and
``FileHistoryProvider`` swapped for ``ContextStoreChatMessageStore``). llama-index-core and
agent-framework-core ship no tests in their source distributions: pass ``--tests DIR``, the
folder of a checkout of the framework's repository that holds the ``tests/`` the suite names
(``llama-index-core``; Agent Framework's ``python/packages/core``).

    python tests/frameworks/run_upstream.py llama-index --tests ~/src/llama_index/llama-index-core
    python tests/frameworks/run_upstream.py agent-framework --tests ~/src/agent-framework/python/packages/core
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version
from pathlib import Path

LANGCHAIN_SWAP = '''
"""Replace langchain-core's InMemoryChatMessageHistory with contextstore's history."""
import itertools, tempfile
import langchain_core.chat_history as chat_history
import contextstore as cs
from contextstore.integrations.langchain import ContextStoreChatMessageHistory

_STORE = cs.ContextStore.embedded(tempfile.mkdtemp(prefix="cs-upstream-"), prefix="upstream")
_IDS = itertools.count()


class SwappedHistory(ContextStoreChatMessageHistory):
    """InMemoryChatMessageHistory's constructor (``messages=``) on a fresh window each."""

    def __init__(self, messages=None, **kwargs):
        super().__init__(f"s{next(_IDS)}", _STORE)
        if messages:
            self.add_messages(messages)

    def __eq__(self, other):  # the tests compare histories as the in-memory model does: by messages
        return isinstance(other, ContextStoreChatMessageHistory) and self.messages == other.messages

    __hash__ = None


chat_history.InMemoryChatMessageHistory = SwappedHistory
'''

OPENAI_AGENTS_SWAP = '''
"""Replace openai-agents' SQLiteSession with contextstore's session."""
import hashlib, itertools, tempfile
import agents, agents.memory
import contextstore as cs
from contextstore.integrations.openai_agents import ContextStoreSession

_STORE = cs.ContextStore.embedded(tempfile.mkdtemp(prefix="cs-upstream-"), prefix="upstream")
_MEMORY = itertools.count()


class SwappedSession(ContextStoreSession):
    """SQLiteSession's constructor: a database path names a set of sessions (":memory:" a new
    set each time, as SQLite's in-memory databases are)."""

    def __init__(self, session_id, db_path=":memory:", session_settings=None, **kwargs):
        named = f"memory-{next(_MEMORY)}" if str(db_path) == ":memory:" else str(db_path)
        db = hashlib.sha1(named.encode()).hexdigest()[:12]
        super().__init__(session_id, _STORE, session_settings=session_settings)
        self._session.window = _STORE.handle(f"{db}:{session_id}", **self._session.config)

    def close(self):
        pass


agents.SQLiteSession = agents.memory.SQLiteSession = SwappedSession
'''

LLAMA_INDEX_SWAP = '''
"""Replace llama-index's SimpleChatStore with contextstore's chat store."""
import itertools, tempfile
import llama_index.core.storage.chat_store as chat_stores
import llama_index.core.storage.chat_store.simple_chat_store as simple
import contextstore as cs
from contextstore.integrations.llama_index import ContextStoreChatStore

_PATH = tempfile.mkdtemp(prefix="cs-upstream-")
_IDS = itertools.count()


class SwappedChatStore(ContextStoreChatStore):
    """SimpleChatStore's constructor: each chat store is a set of keys of its own."""

    def __init__(self, **kwargs):
        super().__init__(cs.ContextStore.embedded(_PATH, prefix=f"upstream{next(_IDS)}"))


chat_stores.SimpleChatStore = simple.SimpleChatStore = SwappedChatStore
'''

AGENT_FRAMEWORK_SWAP = '''
"""Replace Agent Framework's in-memory and file history providers with contextstore's provider."""
import hashlib, itertools, tempfile
import agent_framework, agent_framework._agents as agents_module, agent_framework._sessions as sessions
import contextstore as cs
from contextstore.integrations.agent_framework import ContextStoreChatMessageStore

_PATH = tempfile.mkdtemp(prefix="cs-upstream-")
_IDS = itertools.count()


class SwappedInMemory(ContextStoreChatMessageStore):
    """InMemoryHistoryProvider's constructor: each provider keeps sessions of its own (the
    in-memory one keeps them in each session's state)."""

    DEFAULT_SOURCE_ID = sessions.InMemoryHistoryProvider.DEFAULT_SOURCE_ID

    def __init__(self, source_id=None, **options):
        super().__init__(cs.ContextStore.embedded(_PATH, prefix=f"mem{next(_IDS)}"), source_id=source_id, **options)


class SwappedFile(ContextStoreChatMessageStore):
    """FileHistoryProvider's constructor: a storage path names a set of sessions."""

    DEFAULT_SOURCE_ID = sessions.FileHistoryProvider.DEFAULT_SOURCE_ID

    def __init__(self, storage_path, *, source_id=DEFAULT_SOURCE_ID, serialization_format="json", dumps=None,
                 loads=None, **options):
        named = hashlib.sha1(str(storage_path).encode()).hexdigest()[:12]
        super().__init__(cs.ContextStore.embedded(_PATH, prefix=f"file{named}"), source_id=source_id, **options)


for module in (agent_framework, sessions, agents_module):
    if hasattr(module, "InMemoryHistoryProvider"):
        module.InMemoryHistoryProvider = SwappedInMemory
    if hasattr(module, "FileHistoryProvider"):
        module.FileHistoryProvider = SwappedFile
'''

SUITES = {
    "langchain": {
        "dist": "langchain-core",
        "tests": ["tests/unit_tests/chat_history/test_chat_history.py", "tests/unit_tests/runnables/test_history.py"],
        "deps": ["blockbuster>=1.5.18,<1.6", "pytest-mock", "freezegun", "syrupy", "pytest-asyncio", "grandalf"],
        "swap": LANGCHAIN_SWAP,
    },
    "openai-agents": {
        "dist": "openai-agents",
        "tests": [
            "tests/memory/test_session.py",
            "tests/memory/test_session_limit.py",
            "tests/memory/test_openai_responses_compaction_session.py",
            # a run's tool outputs (a computer tool's screenshot whose data is no image) saved
            # through the session after a sibling tool failed
            "tests/test_native_tool_failure_history.py",
        ],
        "deps": ["pytest-asyncio", "pytest-mock", "inline-snapshot"],
        "swap": OPENAI_AGENTS_SWAP,
    },
    "llama-index": {
        "dist": "llama-index-core",
        "tests": ["tests/storage/chat_store/test_simple_chat_store.py"],
        "deps": ["pytest-asyncio"],
        "swap": LLAMA_INDEX_SWAP,
        "sdist_has_tests": False,
    },
    "agent-framework": {
        "dist": "agent-framework-core",
        "tests": ["tests/core/test_sessions.py", "tests/core/test_agents.py"],
        "deps": ["pytest-asyncio"],
        "swap": AGENT_FRAMEWORK_SWAP,
        "sdist_has_tests": False,
        "pytest": ["-o", "asyncio_mode=auto"],
    },
}


def _unpacked(dist: str, pinned: str, tmp: str) -> Path:
    """The framework's source distribution at the installed version, unpacked under ``tmp``."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", tmp, pinned],
        check=True,
    )
    archive = next(Path(tmp).glob("*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
    return next(p for p in Path(tmp).iterdir() if p.is_dir())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("framework", choices=sorted(SUITES))
    ap.add_argument("--tests", type=Path, help="a checkout's folder holding the suite's tests/ (else the sdist's)")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (e.g. -k NAME)")
    opts, more = ap.parse_known_args()  # pytest's own options (-k NAME) pass through
    opts.pytest_args += more
    suite = SUITES[opts.framework]
    dist = suite["dist"]
    pinned = f"{dist}=={version(dist)}"
    if opts.tests is None and not suite.get("sdist_has_tests", True):
        ap.error(f"{dist} ships no tests in its source distribution: pass --tests DIR")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *suite["deps"]], check=True)
        root = opts.tests.resolve() if opts.tests else _unpacked(dist, pinned, tmp)
        plugin_dir = Path(tmp) / "plugin"
        plugin_dir.mkdir()
        (plugin_dir / "contextstore_swap.py").write_text(suite["swap"])
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "contextstore_swap", "-p", "no:cacheprovider"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), str(root)])}
        cmd += ["-o", "addopts=", *suite.get("pytest", [])]  # not this repository's options
        done = subprocess.run([*cmd, *suite["tests"], *opts.pytest_args], cwd=root, env=env)
        print(f"{pinned}: pytest exit status {done.returncode}")
        return done.returncode


if __name__ == "__main__":
    sys.exit(main())
