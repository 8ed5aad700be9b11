"""An OpenAI-style chat loop shared by several worker processes.

Any turn of any conversation may land on any worker: a worker keeps nothing between turns. Each
conversation lives in its own window, so whichever worker takes a turn sees the whole history,
and the build keeps the prompt within the model's context.

    CONTEXTSTORE_URL=redis://localhost:6379/0 OPENAI_API_KEY=... python chat_loop.py

(`OPENAI_BASE_URL` points the client at any OpenAI-compatible server; without
`CONTEXTSTORE_URL` the embedded server is used.)
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

import openai

import contextstore as cs

MODEL = os.environ.get("CHAT_MODEL", "gpt-4.1-mini")
SYSTEM = "You are a support agent for a bicycle shop. Answer in one short paragraph."
CONVERSATIONS = {
    "alice": ["My chain keeps slipping.", "It is a 9-speed.", "Can I fix it myself?"],
    "bob": ["Do you sell tubeless tyres?", "Which width for gravel?", "Do you fit them?"],
    "carol": ["My brakes squeal.", "They are disc brakes.", "How much is a service?"],
}

_store: cs.ContextStore | None = None


def store() -> cs.ContextStore:
    """One store (one connection pool) per worker process, opened on first use."""
    global _store
    if _store is None:
        _store = cs.ContextStore.from_env()
    return _store


def handle_turn(conversation: str, turn: int, question: str) -> tuple[int, str]:
    """One turn on whichever worker got it: store the question, build, ask, store the answer."""
    win = store().window(f"chat-{conversation}", max_tokens=16_000, keep_recent=4)
    # the same caller id and content every time: the first worker stores it, the others get it back
    win.add(SYSTEM, id="system", type="system_prompt", pinned=True)
    # request ids make a retried add (after a timeout, say) land exactly once
    win.add(question, type="user_message", role="user", request_id=f"{conversation}-{turn}-q")
    messages = win.build_messages(cs.BuildOptions(reserve_for_response=1024, order="arrival"))
    reply = openai.OpenAI().chat.completions.create(model=MODEL, messages=messages)
    answer = reply.choices[0].message.content or ""
    win.add(answer, type="assistant_message", role="assistant", request_id=f"{conversation}-{turn}-a")
    return os.getpid(), answer


def main() -> None:
    """Three workers; each conversation's turns in order, the conversations side by side."""
    with ProcessPoolExecutor(max_workers=3) as workers:
        for turn in range(3):
            asked = {c: workers.submit(handle_turn, c, turn, qs[turn]) for c, qs in CONVERSATIONS.items()}
            for conversation, future in asked.items():
                pid, answer = future.result()
                print(f"{conversation} turn {turn} (worker {pid}): {answer}")
    for conversation in CONVERSATIONS:
        print(store().window(f"chat-{conversation}", create=False).build(cs.BuildOptions(order="arrival")))


if __name__ == "__main__":
    main()
