"""Retrieve phrasings: by topic, last N, speaker, turns, seq, time, the summary, combined.

"Find utterances about Paris", "Get the last 5 utterances", "what did the
assistant say about Paris in turns 3 to 6?", "messages from the user in the
last 10 minutes", "Get utterance 12", "Get summary", terse "last 5".
"""

from __future__ import annotations

import re
from typing import Any

from chd.core.language.grammar.query import Query
from chd.core.language.grammar.reading import Reading
from chd.core.language.grammar.slots import (
    Count,
    seq_fields,
    split_topic,
    take_count,
    take_seqs,
    take_speaker,
    take_summary,
    take_time,
    take_turns,
)
from chd.core.language.grammar.vocab import FILLERS, FLAGS, NOUNS_RE, SPEAKER

__all__ = ["read_retrieve"]

_VERB = (
    r"^(?P<v>get|show|find|search(?:\s+for)?|list|retrieve|fetch|give(?:\s+me)?|return|recall"
    r"|look\s+(?:up|for)|lookup|display|read|print|pull(?:\s+up)?|bring\s+up|dump|tell\s+me"
    r"|remind\s+me(?:\s+of)?|what|which|who|when|did|does|has|have|had|is|are|was|were|any|grep"
    r"|see|view|check|query|let\s+(?:me|us)\s+(?:see|view|read|have(?:\s+a\s+look\s+at)?|look\s+at))\b"
)
_SEARCH_VERBS = ("find", "search", "look", "lookup", "grep")
_WORDS = frozenset(
    """get show find search list retrieve fetch give return recall look up lookup display read print pull
    bring dump remind see view check query happened going on talk talked discussed many back over
    anyone anybody someone somebody ever previously earlier before recent recently latest let look""".split()
)
# "archived", "in the archive": the archive instead of the buffer. Read here
# too, not only in grammar/context.py's whole-query forms, so "the last 2
# archived utterances" does not read the buffer with one stray word ignored.
_ARCHIVE = re.compile(r"\barchived\b|(?:\b(?:in|from|of)\s+)?\bthe\s+archive\b", FLAGS)
# "nothing but the assistant's lines", "system lines alone", "just turn 7":
# a read of a filtered set says "only" in many ways, none changing the filter.
_ONLY = re.compile(r"\bnothing\s+but\b|\b(?:only|just|alone|solely|exclusively|purely)\b", FLAGS)
_NO_UTTERANCES = re.compile(
    r"(?:\b(?:only|alone)\b)?\s*[,(;]?\s*\b(?:no|not\s+the|without(?:\s+(?:the|any))?|and\s+no"
    r"|(?:and\s+)?(?:do\s+not|don't|dont)\s+(?:include|return|show|send)(?:\s+(?:the|any))?)\s+(?:individual\s+)?"
    r"(?:utterances|messages|entries|items|records)\b(?:\s+(?:are\s+)?needed)?\s*\)?"
    # "... and do not generate a new summary", "don't regenerate it": the stored one is what a read returns.
    r"(?:\s*[,;]?\s*(?:and\s+)?(?:do\s+not|don't|dont|without)\s+(?:re-?generat\w*|generat\w*|creat\w*|produc\w*|mak\w*)"
    r"(?:\s+(?:it|a\s+new\s+(?:one|summary)|a\s+fresh\s+(?:one|summary)|(?:it|one|the\s+summary)\s+again))?)?",
    FLAGS,
)
# Reads answer oldest first: saying so changes nothing ("the most recent four,
# earliest first", "Order: chronological"). "newest first" is another order,
# and stays unexplained.
_CHRONOLOGICAL = re.compile(
    r"\b(?:order\s*:\s*)?(?:(?:in\s+)?(?:chronological(?:ly)?|time)(?:\s+order)?|(?:the\s+)?(?:oldest|earliest)\s+(?:ones?\s+)?first"
    r"|in\s+(?:the\s+)?order\s+(?:they\s+were\s+|it\s+was\s+)?(?:said|written|sent|stored|added))\b",
    FLAGS,
)
_LEADING_FILLER = re.compile(
    r"^(?:\s*\b(?:me|all|the|any|every|of|for|in|this|these|those)\b)+", FLAGS
)


def _count_fields(count: Count, topic: bool) -> dict[str, Any]:
    if count.kind == "top":
        return {"limit": count.n or 1}
    if count.kind == "bare":
        return {"limit": count.n} if topic else {"last_n": count.n}
    n = count.n if count.n is not None else (None if count.plural else 1)
    if n is None:
        return {}  # "the latest messages": all of them, in order
    if count.kind == "oldest":
        return {"first_n": n}
    return {"limit": n} if topic and not count.window else {"last_n": n}


