"""Large content parts, stored once per prefix by reference (§18): the pure half.

A content part whose payload (a ``data:`` URL, base64 data) is at least the store's
``blob_threshold_bytes`` is a *blob*: its payload is stored once per *scope* of the prefix, named
by its SHA-256 (``<prefix>:{<scope>#blobs:<g>}:<sha>``; ``g`` the sha's first hex digit in the
shared scope, sixteen slots on a cluster, and ``0`` in a tenant's: ``groups``). A window's scope
is its tenant, the id up to its first ``:`` with the colon (``tenant-a:`` for ``tenant-a:chat``;
``core/tenants.py``), or nothing for an id without one: so a tenant's blobs lie under its own
ACL pattern (``<prefix>:{<tenant>:*}*``) and are shared only
among its windows. The item's stored JSON holds the token ``"cs-blob:<sha>#<media type>,<bytes>,
<width>x<height>,<tokens>"`` in its place (what the part is, readable without the payload: a
part that is no image has no size there), with the tokens' tails (the reference: sha and what
it is) first in its body (``{"added_at_us":…,"blobs":["<sha>#…",…],"content":…}``, where no
caller's value can be). Each window counts its references in its own ``:blobs`` hash (its
items and its archive; lua/lib/items.lua), and its slot's index (``…:index``) lists, per blob,
when it was last stored and the windows that stored it. A sweep (any store of the prefix that
stored or read a blob, every ``SWEEP_EVERY_S``; plans/blobs.py) drops a blob none of those
windows counts any more, unless it was stored again within ``GRACE_MS``: so a blob is released
within seconds of its last reference going, however it went (removal, eviction, compaction,
clear, delete, TTL).

Reads hand back items as they were added: the store puts each referenced payload back in the
stored JSON it read (``inlined``), checking it against its sha, before any plan decodes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import msgspec

from ..errors import corrupt_value
from .layout import STORED_HEAD
from .parts import measured, part_tokens, payload_field, sha_of, spelled

#: a blob's payload must be at least this many bytes (store option ``blob_threshold_bytes``)
DEFAULT_THRESHOLD = 16_384
#: the most bytes a part stored by reference may hold (store option ``max_part_bytes``): OpenAI
#: takes images of up to 20 MB in a chat request, Gemini 20 MB of inline data a request; Anthropic
#: 5 MB an image (and 32 MB a request), so a larger image stays unsent to it
DEFAULT_MAX_PART_BYTES = 20 * 1024 * 1024
#: a blob stored again this recently is never dropped (the add that refers to it may not have
#: run yet): ms
GRACE_MS = 5_000
#: how often a store sweeps its prefix's blobs (one sweep at a time per prefix)
SWEEP_EVERY_S = 2.0
#: most blobs one sweep looks at per slot (the rest: the next sweep)
SWEEP_BATCH = 500
#: the payload a store keeps of blobs it has read (content-addressed: never stale)
CACHE_BYTES = 32 * 1024 * 1024
#: the slots of the shared scope's blobs (a sha's first hex digit): sixteen, spread over a cluster
GROUPS = "0123456789abcdef"

_TOKEN = b'"cs-blob:'
#: a data URL's token: its head kept in the part, the base64 in the blob (``spelled``)
_URL_TOKEN = b";base64,cs-blob:"
_BASE64_HEAD = ";base64,"
#: a reference in an item's ``blobs`` field: the sha, then (since 2026-11-27) what the part is
_REF = re.compile(rb'"([0-9a-f]{64})(#[\w.+/-]*,\d+,(?:\d+x\d+)?,\d+)?"')
_HEAD = STORED_HEAD.encode()
_BLOBS = re.compile(rb',"blobs":\[((?:"[0-9a-f]{64}(?:#[^"]*)?",?)*)\],')
_MEDIA_TYPE = re.compile(r"[\w.+-]+/[\w.+-]+")


class BlobKeys(NamedTuple):
    """The keys of one blob, in the order blob_put.lua and blob_drop.lua take them (one slot):
    its payload, and its slot's index (sha -> "<server ms it was last stored> <holder> ...")."""

    data: str
    registry: str


def scope_of(window_id: str) -> str:
    """The blob scope of ``window_id``: its tenant and the colon (``a:`` for ``a:chat``), or ''
    for an id without a colon. Its windows share their blobs; no other window sees them."""
    tenant, colon, _ = window_id.partition(":")
    return tenant + colon if colon else ""


def scope_of_key(key: str) -> str:
    """The blob scope of a window's key or a blob's key (by what its hash tag holds)."""
    tag = key[key.index("{") + 1 : key.index("}")]
    blob_at = tag.find("#")  # in no window id: a blob's key
    return tag[:blob_at] if blob_at >= 0 else scope_of(tag)


