"""Content parts: an item's content as a list of parts in OpenAI's or Anthropic's shape (images,
audio, files, documents beside text). What a part may be (``check``), the text a part stands for
where only text goes (``text_of``), what it costs in tokens (``tokens``: an image by the
dimensions its header gives, as the providers charge), and a part in the other format
(``for_format``); a provider's own parts (reasoning, signatures) as native parts
(``core/native.py``). No I/O.

May import: ``types``, ``errors``, ``core.native``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InvalidItemError
from . import native
from .images import IMAGE_TYPES, broken, dimensions, header

#: the part types of each format ("text" is both)
OPENAI_TYPES = frozenset({"text", "image_url", "input_audio", "file"})
ANTHROPIC_TYPES = frozenset({"text", "image", "document"})
#: every part type: either format's, and a provider's own part kept whole (``core/native.py``)
KNOWN_TYPES = OPENAI_TYPES | ANTHROPIC_TYPES | {native.NATIVE}
#: at most this many parts in one item
MAX_PARTS = 256
#: an image whose dimensions are not known (by URL or file id): the most either provider charges
UNKNOWN_IMAGE_TOKENS = 1600
#: a part with no rule of its own (audio, a file, a document): a token per this many bytes of data
BYTES_PER_TOKEN = 4
#: the least such a part counts (also what one known only by URL or file id counts)
MIN_PART_TOKENS = 85

#: base64 as a data URL spells it: nothing JSON would escape (``spelled``)
_PLAIN_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)", re.DOTALL)
Say = Callable[[str], None]


def check(value: object) -> list[dict[str, Any]]:
    """``value`` as content parts (``InvalidItemError`` naming the part otherwise): a non-empty
    list of at most ``MAX_PARTS`` dicts, each of a type of either format in that type's shape,
    base64 that decodes, and an image's header that agrees with its media type. Anthropic's
    thinking blocks given as they came become native parts (``native.anthropic_wrapped``)."""
    if not isinstance(value, list) or not value:
        raise InvalidItemError("content must be a str or a non-empty list of content parts")
    if len(value) > MAX_PARTS:
        raise InvalidItemError(f"content has {len(value)} parts; at most {MAX_PARTS}")
    if not all(isinstance(p, dict) for p in value):
        n = next(n for n, p in enumerate(value) if not isinstance(p, dict))
        raise InvalidItemError(f"content part {n} must be a dict with a 'type'")
    value = native.anthropic_wrapped(value)
    for n, part in enumerate(value):
        _check_part(n, part)
    return value


def _check_part(n: int, part: object) -> None:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise InvalidItemError(f"content part {n} must be a dict with a 'type'")
    kind = part["type"]
    if kind not in KNOWN_TYPES:
        known = ", ".join(sorted(KNOWN_TYPES | {"thinking", "redacted_thinking"}))
        raise InvalidItemError(f"content part {n} has an unknown type {kind!r} (known: {known})")

    def bad(what: str) -> InvalidItemError:
        return InvalidItemError(f"content part {n} ({kind!r}) {what}")

    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise bad("needs 'text', a str")
    elif kind == native.NATIVE:
        native.check(part, bad)
    elif kind == "image_url":
        image = part.get("image_url")
        if not isinstance(image, dict) or not isinstance(image.get("url"), str):
            raise bad("needs 'image_url': {'url': str}")
        if image.get("detail", "auto") not in ("auto", "low", "high"):
            raise bad("has a 'detail' other than 'auto', 'low' or 'high'")
        _check_url(image["url"], bad)
    elif kind == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, dict) or not isinstance(audio.get("format"), str):
            raise bad("needs 'input_audio': {'data': base64, 'format': str}")
        _decoded(audio.get("data"), bad)
    elif kind == "file":
        file = part.get("file")
        if not isinstance(file, dict) or not any(isinstance(file.get(k), str) for k in ("file_id", "file_data")):
            raise bad("needs 'file' with 'file_id' or 'file_data'")
        if isinstance(file.get("file_data"), str):
            _check_url(file["file_data"], bad)
    else:  # image, document
        _check_source(part.get("source"), kind, bad)


def _check_url(url: str, bad: Callable[[str], InvalidItemError]) -> None:
    """A ``data:`` URL whose base64 decodes (and an image's header agrees), or any other URL."""
    if not url.startswith("data:"):
        if not url.strip():
            raise bad("has an empty URL")
        if url.startswith("cs-blob:"):
            raise bad("has a URL of the scheme the store keeps for its blobs ('cs-blob:')")
        return
    found = _DATA_URL.fullmatch(url)
    if found is None:
        raise bad("has a data: URL that is not data:<media type>;base64,<data>")
    _check_image(found["type"], _decoded(found["data"], bad), bad)


def _check_source(source: object, kind: str, bad: Callable[[str], InvalidItemError]) -> None:
    if not isinstance(source, dict) or not isinstance(source.get("type"), str):
        raise bad("needs a 'source' with a 'type'")
    how = source["type"]
    if how == "base64":
        if not isinstance(source.get("media_type"), str):
            raise bad("has a base64 source without a 'media_type'")
        _check_image(source["media_type"] if kind == "image" else "", _decoded(source.get("data"), bad), bad)
    elif how == "url":
        if not isinstance(source.get("url"), str) or not source["url"].strip():
            raise bad("has a url source without a 'url'")
    elif how == "file":
        if not isinstance(source.get("file_id"), str):
            raise bad("has a file source without a 'file_id'")
    elif not (kind == "document" and how in ("text", "content")):
        raise bad(f"has a source of unknown type {how!r}")


def _decoded(data: object, bad: Callable[[str], InvalidItemError]) -> bytes:
    if not isinstance(data, str) or not data:
        raise bad("needs base64 'data'")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise bad("holds data that is not valid base64") from None


def _check_image(media_type: str, data: bytes, bad: Callable[[str], InvalidItemError]) -> None:
    """An image of a type whose header is read must have that header, with its dimensions, and be
    whole as a provider checks it (``broken``)."""
    if media_type not in IMAGE_TYPES:
        return
    found = header(data)
    if found is None or found[0] != media_type:
        raise bad(f"says {media_type} but its data has no {media_type} header with the image's size")
    problem = broken(media_type, data)
    if problem:
        raise bad(f"is an image ({media_type}) that is not whole: {problem}")


# -- dimensions --------------------------------------------------------------------------------


# -- tokens ------------------------------------------------------------------------------------


def image_tokens(width: int, height: int, detail: str = "auto") -> int:
    """What an image costs, the more of the two providers' rules: OpenAI's tiles (fit in
    2048x2048, shortest side to 768, 170 a 512-pixel tile plus 85; 85 at ``detail="low"``) and
    Anthropic's (fit in 1568 pixels a side and 1.15 megapixels, then width * height / 750)."""
    openai = 85
    if detail != "low":
        scale = min(1.0, 2048 / max(width, height))
        w, h = width * scale, height * scale
        scale = min(1.0, 768 / min(w, h))
        w, h = w * scale, h * scale
        openai += 170 * math.ceil(w / 512) * math.ceil(h / 512)
    scale = min(1.0, 1568 / max(width, height), math.sqrt(1_150_000 / (width * height)))
    anthropic = math.ceil(width * scale * (height * scale) / 750)
    return max(openai, anthropic)


def tokens(parts: list[dict[str, Any]], count_text: Callable[[str], int]) -> int:
    """The tokens of ``parts`` every format sends: text by ``count_text`` (a native part's
    text too, ``native.text_of``; what else it costs counts in its own format only:
    ``native.cost``); an image by its dimensions (``image_tokens``; ``UNKNOWN_IMAGE_TOKENS`` by
    URL or file id); anything else a token per ``BYTES_PER_TOKEN`` bytes of its data, at least
    ``MIN_PART_TOKENS``."""
    total = 0
    for part in parts:
        if part["type"] in ("text", native.NATIVE):
            text = part["text"] if part["type"] == "text" else native.text_of(part)
            total += count_text(text) if text else 0
            continue
        data, _, size = measured(part)
        total += part_tokens(part, data, size, str((part.get("image_url") or {}).get("detail", "auto")))
    return total


def measured(part: Mapping[str, Any]) -> tuple[bytes | None, str, tuple[int, int] | None]:
    """A part's data and media type (``data_of``), and its size when it is an image whose
    header says (its data decoded once)."""
    data, media_type = data_of(part)
    return data, media_type, dimensions(data) if data is not None and media_type.startswith("image/") else None


def part_tokens(part: Mapping[str, Any], data: bytes | None, size: tuple[int, int] | None, detail: str) -> int:
    """The tokens of one part that is not text, from what ``measured`` found (see ``tokens``)."""
    if size is not None:
        return image_tokens(*size, detail)
    if _is_image(part):
        return UNKNOWN_IMAGE_TOKENS
    return max(MIN_PART_TOKENS, len(data or b"") // BYTES_PER_TOKEN)


def counted_text(content: str | list[dict[str, Any]]) -> str:
    """What a token counter counts of ``content``: a str, or its text parts' text and the text
    native parts stand for (the other parts count by ``media_tokens``)."""
    if isinstance(content, str):
        return content
    texts = (p["text"] if p["type"] == "text" else native.text_of(p) for p in content if p["type"] in _TEXTS)
    return "\n".join(t for t in texts if t)


_TEXTS = ("text", native.NATIVE)


def media_tokens(content: str | list[dict[str, Any]], count_text: Callable[[str], int]) -> int:
    """The tokens of the parts of ``content`` that are not text (``tokens``; 0 for a str)."""
    if isinstance(content, str):
        return 0
    return tokens([p for p in content if p["type"] not in _TEXTS], count_text)


def _is_image(part: Mapping[str, Any]) -> bool:
    return part["type"] in ("image", "image_url")


def data_of(part: Mapping[str, Any]) -> tuple[bytes | None, str]:
    """A part's data and media type, when it holds them inline ((None, "") otherwise)."""
    url = ""
    if part["type"] == "image_url":
        url = part["image_url"]["url"]
    elif part["type"] == "file":
        url = part["file"].get("file_data") or ""
    elif part["type"] == "input_audio":
        return base64.b64decode(part["input_audio"]["data"]), "audio/" + part["input_audio"]["format"]
    elif part["type"] in ("image", "document") and part["source"]["type"] == "base64":
        return base64.b64decode(part["source"]["data"]), part["source"]["media_type"]
    found = _DATA_URL.fullmatch(url) if url.startswith("data:") else None
    return (base64.b64decode(found["data"]), found["type"]) if found else (None, "")


# -- text --------------------------------------------------------------------------------------


def payload_field(part: Mapping[str, Any]) -> tuple[str, str] | None:
    """Where a part holds its payload (outer key, inner key), when it holds one inline."""
    kind = part.get("type")
    if kind == "image_url":
        return "image_url", "url"
    if kind == "file" and isinstance(part["file"].get("file_data"), str):
        return "file", "file_data"
    if kind == "input_audio":
        return "input_audio", "data"
    if kind in ("image", "document") and part["source"].get("type") == "base64":
        return "source", "data"
    return None


def sha_of(payload: str) -> str:
    """The SHA-256 of a payload's text, in hex: what names its blob (``blobs.blob_keys``)."""
    return hashlib.sha256(payload.encode()).hexdigest()


def spelled(payload: str) -> tuple[str, str]:
    """A payload as the head a format spells it with and the data a blob holds: a ``data:`` URL
    of base64 as its ``data:<media type>;base64,`` head and the base64, which is all an
    Anthropic or an audio part spells; so the same bytes are one blob in either format. A
    payload whose data would need escaping in JSON (no base64) is its own data, without head."""
    head, comma, data = payload.partition(";base64,")
    if comma and head.startswith("data:") and _PLAIN_BASE64.fullmatch(data):
        return head + comma, data
    return "", payload


def label(part: Mapping[str, Any], sha: bool = False) -> str:
    """A part that is not text, in words: ``[image/png 1280x800 312 KB]``, ``[file]``; with
    ``sha``, the start of its payload's SHA-256 too (``sha256:ab12cd34ef56…``: it names the
    part's blob when it is stored as one), as the CLI shows it."""
    if part["type"] == native.NATIVE:
        return f"[{part['format']} {native.kind_of(part)}]"
    data, media_type, size = measured(part)
    kind = media_type or ("image" if _is_image(part) else part["type"])
    words = [kind]
    if size is not None:
        words.append(f"{size[0]}x{size[1]}")
    if data is not None:
        words.append(_bytes(len(data)))
        where = payload_field(part)
        if sha and where is not None:
            words.append(f"sha256:{sha_of(spelled(part[where[0]][where[1]])[1])[:12]}…")
    return "[" + " ".join(words) + "]"


def _bytes(n: int) -> str:
    """A size in words: ``57 B``, ``312 KB``, ``4.2 MB``."""
    if n < 1024:
        return f"{n} B"
    return f"{round(n / 1024)} KB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MB"


def text_of(content: str | list[dict[str, Any]], sha: bool = False) -> str:
    """The text ``content`` stands for where only text goes (a text build, markdown, a summary,
    a relevance score, the CLI): a str as it is; parts as their text, each other part as its
    ``label``, a native part as the text it stands for (``native.text_of``; with ``sha``, as the
    CLI shows it, its label when it stands for none; without, it is left out), one a line."""
    if isinstance(content, str):
        return content
    return "\n".join(t for t in (_text_line(p, sha) for p in content) if t)


def _text_line(part: dict[str, Any], sha: bool) -> str:
    if part["type"] == "text":
        return str(part["text"])
    if part["type"] == native.NATIVE:
        return native.text_of(part) or (label(part) if sha else "")
    return label(part, sha)


# -- formats -----------------------------------------------------------------------------------


def copied(value: Any) -> Any:
    """A copy of a JSON value (what a stored item's content and metadata decode to: dicts, lists,
    scalars), its containers new and its scalars shared: what a build hands out, so that a caller
    changing it changes no item a store holds. (``copy.deepcopy`` keeps a memo for cycles a
    decoded JSON value cannot have: 3-4x the time.)"""
    if type(value) is dict:
        return {k: copied(v) for k, v in value.items()}
    if type(value) is list:
        return [copied(v) for v in value]
    return value


def for_format(parts: list[dict[str, Any]], fmt: str, model: str | None = None) -> list[dict[str, Any]]:
    """``parts`` as a build in ``fmt`` ("openai" or "anthropic"; for ``model`` when given) sends
    them: a part of that format as stored (no key added; a copy, so that a caller changing what
    a build gave it changes no item a store holds); one of the other converted where it has an
    equivalent (text; an image by base64 or URL), else ``InvalidItemError`` naming it; a native
    part as ``native.for_format`` gives it (its value, its text, or left out)."""
    own = OPENAI_TYPES if fmt == "openai" else ANTHROPIC_TYPES
    out = []
    for n, p in enumerate(parts):
        if p["type"] == native.NATIVE:
            sent = native.for_format(p, fmt, model)
            if sent is not None:
                out.append(copied(sent))
        else:
            out.append(copied(p) if p["type"] in own else _converted(n, p, fmt))
    return out


def _converted(n: int, part: dict[str, Any], fmt: str) -> dict[str, Any]:
    kind = part["type"]
    if fmt == "anthropic" and kind == "image_url":
        url = part["image_url"]["url"]
        found = _DATA_URL.fullmatch(url) if url.startswith("data:") else None
        if found is not None:
            return {"type": "image", "source": {"type": "base64", "media_type": found["type"], "data": found["data"]}}
        if url.startswith("https://"):
            return {"type": "image", "source": {"type": "url", "url": url}}
    if fmt == "openai" and kind == "image":
        source = part["source"]
        if source["type"] == "base64":
            return {"type": "image_url", "image_url": {"url": f"data:{source['media_type']};base64,{source['data']}"}}
        if source["type"] == "url":
            return {"type": "image_url", "image_url": {"url": source["url"]}}
    other = "Anthropic" if fmt == "anthropic" else "OpenAI"
    raise InvalidItemError(f"content part {n} ({kind!r}) has no {other} equivalent: build it in the format it came in")


def size(parts: list[dict[str, Any]]) -> int:
    """About what ``parts`` hold, in characters: their strings' lengths."""
    total, todo = 0, list(parts)
    while todo:
        node = todo.pop()
        if isinstance(node, str):
            total += len(node)
        elif isinstance(node, dict):
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return total


def only_text(parts: list[dict[str, Any]]) -> bool:
    """Whether every part is text."""
    return all(p["type"] == "text" for p in parts)
