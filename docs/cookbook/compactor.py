"""The background compactor: summaries made beside the agents, so no agent waits on a model.

    CONTEXTSTORE_URL=redis://localhost:6379/0 python compactor.py

An agent keeps adding notes to a window whose default strategy is ``summarize``. When the window
passes ``warn_percent``, a compactor (here a thread; in production a ``contextstore compactor``
process or several) summarises the oldest notes into one item, while the agent goes on adding.
"""

from __future__ import annotations

import threading
import time

import contextstore as cs

WINDOW = "research-notes"


def agent(store: cs.ContextStore, notes: int) -> None:
    """Adds one note after another, never waiting for a summary."""
    win = store.window(WINDOW)
    for n in range(notes):
        win.add(f"Note {n}: service {n % 7} peaked at {40 + n % 13} ms.", type="working_memory")


def main() -> None:
    """Run an agent and a compactor side by side, then show the summary they left."""
    store = cs.ContextStore.from_env(summarizer=cs.ExtractiveSummarizer())
    store.window(
        WINDOW,
        max_tokens=2000,
        default_strategy="summarize",
        warn_percent=60,  # the compactor starts here...
        compaction_threshold=90,  # ...well before an add would have to compact by itself
        keep_recent=5,
    )
    stop = threading.Event()
    compactor = threading.Thread(target=store.run_compactor, args=([WINDOW],), kwargs={"stop": stop})
    compactor.start()
    try:
        agent(store, notes=120)
        deadline = time.monotonic() + 30
        while not any(item.metadata and "summary_of" in item.metadata for item in store.window(WINDOW).items()):
            if time.monotonic() > deadline:
                raise SystemExit("no summary within 30 s")
            time.sleep(0.1)
    finally:
        stop.set()
        compactor.join()
    win = store.window(WINDOW)
    for item in win.items():
        if item.metadata and "summary_of" in item.metadata:
            first_line = item.content.splitlines()[0]
            print(f"{item.id} summarises {len(item.metadata['summary_of'])} notes: {first_line}")
    stats = win.stats()
    print(f"{stats.total_items} items, {stats.current_tokens}/{stats.max_tokens} tokens", end=", ")
    print(f"{stats.compaction_count} compactions")


if __name__ == "__main__":
    main()
