"""A summarizer for any OpenAI-compatible chat completions endpoint (extra ``contextstore[openai]``).

The summary is planned without I/O (``summary_plan``): the items as transcript lines, cut into
chunks that fit the model's context window next to the prompt and the answer; one chunk is
summarized in one request; several are summarized one by one and their summaries summarized
again. ``summarize`` drives the plan with the ``openai`` client, ``asummarize`` with the async
one. Any failure (an error status, a timeout, no answer) raises ``HelperError``.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Sequence
from typing import Any

from ..core.tokens import TokenCounter, resolve_counter
from ..errors import HelperError, InvalidOptionsError
from ..types import ContextItem
from .transcript import line

DEFAULT_PROMPT = (
    "You compress the earlier part of a conversation between a user, an AI assistant and its "
    "tools, so that the assistant can continue without it. Write a concise summary that keeps "
    "every fact, number, identifier, name, decision, constraint, open question and pending task; "
    "drop greetings and repetition. Write plain sentences, no preamble."
)
#: tokens kept free besides the prompt, the transcript and the answer (message framing)
FRAMING = 64
#: how many times summaries of parts are summarized again before giving up
MAX_ROUNDS = 4

Messages = list[dict[str, str]]
SummaryPlan = Generator[Messages, str, str]


def _split(text: str, tokens: int, fits: int) -> list[str]:
    """``text`` cut into pieces of about ``fits`` tokens (it has ``tokens``)."""
    parts = -(-tokens // fits)
    size = -(-len(text) // parts)
    return [text[i : i + size] for i in range(0, len(text), size)]


def chunks(lines: Sequence[str], count: Any, fits: int) -> list[str]:
    """The lines packed in order into chunks of at most ``fits`` tokens (a longer line is cut)."""
    out: list[str] = []
    current: list[str] = []
    used = 0
    for text in lines:
        n = count(text) + 1
        pieces = [text] if n <= fits else _split(text, n, fits)
        for piece in pieces:
            cost = n if len(pieces) == 1 else count(piece) + 1
            if current and used + cost > fits:
                out.append("\n".join(current))
                current, used = [], 0
            current.append(piece)
            used += cost
    if current:
        out.append("\n".join(current))
    return out


class OpenAISummarizer:
    """Summaries from an OpenAI-compatible chat model.

    ``model`` names it; ``client`` (an ``openai.OpenAI`` or ``openai.AsyncOpenAI``) or
    ``base_url`` (with ``api_key``, default ``$OPENAI_API_KEY``, else a placeholder for local
    servers that need none) says where. ``prompt`` is the system prompt, ``max_summary_tokens``
    the answer's budget, ``context_window`` the model's input limit (longer input is chunked),
    ``timeout`` seconds per request, ``max_retries`` the client's retries.
    """

    def __init__(
        self,
        model: str,
        client: Any = None,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        prompt: str = DEFAULT_PROMPT,
        max_summary_tokens: int = 512,
        context_window: int = 16_384,
        timeout: float = 60.0,
        max_retries: int = 2,
        token_counter: object = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise InvalidOptionsError("model must be a non-empty str")
        if context_window < max_summary_tokens + 2 * FRAMING + 64:
            raise InvalidOptionsError("context_window must leave room for the prompt, the input and the summary")
        self.model, self.prompt = model, prompt
        self.max_summary_tokens, self.context_window = max_summary_tokens, context_window
        self.timeout, self.max_retries, self.base_url = timeout, max_retries, base_url
        self._api_key = api_key
        self.counter: TokenCounter = resolve_counter(token_counter)
        self._sync: Any = None
        self._async: Any = None
        if client is not None:
            is_async = type(client).__name__.startswith("Async")
            self._async, self._sync = (client, None) if is_async else (None, client)

    def budget(self, items: Sequence[ContextItem]) -> int:
        """The most tokens a summary takes: ``max_summary_tokens``."""
        return self.max_summary_tokens

    def summary_plan(self, items: Sequence[ContextItem]) -> SummaryPlan:
        """The requests (chat messages) one summary takes; send each answer back in."""
        fits = self.context_window - self.max_summary_tokens - self.counter.count(self.prompt) - 2 * FRAMING
        parts = chunks([line(i) for i in items], self.counter.count, fits)
        for _ in range(MAX_ROUNDS):
            if len(parts) == 1:
                return (yield self._messages(parts[0], "Summarize this conversation:"))
            summaries = []
            for n, part in enumerate(parts, 1):
                summaries.append((yield self._messages(part, f"Summarize part {n} of {len(parts)} of a conversation:")))
            parts = chunks([f"[summary of part {n}] {s}" for n, s in enumerate(summaries, 1)], self.counter.count, fits)
        raise HelperError(f"the items did not fit {self.model}'s context window after {MAX_ROUNDS} rounds")

    def _messages(self, text: str, ask: str) -> Messages:
        return [{"role": "system", "content": self.prompt}, {"role": "user", "content": f"{ask}\n\n{text}"}]

    def _request(self, messages: Messages) -> dict[str, Any]:
        return {"model": self.model, "messages": messages, "max_tokens": self.max_summary_tokens}

    def _client(self, asynchronous: bool) -> Any:
        try:
            import openai
        except ImportError:
            raise InvalidOptionsError(
                "OpenAISummarizer needs the openai package: pip install 'contextstore[openai]'"
            ) from None
        key = self._api_key or os.environ.get("OPENAI_API_KEY") or "unused"
        cls = openai.AsyncOpenAI if asynchronous else openai.OpenAI
        return cls(api_key=key, base_url=self.base_url, timeout=self.timeout, max_retries=self.max_retries)

    def summarize(self, items: Sequence[ContextItem]) -> str:
        """One summary of ``items`` (blocking)."""
        if self._sync is None:
            self._sync = self._client(asynchronous=False)
        plan = self.summary_plan(items)
        try:
            messages = next(plan)
            while True:
                try:
                    reply = self._sync.chat.completions.create(**self._request(messages))
                except Exception as exc:
                    raise _failure(exc, self.model) from exc
                messages = plan.send(_answer(reply))
        except StopIteration as stop:
            return str(stop.value)

    async def asummarize(self, items: Sequence[ContextItem]) -> str:
        """One summary of ``items`` (awaitable; what AsyncContextStore calls)."""
        if self._async is None:
            self._async = self._client(asynchronous=True)
        plan = self.summary_plan(items)
        try:
            messages = next(plan)
            while True:
                try:
                    reply = await self._async.chat.completions.create(**self._request(messages))
                except Exception as exc:
                    raise _failure(exc, self.model) from exc
                messages = plan.send(_answer(reply))
        except StopIteration as stop:
            return str(stop.value)

    def __repr__(self) -> str:
        return f"OpenAISummarizer(model={self.model!r}, base_url={self.base_url!r})"


def _failure(exc: Exception, model: str) -> HelperError:
    status = getattr(exc, "status_code", None)
    what = f"status {status}" if status else type(exc).__name__
    return HelperError(f"summary request to {model} failed ({what}): {exc}")


def _answer(reply: Any) -> str:
    """The text of a chat completion, or ``HelperError`` when there is none."""
    try:
        text = reply.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        text = None
    if not isinstance(text, str) or not text.strip():
        raise HelperError("the model answered without a summary")
    return text.strip()
