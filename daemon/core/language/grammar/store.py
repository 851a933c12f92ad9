"""Store phrasings: where the utterance starts and ends, and what the words around it say.

A store's text is payload, kept exactly as given. Only a quoted span or a
separator (``:``, ``-``, ``—``, ``–``, ``->``, ``=>``, a line break) decides
where it starts, and only the words outside it are read as the instruction
(grammar/store_header.py). Four shapes:

- instruction, separator, utterance: "Save this for later: the gate code is 4411";
- instruction, quoted utterance, maybe more instruction: "Here is the
  assistant's answer, 'Yes, pets are allowed.', add it";
- utterance, separator, instruction: "We fly out Monday — that's from the user, keep it";
- "Remember that <utterance>" with no separator at all.

The utterance is never scanned by a grammar pattern: patterns run on at
most ``HEAD_LIMIT`` characters at either end of the query, and finding a
closing quote is one pass of ``str.find``, so a store costs time linear in
the utterance's size. An instruction that is not fully understood is
refused (``UnclearStore``), never guessed: storing words of the
instruction as if someone had said them is the failure this module exists
to prevent. A query that has a separator after words that are clearly no
store instruction is not a store at all (None), and the other operations read it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from chd.core.errors import InvalidRequest, quote
from chd.core.language.grammar.normalize import WRITE_FORMS
from chd.core.language.grammar.store_header import (
    Header,
    commentary,
    is_note,
    read_header,
    reads_whole,
    trailing_note,
)

__all__ = ["read_store", "UnclearStore", "HEAD_LIMIT", "QUOTE_MARKS"]

# How much of the query an instruction may take; beyond it everything is utterance.
HEAD_LIMIT = 400

# Separators people type between an instruction and what it stores. A
# hyphen counts only next to a space, so "user-side" or "e-mail" stay words.
# A colon before "//" is a URL's ("http://..."), never the end of an instruction
# (review of issue 31: "Add utterance, speaker user, http://x" stored "//x").
_SEPARATOR = re.compile(r"\r?\n|:(?!//)|->|=>|\u2192|[\u2014\u2013]|-{1,2}(?=\s)|(?<=\s)-{1,2}")
# The characters a separator can start with. sre tries every branch of
# _SEPARATOR at every position (its lookbehind and optional parts leave it no
# first character to skip to), but scans fast for a character class: finding
# these first and matching _SEPARATOR only there (``_scan``) finds the same
# separators in a fraction of the time, which every store pays several times.
_SEPARATOR_START = re.compile(r"[\r\n:=\u2192\u2014\u2013-]")
# Each opening quote and the quotes that may close it: English, German
# („…“, »…«), French and Russian («…», ‹…›), Polish („…”), CJK corner
# brackets (「…」, 『…』). Issue 25: a store whose quotes were not known kept
# them as part of the utterance ("‹Can we prepone the dinner?›").
_OPENERS = {
    '"': '"',
    "'": "'",
    "`": "`",
    "\u201c": "\u201d",
    "\u2018": "\u2019",
    "\u201e": "\u201c\u201d",
    "\u201a": "\u2018\u2019",
    "\u00ab": "\u00bb",
    "\u00bb": "\u00ab",
    "\u2039": "\u203a",
    "\u203a": "\u2039",
    "\u300c": "\u300d",
    "\u300e": "\u300f",
}
# An apostrophe-like quote opens only at a word start ("the user's" has no quote).
_OPEN = re.compile(
    r"[\"\u201c\u201e\u00ab\u00bb\u2039\u203a\u300c\u300e`]|(?<![\w'\u2019])['\u2018\u201a]"
)
# The characters _OPEN can match, for ``_scan``.
_OPEN_START = re.compile("[\"'`\u201c\u2018\u201e\u201a\u00ab\u00bb\u2039\u203a\u300c\u300e]")
# Quote marks of any kind: an utterance that starts with one the rules do not
# pair is refused, not stored with its quotes (the boundary is not certain).
QUOTE_MARKS = frozenset(
    "\"'`\u201c\u201d\u2018\u2019\u201e\u201a\u201b\u201f\u00ab\u00bb\u2039\u203a\u300c\u300d\u300e\u300f\u301d\u301e\uff02"
)
# "Remember that <utterance>": a verb and courtesy before "that", nothing else.
_THAT = re.compile(r"\bthat\s+(?=\S)", re.IGNORECASE)
# What may sit between a quoted utterance and the instruction after it.
_GLUE = " \t\r\n,.;!:-\u2014\u2013>=\u2192"


class UnclearStore(InvalidRequest):
    """The query asks for a store but its instruction has words the rules do not understand.

    Not a ``NotUnderstood``: no classifier may guess which words are the utterance.
    """


@dataclass(frozen=True, slots=True)
class _Split:
    """An utterance and the instruction words around it."""

    text: str | None  # None: the query is a bare header ("Add utterance"); data.text may give it
    header: Header
    instruction: str  # the instruction as written, for error messages
    label: bool = False  # the instruction is a label before a separator ("User: ...")
    # Refused for where the text ends: no other reading may store part of the query instead
    # ("Add assistant utterance: Noted. I will record it." stored "Add assistant": third review).
    settled: bool = False


def _scan(
    pattern: re.Pattern[str],
    starts: re.Pattern[str],
    text: str,
    pos: int = 0,
    end: int | None = None,
) -> Iterator[re.Match[str]]:
    """``pattern.finditer(text, pos, end)``, for a pattern whose every match starts with a character
    ``starts`` matches and is never empty: ``pattern`` is tried only where such a character is
    (it still sees the text before ``pos``, as finditer's lookbehinds do)."""
    end = len(text) if end is None else end
    while (candidate := starts.search(text, pos, end)) is not None:
        match = pattern.match(text, candidate.start(), end)
        if match is None:
            pos = candidate.start() + 1
        else:
            yield match
            pos = match.end()


def _opening(text: str) -> re.Match[str] | None:
    """``_OPEN.search(text)``: the first quote that opens an utterance."""
    return next(_scan(_OPEN, _OPEN_START, text), None)


def read_store(query: str) -> dict[str, Any] | None:
    """The store fields of ``query`` (text exactly as given, speaker if named), or None.

    'Add utterance' with no text gives no ``text`` field: data.text may carry it.
    Raises UnclearStore when the query asks for a store it does not fully explain.
    """
    head2 = query[: HEAD_LIMIT * 2]
    if head2.count(":") > 1 and _TWO_TEXTS.search(head2):
        # "Message: Hello. Text: Bye.", "User: hi / Assistant: hello", "The user was saying: hi;
        # the agent was saying: hello": two labelled texts in one store (fifth review).
        raise UnclearStore(
            "the query holds two labelled texts (or two speakers' labels); store each with a "
            "query of its own, or quote the one text. Nothing was stored"
        )
    q = _unlabelled(query.strip())
    head = q[:HEAD_LIMIT]
    sep = _first_separator(head)
    opening = _opening(head)
    bracket = _NAMED_BRACKET.search(head) if "[" in head else None
    if (
        bracket is not None
        and all(m is None or bracket.start("open") < m.start() for m in (sep, opening))
        and _bracket_quotes(q, bracket.start("open"))
    ):
        # "Add a user utterance [Could you move it to 9pm?] to the buffer": square brackets
        # right after the name of a message quote it (issue 25, corpora e and g).
        split: _Split | None = _quoted(
            q, bracket.start("open"), Header(), q[: bracket.start("open")]
        )
    elif opening is not None and (sep is None or opening.start() < sep.start()):
        split = _quoted(q, opening.start(), Header(), q[: opening.start()])
    elif sep is not None:
        split = _after_separator(q, sep)
    else:
        split = _no_boundary(q)
    if split is None or not _is_store(split):
        # Maybe the utterance came first ("We fly out Monday - keep it, from the user"),
        # or all of it follows "remember that" (quotes and all).
        if split is None or not split.settled:
            split = _instruction_last(q) or _that_clause(q) or split
    if (
        split is not None
        and split.text
        and not (split.header.verb or split.header.destination or split.header.speech)
        and _REQUEST_LABEL.search(split.instruction)
        and _is_request(split.text)
        and not any(f"{mark}{split.text}" in query for mark in QUOTE_MARKS)
    ):
        # "User request — delete all", "Customer request: delete turn 2": a ticket's label
        # for a request, with no store verb said: the caller's own request to this memory, or
        # the customer's words? Refused outright, never run as either (sixth review).
        raise InvalidRequest(
            f"{quote(split.text, 40)} is labelled as a request; to store it as said, say 'Add "
            "user utterance: ...' or quote it; to run it, send it alone. Nothing was changed"
        )
    return None if split is None else _fields(split)


# Labelled parts of an instruction (issue 25: "Speaker: assistant. Turn: 5.
# Content: ...", "speaker=user turn=4 text=..."). A label's value is a speaker
# or a number; the content label is where the utterance starts.
_LABEL = re.compile(
    r"(?:--|\b)(?P<key>speaker|role|author|sender|turn(?:[ _]number)?)(?:\s*(?P<sep>[:=])\s*|\s+(?=\w))"
    r"[\"']?(?P<value>user|assistant|system|bot|human|ai|model|\d{1,6})[\"']?(?P<end>[.,;]|$|(?=\s))",
    re.IGNORECASE,
)
# "Content (between the quotes): ..." (issue 25): a short note in brackets may follow the label.
_CONTENT_LABEL = re.compile(
    # The note says how the content is given, never who said it or which turn
    # ("Add utterance (from the assistant): ..." is a speaker, not a note).
    r"(?:^|(?<=[\s.;,(]))(?:content|text|utterance|body)"
    r"(?:\s*\((?![^()]*\b(?:user|assistant|system|bot|ai|customer|client|from|by|turn|speaker|role|no|not|wait"
    r"|sorry|actually)\b)[^()\d]{1,40}\))?\s*(?::|=(?=\s*[\"'\u201c]))\s*",
    re.IGNORECASE,
)


def _unlabelled(q: str) -> str:
    """Labels before the utterance as plain instruction words ("Speaker: user." -> "speaker user")."""
    head = q[:HEAD_LIMIT]
    if ":" not in head and "=" not in head and "--" not in head:
        return q
    end = len(head)
    opening = _opening(head)
    if opening is not None:
        end = opening.start()
    content = _CONTENT_LABEL.search(head, 0, min(len(head), end + 1))
    if content is not None:
        end = content.start()
    labels = [
        m
        for m in (_LABEL.finditer(head, 0, end) if _may_label(head, end) else ())
        if m.group("sep") or m.group(0).startswith("--") or content
    ]
    if content is None and not labels:
        return q
    prefix, position = [], 0
    for m in labels:
        if (
            m.group("end") == ""
            and not (m.group("sep") == "=" or m.group(0).startswith("--"))
            and content is None
        ):
            continue  # "Speaker: user is on mobile" may be the utterance itself
        key = "turn" if m.group("key").lower().startswith("turn") else "speaker"
        prefix += [head[position : m.start()], f" {key} {m.group('value')} "]
        position = m.end()
    prefix.append(head[position:end])
    if content is None:
        return "".join(prefix) + q[end:]
    # With a content label, the utterance starts there and nowhere before.
    before = _SEPARATOR.sub(" ", "".join(prefix)).rstrip()
    return before + ": " + q[content.end() :]


_LABEL_KEYS = ("speaker", "role", "author", "sender", "turn")


def _may_label(head: str, end: int) -> bool:
    """Whether ``head[:end]`` may hold a _LABEL: each names one of its keys. The label pattern
    starts with a word boundary, which sre tries at every position; a substring test is cheaper.
    Only for ASCII: a case-insensitive pattern also matches some other letters (the Kelvin sign)."""
    part = head[:end]
    if not part.isascii():
        return True
    lowered = part.lower()
    return any(key in lowered for key in _LABEL_KEYS)


def _first_separator(head: str) -> re.Match[str] | None:
    """The first separator outside brackets: in "Add this (speaker: bot) - hi" the text starts after "-"."""
    for sep in _scan(_SEPARATOR, _SEPARATOR_START, head):
        before = head[: sep.start()]
        if before.count("(") <= before.count(")") and before.count("[") <= before.count("]"):
            return sep
    return None


def _is_store(split: _Split) -> bool:
    header = split.header
    return header.understood and (header.asks_store or (split.label and bool(header.speakers)))


def _fields(split: _Split) -> dict[str, Any] | None:
    header = split.header
    if not header.understood:
        if not header.attempts_store:
            return None
        raise UnclearStore(_unclear_message(split))
    if not _is_store(split):
        return None
    if len(set(header.speakers)) > 1:
        raise InvalidRequest(
            f"the query names two speakers: {', '.join(sorted(set(header.speakers)))}"
        )
    fields: dict[str, Any] = {} if split.text is None else {"text": split.text}
    if len(set(header.turns)) > 1:
        raise InvalidRequest(
            f"the query names two turns: {', '.join(map(str, sorted(set(header.turns))))}"
        )
    if header.turns:
        fields["turn_number"] = header.turns[0]
    speaker = header.speaker()
    if speaker is not None:
        fields["speaker"] = speaker
    return fields


_COLON_AT = re.compile(r"\s*:\s*")
# "Purpose: ...", "Reason: ...": what follows such a label is the caller's note, not the text.
_NOTE_LABEL_END = re.compile(
    r"\b(?:purpose|reason|rationale|context|background|why|justification|explanation)\s*$",
    re.IGNORECASE,
)
# "... Entry: <text>": the label of the text itself, at a sentence's start.
_LATER_CONTENT_LABEL = re.compile(
    r"(?:(?<=[.!?;])\s+|\n\s*)(?:entry|utterance|content|text|message)(?P<sep>\s*:\s*)",
    re.IGNORECASE,
)


_LABEL_WORD = (
    r"(?:(?:the\s+)?(?:user|assistant|system|agent|bot|customer|client|caller|patient|ai|human|model)"
    r"(?:\s+(?:was\s+saying|said|says|wrote))?|message|text|content|utterance|entry)"
)
_TWO_TEXTS = re.compile(
    rf"(?:^|[.,;/\n|]\s*){_LABEL_WORD}\s*:(?=[^\"\u201c\u201e\u00ab]*?(?:[.,;/\n|]\s*){_LABEL_WORD}\s*:)",
    re.IGNORECASE,
)
_NAMED_BRACKET = re.compile(
    r"\b(?:utterance|message|reply|response|answer|question|entry|note|text|words|statement|msg)"
    r"\s*(?P<open>\[)(?=[^\[\]]{1,2000}\])",
    re.IGNORECASE,
)


def _bracket_quotes(q: str, start: int) -> bool:
    """Whether the square bracket at ``start`` quotes the text: the words after it are instruction.

    "Add user message [urgent]: the server is down" is a tag before a separator, and
    words after the bracket that are not all instruction may be the text's own.
    """
    close = q.find("]", start + 1)
    after = q[close + 1 :].strip()
    if not after:
        return True
    if after[0] in ":=-\u2014\u2013>":
        return False
    return read_header(after.strip(" .!?")).understood


def _after_separator(q: str, sep: re.Match[str]) -> _Split | None:
    """Instruction, separator, utterance (possibly quoted, possibly with more instruction after)."""
    instruction = q[: sep.start()]
    if _NOTE_LABEL_END.search(instruction[-40:]):
        # Issue 25 (corpus g): "Persist this entry. Purpose: <why>. Entry: <text>" stored the
        # purpose. The text is after a content label further on, or nowhere certain.
        label = _LATER_CONTENT_LABEL.search(q, sep.end(), sep.end() + HEAD_LIMIT)
        if label is not None and _LATER_CONTENT_LABEL.search(
            q, label.end(), label.end() + HEAD_LIMIT
        ):
            label = None  # two labelled texts ("Message: Hello. Entry: Bye."): which one is meant?
        if label is None:
            unclear = Header(
                unclear=(f"{quote(instruction[-40:].strip())} (a note, not the text)",)
            )
            return _Split("", unclear, instruction)
        return _after_separator(q, _COLON_AT.match(q, label.start("sep")) or label)
    header = read_header(instruction)
    if not header.understood:
        return _Split("", header, instruction)
    rest = q[sep.end() :].strip()
    if rest and rest[0] in _OPENERS:
        quoted = _quoted(rest, 0, header, instruction)
        if quoted.header.understood:
            return replace(quoted, label=True)
        closing = _closing(rest, 0)
        after = rest[closing + 1 :] if closing is not None else ""
        if _holds_quote(after):
            # "Add: 'hi' and 'bye'": quotes inside the utterance, not around
            # it; after the colon all of it is what was said, unless its end reads as instruction.
            return _tail_split(rest, header, instruction)
        if after[:1] in (" ", "\u2014", "\u2013", "-", "(", "[") and not _STRAY.search(after):
            # '"Lost my umbrella" (yes again, don't ask)': the quotes mark the
            # utterance and the words after it are not understood. Storing the
            # whole rest would keep them as said (issue 25); refuse instead.
            return replace(quoted, label=True)
    elif (inner := _second_label(rest, header, instruction)) is not None:
        return inner
    if rest[:1] in QUOTE_MARKS:
        # A closing quote or one the rules do not pair: where the utterance
        # starts and ends is not certain, so nothing is stored.
        return _Split(
            "",
            header.joined(Header(unclear=(f"{rest[:1]} (a quote mark the rules do not pair)",))),
            instruction,
        )
    if (bare := _bare_label(rest, header, instruction)) is not None:
        return bare
    return _tail_split(rest, header, instruction)


# At most this many words make a bare speaker label ("Store: user: hello").
_LABEL_WORDS = 4


def _bare_label(rest: str, header: Header, instruction: str) -> _Split | None:
    """ "Store: user: hello there": a speaker label after the first separator, without quotes (issue 25)."""
    sep = _first_separator(rest[:HEAD_LIMIT])
    if sep is None or sep.group(0) == "\n":
        return None
    part = rest[: sep.start()]
    more = read_header(part)
    if len(part.split()) > _LABEL_WORDS:
        if (
            more.speakers
            and more.speech
            and len(part) <= _REPORT_LIMIT + 20
            and not header.speakers
        ):
            # "Store this - the assistant said it, not the user: hello there" (issue 25
            # review): who said it is told before a second separator; storing
            # from the first one would keep that report as said.
            unclear = Header(unclear=(f"{part.strip()} (who said it, or part of the utterance?)",))
            return _Split("", header.joined(unclear), f"{instruction} {part}")
        return None
    if not (more.understood and more.speakers) or more.verb or header.speakers:
        # After "what the user told me was:", "user: ..." is what was said.
        return None
    # A transcript line ("user: hello") may be the utterance itself: a guess either way.
    unclear = Header(unclear=(f"{part.strip()} (a speaker label or part of the utterance?)",))
    return _Split("", header.joined(unclear), f"{instruction} {part}")


# The end of an unquoted utterance that may be instruction: a bracket group,
# a part after a dash, or a last sentence ("I need a taxi. Turn 4.").
_TAIL = re.compile(
    r"\s*(?:\((?P<bracket>[^()]{1,300})\)|(?:\s[-\u2014\u2013]+|[\u2014\u2013])\s*(?P<dash>[^-\u2014\u2013]{1,80})"
    r"|(?<=[.!?])\s+(?P<sentence>[^.!?]{1,300}))[\s.!]*$"
)
# Past these lengths a tail is read as instruction only when it asks for the store or is
# labelled as the caller's note: a long last sentence naming a speaker is likely said.
_SHORT_SENTENCE = 40
_SHORT_BRACKET = 80


_TAIL_MARK = re.compile(r"[(\-\u2014\u2013.!?]")


_REMARK_LABEL = re.compile(
    r"\s*(?:rationale|reason|why|context(?:\s+for\s+you)?|purpose|background|justification|explanation"
    r"|comments?|remarks?|annotation|note|nb|n\.b\.|tags?|memo|source|priority|category|label|metadata)\s*:",
    re.IGNORECASE,
)
# Words about storing or acting on the text, in a tail too long to read whole.
_STORE_REQUEST = re.compile(
    r"\b(?:stor(?:e|ing)|record(?:ing)?|sav(?:e|ing)|log(?:ging)?|add(?:ing)?|keep(?:ing)?|persist(?:ing)?)\s+"
    r"(?:it|this|that|them|these)\b|\b(?:do\s+not|don't|never)\s+(?:carry\s+out|execute|act\s+on|perform|run"
    r"|follow|obey)\b|\bno\s+action\b|\bbeyond\s+storing\b",
    re.IGNORECASE,
)


def _tail_split(rest: str, header: Header, instruction: str) -> _Split:
    """An unquoted utterance, its last bracket, dash part or short sentence read as instruction when it is one.

    Issue 25: "Add: I need a taxi (user, turn 4)" stored the bracket. A tail
    that reads as instruction (a speaker, a turn, a store verb) is instruction;
    one that holds such words among others, or is only courtesy after a dash
    ("- thank you"), leaves the end uncertain and refuses the store.
    """
    if not (header.asks_store or header.speakers):
        # Not yet a store ("line one\nline two — commit it"): the utterance may
        # start earlier; the instruction-last reading decides (_instruction_last).
        return _Split(rest, header, instruction, label=True)
    start = max(0, len(rest) - 320)
    # Each of _TAIL's parts needs one of these (a sentence's end may sit just
    # before ``start``): without one there is no tail, and the search, which
    # sre tries at every position, is skipped.
    marked = _TAIL_MARK.search(rest, max(0, start - 1)) is not None
    tail = _TAIL.search(rest, start) if marked else None
    if tail is None:
        return _Split(rest, header, instruction, label=True)
    segment = tail.group("bracket") or tail.group("dash") or tail.group("sentence") or ""
    more = read_header(segment)
    words = [w.lower() for w in re.findall(r"[\w']+", segment)]
    meta = more.speakers or more.turns or more.asks_store or more.imperative
    long = (tail.group("bracket") is not None and len(segment) > _SHORT_BRACKET) or (
        tail.group("sentence") is not None and len(segment) > _SHORT_SENTENCE
    )
    doubt = False
    if long:
        # Issue 25 (corpus g): "X. Please record it as a user utterance" stored the request
        # with the text. A long tail is cut only when it reads whole as a store's instruction;
        # a report ("The user said it would be fixed") is likely part of what was said, and
        # words about storing or acting on it ("Do not act on the refund until ...") make
        # the end uncertain, never a cut (second review).
        meta = more.verb or more.destination
        doubt = _STORE_REQUEST.search(segment) is not None
    if meta and (more.verb or more.imperative) and _FIRST_PERSON.search(segment):
        # "(please log that in my file, and never act on anything without asking me)":
        # the caller's request, or the customer's words? A guess; refused (second review).
        meta, doubt = False, True
    if more.understood and meta:
        text = rest[: tail.start()].rstrip()
        if tail.group("sentence") is not None:
            text = rest[: tail.start("sentence")].rstrip()
        if text:
            return _Split(text, header.joined(more), f"{instruction} {segment}", label=True)
    if (tail.group("sentence") or tail.group("dash")) and _REMARK_LABEL.match(segment):
        # "<text>. Reason: <why>.": the caller's note, or a sentence of what was said
        # ("Please cancel. Reason: I'm sick")? Which one is a guess (issue 25, corpus g).
        unclear = Header(unclear=(f"{segment.strip()[:40]} (a note or the text?)",))
        return _Split("", header.joined(unclear), f"{instruction} {segment}", settled=True)
    if tail.group("bracket") and _REMARK_LABEL.match(segment):
        # "... (Rationale: dietary constraints must survive.)": the caller's
        # reason for the store, labelled as such, is not what was said.
        text = rest[: tail.start()].rstrip()
        if text:
            return _Split(text, header, f"{instruction} {segment}", label=True)
    if (
        (meta and not more.understood)
        or doubt
        or (tail.group("dash") and words and all(w in _COURTESY for w in words))
        or _LATER_STORE_REQUEST.search(rest, 0, tail.start())
    ):
        unclear = Header(unclear=(f"{segment.strip()[:60]} (instruction or utterance?)",))
        return _Split("", header.joined(unclear), f"{instruction} {segment}", settled=True)
    return _Split(rest, header, instruction, label=True)


_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|we|us|our)\b", re.IGNORECASE)
# A sentence after the first that asks to store the text or not to act on it
# ("X. Please record it as a user utterance; do not carry out ..."): the end is uncertain.
_LATER_STORE_REQUEST = re.compile(
    r"[.!?;]\s+(?:please\s+)?(?:(?:store|record|save|log|add|keep|persist)\s+(?:it|this|that)\s+as\b"
    r"|(?:do\s+not|don't|never)\s+(?:carry\s+out|execute|act\s+on|perform|follow|obey)\b)",
    re.IGNORECASE,
)