def group_tag(prefix: str, scope: str, group: str) -> str:
    """The key head of one slot of ``scope``'s blobs: ``<prefix>:{<scope>#blobs:<g>}:`` ('#' is
    in no window id, so no window's keys look like these)."""
    return f"{prefix}:{{{scope}#blobs:{group}}}:"


def groups(scope: str) -> str:
    """The slots of ``scope``'s blobs: sixteen for the shared scope (a sha's first hex digit),
    one for a tenant's (``0``): a sweep of a scope reads one index per slot, and a store may
    sweep the scopes of thousands of tenants."""
    return "0" if scope else GROUPS


def blob_keys(prefix: str, scope: str, sha: str) -> BlobKeys:
    """The keys of blob ``sha`` of ``scope``."""
    head = group_tag(prefix, scope, sha[0] if not scope else "0")
    return BlobKeys(head + sha, head + "index")  # the index: one per slot


def sweep_lock(prefix: str, scope: str) -> str:
    """The key a store sweeping ``scope``'s blobs holds for ``SWEEP_EVERY_S`` (one sweep at a
    time per scope)."""
    return f"{prefix}:{{{scope}#blobs}}:sweep"


def split(content: Any, threshold: int) -> tuple[Any, dict[str, str]]:
    """``content`` (checked) as stored: each payload of at least ``threshold`` bytes replaced by
    its token; and those payloads by sha. A str, or nothing that large: as it is, {}."""
    if not threshold or isinstance(content, str):
        return content, {}
    out, found = [], {}
    for part in content:
        where = payload_field(part)
        payload = part[where[0]][where[1]] if where else None
        if isinstance(payload, str) and len(payload.encode()) >= threshold:
            head, data = spelled(payload)
            sha = sha_of(data)
            found[sha] = data
            token = f"{head}cs-blob:{sha}{described(part)}"
            part = {**part, where[0]: {**part[where[0]], where[1]: token}}  # type: ignore[index]
        out.append(part)
    return (out, found) if found else (content, {})


def by_reference(content: list[Any], threshold: int) -> list[tuple[int, str, int]]:
    """The parts of ``content`` (not yet checked) that ``split`` would store by reference: their
    index, type and payload's bytes (UTF-8, the payload as given: nothing is decoded)."""
    found = []
    for n, part in enumerate(content if threshold else ()):
        try:
            where = payload_field(part)
            payload = part[where[0]][where[1]] if where else None
        except (KeyError, TypeError, AttributeError):  # a part in no shape: the part check refuses it
            payload = None
        size = len(payload.encode()) if isinstance(payload, str) else 0
        if size >= threshold:
            found.append((n, str(part.get("type")), size))
    return found


def described(part: Mapping[str, Any]) -> str:
    """What a part is, as its blob token carries it: ``#<media type>,<bytes>,<w>x<h>,<tokens>``
    (no size for a part that is no image, no media type where it names none; the tokens at the
    default ``detail``, so that one payload always reads the same, in any part that sends it)."""
    data, media_type, size = measured(part)
    kind = media_type if _MEDIA_TYPE.fullmatch(media_type) else ""
    shape = f"{size[0]}x{size[1]}" if size else ""
    return f"#{kind},{len(data or b'')},{shape},{part_tokens(part, data, size, 'auto')}"


def tokens_in(content: Any) -> list[str]:
    """The references (sha and ``described`` tail) of the blob tokens ``split`` put in
    ``content``'s payload fields, sorted: what the item's ``blobs`` field lists."""
    if isinstance(content, str):
        return []
    found = set()
    for part in content:
        where = payload_field(part)
        payload = part[where[0]][where[1]] if where else None
        token = payload.partition(_BASE64_HEAD)[2] or payload if isinstance(payload, str) else ""
        if token.startswith("cs-blob:"):
            found.add(token[len("cs-blob:") :])
    return sorted(found)


def _refs(stored: bytes) -> list[tuple[bytes, bytes]]:
    """The references of an item's stored JSON: (sha, the tail its token carries after it)."""
    if not stored.startswith(_HEAD):
        return []
    found = _BLOBS.match(stored, stored.find(b",", len(_HEAD)))
    return [(sha, tail or b"") for sha, tail in _REF.findall(found.group(1))] if found else []


def refs_of(stored: bytes) -> list[str]:
    """The shas an item's stored JSON refers to ([] for one without blobs)."""
    return [sha.decode() for sha, _ in _refs(stored)]


_MARK = b',"blobs":['


def _with_blobs(raw: bytes) -> bool:
    return raw[:15] == _HEAD and _MARK in raw[14:48]


