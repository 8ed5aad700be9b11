"""Run a framework's own tests of its chat-history protocol against contextstore's adapter.

Downloads the framework's source distribution at the installed version (PyPI), installs its
test dependencies into the current environment, swaps the framework's in-memory class for the
contextstore one (a pytest plugin written next to the tests; nothing is copied into this
repository) and prints passed/failed. The tests run against an embedded redis-server.

    python tests/frameworks/run_upstream.py langchain

Wired: LangChain (its chat-history and runnable-history tests) and openai-agents (its session
tests, run against ``SQLiteSession``'s constructor). llama-index-core and agent-framework-core
ship no tests in their source distributions.
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
import hashlib, tempfile
import agents, agents.memory
import contextstore as cs
from contextstore.integrations.openai_agents import ContextStoreSession

_STORE = cs.ContextStore.embedded(tempfile.mkdtemp(prefix="cs-upstream-"), prefix="upstream")


class SwappedSession(ContextStoreSession):
    """SQLiteSession's constructor: a database path names a set of sessions."""

    def __init__(self, session_id, db_path=":memory:", session_settings=None, **kwargs):
        db = hashlib.sha1(str(db_path).encode()).hexdigest()[:12]
        super().__init__(session_id, _STORE, session_settings=session_settings)
        self._session.window = _STORE.handle(f"{db}:{session_id}", **self._session.config)

    def close(self):
        pass


agents.SQLiteSession = agents.memory.SQLiteSession = SwappedSession
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
        "tests": ["tests/memory/test_session.py", "tests/memory/test_session_limit.py"],
        "deps": ["pytest-asyncio", "pytest-mock", "inline-snapshot"],
        "swap": OPENAI_AGENTS_SWAP,
    },
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("framework", choices=sorted(SUITES))
    suite = SUITES[ap.parse_args().framework]
    dist = suite["dist"]
    pinned = f"{dist}=={version(dist)}"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *suite["deps"]], check=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", tmp, pinned],
            check=True,
        )
        archive = next(Path(tmp).glob("*.tar.gz"))
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        root = next(p for p in Path(tmp).iterdir() if p.is_dir())
        (root / "contextstore_swap.py").write_text(suite["swap"])
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "contextstore_swap", "-p", "no:cacheprovider"]
        done = subprocess.run([*cmd, *suite["tests"]], cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
        print(f"{pinned}: pytest exit status {done.returncode}")
        return done.returncode


if __name__ == "__main__":
    sys.exit(main())