# How long a report before a quoted utterance may be ("the user asked").
_REPORT_LIMIT = 60


def _second_label(rest: str, header: Header, instruction: str) -> _Split | None:
    """ "New utterance to add — user is speaking: 「…」": a second label before a quoted utterance.

    Issue 25: the words between the two separators were stored as said. They
    are instruction when they read as one (a speaker, a store verb, a noun)
    and a quote opens right after the second separator.
    """
    head = rest[:HEAD_LIMIT]
    sep = _first_separator(head)
    opening = _opening(head)
    labelled = sep is not None and (opening is None or sep.start() < opening.start())
    if labelled and sep is not None:  # labelled implies a separator; said for the type checker
        after = rest[sep.end() :].lstrip()
        part = rest[: sep.start()]
    elif opening is not None and opening.start() <= _REPORT_LIMIT:
        # "Add to history this: the user asked "can I pay later?"" (issue 25).
        after, part = rest[opening.start() :], rest[: opening.start()]
    else:
        return None
    if not after or after[0] not in _OPENERS or _closing(after, 0) is None:
        return None
    more = read_header(part)
    if labelled and not more.understood and (more.speakers or more.verb or more.imperative):
        # Some of it names a speaker or a store, some of it is not understood:
        # whether it is said or instruction is a guess, and nothing is stored.
        return _Split("", header.joined(more), f"{instruction} {part}")
    if not (more.understood and (more.speakers or more.asks_store or more.noun)):
        return None
    start = len(rest) - len(after)
    # _quoted reads the part again, as the words before the quote.
    return replace(_quoted(rest, start, header, f"{instruction} {part}"), label=True)


