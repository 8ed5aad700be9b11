"""Images as the providers read them, without decoding one: the media type and dimensions its
header gives (``header``, ``dimensions``: what an image costs in tokens), and whether it is whole
as a provider checks it before it takes it (``broken``: a PNG's chunk CRCs up to ``IEND``, a
JPEG's segments and end of image, a GIF's trailer, a WebP's RIFF length). No I/O.

May import: nothing but the standard library.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

#: the image media types whose dimensions are read from their header (and checked whole)
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


def dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, GIF, JPEG or WebP header, without decoding the image; None
    when ``data`` is none of those or its header does not say."""
    found = header(data)
    return None if found is None else found[1:]


def header(data: bytes) -> tuple[str, int, int] | None:
    """(media type, width, height) of a PNG, GIF, JPEG or WebP image, from its header."""
    got: tuple[int, int] | None = None
    kind = ""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        kind, got = "image/png", struct.unpack(">II", data[16:24])
    elif data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        kind, got = "image/gif", struct.unpack("<HH", data[6:10])
    elif data[:2] == b"\xff\xd8":
        kind, got = "image/jpeg", _jpeg_size(data)
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        kind, got = "image/webp", _webp_size(data)
    return (kind, *got) if got is not None and got[0] > 0 and got[1] > 0 else None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 9 <= len(data):
        if data[at] != 0xFF:
            return None
        marker, length = data[at + 1], struct.unpack(">H", data[at + 2 : at + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        at += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


def broken(media_type: str, data: bytes) -> str:
    """What makes ``data``, an image of ``media_type`` whose header was read, one a provider
    refuses ('': it is whole): a PNG's chunks each with their CRC up to ``IEND``; a JPEG's
    segments up to its scan and an end of image after it; a GIF's trailer; a WebP's RIFF length."""
    return _WHOLE[media_type](data)


def _png_broken(data: bytes) -> str:
    at = 8
    while at + 12 <= len(data):
        length = struct.unpack(">I", data[at : at + 4])[0]
        kind, end = data[at + 4 : at + 8], at + 12 + length
        if end > len(data):
            return f"its {kind.decode('latin-1')!r} chunk runs past the end of the data (cut short)"
        if zlib.crc32(data[at + 4 : end - 4]) != struct.unpack(">I", data[end - 4 : end])[0]:
            return f"its {kind.decode('latin-1')!r} chunk at byte {at} fails its CRC"
        if kind == b"IEND":
            return ""
        at = end
    return "it has no IEND chunk (cut short)"


def _jpeg_broken(data: bytes) -> str:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return f"byte {at} starts no segment"
        marker = data[at + 1]
        if marker == 0xDA:  # start of scan: the entropy-coded data runs to the end of image
            ended = data.rfind(b"\xff\xd9") > at
            return "" if ended else "it has no end of image (EOI) after its scan (cut short)"
        if marker == 0xD9:
            return "it ends before its scan"
        at += 2 + struct.unpack(">H", data[at + 2 : at + 4])[0]
    return "it has no scan (cut short)"


def _gif_broken(data: bytes) -> str:
    return "" if data.rstrip(b"\x00").endswith(b";") else "it has no trailer (cut short)"


def _webp_broken(data: bytes) -> str:
    riff = int.from_bytes(data[4:8], "little") + 8
    return "" if len(data) >= riff else f"its RIFF header says {riff} bytes, the data holds {len(data)} (cut short)"


_WHOLE: dict[str, Callable[[bytes], str]] = {
    "image/png": _png_broken, "image/jpeg": _jpeg_broken, "image/gif": _gif_broken, "image/webp": _webp_broken,
}  # fmt: skip
