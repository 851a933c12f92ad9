"""Summarize phrasings: the whole conversation or a turn range, within a token limit.

"Summarize conversation", "Summarize turns 3 to 6 in 100 tokens", "give me a
200-token summary", "tl;dr". "Get the summary" is a retrieve of the running
summary instead (see retrieve.py).
"""

from __future__ import annotations

from chd.core.language.grammar.query import Query
from chd.core.language.grammar.reading import Reading
from chd.core.language.grammar.slots import take_count, take_speaker, take_token_limit, take_turns, take_time
from chd.core.language.numbers import NUM

__all__ = ["read_summarize"]

_MAKE = r"(?:give|make|write|create|produce|generate|get|prepare|draft|provide|send)(?:\s+me|\s+us)?"
_KIND = rf"(?:(?:{NUM})[\s-]*tokens?\s+|short\s+|brief\s+|quick\s+|concise\s+|compact\s+|new\s+|fresh\s+)*"
_TRIGGER = (
    rf"^(?:summari[sz]e|sum\s+up|recap|condense|digest|tl;?\s*dr|{_MAKE}\s+(?:a|an)\s+{_KIND}(?:summary|recap)"
    rf"|(?:a|an)\s+{_KIND}summary|summary\s+of)\b"
)
_WORDS = frozenset(
    """summarize summarise sum up recap condense digest tl dr tldr summary give make write create produce
    generate get prepare draft provide send short brief quick concise compact new fresh of what happened
    has been said so far""".split()
)


def read_summarize(text: str) -> Reading | None:
    q = Query(text)
    trigger = q.search(_TRIGGER)
    if trigger is None:
        return None
    fields: dict[str, object] = {}
    limit = take_token_limit(q)
    if limit is not None:
        fields["token_limit"] = limit
    span = take_turns(q)
    reading = Reading("summarize", fields, [], q.total_words)
    if span.last_turns is not None:
        reading.refusal = "summarize takes a turn range ('Summarize turns 3 to 6'), not 'the last N turns'"
    low, high = span.inclusive()
    if low is not None:
        fields["turn_from"] = low
    if high is not None:
        fields["turn_to"] = high
    if take_speaker(q) or take_count(q) or take_time(q):
        reading.refusal = (
            "summarize works on the whole conversation or a turn range; to read what one "
            "speaker said or the last N utterances, retrieve them instead"
        )
    reading.unexplained = q.unexplained(_WORDS)
    return reading