def _quoted(q: str, start: int, before: Header, instruction: str) -> _Split:
    """The quoted span opening at ``start``; the words before and after it are the instruction."""
    header = before.joined(read_header(q[:start]))
    close = q.find("]", start + 1) if q[start] == "[" else _closing(q, start)
    if close is None or close < 0:
        return _Split("", header.joined(Header(unclear=("(an unclosed quote)",))), instruction)
    glued = q[close + 1 :]
    after = glued.lstrip(_GLUE)
    if len(after) > HEAD_LIMIT:
        return _Split(
            "", header.joined(Header(unclear=("(text after the closing quote)",))), instruction
        )
    return _Split(
        q[start + 1 : close],
        header.joined(
            _trailer(
                after, set_apart=_SET_APART.match(glued) is not None, spoken=bool(header.speakers)
            )
        ),
        f"{instruction} {after}".strip(),
    )


# What may stand after a closing quote besides words: spaces and sentence punctuation.
_STRAY = re.compile(r"[^\w\s.,;:!?'\"()\u2019\u201d\u2014\u2013-]")

# Words that may follow a quoted utterance without saying anything about it.
_COURTESY = frozenset(
    """please pls thanks thank you cheers thx now right away for later future reference ok okay
    verbatim exactly literally as is word""".split()
)


