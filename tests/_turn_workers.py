"""Agent workers for the turn fault test (importable by spawned processes): each takes user
messages off a job list in Redis and answers them with a fake chat model over HTTP, with turns
(a policy) or without (``"none"``: add, build, call the model, add). An answer names the user
messages it answers (``metadata["answers"]``) and the turn that wrote it (``metadata["turn"]``);
one turn in three calls a tool first."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import redis

import contextstore as cs

USER = {"type": "user_message", "role": "user"}
ASSISTANT = {"type": "assistant_message", "role": "assistant"}


def model(url: str, messages: Any) -> str:
    """One chat completion from the fake model server."""
    body = json.dumps({"model": "fake", "messages": messages}).encode()
    req = urllib.request.Request(f"{url}/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return str(json.loads(resp.read())["choices"][0]["message"]["content"])


def unanswered(w: Any) -> list[str]:
    """The user messages of the window that no answer names yet, oldest first."""
    items = w.items()
    done = {a for i in items if i.role == "assistant" for a in (i.metadata or {}).get("answers", [])}
    return [i.id for i in items if i.role == "user" and i.id not in done]


def answer(writer: Any, w: Any, url: str, token: str, n: int) -> None:
    """Build, (one time in three call a tool), call the model, write the answer through ``writer``
    (a turn, or the window itself)."""
    todo = unanswered(w)
    if not todo:
        return
    build = writer.build_messages if hasattr(writer, "build_messages") else w.build_messages
    messages = build()
    if n % 3 == 0:
        call = f"call-{token[:8]}-{n}"
        calls = [{"id": call, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]
        writer.add("", **ASSISTANT, metadata={"tool_calls": calls, "turn": token})
        result = model(url, messages)
        writer.add(result, type="tool_result", role="tool", metadata={"tool_call_id": call, "turn": token})
        messages = build()
    text = model(url, messages)
    writer.add(f"answers {' '.join(todo)}: {text}", **ASSISTANT, metadata={"answers": todo, "turn": token})


def _with_turn(store: Any, r: Any, job: bytes, policy: str, url: str, lease_ms: int, wid: str, n: int) -> None:
    conv, msg = job.decode().split("|")
    w = store.handle(conv)
    first: Any = {"content": f"question {msg}", "id": msg, **USER}
    while True:
        try:
            with w.turn(policy=policy, input=first, lease_ms=lease_ms, owner=wid) as turn:
                answer(turn, w, url, turn.token, n)
        except cs.TurnBusyError as busy:
            if isinstance(busy, cs.TurnQueuedError):
                return  # the input waits for the running turn or the next
            time.sleep(0.05)
            r.rpush(f"{w._settings.prefix}:jobs", job)  # rejected: ask again later
            return
        except cs.TurnLostError:
            return  # fenced off: the turn that took over answers
        if not turn.pending_left:
            return
        first, n = None, n + 1  # inputs still wait: a turn of their own


def _without_turns(store: Any, job: bytes, url: str, wid: str, n: int) -> None:
    conv, msg = job.decode().split("|")
    w = store.handle(conv)
    w.add(f"question {msg}", id=msg, **USER)
    answer(w, w, url, f"{wid}-{n}", n)


def worker(redis_url: str, prefix: str, url: str, policy: str, lease_ms: int, wid: str) -> None:
    """Answer jobs (``<prefix>:jobs``, each ``<conversation>|<message id>``) until ``<prefix>:stop``
    is set; the job in hand is in ``<prefix>:inflight:<wid>``, errors go to ``<prefix>:errors``."""
    store = cs.ContextStore.from_url(redis_url, prefix=prefix)
    r = redis.Redis.from_url(redis_url)
    n = 0
    while not r.exists(f"{prefix}:stop"):
        got = r.blmove(f"{prefix}:jobs", f"{prefix}:inflight:{wid}", 0.5, "LEFT", "RIGHT")
        if got is None:
            continue
        n += 1
        try:
            if policy == "none":
                _without_turns(store, got, url, wid, n)
            else:
                _with_turn(store, r, got, policy, url, lease_ms, wid, n)
        except cs.ContextStoreError as exc:
            r.rpush(f"{prefix}:errors", f"{wid}: {type(exc).__name__}: {exc}")
        r.delete(f"{prefix}:inflight:{wid}")