_RELATION = re.compile(
    r"\b(?:before|after|earlier\s+than|previous\s+to)\s+(?:the|a|an|that|this|my|its|\d)", FLAGS
)
_RELATION_WORD = re.compile(r"\b(?:before|after)\b", FLAGS)
_FIRST_WORD = re.compile(r"[\w']+", re.UNICODE)
# Words that would be a filter if understood: a read that leaves one of
# them unexplained would return more than was asked ("what the assistant
# has said" read as everything), so it needs every word understood.
_FILTER_WORD = re.compile(rf"(?:{SPEAKER})(?:'s|s')?|turns?|\#?\d+\w*|archived?|summary", FLAGS)


# "a summary of turns 1 to 2" is a new summary of that range, not the running one beside them.
_NEW_SUMMARY = re.compile(
    r"\b(?:a|an|new|fresh)\s+(?:(?:short|brief|quick|concise|new|fresh)\s+)?summary\s+of\b"
    # "the summary of the last 2 turns": the running summary holds no range of the buffer
    r"|\bsummary\s+(?:of|for)\s+(?:the\s+)?(?:first|last|newest|oldest|latest|recent|previous|turns?|messages?"
    r"|utterances?|\d)",
    re.IGNORECASE,
)


def read_retrieve(text: str) -> Reading | None:
    if _NEW_SUMMARY.search(text):
        return None  # "Show me a summary of turns 1 to 2" asks for a new one: summarize reads it
    q = Query(text)
    first = _FIRST_WORD.match(q.text)
    # The topic first: "who said X" needs its "who" to know "said" marks a topic.
    q, topic = split_topic(q)
    verb = q.take(_VERB)
    fields: dict[str, Any] = dict(take_time(q))
    if q.take(_ARCHIVE):
        fields["archived"] = True
    seqs = take_seqs(q)
    fields.update(seq_fields(seqs))
    span = take_turns(q)
    low, high = span.inclusive()
    if low is not None:
        fields["turn_from"] = low
    if high is not None:
        fields["turn_to"] = high
    if span.last_turns is not None:
        fields["last_turns"] = span.last_turns
    if span.first_turns is not None:
        fields["first_turns"] = span.first_turns
    q.take(_ONLY)
    q.take(_CHRONOLOGICAL)
    if speaker := take_speaker(q):
        fields["speaker"] = speaker
    summary = take_summary(q)
    # "the summary (no messages)", "the summary only, not the messages": the summary alone.
    without = q.take(_NO_UTTERANCES) if summary is not None else None
    count = take_count(q)
    if topic is None and verb is not None and verb.group("v").lower().startswith(_SEARCH_VERBS):
        rest = _LEADING_FILLER.sub("", q.text).strip(" ,.?!")
        if rest and not all(w.lower() in FILLERS for w in rest.split()):
            topic = q.restore(rest)
            q.text = ""
    if topic is not None:
        fields["topic"] = topic
    if count is not None:
        fields.update(_count_fields(count, topic is not None))
    if without is not None and fields:
        # "the summary and don't include the user's messages": the filter was part of
        # what is left out, not what is asked for (review of issue 25).
        return Reading(
            "retrieve",
            fields,
            [],
            q.total_words,
            refusal=(
                "this asks for no messages and names which messages in one query; ask for the "
                "summary alone ('Get the summary only') or for the messages you want"
            ),
        )
    if summary is not None:
        alone = not fields and (
            without is not None or (not NOUNS_RE.search(q.text) and not summary.group("with"))
        )
        fields["summary_only" if alone else "include_summary"] = True
    if verb is None and not fields:
        return None
    unexplained = q.unexplained(_WORDS)
    if _RELATION.search(q.original) and (left := _RELATION_WORD.search(q.text)):
        # "the message before the last": "before" relates two things here, it is
        # no filler as in "what did the user say before?" (issue 25).
        unexplained.append(left.group(0))
    strict = (
        (verb is None and first is not None and first.group(0) in unexplained)
        or any(_FILTER_WORD.fullmatch(word) for word in unexplained)
        # "the last 3 exchanges": a count of something not understood might not be utterances.
        or (count is not None and count.after is not None and count.after in unexplained)
        or (bool(unexplained) and unexplained[-1].lower() in ("before", "after"))
    )
    return Reading("retrieve", fields, unexplained, q.total_words, strict=strict)