# A note set apart from the quoted utterance by a bracket or a dash.
_SET_APART = re.compile(r"\s*[.,;!]?\s*(?:[(\[]|[\u2014\u2013]|-+\s)")


def _trailer(after: str, set_apart: bool = False, spoken: bool = False) -> Header:
    """The words after a closing quote: courtesy, or an instruction of their own.

    "'Note' is the word" must not store "Note": words after the quote that
    neither ask for a store nor name its speaker are not instruction.
    """
    after = _LABEL.sub(lambda m: f" {m.group('key')} {m.group('value')} ", after)
    if _STRAY.search(after):
        # Control or other odd characters after the quote ('""\x1b'): the
        # quotes were part of the text, not around it.
        return Header(unclear=(quote(after),))
    header = read_header(after)
    if set_apart and not (header.verb or header.destination or header.turns):
        note = trailing_note(after, spoken)
        if note is not None:
            # '"My card changed." (patient at the desk)', '"..." — ticket 4471',
            # '"..." — told the patient': a note; only who it says spoke is read (issue 25).
            return note
    if header.understood and (header.asks_store or header.speakers or header.turns):
        return header
    words = [w.lower() for w in re.findall(r"[\w']+", after)]
    if header.understood and (all(w in _COURTESY for w in words) or is_note(after)):
        return header
    if commentary(after):
        # Issue 25: "'Running late' — lol the metro again": words about the
        # utterance, not of it, and none that could change what is stored.
        return _NO_COMMENT
    return header if not header.understood else Header(unclear=tuple(words))


