"""The query language: natural-language text to an operation, its fields and a confidence.

A function call such as ``get_last_n(5)`` (grammar/calls.py) is read
first; it is understood whole or refused. Store is tried next and alone
(grammar/store.py): a quote or a separator
marks the utterance, which is kept exactly, whatever words it contains; an
instruction around it that is not fully understood refuses the store
(UnclearStore) unless another operation's rules explain every word of the
query. Every other operation's
rules (daemon/core/language/grammar/) read the query independently; the reading that
explains the largest share of the query's words wins, ties going to the
earlier operation in ``_READERS``. The share is the confidence. Below the
operation's threshold the query is refused with the closest supported
forms — writes (remove, mark, configure) need every word understood, reads
tolerate a stray word, but not one that would have been a filter (a
speaker, a turn, a number) nor an unknown first word (an unknown verb may
mean a write). A query that starts with a remove verb runs as a remove or
not at all. docs/query-language.md lists every form.

The parser only reads; defaults, limits and conflicts between the query,
metadata and data are intents.build_intent's job.

Every request is read in time linear in its size (issue 14). A store's
utterance is payload: grammar/store.py finds where it starts and the rest
of the grammar never reads it. Any other query is an instruction, and the
rules read at most ``MAX_INSTRUCTION_CHARS`` of it; a longer one is refused
at once (a long topic goes in data.topic). Within that, every pattern is
linear, and the closest-form suggestions compare a short prefix.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from chd.core.errors import InvalidRequest, quote
from chd.core.language.grammar import summary_forms
from chd.core.language.grammar.calls import read_call, read_json, read_sql_insert
from chd.core.language.grammar.configure import read_configure
from chd.core.language.grammar.context import read_context
from chd.core.language.grammar.guards import refusal_for
from chd.core.language.grammar.mark import read_mark
from chd.core.language.grammar.normalize import (
    LEXICON,
    SCOPE,
    WORDS,
    WRITE_FORMS,
    Normalizer,
    developer_syntax,
    glossed,
    lemma,
    operation_label,
    phrases,
    removal_idiom,
    speech_question,
    vocabulary_of,
    write_operations,
)
from chd.core.language.grammar.query import ANY_QUOTE, QUOTED
from chd.core.language.grammar.reading import Reading
from chd.core.language.grammar.remarks import (
    COUNTERMAND,
    DESCRIBES_TARGET,
    SAFE_INTERJECTIONS,
    WRONG_TARGET,
    agrees,
    is_remark,
)
from chd.core.language.grammar.remove import read_remove
from chd.core.language.grammar.repairs import repaired
from chd.core.language.grammar.retrieve import read_retrieve
from chd.core.language.grammar.stats import read_stats
from chd.core.language.grammar.store import UnclearStore, read_store
from chd.core.language.grammar.summarize import read_summarize
from chd.core.language.grammar.vocab import NOUN, SPEAKER
from chd.core.language.guide import GUIDE, MAX_INSTRUCTION_CHARS
from chd.core.language.numbers import NUM, parse_number

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
    "MAX_INSTRUCTION_CHARS",
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
# Writes that may start with a remove verb ("remove the pin from utterance 3",
# "remove the overrides") when every word is theirs.
_WRITES = frozenset({"mark", "configure"})


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

    def __init__(
        self,
        message: str,
        confidence: float = 0.0,
        best: Reading | None = None,
        did_you_mean: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.confidence = confidence
        self.best = best
        self.did_you_mean = did_you_mean

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled whole (reading_process sends refusals between processes);
        # the default would rebuild it from the message alone.
        fields = (str(self), self.confidence, self.best, self.did_you_mean)
        return (type(self), fields, {"operation": self.operation})


class Ambiguous(InvalidRequest):
    """The query was understood well enough to know that acting on it would be a guess."""


# A read may leave a stray word unexplained, never one that negates or scopes
# what it reads ("the summary, not the messages"): issue 25.
_NEGATION = frozenset(
    "not no n't never except without but other others besides excluding instead".split()
)
# Nor one that narrows it (issue 25: "show turn 3 and everything after" read
# as turn 3): order, time and count words.
_NARROWING = frozenset(
    """after before since until till older newer later earlier onward onwards following beyond first last
    latest newest oldest earliest recent ago only once twice one two three four five six seven eight nine ten
    eleven twelve dozen few couple several short brief briefly gist condensed""".split()
)


_TOPIC_WORDS = frozenset("regarding concerning mentioning re limit limited excluding".split())


def threshold_for(reading: Reading) -> float:
    """A configure that only reads the settings is a read."""
    if reading.strict or any(
        w.lower() in _NEGATION
        or w.lower() in _NARROWING
        or w.lower().endswith("n't")
        or w.lower() in WORDS
        # A number or a topic left unread would be dropped: "Summarize, limit 5",
        # "Summarize what was said about Paris" (issue 25 review).
        or any(c.isdigit() for c in w)
        or w.lower() in _TOPIC_WORDS
        # "the assistent's reply": an owner the rules did not know would be dropped.
        or w.lower().replace("\u2019", "'").endswith("'s")
        for w in reading.unexplained
    ):
        # A word the lexicon would rewrite ("the client's messages") is no
        # stray word: read as written, the filter it names would be dropped.
        return 1.0
    if reading.operation == "configure" and not reading.fields:
        return _READ_ONLY_CONFIGURE
    return THRESHOLDS[reading.operation]


def parse(text: str) -> ParsedQuery:
    """Read ``text``; raise NotUnderstood or Ambiguous (both INVALID_ARGUMENT) saying why."""
    query = text.strip()
    if not query:
        raise NotUnderstood(_with_forms("the query is empty", query))
    if query.endswith("}") and (json_call := read_json(query)) is not None:
        return ParsedQuery(json_call[0], json_call[1], 1.0)
    if query[:1] in "oOaAtTcCiI{":
        query = operation_label(query)
    known = _READINGS.known(query)
    if known is not None:
        # Only a query that neither the call reader nor the store rules took
        # is ever cached, so a hit skips both: the store rules cost a retrieve
        # ~70 us, a third of its time in the daemon (bench_backends).
        return _fresh_parse(known)
    call = read_call(query) or read_sql_insert(query)
    if call is not None:
        # Before the store rules, which would read add_utterance("...") as a
        # header and a quote; not cached: a call may store an utterance.
        return ParsedQuery(call[0], call[1], 1.0)
    try:
        stored = read_store(query)
    except UnclearStore:
        # A store verb in words the store rules cannot place ("Keep only the
        # last 5 messages"): another operation may run only if its rules
        # explain every word; otherwise the store's refusal stands.
        other = _fully_read(query) if len(query) <= _OTHER_READING_LIMIT else None
        if other is None:
            raise
        # Read once: the next time the cache answers it, as it would once read below.
        return _fresh_parse(_READINGS.kept(query, other))
    if stored is not None:
        return ParsedQuery("store", stored, 1.0)
    if len(query) > MAX_INSTRUCTION_CHARS:
        # Not NotUnderstood: the classifier is not sent a query this long either.
        raise InvalidRequest(
            f"the query is {len(query):,} characters and not a store; the query language reads "
            f"instructions of up to {MAX_INSTRUCTION_CHARS:,} characters (it begins "
            f"{quote(query)}). Store a long utterance with 'Add utterance: <text>' or data.text; "
            f"search for a long topic with 'Find utterances' and data.topic"
        )
    return _fresh_parse(_READINGS.read(query))


def _fresh_parse(outcome: tuple[str, dict[str, Any], float]) -> ParsedQuery:
    # A fresh dict (and fresh lists such as seqs) per call: the cached
    # reading is shared, the caller's copy is its own.
    operation, fields, confidence = outcome
    return ParsedQuery(
        operation, {k: list(v) if isinstance(v, list) else v for k, v in fields.items()}, confidence
    )


def _read(query: str) -> tuple[str, dict[str, Any], float]:
    """The rules' reading of ``query`` as written; if they refuse it, of its normalized form."""
    if _TEXT_CONDITION.search(query) and not _TEXT_CONDITION.search(developer_syntax(query)):
        # "text IN ('Hi')": the developer form was rewritten, the condition on the text lost.
        raise _refused(
            _TEXT_CONDITION_UNREAD,
            "retrieve",
        )
    try:
        # Developer forms ("turn>=3", "speaker=user") are read as their words
        # first: a search verb would otherwise take "speaker=user" as topic.
        # "What said the assistant" first as "what did the assistant say": read as
        # written, a topic marker takes the speaker for a topic (review of issue 25).
        return _read_rules(developer_syntax(speech_question(query) or query))
    except (NotUnderstood, Ambiguous):
        # An Ambiguous refusal may come of a word the rules did not know
        # ("flag msg 7": no seq); it stands unless the normalized query reads fully.
        alternative = _read_normalized(query)
        if alternative is None:
            raise
        # The guards look at the query as sent: normalizing may have dropped
        # the words that make it a question ("how do I ...").
        if why := refusal_for(query, alternative[0], alternative[1]):
            raise _refused(why, alternative[0]) from None
        if _TEXT_CONDITION.search(query) and "topic" not in alternative[1]:
            # "SELECT * WHERE text IN ('Hi')": the condition was set aside with its bracket.
            raise _refused(
                _TEXT_CONDITION_UNREAD,
                alternative[0],
            ) from None
        if alternative[0] not in _WRITE_OPERATIONS and (
            writes := write_operations(_unquoted(query))
        ):
            # "Summarize the conversation. The old messages can then be removed.": a
            # write word set aside with a clause is still a write asked for (second review).
            raise _refused(
                f"this also asks for a {' and a '.join(sorted(writes))}, which a "
                f"{alternative[0]} does not do; send each as a query of its own",
                alternative[0],
            ) from None
        return alternative


