"""A provider's own parts of an assistant message, kept whole (contract §21).

A reasoning model answers with what only its provider reads back: Anthropic's ``thinking``,
``redacted_thinking`` and ``compaction`` blocks; OpenAI Responses' ``reasoning`` and
``compaction`` items, and the ``message`` and ``function_call`` items a reasoning item is
followed by; Gemini's thought parts and the parts that carry a ``thought_signature``. The store
keeps each as a *native part* of the assistant item, in its place among the item's other parts:

    {"type": "native", "format": <the format it goes back to>, "value": <as received>,
     "tokens": <what it costs in that format beyond the item's text>,
     "model": <the model that produced it, when known>, "call": <the tool call it is>}

A build in ``format`` returns ``value`` unchanged and in place (``for_format``); a build in
another format, or for another model, sends the text it stands for (``text_of``: an assistant
message item's text, a signed Gemini text part's) or nothing. ``call`` names the item's tool
call (``metadata["tool_calls"]``) that the part is in its own format (a Responses
``function_call`` item, a Gemini ``function_call`` part with its signature): that format's build
sends the part instead of making one from the call. ``tokens`` is the store's to count
(``counted``); the item's ``token_count`` counts only what every format sends. No I/O.

May import: ``errors``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import CorruptWindowError, InvalidItemError

NATIVE = "native"
#: the formats whose parts the store keeps as native parts
FORMATS = ("anthropic", "responses", "gemini")
#: Anthropic's own blocks of an assistant message
ANTHROPIC_BLOCKS = ("thinking", "redacted_thinking", "compaction")
#: a token per this many characters of what the store cannot read (a signature, encrypted data)
CHARS_PER_TOKEN = 4
#: Gemini's parts in the REST API's spelling -> the Python SDK's, which builds send
GEMINI_KEYS = {
    "functionCall": "function_call", "functionResponse": "function_response", "thoughtSignature": "thought_signature",
    "inlineData": "inline_data", "fileData": "file_data", "mimeType": "mime_type", "fileUri": "file_uri",
    "executableCode": "executable_code", "codeExecutionResult": "code_execution_result",
    "videoMetadata": "video_metadata",
}  # fmt: skip
Bad = Callable[[str], InvalidItemError]


def wrap(fmt: str, value: dict[str, Any], *, call: str | None = None, model: str | None = None) -> dict[str, Any]:
    """``value`` (a block, item or part of format ``fmt`` as the provider gave it) as a native
    part; ``tokens`` is counted when the item is (``counted``)."""
    part: dict[str, Any] = {"type": NATIVE, "format": fmt, "value": value}
    if model is not None:
        part["model"] = model
    if call is not None:
        part["call"] = call
    return part


def kind_of(part: Mapping[str, Any]) -> str:
    """What a native part is, in a word: its value's ``type`` (Anthropic, Responses), or for a
    Gemini part ``thought``, ``function_call`` or its first key (``text``, ``inline_data``)."""
    value = part["value"]
    if isinstance(value.get("type"), str):
        return str(value["type"])
    if value.get("thought"):
        return "thought"
    return "function_call" if "function_call" in value else next(iter(value), "part")


def check(part: dict[str, Any], bad: Bad) -> None:
    """A native part in its shape (``bad(what)`` makes the error naming it): a format of
    ``FORMATS``, a ``value`` that format's provider could have sent, str ``model`` and ``call``
    when given, and a ``call`` on (only) a part that is a tool call."""
    fmt, value = part.get("format"), part.get("value")
    if fmt not in FORMATS:
        raise bad(f"has a 'format' other than {', '.join(map(repr, FORMATS))}")
    if not isinstance(value, dict):
        raise bad("needs 'value': the block, item or part as the provider returned it")
    for key in ("model", "call"):
        if key in part and (not isinstance(part[key], str) or not part[key]):
            raise bad(f"has a {key!r} that is not a non-empty str")
    if "tokens" in part and (type(part["tokens"]) is not int or part["tokens"] < 0):
        raise bad("has 'tokens' that is not an int >= 0")
    is_call = _call_id(fmt, value)
    if is_call is None and "call" in part:
        raise bad("has a 'call' but is no tool call")
    if is_call is not None and ("call" not in part or (is_call and part["call"] != is_call)):
        raise bad(f"is a tool call: its 'call' must be its id ({is_call or 'the one the store gave it'!r})")
    _CHECKS[fmt](value, bad)


def check_owner(parts: list[dict[str, Any]], role: str, call_ids: Iterable[str]) -> None:
    """A provider's own parts (reasoning it signed, its calls) come only in the assistant message
    it answered with (``role``: the item's chat role), a part that is a call only for one of the
    item's tool calls (``call_ids``), once; ``InvalidItemError`` otherwise."""
    calls, seen = set(call_ids), set()
    for n, part in enumerate(parts):
        if part["type"] != NATIVE:
            continue
        if role != "assistant":
            raise InvalidItemError(
                f"content part {n} ({part['format']} {kind_of(part)!r}) is the provider's own: it belongs to "
                f"the assistant message it came in, not to a {role} item"
            )
        call = part.get("call")
        if call is not None and (call not in calls or call in seen):
            raise InvalidItemError(
                f"content part {n} is tool call {call!r}, which is not one of the item's tool calls "
                "(metadata['tool_calls']) or is there twice"
            )
        seen.add(call)


def _call_id(fmt: str, value: dict[str, Any]) -> str | None:
    """The call id a value that is a tool call names ("" for a Gemini call without one); None
    for a value that is none."""
    if fmt == "responses" and value.get("type") == "function_call":
        return value.get("call_id") if isinstance(value.get("call_id"), str) else ""
    if fmt == "gemini" and "function_call" in value:
        call = value["function_call"]
        return call.get("id") or "" if isinstance(call, dict) else ""
    return None


def _anthropic(value: dict[str, Any], bad: Bad) -> None:
    kind = value.get("type")
    if kind == "thinking":
        if not isinstance(value.get("thinking"), str) or not isinstance(value.get("signature"), str):
            raise bad("(a 'thinking' block) needs 'thinking' and its 'signature', both str, as returned")
    elif kind == "redacted_thinking":
        if not isinstance(value.get("data"), str):
            raise bad("(a 'redacted_thinking' block) needs 'data', a str, as the provider returned it")
    elif kind == "compaction":
        if not isinstance(value.get("content"), (str, type(None))):
            raise bad("(a 'compaction' block) has a 'content' that is neither a str nor null")
    else:
        raise bad(f"holds an Anthropic block of type {kind!r}; kept whole: {', '.join(ANTHROPIC_BLOCKS)}")


def _responses(value: dict[str, Any], bad: Bad) -> None:
    kind = value.get("type")
    if not isinstance(kind, str):
        raise bad("holds a Responses item without a 'type'")
    if kind == "reasoning" and not isinstance(value.get("summary", []), list):
        raise bad("(a 'reasoning' item) has a 'summary' that is no list")
    if kind == "compaction" and not isinstance(value.get("encrypted_content"), str):
        raise bad("(a 'compaction' item) needs 'encrypted_content', a str")
    if kind == "message" and (value.get("role") != "assistant" or not isinstance(value.get("content"), list)):
        raise bad("(a 'message' item) must be the assistant's, with a list of 'content'")
    if kind == "function_call" and not all(isinstance(value.get(k), str) for k in ("call_id", "name", "arguments")):
        raise bad("(a 'function_call' item) needs 'call_id', 'name' and 'arguments', each a str")
    for key in ("encrypted_content", "id"):
        if value.get(key) is not None and not isinstance(value[key], str):
            raise bad(f"has an {key!r} that is not a str")


def _gemini(value: dict[str, Any], bad: Bad) -> None:
    if any(k in GEMINI_KEYS for k in value):
        raise bad("spells a Gemini part the REST API's way: keys are kept as the Python SDK spells them")
    if "text" in value and not isinstance(value["text"], str):
        raise bad("(a Gemini text part) has a 'text' that is not a str")
    if "thought_signature" in value and not _is_base64(value["thought_signature"]):
        raise bad("has a 'thought_signature' that is not base64 text")
    call = value.get("function_call", {"name": ""})
    args = call.get("args", {}) if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not isinstance(args, dict):
        raise bad("(a Gemini function_call part) needs a 'name', a str, and 'args', an object")


def _is_base64(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


_CHECKS: dict[str, Callable[[dict[str, Any], Bad], None]] = {
    "anthropic": _anthropic,
    "responses": _responses,
    "gemini": _gemini,
}


def text_of(part: dict[str, Any]) -> str:
    """The text a native part stands for in every format ("" for none: reasoning, a signature,
    a tool call): a Responses assistant message's text, a Gemini text part's (not a thought's)."""
    value = part["value"]
    if part["format"] == "responses" and value.get("type") == "message":
        return "".join(c["text"] for c in value["content"] if isinstance(c, dict) and isinstance(c.get("text"), str))
    if part["format"] == "gemini" and isinstance(value.get("text"), str) and not value.get("thought"):
        return str(value["text"])
    return ""


def own_tokens(part: dict[str, Any], count: Callable[[str], int]) -> int:
    """What a native part costs in its own format beyond ``text_of`` (counted in the item's
    ``token_count``): readable reasoning by ``count``; what the store cannot read (encrypted
    reasoning, a signature) a token per ``CHARS_PER_TOKEN`` characters. Anthropic's thinking
    counts by its text, not its signature; a Responses item by its encrypted content and its
    reasoning text; a Gemini thought by its text, and any Gemini part by its signature."""
    value, fmt = part["value"], part["format"]
    if fmt == "anthropic":
        if value["type"] == "thinking":
            return count(value["thinking"])
        if value["type"] == "redacted_thinking":
            return _sealed(value["data"])
        return count(value.get("content") or "") + _sealed(value.get("encrypted_content"))
    if fmt == "responses":
        texts = [c.get("text") for c in value.get("content") or () if isinstance(c, dict)]
        readable = [t for t in texts if isinstance(t, str)] if value.get("type") == "reasoning" else []
        return _sealed(value.get("encrypted_content")) + (count("\n".join(readable)) if readable else 0)
    thought = value.get("text") if value.get("thought") else None
    return (count(thought) if isinstance(thought, str) else 0) + _sealed(value.get("thought_signature"))


def _sealed(text: object) -> int:
    return len(text) // CHARS_PER_TOKEN if isinstance(text, str) else 0


def counted(parts: list[dict[str, Any]], count: Callable[[str], int]) -> None:
    """Set every native part's ``tokens`` (``own_tokens``), whatever a caller gave."""
    for part in parts:
        if part["type"] == NATIVE:
            part["tokens"] = own_tokens(part, count)


def cost(content: str | list[dict[str, Any]], fmt: str, model: str | None, earlier: bool = False) -> int:
    """What the native parts of ``content`` add to an item's cost in a build in ``fmt`` (for
    ``model``, when given): the ``tokens`` of those it sends (``sends``); of an item before the
    current turn that the build counts no reasoning of (``earlier``), only its compaction
    parts' (a compaction stands for the history it replaced). A stored part whose ``tokens`` is
    no int >= 0 raises ``CorruptWindowError``."""
    if isinstance(content, str):
        return 0
    total = 0
    for part in content:
        if part.get("type") != NATIVE or not sends(part, fmt, model):
            continue
        if earlier and part["value"].get("type") != "compaction":
            continue
        tokens = part.get("tokens", 0)
        if type(tokens) is not int or tokens < 0:
            raise CorruptWindowError(f"a stored native part has tokens {tokens!r}: not an int >= 0")
        total += tokens
    return total


def reasons(content: str | list[dict[str, Any]]) -> bool:
    """Whether ``content`` holds a native part with tokens of its own: what a build adds to the
    item's cost depends on its format and turn (``facts.REASONING``)."""
    if isinstance(content, str):
        return False
    return any(isinstance(p, dict) and p.get("type") == NATIVE and p.get("tokens") for p in content)


def sends(part: dict[str, Any], fmt: str, model: str | None) -> bool:
    """Whether a build in ``fmt`` for ``model`` (None: any) sends a native part as it came: its
    format's, from that model or one not named."""
    return bool(part.get("format") == fmt and (model is None or part.get("model") in (None, model)))


def for_format(part: dict[str, Any], fmt: str, model: str | None) -> dict[str, Any] | None:
    """A native part as a build in ``fmt`` sends it: its value as it came (``sends``; the
    caller copies what it hands out), else the text it stands for as a text part, else None (left
    out)."""
    if sends(part, fmt, model):
        return part["value"]  # type: ignore[no-any-return]
    text = text_of(part)
    return {"type": "text", "text": text} if text else None


def carried(content: str | list[dict[str, Any]], fmt: str, model: str | None) -> set[str]:
    """The tool calls (ids) that native parts a build in ``fmt`` sends are themselves."""
    if isinstance(content, str):
        return set()
    return {p["call"] for p in content if p["type"] == NATIVE and "call" in p and sends(p, fmt, model)}


def gemini_spelled(value: Any) -> Any:
    """A Gemini value with the REST API's camelCase keys (``GEMINI_KEYS``) as the SDK spells
    them, the values kept as they are."""
    if isinstance(value, dict):
        return {GEMINI_KEYS.get(k, k): gemini_spelled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [gemini_spelled(v) for v in value]
    return value


def anthropic_wrapped(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Content parts with Anthropic's thinking blocks given as they came (``thinking``,
    ``redacted_thinking``) as native parts; ``parts`` itself when it holds none (every stored
    item's parts pass here on read)."""
    if not any(p.get("type") in _RAW_THINKING for p in parts):
        return parts
    return [wrap("anthropic", p) if p.get("type") in _RAW_THINKING else p for p in parts]


_RAW_THINKING = ("thinking", "redacted_thinking")