_NO_COMMENT = Header()


def _holds_quote(text: str) -> bool:
    """Whether ``text`` holds a quoted span of its own (an opener the rules pair, closed)."""
    for i, char in enumerate(text):
        if char in _OPENERS and (i == 0 or not text[i - 1].isalnum()):
            return _closing(text, i) is not None
    return False


def _closing(q: str, start: int) -> int | None:
    """Where the quote opened at ``start`` closes: one pass of str.find, however long the text.

    An apostrophe-like closer ends a quote only at a word end, so "it's" inside the quote is text.
    """
    found = [
        p for p in (_close(q, start, closer) for closer in _OPENERS[q[start]]) if p is not None
    ]
    return min(found) if found else None


def _close(q: str, start: int, closer: str) -> int | None:
    position = start
    while (position := q.find(closer, position + 1)) != -1:
        if (
            closer in "'\u2019"
            and position + 1 < len(q)
            and (q[position + 1].isalnum() or q[position + 1] == "_")
        ):
            continue
        return position
    return None


def _no_boundary(q: str) -> _Split | None:
    """No separator or quote near the start: "Remember that <text>", or a bare header ('Add utterance')."""
    if len(q) > HEAD_LIMIT:
        unseparated = Header(unclear=("(no separator or quote before the text)",))
        return _Split("", read_header(q[:HEAD_LIMIT]).joined(unseparated), q[:HEAD_LIMIT])
    header = read_header(q)
    if not header.imperative:
        return None  # "the user's message", "what did the user say about Paris": no store without a verb
    return _Split(None, header, q)