def _read_rules(query: str) -> tuple[str, dict[str, Any], float]:
    readings = [r for r in (read(query) for read in _READERS) if r is not None]
    if not readings:
        raise NotUnderstood(_with_forms(f"could not tell what {quote(query)} asks for", query))
    best = max(readings, key=lambda r: r.confidence)
    removal = next((r for r in readings if r.operation == "remove"), None)
    if (
        removal is not None
        and best is not removal
        and (best.operation not in _WRITES or best.confidence < 1.0)
    ):
        # It starts with a remove verb: it runs as a remove or not at all. A
        # read here would answer as if something had been deleted.
        best = removal
    if best.refusal is not None:
        raise _refused(best.refusal, best.operation)
    if (
        best.operation == "retrieve"
        and "topic" not in best.fields
        and ANY_QUOTE.search(query)
        and not _FIELDS_FORM.search(query)
        and QUOTED.search(query)
    ):
        # '"I can help." — the customer was told' read the user's messages and ignored the
        # quoted text (fourth review): a read uses a quoted span as its topic or not at all.
        raise _refused(
            "a quoted text is not part of this read; to store it, say 'Add user utterance: ...'; "
            "to search for it, say 'Find utterances about \"...\"'",
            best.operation,
        )
    if best.operation in ("retrieve", "summarize", "stats") and _ARROW.search(query):
        # "[I want a refund] <- from the caller": a pointer at a text, never a read.
        raise _refused(
            "an arrow points at a text here; to store it, say so ('Add user utterance: ...')",
            best.operation,
        )
    if best.operation != "stats" and _STATS_THEN_MORE.match(query):
        # "How full is the buffer and what did the assistant say?" answered the read alone.
        raise _refused(
            "this asks for the stats and for something else; send each as a query of its own",
            best.operation,
        )
    if best.operation not in _WRITE_OPERATIONS and (writes := write_operations(_unquoted(query))):
        # Issue 25: "The utterance with seq 6 can be removed" was read as a
        # retrieve with one stray word, and answered OK. A write word anywhere
        # makes the query that write or a refusal, never a read that ignores it.
        meant = suggestions(readings, writes)
        raise NotUnderstood(
            _with_forms(
                f"{quote(query)} names a {' and a '.join(sorted(writes))} but could not be read as "
                f"one; nothing was changed",
                query,
                sorted(writes)[0],
                meant,
            ),
            0.0,
            None,
            meant,
        )
    needed = threshold_for(best)
    if _TEXT_CONDITION.search(query) and "topic" not in best.fields:
        # "WHERE speaker='user' AND text LIKE '%card%'", "text IN ('Hi')": a condition on
        # the text left unread would return other messages (second and fourth reviews).
        raise _refused(
            _TEXT_CONDITION_UNREAD,
            best.operation,
        )
    if best.confidence >= needed and (why := refusal_for(query, best.operation, best.fields)):
        raise _refused(why, best.operation)
    if best.confidence < needed:
        words = ", ".join(quote(w, 30) for w in best.unexplained[:5])
        reason = (
            f"could not fully understand {quote(query)} as a {best.operation} "
            f"(confidence {best.confidence:.2f}, a {best.operation} needs {needed:.2f}; "
            f"not understood: {words})"
        )
        meant = suggestions(readings, write_operations(_unquoted(query)))
        raise NotUnderstood(
            _with_forms(reason, query, best.operation, meant), best.confidence, best, meant
        )
    return best.operation, best.fields, best.confidence


