"""Stats phrasings: 'stats', 'how many utterances are stored?', 'how big is the summary?'."""

from __future__ import annotations

import re

from chd.core.language.grammar.query import Query
from chd.core.language.grammar.reading import Reading

__all__ = ["read_stats"]

_TRIGGER = (
    r"\b(?:stats|statistics|status|usage|metrics|counts?|numbers|size|fill)\b"
    r"|^how\s+(?:many|much|big|large|long|full)\b|^count\b"
    # "Is the buffer full?", "how close to full is the buffer" (issue 25).
    r"|^(?:is|are)\s+(?:the\s+)?(?:buffer|memory|history|conversation|summary)\s+(?:already\s+|almost\s+|nearly\s+)?(?:full|empty|big|large)\b"
    r"|\b(?:full|empty)\s+is\s+the\s+buffer\b"
)
_WORDS = frozenset(
    """stats statistics status usage metrics count counts numbers how many much big large long full
    tokens token turns turn summary queue queued pending evicted used use size length there left
    waiting important overall total get show give display report are stored have do fill level
    buffer's summary's sizes lengths conversation's is empty almost nearly already close""".split()
)


_SECOND_REQUEST = re.compile(
    r"\b(?:and|also|plus|then|as\s+well\s+as)\s+(?:(?:also|then|please)\s+)?(?:show|get|give|list|send|include"
    r"|display|return|read|fetch|tell|find|summari[sz]e|delete|remove|clear|set|mark|the\s+(?:last|first)\b|\d)",
    re.IGNORECASE,
)


def read_stats(text: str) -> Reading | None:
    q = Query(text)
    if q.search(_TRIGGER) is None:
        return None
    unexplained = q.unexplained(_WORDS)
    # "How full is the buffer, and show the summary": a second request, not a stray word.
    second = _SECOND_REQUEST.search(text)
    refusal = (
        f"this asks for the stats and for something else ({second.group(0)!r} ...); "
        "send each as a query of its own"
        if second
        else None
    )
    return Reading("stats", {}, unexplained, q.total_words, refusal=refusal)