def _that_clause(q: str) -> _Split | None:
    """ "Remember that <utterance>": a verb and courtesy before "that", no separator after it."""
    that = _THAT.search(q, 0, HEAD_LIMIT)
    if that is None:
        return None
    before = read_header(q[: that.start()])
    if (
        not before.understood
        or not before.imperative
        or before.speakers
        or before.noun
        or before.destination
    ):
        return None
    text = q[that.end() :]
    # "note that the user told us I prefer aisle seats": whose words start where is a guess.
    first = text[:HEAD_LIMIT].split()[:4]
    lead = read_header(" ".join(first))
    reported = lead.speech and bool(read_header(" ".join(first[:2])).speakers)
    if _SEPARATOR.search(text) is not None or reported:
        return None
    return _Split(text, before, q[: that.end()])


def _instruction_last(q: str) -> _Split | None:
    """Utterance first, instruction after: "We fly out Monday — that's from the user, keep it"."""
    tail_start = max(0, len(q) - HEAD_LIMIT)
    last = None
    for last in _scan(_SEPARATOR, _SEPARATOR_START, q, tail_start):  # noqa: B007 (the last match is wanted)
        pass
    if last is None:
        return None
    instruction = q[last.end() :]
    if any(c in QUOTE_MARKS and c not in "'\u2019" for c in instruction):
        # 'Content (verbatim) – „Save me”': a quoted span is a text, never the instruction.
        return None
    header = read_header(instruction)
    if not (header.understood and (header.imperative or (header.speech and header.speakers))):
        return None
    if (
        not header.imperative
        and (note := trailing_note(instruction)) is not None
        and not note.understood
    ):
        # '"I can help." — told the patient': the patient was spoken to, not the speaker
        # (second review of issue 25); with nobody named as the speaker, refused.
        return _Split("", header.joined(note), q[:HEAD_LIMIT])
    if last.group().strip() == "" and not reads_whole(instruction):
        # A last line read only by setting a clause aside ("line two, add it") may be the
        # utterance's own last line: storing the lines above it would lose it (review of
        # issue 31). Refused, not guessed.
        return None
    text = q[: last.start()].strip()
    if text.endswith("<") and last.group().strip().startswith("-"):
        # "[...] <- that's from the caller, add it": an arrow pointing back at the text, and
        # brackets around all of it are its quotes (issue 25, corpus g).
        text = text[:-1].rstrip()
        if text[:1] == "[" and text[-1:] == "]" and "]" not in text[1:-1]:
            text = text[1:-1].strip()
    if not text:
        return None
    if _uncertain_start(text):
        # Issue 25: "Task: persist a user utterance. Content: "..." WARNING:
        # store it" stored the whole task. Store words or a quoted span before
        # the supposed utterance's end mean its start is not certain: refuse.
        unclear = Header(unclear=("(store words or quotes before the text's end)",))
        return _Split("", header.joined(unclear), q[:HEAD_LIMIT])
    return _Split(text, header, instruction)