# A stats question, then more after its clause ends or an "and" (review of issue 25).
_STATS_THEN_MORE = re.compile(
    r"\W*(?:how\s+(?:many|much|big|large|long|full)|(?:is|are)\s+(?:the\s+)?(?:buffer|memory|history"
    r"|conversation|summary)\s+(?:already\s+|almost\s+|nearly\s+)?(?:full|empty|big|large))\b"
    r"[^?;.!]*?(?:[?;.!]|\band\b|\bplus\b|\balso\b)[\s(\[\u2014\u2013-]*[^\W_]",
    re.IGNORECASE,
)


# JSON, key=value and call forms quote their values: those quotes are no texts.
_FIELDS_FORM = re.compile(r"[{}=\[\]]|[\"']\s*:")
_ARROW = re.compile(r"<-+|\u2190")
_TEXT_CONDITION_UNREAD = (
    "a condition on the text is not read here; search with 'Find utterances about ...'"
)
_TEXT_CONDITION = re.compile(
    r"\b(?:text|content|body|message|utterance)[`'\"\]]?\s*\)?\s*(?:==|=|!=|<>|~|\blike\b|\bilike\b"
    r"|\bin\s*\(|\bsimilar\s+to\b|\bregexp\b|\bmatch(?:es)?\b|\bglob\b)",
    re.IGNORECASE,
)


def _refused(why: str, operation: str) -> Ambiguous:
    """A refusal of a reading the rules made: traced and counted as its operation, not "unknown"."""
    refused = Ambiguous(f"{why}. Nothing was changed.")
    refused.operation = operation
    return refused


_OTHER_READING_LIMIT = 1_000
_WRITE_OPERATIONS = frozenset({"remove", "mark", "configure"})


def _unquoted(text: str) -> str:
    return QUOTED.sub(" ", text) if ANY_QUOTE.search(text) else text


_NORMALIZER: Normalizer | None = None


def _normalizer() -> Normalizer:
    global _NORMALIZER
    if _NORMALIZER is None:
        from chd.core.language import grammar
        from chd.core.language.grammar import (
            calls,
            configure,
            context,
            mark,
            remove,
            retrieve,
            slots,
            stats,
            store_header,
            summarize,
            vocab,
        )

        modules = (
            calls,
            configure,
            context,
            mark,
            remove,
            retrieve,
            slots,
            stats,
            store_header,
            summarize,
            vocab,
        )
        _NORMALIZER = Normalizer(vocabulary_of(modules) | vocabulary_of((grammar,)))
    return _NORMALIZER


