"""The one escaping rule for every JSON the project writes for people and files (the CLI's
``--json`` output, ``snapshot``, ``export``'s files, ``write_snapshot``): what JSON leaves raw but a
terminal or an editor acts on is written as a ``\\uXXXX`` escape, so stored text never drives a
terminal (C1 controls such as CSI U+009B) nor reads other than it is stored (the bidirectional
overrides and isolates U+202A-U+202E, U+2066-U+2069). JSON escapes C0 controls itself. The
escapes decode to the same text: what is read back is what was stored."""

from __future__ import annotations

import re

import msgspec

#: the UTF-8 of DEL, C1 (U+0080-U+009F), U+202A-U+202E and U+2066-U+2069: in valid UTF-8 these byte
#: sequences are those characters and nothing else
_UNSAFE = re.compile(rb"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]")


def _escaped(match: re.Match[bytes]) -> bytes:
    return b"\\u%04x" % ord(match.group().decode())


def escaped(encoded: bytes) -> bytes:
    """JSON text ``encoded`` (UTF-8) with every character of the rule written as its escape."""
    return _UNSAFE.sub(_escaped, encoded)


def encode(value: object) -> bytes:
    """``value`` as JSON (``msgspec.json.encode``) under the rule."""
    return escaped(msgspec.json.encode(value))