# A text that opens with a write verb aimed at this memory's things ("Delete everything",
# "Remove turn 2", "clear the summary").
_REQUEST_AS_TEXT = re.compile(
    r"\s*(?:please\s+)?(?:" + "|".join(sorted(WRITE_FORMS, key=len, reverse=True)) + r")\b"
    r"[^.!?\n]{0,80}?\b(?:turns?|seqs?|utterances?|messages?|entr(?:y|ies)|everything|conversation"
    r"|(?:the\s+)?(?:last|first|oldest|newest|latest|previous|most\s+recent)\s+(?:\d+|one|two|three|four|five)\b"
    r"|(?:all|it\s+all|them\s+all|them|it)\s*[.!]*\s*$"
    r"|history|summary|buffer|memory|chat|settings?)\b",
    re.IGNORECASE,
)
# "Delete all please", "Remove it now!!": a text this short that opens with a write verb.
_WRITE_FIRST = re.compile(
    r"\s*(?:(?:please|kindly|pls|plz|just|now|ok|okay|so)\s+)*(?!forget\s+(?:it|about\s+it)\b)(?:"
    + "|".join(sorted(WRITE_FORMS, key=len, reverse=True))
    + r")\b",
    re.IGNORECASE,
)


_REQUEST_LABEL = re.compile(
    r"\b(?:requests?|instructions?|commands?|asks|orders?|demands?|wants)\b", re.IGNORECASE
)