# After these the words are the caller's topic, kept as written.
_TOPIC_MARKER = re.compile(
    r"\b(?:about|regarding|concerning|mentioning|containing|matching|re:|related\s+to|referring\s+to"
    r"|talking\s+about|discussing|whose\s+text)\b",
    re.IGNORECASE,
)


def normalized(query: str) -> str:
    """``query``'s instruction words in the grammar's words (grammar/normalize.py); quotes and topic kept."""
    text = developer_syntax(query)
    text = glossed(text, _normalizer().vocabulary)
    text = repaired(text) or text
    text = _without_lead_fillers(text)
    text = speech_question(text) or text
    text = _LIKE_BEFORE_NUMBER.sub("", text)
    text = removal_idiom(text) or text
    out: list[str] = []
    position = 0
    free = True
    spans = [(m.start(), m.end()) for m in QUOTED.finditer(text)] + [(len(text), len(text))]
    for start, end in spans:
        chunk = text[position:start]
        if free and chunk:
            marker = _TOPIC_MARKER.search(chunk)
            head, tail = (chunk[: marker.end()], chunk[marker.end() :]) if marker else (chunk, "")
            chunk = _normalizer().words(phrases(head)) + tail
            free = marker is None
        out.append(chunk)
        out.append(text[start:end])
        position = end
    text = " ".join("".join(out).split())
    # "messages of user": "of" and a bare speaker name the speaker (non-native, issue 25).
    text = _OF_SPEAKER.sub(lambda m: f"from the {m.group('s')}", text)
    # A typo'd passive ("can be delted") is fixed only now.
    text = removal_idiom(text) or text
    # "ugh, delete turn 2": the interjection is gone, its comma must go too.
    return text.lstrip(" ,;:.!\u2014\u2013-")


# Spoken fillers before the instruction ("um", "so yeah"): set aside before the
# verb-last reading, which would take them for the object ("so yeah remove turn 4").
_LEAD_FILLERS = re.compile(
    r"^(?:(?:um+|uh+|er+m?|uhm|hmm+|so|yeah|yep|yup|ok(?:ay)?|alright|right|well|oh|hey|hi|hello)\b[\s,.!]*)+",
    re.IGNORECASE,
)


# "set the buffer to like fifty messages": a spoken hedge before a number, not a comparison.
_LIKE_BEFORE_NUMBER = re.compile(rf"\blike\s+(?=(?:about\s+)?{NUM})", re.IGNORECASE)


def _without_lead_fillers(text: str) -> str:
    found = _LEAD_FILLERS.match(text)
    if found is None or found.end() == len(text):
        return text
    return text[found.end() :]


_CLAUSE_BREAK = re.compile(
    r"\s*(?:[,;!?()\[\]]|\.(?=\s|$)|\s[-\u2013\u2014]+(?=\s)|[\u2013\u2014])\s*"
    # A purpose after the request: "... from the buffer to free space for new context".
    r"|\s+(?=(?:so\s+that|in\s+order\s+to|to\s+(?:free|make\s+room|make\s+space|avoid|reduce|help|allow"
    r"|ensure|prevent|restore|reconstruct|rebuild|give|provide|catch\s+up))\b)"
)
_SPEAKER_WORDS = frozenset(
    "user assistant system bot human ai model agent claude customer me my i we our".split()
)
_MAX_DROPPED = 5


def _commentary_free(segment: str) -> bool:
    """Whether ``segment`` may be set aside as commentary: docs/query-language.md states the rule."""
    words = re.findall(r"[\w']+", segment.lower())
    if (
        not words
        or "\u27e6" in segment
        or '"' in segment
        or WRONG_TARGET.search(segment)
        or DESCRIBES_TARGET.search(segment)
        or read_stats(segment) is not None  # "How full is the buffer?" asks for something
    ):
        return False
    for word in words:
        bare = word.strip("'")
        bare = bare[:-2] if bare.endswith("'s") else bare  # "it was the user's"
        if bare in COUNTERMAND:
            return False  # "the reply can stay", "please disregard this", "wrong conversation"
        if (
            any(c.isdigit() for c in bare)
            or bare in SCOPE
            or bare in _SPEAKER_WORDS
            or bare in WRITE_FORMS
            or bare in _operation_verbs()
            or bare.endswith("n't")
            or (bare.isalpha() and lemma(bare) in SCOPE | _SPEAKER_WORDS)
        ):
            return False
    return True


@lru_cache(maxsize=1)
def _operation_verbs() -> frozenset[str]:
    """Words that ask for an operation: a clause holding one is never commentary."""
    from chd.core.language.grammar import configure, mark, remove, retrieve, store_header, summarize
    from chd.core.language.grammar.normalize import LEXICON

    questions = {
        "what",
        "which",
        "who",
        "when",
        "did",
        "does",
        "has",
        "have",
        "had",
        "is",
        "are",
        "was",
        "were",
        "any",
    }
    words = set(store_header.STORE_VERBS)
    for module, names in (
        (retrieve, ("_VERB",)),
        (remove, ("_VERB",)),
        (summarize, ("_VERB", "_NOUN", "_MAKE")),
        (mark, ("_VERB",)),
        (configure, ("_SET_VERB", "_READ_VERB")),
    ):
        for name in names:
            words.update(
                re.findall(
                    r"[a-z]{2,}", re.sub(r"\\[a-zA-Z]|\(\?P?<\w+>", " ", getattr(module, name))
                )
            )
    for section in ("remove", "retrieve", "summarize", "mark", "configure"):
        for key, value in LEXICON[section].items():
            words.update(key.split() + value.split())
    return frozenset(
        words
        - questions
        - {"me", "us", "up", "for", "of", "on", "in", "out", "away", "to", "the", "and"}
    )


