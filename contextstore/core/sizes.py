"""An item's size against the store's limits (``validate.new_item`` checks it before any part's
data is decoded): its content, metadata and source_ref together at most ``max_content_bytes``,
but for the content parts stored by reference (``core/blobs.py``), each at most
``max_part_bytes``. No I/O."""

from __future__ import annotations

from typing import Any, NamedTuple

from ..errors import InvalidItemError
from . import blobs


def _by_reference(content: list[Any], blob_threshold: int, max_part_bytes: int) -> int:
    """The bytes of ``content``'s payloads that are stored by reference (as blobs), each at most
    ``max_part_bytes`` (``InvalidItemError`` naming the part), read without decoding any."""
    stored_apart = 0
    for n, kind, size in blobs.by_reference(content, blob_threshold):
        if size > max_part_bytes:
            raise InvalidItemError(
                f"content part {n} ({kind!r}) holds {size} bytes of data; a part stored by reference holds at "
                f"most {max_part_bytes} (the store's max_part_bytes)"
            )
        stored_apart += size
    return stored_apart


class ItemLimits(NamedTuple):
    """The store options an item's size is checked against: its content, metadata and
    source_ref together at most ``max_content_bytes``, but for the parts stored by reference
    (payloads of at least ``blob_threshold`` bytes; 0: none), each at most ``max_part_bytes``."""

    max_content_bytes: int
    blob_threshold: int = 0
    max_part_bytes: int = blobs.DEFAULT_MAX_PART_BYTES


def check(
    content: str | list[Any], content_bytes: int, meta_bytes: int, source_ref: str | None, limits: ItemLimits
) -> None:
    """An item's content (``content_bytes`` of it, as UTF-8 or JSON), metadata and source_ref
    within ``limits`` (``InvalidItemError`` otherwise), reading no part's data."""
    if isinstance(content, list):
        content_bytes -= _by_reference(content, limits.blob_threshold, limits.max_part_bytes)
    size = content_bytes + meta_bytes + len((source_ref or "").encode())
    if size > limits.max_content_bytes:
        what = "content" if size == content_bytes else "content, metadata and source_ref"
        raise InvalidItemError(f"{what} of the item are {size} bytes in UTF-8; the limit is {limits.max_content_bytes}")
