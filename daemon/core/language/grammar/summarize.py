"""Summarize phrasings: the whole conversation, a turn range or the newest utterances, within a token limit.

"Summarize conversation", "Summarize turns 3 to 6 in 100 tokens", "give me a
200-token summary", "tl;dr", "a recap of 60 tokens", "what's the gist?",
"Summarize the last 10 messages", "an overview of the first two turns".
"Get the summary" is a retrieve of the running summary instead (see
retrieve.py): only the other nouns (synopsis, overview, recap...) name a
new summary without a verb.
"""

from __future__ import annotations

import re

from chd.core.language.grammar.query import Query, strip_politeness
from chd.core.language.grammar.reading import Reading
from chd.core.language.grammar.slots import (
    Count,
    take_count,
    take_speaker,
    take_time,
    take_token_limit,
    take_turns,
)
from chd.core.language.grammar.vocab import FLAGS
from chd.core.language.numbers import NUM

__all__ = ["read_summarize"]

_MAKE = (
    r"(?:give|make|write|create|produce|generate|get|prepare|draft|provide|send|show|let\s+me\s+(?:have|see)"
    r"|i\s+(?:want|need|would\s+like|'d\s+like)|can\s+i\s+(?:have|get)|how\s+about)(?:\s+me|\s+us)?"
)
_ADJECTIVE = (
    rf"(?:(?:{NUM})[\s-]*tokens?\s+|short\s+|shorter\s+|brief\s+|quick\s+|concise\s+|compact\s+|new\s+|fresh\s+"
    r"|tight\s+|small\s+|little\s+|high[\s-]level\s+|one[\s-](?:line|paragraph)\s+|rough\s+|fast\s+)"
)
_KIND = _ADJECTIVE + "*"
_CREATE = r"(?:make|write|create|produce|generate|prepare|draft|do)(?:\s+me|\s+us)?"
# Nouns that only ever mean a new summary; "summary" alone may be the running one.
_NOUN = (
    r"(?:synopsis|overview|digest|rundown|run[\s-]down|wrap[\s-]?up|recap|gist|pr[eé]cis|round[\s-]?up"
    r"|summation|tl;?\s*dr|abstract|outline|sum[\s-]?up|executive\s+summary)"
)
_VERB = (
    r"(?:summari[sz]e|sum\s+up|recap|condense|digest|boil(?:\s+down)?|wrap\s+up|outline|distil+|abridge"
    r"|run\s+(?:me\s+)?through|go\s+over|brief\s+me\s+on|fill\s+me\s+in\s+on|catch\s+me\s+up\s+on)"
)
_TRIGGER = (
    rf"^(?:{_VERB}|tl;?\s*dr|{_MAKE}\s+(?:a|an)\s+{_KIND}(?:summary|{_NOUN})|{_MAKE}\s+(?:(?:the|your)\s+)?{_KIND}{_NOUN}"
    # Without an article (non-native, issue 25: "Kindly prepare summary of
    # the chat"), only a verb that makes one: "get summary" may be the running one.
    rf"|{_CREATE}\s+{_KIND}summary"
    rf"|(?:(?:a|an)\s+)?{_KIND}{_NOUN}|(?:a|an)\s+{_KIND}summary|{_ADJECTIVE}+summary|summary\s+of"
    rf"|what(?:'s|\s+is|\s+was)\s+the\s+(?:gist|upshot|bottom\s+line|short\s+version|tl;?\s*dr)"
    rf"|(?:give|tell)\s+(?:me|us)\s+the\s+(?:gist|short\s+version|highlights|upshot|tl;?\s*dr)"
    # A question about what the conversation is about asks for its summary
    # (issue 25: "What is the conversation about?" read every utterance).
    rf"|what(?:'s|\s+is|\s+was)\s+(?:the|this|our)\s+(?:conversation|chat|talk|discussion|dialog(?:ue)?|thread|session)\s+(?:all\s+)?about"
    rf"|what\s+(?:have|did|has)\s+(?:we|you\s+and\s+i|the\s+user\s+and\s+the\s+assistant)\s+(?:been\s+)?"
    rf"(?:discuss(?:ed|ing)?|talk(?:ed|ing)?\s+about|cover(?:ed)?)(?:\s+so\s+far|\s+until\s+now)?\s*[?.!]*$)"
    r"(?:\b|(?<=[?.!]))"
)
_WORDS = frozenset(
    """summarize summarise sum up recap condense digest tl dr tldr summary give make write create produce
    generate get prepare draft provide send short brief quick concise compact new fresh of what happened
    has been said so far synopsis overview rundown run down wrap wrapup gist precis précis roundup round
    summation abstract outline boil distil distill abridge shorter tight small little high level line
    paragraph rough fast executive through go over catch fill in on let have see want need like how about
    upshot bottom version highlights tokens token stay staying keep kept capped cap limit max maximum
    until now thus date everything whole entire conversation's down we we've we're our us you've discussed
    talked covered said about happened briefly shortly quickly concisely succinctly budget is was this chat
    talk discussion dialog dialogue thread session all discuss discussing talking cover few words in a do""".split()
)


_LEAD = " ,;:()[]-\u2013\u2014"


def read_summarize(text: str) -> Reading | None:
    q = Query(text)
    # The limit may come first: "using no more than 80 tokens, summarize turns 2 to 3".
    limit = take_token_limit(q)
    if re.search(_TRIGGER, strip_politeness(q.text.lstrip(_LEAD)), FLAGS) is None:
        return None
    fields: dict[str, object] = {}
    if limit is not None:
        fields["token_limit"] = limit
    span = take_turns(q)
    reading = Reading("summarize", fields, [], q.total_words)
    low, high = span.inclusive()
    for name, value in (
        ("turn_from", low),
        ("turn_to", high),
        ("last_turns", span.last_turns),
        ("first_turns", span.first_turns),
    ):
        if value is not None:
            fields[name] = value
    count = take_count(q)
    if count is not None:
        _read_scope(reading, count)
    if take_speaker(q) or take_time(q):
        reading.refusal = (
            "summarize works on the whole conversation, a turn range or the newest utterances; "
            "to read what one speaker said or what was said in a time window, retrieve it instead"
        )
    reading.unexplained = q.unexplained(_WORDS)
    topic = _ABOUT.search(text)
    if topic is not None and topic.group("t").lower() not in _WORDS | _NOT_TOPICS:
        # "Summarize what was said about Paris": a summary has no topic filter;
        # read without it, the summary would be of everything.
        reading.refusal = (
            "summarize works on the whole conversation, a turn range or the newest utterances, "
            "not on a topic: find the utterances about it first ('Find utterances about Paris')"
        )
    return reading


_ABOUT = re.compile(
    r"\b(?:about|regarding|concerning|on\s+the\s+subject\s+of)\s+(?:the\s+)?(?P<t>[\w'-]+)", re.I
)
_NOT_TOPICS = frozenset("it this that everything what so far now".split())


def _read_scope(reading: Reading, count: Count) -> None:
    """'the last 10 messages' -> last_n; 'the newest messages' -> everything (the buffer is the newest)."""
    if count.kind == "newest":
        if count.n is not None:
            reading.fields["last_n"] = count.n
        elif not count.plural:
            reading.fields["last_n"] = 1
        return
    reading.refusal = (
        "summarize takes the whole conversation, a turn range ('Summarize turns 3 to 6'), the first "
        "or last turns ('Summarize the last 2 turns') or the newest utterances ('Summarize the last "
        "10 messages')"
    )