def _clauses(text: str) -> list[str]:
    masked = QUOTED.sub(lambda m: "\u27e6" * len(m.group(0)), text)
    cuts = [0]
    for m in _CLAUSE_BREAK.finditer(masked):
        cuts += [m.start(), m.end()]
    cuts.append(len(text))
    return [text[cuts[i] : cuts[i + 1]] for i in range(0, len(cuts), 2)]


def _read_normalized(query: str) -> tuple[str, dict[str, Any], float] | None:
    """The reading of ``query`` normalized, maybe with commentary set aside; None if none is complete.

    Commentary is a clause at either end ("ugh", "it was a mistake") whose
    words carry no number, speaker, turn, seq, negation, scope or write word;
    the rest must then be read with every word understood.
    """
    text = normalized(query)
    if text != query:
        try:
            return _read_rules(text)
        except InvalidRequest:
            pass
    # As written first: the lexicon reads "recap" and "compressed" as verbs ("summarize").
    summary = _summary_reading(query) or _summary_reading(text)
    if summary is not None:
        return summary
    clauses = _clauses(text)
    if len(clauses) < 2:
        return None
    tried = 0
    for drop in range(1, min(_MAX_DROPPED, len(clauses) - 1) + 1):
        for lead in range(min(drop, 1) + 1):
            kept = clauses[lead : len(clauses) - (drop - lead)]
            dropped = clauses[:lead] + clauses[len(clauses) - (drop - lead) :]
            dropped = [c for c in dropped if c.strip()]
            remarks = [c for c in dropped if not _commentary_free(c)]
            if (
                not kept
                or not dropped
                or not all(is_remark(c, None) or _beside_stats(c) for c in remarks)
            ):
                # Nothing set aside is no reading: rejoined without their
                # punctuation the clauses read otherwise ("..., please set this
                # in the settings." became one topic).
                continue
            tried += 1
            try:
                operation, fields, confidence = _read_rules(" ".join(c for c in kept if c.strip()))
            except InvalidRequest:
                continue
            if (
                confidence >= 1.0
                and all(
                    is_remark(c, operation) or (operation == "stats" and _beside_stats(c))
                    for c in remarks
                )
                and not (operation == "remove" and _narrows(fields, dropped))
                and all(_may_set_aside(c, operation) for c in dropped)
            ):
                return operation, fields, confidence
    return None


_ASKS_FOR_MORE = re.compile(
    rf"\b(?:{NOUN}|summary|summaries|settings?|turns?|seqs?|show|get|give|list|send|include|also|too|and)\b",
    re.IGNORECASE,
)


def _beside_stats(clause: str) -> bool:
    """Whether a clause beside a stats question only says why it is asked.

    Stats take no filter, so nothing in such a clause can narrow them; it may
    not ask for anything more ("and the last 3 messages"), name a number or a write.
    """
    words = {w.lower() for w in re.findall(r"[\w']+", clause)}
    return (
        "\u27e6" not in clause
        and not any(c.isdigit() for c in clause)
        and _ASKS_FOR_MORE.search(clause) is None
        and _WHOSE.search(clause) is None  # "only counting the assistant": a filter stats lack
        and not words & (_NARROWING | _NEGATION)
        and not write_operations(clause)
    )


# Whose message, or which kind: beside a stats question, a filter stats do not take
# ("..., only counting the assistant's messages").
_WHOSE = re.compile(
    rf"\b(?:{SPEAKER}|{'|'.join(re.escape(w) for w in LEXICON['speakers'])}|answers?|questions?"
    r"|repl(?:y|ies)|responses?|messages?|utterances?|entries|entry|his|her|their|mine|my|ours)\b",
    re.IGNORECASE,
)


# Words that may pick out part of a turn, a range or a count: who, which one, which kind,
# or who wrote it ("the second one was wrong", "she typed it by mistake", "the agent's
# follow-up", "the user sent them by mistake": second and third reviews of issue 25).
_PART = re.compile(
    rf"\b(?:{SPEAKER}|{'|'.join(re.escape(w) for w in LEXICON['speakers'])}|answers?|questions?"
    r"|repl(?:y|ies)|responses?|messages?|utterances?|entries|entry|statements?|follow[\s-]*ups?|part"
    r"|bit|half|lines?|one|ones|latter|former|first|second|third|last|bottom|top|other|others"
    r"|he|she|him|her|his|hers|their|theirs|my|mine|ours)\b|'s\b",
    re.IGNORECASE,
)


