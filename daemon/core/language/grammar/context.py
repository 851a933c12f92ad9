"""Context and archive phrasings: 'Get context within 2000 tokens', 'Get archived utterances'.

Both are anchored to the whole query, so "Find utterances about context
switching" stays a topic search and nothing here guesses.
"""

from __future__ import annotations

import re
from typing import Any

from chd.core.language.grammar.query import normalize, strip_politeness
from chd.core.language.grammar.reading import Reading
from chd.core.language.numbers import NUM, parse_number

__all__ = ["read_context"]

_POLITE = r"^\s*(?:please\s+|can\s+you\s+|could\s+you\s+)?"
_VERB = (
    r"(?:get|show|give(?:\s+me)?|fetch|build|return|list|find|search|what(?:'s|\s+is))\s+(?:me\s+)?"
)
_CONTEXT = re.compile(
    _POLITE + _VERB + r"(?:the\s+)?(?:conversation(?:'s)?\s+|prompt\s+|current\s+)?context"
    rf"(?:\s+(?:within|in|under|of|for|up\s+to|at\s+most|below|with)\s+(?:at\s+most\s+)?(?P<n>{NUM})\s+tokens?)?"
    r"\s*[?.!]?\s*$",
    re.IGNORECASE,
)
_ARCHIVED = re.compile(
    _POLITE
    + _VERB
    + r"(?:all\s+|the\s+)*(?:archived\s+(?:utterances|messages)|(?:utterances|messages)\s+(?:from|in)\s+the\s+archive)"
    r"(?:\s+about\s+(?P<topic>.+))?$",
    re.IGNORECASE | re.DOTALL,
)


def read_context(text: str) -> Reading | None:
    words = len(text.split())
    # The anchored forms would miss "..., please" or "? Thanks" at the end
    # (the politeness strip also drops a final "?", "." or "!").
    text = strip_politeness(normalize(text))
    if m := _CONTEXT.match(text):
        fields: dict[str, Any] = {"context": True}
        if m.group("n"):
            fields["token_limit"] = parse_number(m.group("n"))
        return Reading("retrieve", fields, [], words)
    if m := _ARCHIVED.match(text):
        fields = {"archived": True}
        if m.group("topic"):
            fields["topic"] = m.group("topic").strip(" ?.!")
        return Reading("retrieve", fields, [], words)
    return None