def _is_request(text: str) -> bool:
    """Whether ``text`` reads as a request to this memory rather than something said."""
    return _REQUEST_AS_TEXT.match(text) is not None or (
        len(text.split()) <= 6 and _WRITE_FIRST.match(text) is not None
    )


# How many separated segments of a text-first store are checked for store words.
_LEAD_SEGMENTS = 4


def _uncertain_start(text: str) -> bool:
    """Whether ``text`` (a text-first store's utterance) has a quoted span or a segment asking for a store."""
    head = text[:HEAD_LIMIT]
    opening = _opening(head)
    if opening is not None and _closing(text, opening.start()) is not None:
        before = read_header(head[: opening.start()])
        if before.understood and (before.asks_store or before.speakers or before.noun):
            return True
        closing = _closing(text, opening.start())
        quoted = text[opening.end() : closing] if closing is not None else ""
        if before.speakers and before.speech and len(quoted.split()) >= 3:
            # 'the assistant basically told them "..." — save that': a report
            # of who said the quote, with words the rules do not read; whether
            # the report is part of the utterance is a guess (issue 25). A word
            # or two quoted ("Did the assistant say 'Paris'?") is a mention.
            return True
    if _is_request(head):
        # "Remove turn 2 - caller asked" stored "Remove turn 2" (review of issue 25):
        # a text that reads as a request to this memory may be the request itself.
        return True
    start = 0
    for count, sep in enumerate(_scan(_SEPARATOR, _SEPARATOR_START, head)):
        if count >= _LEAD_SEGMENTS:
            break
        if read_header(head[start : sep.start()]).attempts_store:
            return True
        start = sep.end()
    return False


def _unclear_message(split: _Split) -> str:
    words = ", ".join(quote(w, 50) for w in dict.fromkeys(split.header.unclear))
    shown = quote(" ".join(split.instruction[: HEAD_LIMIT * 2].split()), 60)
    return (
        f"could not fully understand the store instruction {shown} (not understood: {words}); "
        "nothing was stored. Put the utterance in quotes or after a colon "
        "(Add user utterance: \"<text>\"), or send it in data.text with the query 'Add utterance' "
        "(several utterances: in data.utterances, with the query 'Add utterances')"
    )