# A remark about all of what a remove names opens with a pronoun or an idiom ("they concern the
# weather", "it was a mistake", "no longer relevant", "next customer", "to free space"); one
# that opens with a noun ("the apology was wrong", "wrong expiry claim", "GPT was wrong") may be
# about a part of it (fourth review of issue 25).
_ABOUT_ALL_OF_IT = re.compile(
    r"\W*(?:(?:and|but|so|oh|ugh|well|also|honestly|anyway|ok|okay|please|pls|plz|lol)\W+)*"
    r"(?:it|they|these|those|this|that|we|i|all|both|everything|it's|they're|we're|i'm|there"
    r"|no|not|none|nothing|never|next|new|start|starting|fresh|ancient|obsolete|outdated|irrelevant"
    r"|free|make|clean|save|room|space"
    r"|unneeded|duplicates?|tests?|testing|typos?|done|finished|over|to|in\s+order|as|since|because"
    r"|so\s+that|for|don't|dont|do|session|conversation|chat|ticket|call|reason|rationale|context)\b",
    re.IGNORECASE,
)


# A noun may open a remark that says a subject is over ("the earlier weather discussion is no
# longer relevant", "booking got cancelled", "old stuff"), never one that says a message was at
# fault ("the apology was wrong"): that is about one message of the turn.
_OBSOLETE = re.compile(
    r"\b(?:no\s+longer|not\s+(?:needed|relevant|necessary|useful)|irrelevant|unneeded|cancel+ed|old|over|done"
    r"|finished|obsolete|outdated|stale|moved\s+on|off[\s-](?:track|topic)|ancient|history|closed|resolved"
    r"|superseded|anymore|any\s+more)\b",
    re.IGNORECASE,
)
_FAULT = re.compile(
    r"\b(?:wrong|mistakes?|mistaken|errors?|erroneous|typos?|incorrect|inaccurate|false|misleading|bad"
    r"|broken|garbled|offensive|rude)\b",
    re.IGNORECASE,
)


def _narrows(fields: dict[str, Any], dropped: list[str]) -> bool:
    """Whether a clause set aside beside a remove may have narrowed what it deletes.

    Beside a turn, a range or a count, any speaker, owner or kind of message may say
    that only part was meant ("the assistant answered wrong", "the bit the customer
    typed", "user sent them by mistake": second review of issue 25).
    """
    # One seq or everything: nothing smaller a remark could mean. One newest or oldest is one
    # message too, but a remark naming whose it was may say the count picked the wrong one
    # ("Delete the last message — the customer typed it": sixth review).
    exact = "all" in fields or "seq" in fields
    single = 1 in (fields.get("newest"), fields.get("oldest"))
    return not exact and any(
        _PART.search(_NEW_PERSON.sub(" ", c.replace("\u2019", "'")))
        or (not single and not _about_all_of_it(c))
        for c in dropped
    )


# "new patient at the desk", "next customer": the session is over; no one's messages are meant.
_NEW_PERSON = re.compile(
    r"\b(?:next|new)\s+(?:customer|patient|caller|client|guest|visitor|passenger|user)\b",
    re.IGNORECASE,
)


def _about_all_of_it(clause: str) -> bool:
    """Whether a remark beside a remove of a turn, range or count is about all it names."""
    rest = _REMARK_OPENER.sub("", clause)
    if _PRONOUN_SUBJECT.match(rest):
        return True  # "it was a mistake", "they concern the weather"
    if _FAULT.search(rest):
        return False  # "the apology was wrong", "typo in the card number": one message
    return bool(_ABOUT_ALL_OF_IT.match(rest) or _OBSOLETE.search(rest))


# What opens a remark before its subject: conjunctions, reason words, labels, interjections.
_REMARK_OPENER = re.compile(
    r"^\W*(?:(?:and|but|so|oh|ugh|well|also|honestly|anyway|ok|okay|please|pls|plz|lol|as|since"
    r"|because|cause|cuz|given\s+that|now\s+that|reason|rationale|context|note|why"
    r"|(?:i|we)\s+(?:think|believe|guess|suppose|feel)|apparently|probably|maybe)\W+)*",
    re.IGNORECASE,
)
# A demonstrative is a pronoun only before its verb ("that was a mistake"); before a noun
# ("this expiry claim was wrong") it picks one thing out (sixth review).
_PRONOUN_SUBJECT = re.compile(
    r"(?:it|they|we|i|all\s+of\s+(?:it|them)|both|everything|it's|they're|we're|i'm|that's"
    r"|(?:these|those|this|that)\s+(?:is|was|were|are|has|have|had|can|should|must|will|got)"
    r"|(?:these|those|this|that)\W*$)\b",
    re.IGNORECASE,
)


def _summary_reading(text: str) -> tuple[str, dict[str, Any], float] | None:
    """A summary asked for in the caller's words (grammar/summary_forms.py), read as one or not at all."""
    plain = summary_forms.rewritten(text)
    if plain is None:
        return None
    try:
        operation, fields, confidence = _read_rules(plain)
    except InvalidRequest:
        return None
    return (operation, fields, confidence) if operation == "summarize" else None


def _may_set_aside(clause: str, operation: str) -> bool:
    """A write sets aside only interjections and remarks that agree with it (issue 25 review)."""
    if operation not in _WRITE_OPERATIONS or operation == "mark":
        return True  # a read changes nothing; a mark is undone by unmarking
    words = [w.lower() for w in re.findall(r"[\w']+", clause)]
    return all(w in SAFE_INTERJECTIONS for w in words) or agrees(clause, operation)


