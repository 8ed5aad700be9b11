"""A local OpenAI-compatible chat completions endpoint for the summarizer tests: real HTTP on
127.0.0.1, spoken to by the real ``openai`` client; no network, no model.

``mode`` decides the answers: ``"ok"`` summarizes by counting (``"summary of N lines: <first
words of each line>"``), ``"500"`` fails with an internal server error, ``"slow"`` answers after
``delay`` seconds, ``"empty"`` answers with no content, ``"chat"`` answers a chat turn with how
many messages it was sent and the last user question (``"seen N messages; re: <question>"``),
``"jitter"`` the same after a random 20-100% of ``delay``.
Every request body is kept in ``requests``.

It also speaks enough of the Responses API for openai-agents: ``/v1/responses`` answers with one
assistant message (``"seen N items"``), ``/v1/responses/compact`` with one opaque compaction item
(``COMPACTED``) standing for everything it was sent.
"""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeChatServer:
    """Start with ``start()``; ``base_url`` is what ``OpenAISummarizer(base_url=...)`` takes."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.delay = 2.0
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0  # requests received and not yet answered
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, body: dict[str, Any]) -> str:
        """The summary the ``ok`` mode gives: how many transcript lines, and their first words."""
        if self.mode in ("chat", "jitter"):
            messages = body["messages"]
            return f"seen {len(messages)} messages; re: {messages[-1]['content']}"
        text = body["messages"][-1]["content"].split("\n\n", 1)[1]
        lines = text.splitlines()
        return f"summary of {len(lines)} lines: " + "; ".join(" ".join(x.split()[:3]) for x in lines)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(body)
                if self.path == "/v1/responses/compact":
                    return self._send(200, {"id": "cmp_local", "object": "response.compaction",
                                            "created_at": 1, "output": [COMPACTED]})  # fmt: skip
                if self.path == "/v1/responses":
                    return self._send(200, _response(body))
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": "not found"}})
                if owner.mode == "500":
                    return self._send(500, {"error": {"message": "the model fell over", "type": "server_error"}})
                owner.in_flight += 1
                try:
                    if owner.mode == "slow":
                        time.sleep(owner.delay)
                    elif owner.mode == "jitter":  # a chat model of random latency
                        time.sleep(random.uniform(0.2, 1.0) * owner.delay)
                    content = None if owner.mode == "empty" else owner.answer(body)
                    self._send(200, _completion(body["model"], content))
                finally:
                    owner.in_flight -= 1

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

        return Handler


#: what ``/v1/responses/compact`` answers with: one opaque item for the whole history
COMPACTED = {"id": "cmp_local_1", "type": "compaction", "encrypted_content": "opaque-summary"}


def _response(body: dict[str, Any]) -> dict[str, Any]:
    """A completed Responses API answer: one assistant message saying how many items it saw."""
    seen = len(body["input"]) if isinstance(body.get("input"), list) else 1
    message = {
        "type": "message", "id": f"msg_local_{seen}", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": f"seen {seen} items", "annotations": []}],
    }  # fmt: skip
    usage = {
        "input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
        "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0},
    }  # fmt: skip
    return {
        "id": f"resp_local_{seen}", "object": "response", "created_at": 1, "model": body["model"],
        "status": "completed", "output": [message], "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [], "usage": usage,
    }  # fmt: skip


def _completion(model: str, content: str | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
