"""The query language: natural-language text to an operation, its fields and a confidence.

Store is tried first and alone (grammar/store.py): a quote or a separator
marks the utterance, which is kept exactly, whatever words it contains; an
instruction around it that is not fully understood refuses the store
(UnclearStore) unless another operation's rules explain every word of the
query. Every other operation's
rules (daemon/core/language/grammar/) read the query independently; the reading that
explains the largest share of the query's words wins, ties going to the
earlier operation in ``_READERS``. The share is the confidence. Below the
operation's threshold the query is refused with the closest supported
forms — writes (remove, mark, configure) need every word understood, reads
tolerate a stray word. docs/query-language.md lists every form.

The parser only reads; defaults, limits and conflicts between the query,
metadata and data are intents.build_intent's job.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

from chd.core.errors import InvalidRequest
from chd.core.language.grammar.configure import read_configure
from chd.core.language.grammar.context import read_context
from chd.core.language.grammar.mark import read_mark
from chd.core.language.grammar.reading import Reading
from chd.core.language.grammar.remove import read_remove
from chd.core.language.grammar.retrieve import read_retrieve
from chd.core.language.grammar.stats import read_stats
from chd.core.language.grammar.store import UnclearStore, read_store
from chd.core.language.grammar.summarize import read_summarize
from chd.core.language.guide import GUIDE
from chd.core.language.numbers import parse_number

__all__ = [
    "ParsedQuery",
    "parse",
    "parse_number",
    "SUPPORTED_FORMS",
    "NotUnderstood",
    "Ambiguous",
    "THRESHOLDS",
    "threshold_for",
    "closest_forms",
]

# Confidence a reading needs, by operation. Reads may ignore a stray word
# ("show me the frobnicated messages"); writes may not.
THRESHOLDS: dict[str, float] = {
    "store": 1.0,
    "retrieve": 0.8,
    "summarize": 0.8,
    "stats": 0.8,
    "configure": 1.0,
    "mark": 1.0,
    "remove": 1.0,
}
_READ_ONLY_CONFIGURE = 0.8


# Every documented phrasing (from daemon/core/language/guide.py), as the first parser exported it.
SUPPORTED_FORMS: tuple[str, ...] = tuple(form for guide in GUIDE for form in guide.forms)

_READERS: tuple[Callable[[str], Reading | None], ...] = (
    read_context,
    read_mark,
    read_configure,
    read_stats,
    read_summarize,
    read_remove,
    read_retrieve,
)


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """An operation, the fields the query text gave for it, and how sure the parser is."""

    operation: str
    fields: dict[str, Any] = field(default_factory=dict)
    confidence: float = 1.0


class NotUnderstood(InvalidRequest):
    """The rules could not read the query with enough confidence.

    ``best`` is the best reading they had (None if no rule matched at all);
    a classifier may try such a query, never an ``Ambiguous`` one.
    """

    def __init__(self, message: str, confidence: float = 0.0, best: Reading | None = None) -> None:
        super().__init__(message)
        self.confidence = confidence
        self.best = best


class Ambiguous(InvalidRequest):
    """The query was understood well enough to know that acting on it would be a guess."""


def threshold_for(reading: Reading) -> float:
    """A configure that only reads the settings is a read."""
    if reading.operation == "configure" and not reading.fields:
        return _READ_ONLY_CONFIGURE
    return THRESHOLDS[reading.operation]


def parse(text: str) -> ParsedQuery:
    """Read ``text``; raise NotUnderstood or Ambiguous (both INVALID_ARGUMENT) saying why."""
    query = text.strip()
    if not query:
        raise NotUnderstood(_with_forms("the query is empty", query))
    try:
        stored = read_store(query)
    except UnclearStore:
        # A store verb in words the store rules cannot place ("Keep only the
        # last 5 messages"): another operation may run only if its rules
        # explain every word; otherwise the store's refusal stands.
        if len(query) > _OTHER_READING_LIMIT or _fully_read(query) is None:
            raise
        stored = None
    if stored is not None:
        return ParsedQuery("store", stored, 1.0)
    operation, fields, confidence = _read(query)
    # A fresh dict (and fresh lists such as seqs) per call: the cached
    # reading is shared, the caller's copy is its own.
    return ParsedQuery(
        operation, {k: list(v) if isinstance(v, list) else v for k, v in fields.items()}, confidence
    )


# Reading a non-store query runs every operation's rules: ~220 us for "Get
# the last 5 utterances", about half of a retrieve's time in the daemon
# (py-spy of bench/bench_backends.py). The rules are pure functions of the
# text, and clients repeat the same few queries, so readings are cached by
# text. Stores are not (every utterance is new, and a cache must not keep
# the text of an utterance after it is removed); refusals are not either
# (lru_cache never caches an exception), and they are rare. What it does
# keep, up to 1,024 queries, is query text such as a search's topic.
@lru_cache(maxsize=1024)
def _read(query: str) -> tuple[str, dict[str, Any], float]:
    readings = [r for r in (read(query) for read in _READERS) if r is not None]
    if not readings:
        raise NotUnderstood(_with_forms(f"could not tell what {_quote(query)} asks for", query))
    best = max(readings, key=lambda r: r.confidence)
    if best.refusal is not None:
        raise Ambiguous(f"{best.refusal}. Nothing was changed.")
    needed = threshold_for(best)
    if best.confidence < needed:
        words = ", ".join(repr(w) for w in best.unexplained[:5])
        reason = (
            f"could not fully understand {_quote(query)} as a {best.operation} "
            f"(confidence {best.confidence:.2f}, a {best.operation} needs {needed:.2f}; "
            f"not understood: {words})"
        )
        raise NotUnderstood(_with_forms(reason, query, best.operation), best.confidence, best)
    return best.operation, best.fields, best.confidence


_OTHER_READING_LIMIT = 1_000


def _fully_read(query: str) -> tuple[str, dict[str, Any], float] | None:
    try:
        reading = _read(query)
    except InvalidRequest:
        return None
    return reading if reading[2] >= 1.0 else None


def _quote(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def closest_forms(query: str, operation: str | None = None, count: int = 3) -> list[str]:
    """The supported example phrasings most like ``query`` (its operation's first)."""
    lowered = query.lower()

    def likeness(form: str) -> float:
        return difflib.SequenceMatcher(None, lowered, form.lower()).ratio()

    pool = [(g.operation, form) for g in GUIDE for form in g.forms]
    ranked = sorted(pool, key=lambda item: (item[0] != operation, -likeness(item[1])))
    return [form for _, form in ranked[:count]]


def _with_forms(reason: str, query: str, operation: str | None = None) -> str:
    forms = "\n  ".join(closest_forms(query, operation))
    return f"{reason}. Closest supported forms:\n  {forms}\n(GetInstructions lists them all)"
