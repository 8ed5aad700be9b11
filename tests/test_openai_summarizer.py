"""OpenAISummarizer through the real ``openai`` client against a local OpenAI-compatible server
(tests/_openai_server.py): success, chunking, a 500, a timeout, an empty answer; a failure
changes nothing in the window."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import contextstore as cs

from _openai_server import FakeChatServer
from support import dump_window


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    s = FakeChatServer().start()
    yield s
    s.stop()


def _items(n: int, words: int = 20) -> list[cs.ContextItem]:
    return [
        cs.ContextItem(content=f"message {k} " + "lorem ipsum " * words, type=cs.ItemType.USER_MESSAGE, id=f"m{k}")
        for k in range(n)
    ]


def test_one_request_when_the_items_fit(server):
    s = cs.OpenAISummarizer(model="local-model", base_url=server.base_url, max_summary_tokens=100)
    text = s.summarize(_items(3))
    assert text.startswith("summary of 3 lines: [user] message 0")
    (body,) = server.requests
    assert body["model"] == "local-model" and body["max_tokens"] == 100
    assert body["messages"][0] == {"role": "system", "content": cs.summarize.openai_chat.DEFAULT_PROMPT}
    assert body["messages"][1]["content"].startswith("Summarize this conversation:\n\n[user] message 0")


def test_a_custom_prompt_is_the_system_message(server):
    s = cs.OpenAISummarizer(model="m", base_url=server.base_url, prompt="Keep only the numbers.")
    s.summarize(_items(1))
    assert server.requests[0]["messages"][0]["content"] == "Keep only the numbers."


def test_items_larger_than_the_model_window_are_chunked(server):
    s = cs.OpenAISummarizer(model="m", base_url=server.base_url, max_summary_tokens=64, context_window=400)
    items = _items(12, words=20)  # ~45 tokens each: about 540, more than the ~200 a request may carry
    text = s.summarize(items)
    parts = [b for b in server.requests if "part" in b["messages"][1]["content"].split("\n", 1)[0]]
    assert len(parts) >= 2 and len(server.requests) == len(parts) + 1
    for body in server.requests:  # every request fits the model's window
        assert sum(s.counter.count(m["content"]) for m in body["messages"]) <= 400 - 64
    final = server.requests[-1]["messages"][1]["content"]
    assert final.startswith("Summarize this conversation:") and "[summary of part 1]" in final
    seen = " ".join(b["messages"][1]["content"] for b in server.requests[:-1])
    assert all(f"message {k} " in seen for k in range(12))  # every item went to the model once
    assert text.startswith(f"summary of {len(parts)} lines")


def _window(make_store, server, **summarizer):
    store = make_store(summarizer=cs.OpenAISummarizer(model="m", base_url=server.base_url, **summarizer))
    w = store.window("oa", max_tokens=2000, compaction_threshold=100, keep_recent=0)
    for k in range(8):
        w.add(f"question {k} " + "lorem ipsum " * 20, type="user_message")
    return w


def test_compaction_with_the_openai_summarizer(make_store, server):
    w = _window(make_store, server)
    freed = w.compact("summarize", target_percent=0)
    (summary,) = [i for i in w.items() if "summary_of" in (i.metadata or {})]
    assert summary.content.startswith("summary of 8 lines") and freed > 0
    assert len(server.requests) == 1 and w.verify().ok


@pytest.mark.parametrize("mode", ["500", "slow", "empty"])
def test_a_failing_endpoint_raises_summarizer_error_and_changes_nothing(make_store, server, r, prefix, mode):
    server.mode = mode
    w = _window(make_store, server, timeout=0.5, max_retries=0)
    before = dump_window(r, prefix, "oa")
    with pytest.raises(cs.HelperError) as info:
        w.compact("summarize", target_percent=5)
    assert {"500": "status 500", "slow": "APITimeoutError", "empty": "without a summary"}[mode] in str(info.value)
    after = dump_window(r, prefix, "oa")
    events = after.pop(next(k for k in after if k.endswith(b":events")))
    assert {k: v for k, v in before.items() if not k.endswith(b":events")} == after
    assert events == before[next(k for k in before if k.endswith(b":events"))]


def test_retries_are_the_clients(server):
    server.mode = "500"
    s = cs.OpenAISummarizer(model="m", base_url=server.base_url, max_retries=2)
    with pytest.raises(cs.HelperError):
        s.summarize(_items(1))
    assert len(server.requests) == 3


def test_the_async_form_uses_the_async_client(server):
    s = cs.OpenAISummarizer(model="m", base_url=server.base_url)
    text = asyncio.run(s.asummarize(_items(2)))
    assert text.startswith("summary of 2 lines") and len(server.requests) == 1


def test_bad_options_are_refused():
    with pytest.raises(cs.InvalidOptionsError):
        cs.OpenAISummarizer(model="")
    with pytest.raises(cs.InvalidOptionsError):
        cs.OpenAISummarizer(model="m", max_summary_tokens=1000, context_window=1000)