def wanted(reply: Any) -> set[str]:
    """The shas the item JSONs in a script's or a plain read's reply (any nesting) refer to. (A
    loop, not recursion: every read's reply goes through here, a whole window's too.)"""
    found: set[str] = set()
    if type(reply) is bytes:
        return set(refs_of(reply)) if _with_blobs(reply) else found
    if type(reply) is dict:
        reply = list(reply.values())
    elif type(reply) is not list and type(reply) is not tuple:
        return found
    stack = [reply]
    while stack:
        for r in stack.pop():
            kind = type(r)
            if kind is bytes:
                if r[:15] == _HEAD and _MARK in r[14:48]:
                    found.update(refs_of(r))
            elif kind is list or kind is tuple:
                stack.append(r)
            elif kind is dict:
                stack.append(list(r.values()))
    return found


def _read(sha: str, raw: object) -> tuple[str, str]:
    """A blob's payload as read and what is wrong with it ('': nothing): missing (an item refers
    to it), not UTF-8, or not what its sha names."""
    if raw is None:
        return "", "missing: an item refers to it"
    try:
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
    except UnicodeDecodeError:
        return "", "bytes that are not UTF-8"
    return text, "" if sha_of(text) == sha else "a payload whose SHA-256 is not its name"


def checked_blobs(keys: Sequence[str], shas: Sequence[str], raws: Sequence[Any]) -> tuple[dict[str, str], list[str]]:
    """The blobs an item refers to as the server holds them (``raws``: ``GET`` of ``keys``): the
    payloads that are sound, by sha, and what is wrong with each other one (``_read``)."""
    payloads: dict[str, str] = {}
    problems: list[str] = []
    for key, sha, raw in zip(keys, shas, raws, strict=True):
        text, problem = _read(sha, raw)
        if problem:
            problems.append(f"blob {key}: {problem}")
        else:
            payloads[sha] = text
    return payloads, problems


def checked_payload(key: str, sha: str, raw: object) -> str:
    """A blob's payload as read from ``key``: ``CorruptWindowError`` naming the key and what is
    wrong (``_read``)."""
    text, problem = _read(sha, raw)
    if problem:
        raise corrupt_value(key, "", problem)
    return text


def inlined(reply: Any, payloads: Mapping[str, str]) -> Any:
    """``reply`` with each item JSON's blob tokens replaced by their payloads (its ``blobs``
    field stays: ``tokenized`` undoes this exactly): a whole string's token by the payload's
    JSON, a data URL's by its base64."""
    return _inlined(reply, {sha: msgspec.json.encode(p) for sha, p in payloads.items()})


def _inlined(reply: Any, encoded: Mapping[str, bytes]) -> Any:
    if type(reply) is bytes:
        for sha, tail in _refs(reply) if _with_blobs(reply) else ():
            json = encoded[sha.decode()]
            reply = reply.replace(_TOKEN + sha + tail + b'"', json)
            reply = reply.replace(_URL_TOKEN + sha + tail + b'"', b";base64," + json[1:])
        return reply
    if type(reply) is list:
        return [_inlined(r, encoded) for r in reply]
    if type(reply) is tuple:
        return tuple(_inlined(r, encoded) for r in reply)
    if type(reply) is dict:
        return {k: _inlined(v, encoded) for k, v in reply.items()}
    return reply


def tokenized(stored: bytes, payloads: Mapping[str, str] | BlobCache) -> bytes:
    """An item JSON as Redis holds it, from one ``inlined`` made (what commit.lua checks)."""
    for sha, tail in _refs(stored):
        if sha.decode() in payloads:
            json = msgspec.json.encode(payloads[sha.decode()])
            stored = stored.replace(b";base64," + json[1:], _URL_TOKEN + sha + tail + b'"')
            stored = stored.replace(json, _TOKEN + sha + tail + b'"')
    return stored


class BlobCache:
    """The payloads a store has read, by sha, least recently used first out, within a byte
    budget (content-addressed: an entry is never stale)."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.limit, self.used = limit, 0
        self._by_sha: dict[str, str] = {}

    def get(self, sha: str) -> str | None:
        """The payload of ``sha`` if held (it becomes the most recently used)."""
        payload = self._by_sha.pop(sha, None)
        if payload is not None:
            self._by_sha[sha] = payload
        return payload

    def put(self, sha: str, payload: str) -> None:
        """Keep ``payload``; drop the least recently used beyond the budget."""
        if sha in self._by_sha or len(payload) > self.limit:
            return
        self._by_sha[sha], self.used = payload, self.used + len(payload)
        while self.used > self.limit:
            self.used -= len(self._by_sha.pop(next(iter(self._by_sha))))

    def __contains__(self, sha: object) -> bool:
        return sha in self._by_sha

    def __getitem__(self, sha: str) -> str:
        return self._by_sha[sha]

    def held(self, shas: Iterable[str]) -> dict[str, str]:
        """The payloads of ``shas`` this cache holds."""
        return {s: p for s in shas if (p := self.get(s)) is not None}
