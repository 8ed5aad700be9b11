"""Retry from here: branch a conversation at one of its messages to try another way (both ways
stay), and take back a turn that went wrong (undoably).

    CONTEXTSTORE_URL=redis://localhost:6379/0 OPENAI_API_KEY=... python retry_from_here.py

(`OPENAI_BASE_URL` points the client at any OpenAI-compatible server; without
`CONTEXTSTORE_URL` the embedded server is used.)
"""

from __future__ import annotations

import os

import openai

import contextstore as cs

MODEL = os.environ.get("CHAT_MODEL", "gpt-4.1-mini")
client = openai.OpenAI()


def ask(win: cs.ContextWindow, question: str) -> cs.ContextItem:
    """One turn: the question in, the model's answer (to the messages the window builds) stored."""
    win.add(question, role="user")
    messages = win.build_messages(cs.BuildOptions(reserve_for_response=500))
    answer = client.chat.completions.create(model=MODEL, messages=messages).choices[0].message.content or ""
    return win.add(answer, role="assistant")


def main() -> None:
    """A conversation; a branch that takes its second turn another way; a rewind and its undo."""
    store = cs.ContextStore.from_env()
    for wid in ("trip", "trip/formal"):
        store.window(wid).delete()
    trip = store.window("trip", max_tokens=16_000)
    trip.add("You plan short city trips.", role="system", pinned=True)
    first = ask(trip, "Plan a weekend in Porto.")
    second = ask(trip, "Make it cheaper.")

    # retry from here: a branch that ends at the first answer takes the second turn another way
    formal = trip.fork("trip/formal", at=first.id)
    print("branch:", ask(formal, "Rewrite it as a formal itinerary.").content)
    print("main:  ", second.content)
    print(f"main holds {trip.stats().total_items} items, the branch {formal.stats().total_items}")
    print("lineage:", trip.lineage().forks, formal.lineage().parent, formal.lineage().fork_point)

    # a turn that went wrong: take it back, then change your mind
    ask(trip, "Add a day trip to Braga.")
    rewind_id = trip.rewind(second.id or "")
    print("after the rewind, main ends with:", trip.items()[-1].content)
    print("put back:", trip.undo_rewind(rewind_id), "items")
    store.close()


if __name__ == "__main__":
    main()