def _fully_read(query: str) -> tuple[str, dict[str, Any], float] | None:
    # Not through the cache: a cached reading means "not a store", and this
    # query is one the store rules could not place. Through the reader, though:
    # a long one is read in the child process like any other (review of issue 28).
    reading = _READINGS.reader(query, False)
    if isinstance(reading, InvalidRequest):
        return None
    return reading if reading[2] >= 1.0 else None


_Outcome = tuple[str, dict[str, Any], float]


class _ReadingCache:
    """Readings and refusals of recent queries, least recently used first out, bounded in bytes.

    Reading a non-store query runs every operation's rules: ~220 us for "Get
    the last 5 utterances", about half of a retrieve's time in the daemon
    (py-spy of bench/bench_backends.py), and clients repeat the same few
    queries. Refusals are kept too, so a refused query that is sent again
    (or looked at again for the metrics) costs nothing. Stores never get
    here: every utterance is new, and no cache may keep an utterance's text
    after it is removed. Counting entries was not enough: 1,024 queries of
    100 kB held 193 MiB (issue 14); the budget is in bytes of query text
    and readings, and no query over MAX_INSTRUCTION_CHARS gets here.
    """

    _ENTRY_OVERHEAD = 600  # the key's slot, the tuple, a small fields dict

    def __init__(self, budget: int) -> None:
        # What reads a query the cache does not know: reading_of here, or a
        # chd.core.language.reading_process.ReadingProcess in a daemon.
        self.reader: Callable[[str, bool], _Outcome | InvalidRequest] = reading_of
        self.budget = budget
        self.used = 0
        self._entries: OrderedDict[str, tuple[_Outcome | InvalidRequest, int]] = OrderedDict()
        self._lock = threading.Lock()

    def known(self, query: str) -> _Outcome | None:
        """The cached reading of ``query`` (its refusal raised again), or None if it is not cached."""
        with self._lock:
            entry = self._entries.get(query)
            if entry is None:
                return None
            self._entries.move_to_end(query)
        if isinstance(entry[0], InvalidRequest):
            raise _fresh(entry[0])
        return entry[0]

    def read(self, query: str) -> _Outcome:
        """Read ``query`` (not cached: ``known`` said so) and keep the reading or the refusal."""
        outcome = self.reader(query, True)
        self._keep(query, outcome)
        if isinstance(outcome, InvalidRequest):
            raise _fresh(outcome)
        return outcome

    def kept(self, query: str, outcome: _Outcome) -> _Outcome:
        """``outcome``, kept as the reading of ``query``."""
        self._keep(query, outcome)
        return outcome

    def _keep(self, query: str, outcome: _Outcome | InvalidRequest) -> None:
        size = self._size(query, outcome)
        with self._lock:
            if query in self._entries:
                return
            self._entries[query] = (outcome, size)
            self.used += size
            while self.used > self.budget and self._entries:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.used -= dropped

    def _size(self, query: str, outcome: _Outcome | InvalidRequest) -> int:
        if isinstance(outcome, InvalidRequest):
            extra = sum(len(str(arg)) for arg in outcome.args)
        else:
            extra = sum(sys.getsizeof(v) for v in outcome[1].values())
        return sys.getsizeof(query) + extra + self._ENTRY_OVERHEAD

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.used = 0


def reading_of(query: str, rewrites: bool = True) -> _Outcome | InvalidRequest:
    """The rules' reading of ``query``, or their refusal (with did_you_mean from ``rewrites``), returned."""
    try:
        return _read(query)
    except NotUnderstood as refusal:
        return _with_rewrites(query, refusal) if rewrites else refusal
    except InvalidRequest as refusal:
        return refusal


def read_queries_with(reader: Callable[[str, bool], _Outcome | InvalidRequest]) -> None:
    """Have ``reader`` read the queries no cached reading answers (``reading_of`` by default)."""
    _READINGS.reader = reader


def _fresh(refusal: InvalidRequest) -> InvalidRequest:
    """A new exception like the cached one (re-raising one object would chain tracebacks)."""
    if isinstance(refusal, NotUnderstood):
        fresh: InvalidRequest = NotUnderstood(
            str(refusal), refusal.confidence, refusal.best, refusal.did_you_mean
        )
    else:
        fresh = type(refusal)(*refusal.args)
    fresh.operation = refusal.operation
    return fresh


# 2 MiB: a few thousand typical queries, or a thousand of the longest.
_READINGS = _ReadingCache(budget=2 * 1024 * 1024)


# Suggestions compare this much of the refused query with each example:
# difflib is quadratic, and comparing whole queries took 100+ s at 1 MB
# (issue 14). The first words tell the operation a caller was after.
_LIKENESS_PREFIX = 120


def closest_forms(query: str, operation: str | None = None, count: int = 3) -> list[str]:
    """The supported example phrasings most like ``query`` (its operation's first)."""
    prefix = " ".join(query[: _LIKENESS_PREFIX * 2].split())[:_LIKENESS_PREFIX].lower()
    return list(_closest(prefix, operation, count))


@lru_cache(maxsize=256)  # keys are at most _LIKENESS_PREFIX characters
def _closest(prefix: str, operation: str | None, count: int) -> tuple[str, ...]:
    matcher = difflib.SequenceMatcher(None, b=prefix)

    def likeness(form: str) -> float:
        matcher.set_seq1(form.lower())
        return matcher.ratio()

    ranked = sorted(_POOL, key=lambda item: (item[0] != operation, -likeness(item[1])))
    return tuple(form for _, form in ranked[:count])


