"""Remove phrasings, read strictly: a misparsed remove is data loss.

Every word must be understood (the parser's threshold for removes is 1.0),
and a remove that names no target ("remove messages"), a count without a
direction ("remove 3 messages": the oldest or the newest?), or a topic
("forget what I said about Paris") is refused with a message saying what
to write instead. A singular phrasing over a set ("remove the assistant's
message in turn 3") deletes at most one utterance: if the set holds more,
the core refuses instead of choosing.
"""

from __future__ import annotations

import re

from chd.core.errors import quote
from chd.core.language.grammar.query import Query
from chd.core.language.grammar.reading import Reading
from chd.core.language.grammar.slots import (
    Count,
    seq_fields,
    split_topic,
    take_count,
    take_seqs,
    take_speaker,
    take_time,
    take_turns,
)
from chd.core.language.grammar.vocab import CONVERSATION, FLAGS, NOUNS_RE, SINGULAR

__all__ = ["read_remove"]

_VERB = (
    r"^(?P<v>remove|delete|forget|drop|erase|purge|clear|wipe|evict|discard|get\s+rid\s+of"
    r"|throw\s+(?:away|out)|scrub|reset|empty|trash|nuke|scrap|strike(?:\s+out)?|cross\s+out"
    r"|cut(?:\s+out)?|axe|ditch|dump|bin|toss(?:\s+out)?|expunge|eliminate|delete|take\s+out|kill"
    r"|blow\s+away|wipe\s+out|clean\s+out|zap|obliterate|eradicate|destroy)\b"
)
# Verbs that alone mean "everything". "reset" is not one of them: a bare
# "reset" could as well mean the settings, so it needs "the conversation".
_WIPE_VERBS = {"clear", "wipe", "purge"}
_ALL = r"\b(?:all|everything|every|entire|whole|complete)\b"
_WORDS = frozenset(
    "everything all every entire whole complete out away whatever came come happened".split()
)
# "every turn before turn 3": the turns named by the turn filter itself.
_WITH_SUMMARY = (
    r"(?:\b(?:including|incl\.?|with|and|plus|as\s+well\s+as)\s+)(?:the\s+|its\s+|their\s+)?"
    r"(?:running\s+|stored\s+)?summary\b(?:\s+(?:too|as\s+well))?"
)
_BUFFER_ONLY = re.compile(r"\bbuffer\b", re.IGNORECASE)
_TURN_NOUN = re.compile(r"\b(?:every|each|all(?:\s+the)?|any|the)\s+turns?\b|\bturns?\b", FLAGS)
_HOW = (
    "say which utterances: 'the oldest 3', 'the newest 2', 'utterance 12', 'before turn 4', "
    "'turns 3 to 5', 'everything the assistant said', or 'all' ('Clear the conversation')"
)


# Verbs that as often mean "show" ("dump the history"): a remove phrased with
# one is refused, never guessed (issue 25: a read ran as a remove and deleted).
_TWO_WAY = frozenset({"dump"})


def read_remove(text: str) -> Reading | None:
    q = Query(text)
    verb = q.take(_VERB)
    if verb is None:
        return None
    reading = Reading("remove", {}, [], q.total_words)
    if verb.group("v").lower() in _TWO_WAY:
        reading.refusal = (
            f"{quote(verb.group('v'))} may mean show or delete; say 'show' or 'delete' ({_HOW})"
        )
    fields = reading.fields
    q, topic = split_topic(q)
    if topic is not None:
        reading.refusal = (
            f"remove by topic is not supported (it could delete more than meant): find the "
            f"utterances first (Find utterances about {quote(topic, 40)}), then remove them by seq"
        )
    if time := take_time(q):
        # "older than an hour", "in the last 5 minutes" select by age; a calendar
        # window ("since 2026-01-31") is a read's filter, not yet a remove's.
        if set(time) <= {"within_seconds", "older_than_seconds"}:
            fields.update(time)
        else:
            reading.refusal = (
                "remove by date is not supported; remove by age ('older than an hour'), by turn "
                "or by seq instead"
            )
    seqs = take_seqs(q)
    fields.update(seq_fields(seqs))
    span = take_turns(q)
    if span.given:
        q.take(_TURN_NOUN)
    for name, value in (
        ("before_turn", span.before),
        ("after_turn", span.after),
        ("turn_from", span.turn_from),
        ("turn_to", span.turn_to),
        ("last_turns", span.last_turns),
        ("first_turns", span.first_turns),
    ):
        if value is not None:
            fields[name] = value
    if speaker := take_speaker(q):
        fields["speaker"] = speaker
    count = take_count(q)
    if count is not None:
        _read_count(reading, count)
    everything = q.take(_ALL) is not None
    nouns = [m.group(0).lower() for m in NOUNS_RE.finditer(q.text)]
    reading.unexplained = q.unexplained(_WORDS)
    if fields or reading.refusal:
        if not everything and count is None and not seqs and _singular(nouns):
            fields["at_most"] = 1
        return reading
    if (
        everything
        or (
            verb.group("v").lower() in _WIPE_VERBS
            or re.search(rf"\b{CONVERSATION}\b", q.text, FLAGS)
        )
        and not nouns
    ):
        fields["all"] = True
        if _BUFFER_ONLY.search(text) and not re.search(_WITH_SUMMARY, text, FLAGS):
            # "Clear the buffer": the running summary is not in the buffer, and
            # clearing everything would drop it (issue 25 review).
            reading.refusal = (
                "clearing removes the running summary too, which is not in the buffer; say 'Clear "
                "the conversation' for everything, or name the utterances ('Remove turns 1 to 4')"
            )
        # "Clear the entire conversation, including its summary": all is buffer, summary and queue.
        q.take(_WITH_SUMMARY)
        reading.unexplained = q.unexplained(_WORDS)
        return reading
    if len(reading.unexplained) == 1 and reading.unexplained[0].isdigit():
        n = reading.unexplained[0]
        reading.refusal = f"'{n}' could be a count or a seq: say 'the oldest {n}', 'the newest {n}' or 'utterance {n}'"
    elif not reading.unexplained:
        reading.refusal = f"the query does not say which utterances to remove; {_HOW}"
    return reading


def _read_count(reading: Reading, count: Count) -> None:
    if count.kind == "bare":
        reading.refusal = f"'{count.n}' utterances from which end? say 'the oldest {count.n}' or 'the newest {count.n}'"
    elif count.kind == "top" or count.window:
        reading.refusal = f"that count is not understood for a remove; {_HOW}"
    elif count.n is None and count.plural:
        reading.refusal = "how many? say 'the oldest 3 utterances' or 'the newest 2 utterances'"
    else:
        reading.fields[count.kind] = count.n if count.n is not None else 1


def _singular(nouns: list[str]) -> bool:
    return bool(nouns) and all(re.fullmatch(SINGULAR, n, FLAGS) for n in nouns)
