"""The markdown form of a window: ``## Context``, then per item a heading and a fenced block.

``"### <Heading>[ (from <filename>[:<start>-<end>])]\\n```<lang>\\n<content>\\n```\\n\\n"``; the
heading is the type's value with each part capitalised (``repl_history`` -> ``Repl-History``).
A fence is always longer than the longest backtick run inside its content.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from ..core.parts import text_of
from ..errors import InvalidOptionsError
from ..types import ContextItem, ItemType

_BACKTICKS = re.compile(r"`+")


def heading(item_type: ItemType) -> str:
    """``repl_history`` -> ``Repl-History``."""
    return "-".join(part.capitalize() for part in item_type.value.split("_"))


def fence(content: str) -> str:
    """A backtick fence longer than the longest backtick run inside ``content`` (at least 3)."""
    longest = max((len(m) for m in _BACKTICKS.findall(content)), default=0)
    return "`" * max(3, longest + 1)


def _meta(md: dict[str, Any], key: str) -> Any:
    value = md.get(key)
    return md.get(key.replace("_", "-")) if value is None else value


def source_note(item: ContextItem) -> str:
    """`` (from <filename>[:<start>-<end>])`` from the item's metadata, or ""."""
    md = item.metadata or {}
    filename = md.get("filename")
    if not filename:
        return ""
    start, end = _meta(md, "start_line"), _meta(md, "end_line")
    lines = f":{start}-{end}" if start is not None and end is not None else ""
    return f" (from {filename}{lines})"


def language_of(item: ContextItem, language: str | None) -> str:
    """The fence's language: the one given, else ``metadata["language"]``, else the filename's
    extension, else none."""
    if language is not None:
        return language
    md = item.metadata or {}
    lang = md.get("language")
    if isinstance(lang, str) and lang:
        return lang
    filename = md.get("filename")
    if isinstance(filename, str):
        return PurePosixPath(filename).suffix.lstrip(".")
    return ""


def render(items: Sequence[ContextItem], language: str | None = None) -> str:
    """The markdown of ``items`` in the order given."""
    if language is not None and (not isinstance(language, str) or re.search(r"[\s`]", language)):
        raise InvalidOptionsError(f"language must be a word without spaces or backticks: {language!r}")
    parts = ["## Context\n\n"]
    for item in items:
        text = text_of(item.content)
        f = fence(text)
        parts.append(f"### {heading(item.type)}{source_note(item)}\n{f}{language_of(item, language)}\n{text}\n{f}\n\n")
    return "".join(parts)