_POOL = tuple((g.operation, form) for g in GUIDE for form in g.forms)


def _with_forms(
    reason: str, query: str, operation: str | None = None, meant: tuple[str, ...] = ()
) -> str:
    forms = "\n  ".join(closest_forms(query, operation))
    # One JSON line a client can read and send back as the query (docs/query-language.md).
    did_you_mean = f"\ndid_you_mean: {json.dumps(list(meant), ensure_ascii=False)}" if meant else ""
    return f"{reason}. Closest supported forms:\n  {forms}\n(GetInstructions lists them all){did_you_mean}"


# --- did_you_mean ------------------------------------------------------------------
#
# Issue 25: a refusal offers one or two rewrites that, sent back as the
# query, do what was meant. A rewrite is the reading the rules had, as a
# function call (grammar/calls.py), offered only when the words it leaves
# out could be set aside by the commentary rule: no number, speaker,
# negation, scope, order, time or write word, and no unknown first word
# (which may be a verb the grammar does not know); a write's reading must
# leave no word out at all (a rewrite such as "of user" -> "from the user"
# may make it so). It is checked by reading it back: the call must give the
# same operation and fields.

_MOST_SUGGESTIONS = 2
_CALL_NAME = {"retrieve": "retrieve", "remove": "remove", "summarize": "summarize", "mark": "mark",
              "configure": "configure", "stats": "stats"}  # fmt: skip


def suggestions(readings: list[Reading], writes: set[str]) -> tuple[str, ...]:
    """Executable rewrites of what ``readings`` understood, best first; () when none is safe."""
    ranked = sorted(readings, key=lambda r: -r.confidence)
    found: list[str] = []
    for reading in ranked:
        if len(found) >= _MOST_SUGGESTIONS:
            break
        if reading.refusal is not None or reading.strict or reading.confidence < _LEAST_CONFIDENCE:
            continue
        if writes and reading.operation not in writes:
            continue  # a write was named: a read is never what was meant
        if reading.operation in _WRITE_OPERATIONS and reading.unexplained:
            # "Remove the last part of the conversation" is no "remove the newest
            # utterance": a write is offered only from a reading of every word.
            continue
        if (
            reading.operation in _WRITE_OPERATIONS | {"retrieve", "summarize"}
            and not reading.fields
            and reading.operation != "summarize"
        ):
            continue
        if not all(
            _commentary_free(word) and word.lower() not in _NARROWING | _NEGATION
            for word in reading.unexplained
        ):
            continue
        call = _as_call(reading)
        if call is not None and call not in found:
            found.append(call)
    return tuple(found)


# "of user" said as "from the user" (normalized() reads it so too).
_OF_SPEAKER = re.compile(r"\bof\s+(?P<s>user|assistant|system|bot|customer|human)\b", re.IGNORECASE)


def _rewrites(query: str) -> list[str]:
    """Rewrites of a refused query tried for did_you_mean; each must then read in full."""
    found = []
    if (idiom := removal_idiom(query)) is not None:
        found.append(idiom)
    if _OF_SPEAKER.search(query):
        found.append(_OF_SPEAKER.sub(lambda m: f"from the {m.group('s')}", query))
    return found


def _with_rewrites(query: str, refusal: NotUnderstood) -> NotUnderstood:
    """``refusal`` with did_you_mean from rewrites of ``query`` that read in full."""
    meant = list(refusal.did_you_mean)
    for candidate in _rewrites(query)[:_MOST_SUGGESTIONS]:
        try:
            operation, fields, confidence = _read(candidate)
        except InvalidRequest:
            continue
        call = _as_call(Reading(operation, fields)) if confidence >= 1.0 else None
        if call is not None and call not in meant:
            meant.insert(0, call)
    if meant == list(refusal.did_you_mean):
        return refusal
    meant = meant[:_MOST_SUGGESTIONS]
    message = str(refusal).split("\ndid_you_mean: ")[0]
    message += f"\ndid_you_mean: {json.dumps(meant, ensure_ascii=False)}"
    return NotUnderstood(message, refusal.confidence, refusal.best, tuple(meant))


# Below this share of its words understood, a reading is too thin to be what was meant.
_LEAST_CONFIDENCE = 0.5


def _as_call(reading: Reading) -> str | None:
    """``reading`` as a function call that reads back to the same operation and fields, or None."""
    arguments = ", ".join(
        f"{key}={_literal(value)}" for key, value in sorted(reading.fields.items())
    )
    call = f"{_CALL_NAME[reading.operation]}({arguments})"
    try:
        back = read_call(call)
    except InvalidRequest:
        return None
    if (
        back is None
        or back[0] != reading.operation
        or {k: _plain(v) for k, v in back[1].items()}
        != {k: _plain(v) for k, v in reading.fields.items()}
    ):
        return None
    return call


def _plain(value: Any) -> Any:
    return (
        value.isoformat()
        if hasattr(value, "isoformat")
        else list(value)
        if isinstance(value, tuple)
        else value
    )


def _literal(value: Any) -> str:
    value = _plain(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)
