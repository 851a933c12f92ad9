"""The query language: natural-language text to an operation and its fields.

The parser only reads; it never decides defaults or checks limits (that is
intents.build_intent's job), so a reader can see here exactly which phrasings
are understood. Store is recognised first and takes everything after its
header verbatim, which is why "Add utterance: remove all files" stores that
sentence instead of deleting anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from daemon.errors import InvalidRequest

__all__ = ["ParsedQuery", "parse", "SUPPORTED_FORMS", "parse_number"]

SUPPORTED_FORMS = (
    "Add utterance: <text>   |   Add user utterance: '<text>'   |   Remember <text>",
    "Find utterances about <topic>   |   Get the last 5 utterances   |   Get summary",
    "Get context within 2000 tokens   |   Get archived utterances",
    "Get utterance 12   |   Get utterances in turns 3 to 6   |   Get all utterances",
    "Remove oldest utterance   |   Remove before turn 4   |   Remove utterance 12   |   Clear the conversation",
    "Summarize conversation   |   Summarize the conversation in 200 tokens",
)

_NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "hundred": 100, "a": 1, "an": 1, "single": 1,
}  # fmt: skip
NUM = r"(?:\d+|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + r")"
SPEAKER = r"(?:user|assistant|system)"
NOUN = r"(?:utterances?|messages?|entries|entry|lines?|items?|turns?)"

_FLAGS = re.IGNORECASE | re.DOTALL


def parse_number(token: str) -> int:
    token = token.lower()
    return int(token) if token.isdigit() else _NUMBER_WORDS[token]


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """An operation and the fields the query text gave for it."""

    operation: str
    fields: dict[str, Any] = field(default_factory=dict)


def parse(text: str) -> ParsedQuery:
    """Read ``text``; raise InvalidRequest saying what was not understood."""
    query = text.strip()
    if not query:
        raise _not_understood("the query is empty")
    for rule in (_store, _summarize, _remove, _retrieve):
        parsed = rule(query)
        if parsed is not None:
            return parsed
    raise _not_understood(f"could not tell what {_quote(query)} asks for")


def _quote(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _not_understood(reason: str) -> InvalidRequest:
    forms = "\n  ".join(SUPPORTED_FORMS)
    return InvalidRequest(f"{reason}. Supported forms:\n  {forms}")


# --- store -----------------------------------------------------------------

_STORE_VERB = re.compile(
    r"^(?:please\s+)?(?:add|store|record|remember|save|log|append|insert)\b(?P<rest>.*)$",
    _FLAGS,
)
_STORE_HEADER = (
    r"^\s*(?:(?:a|an|the|this|new|following)\s+)*"
    rf"(?:(?P<sp1>{SPEAKER})(?:'s)?\s*)?"
    r"(?:utterance|message|turn|line|reply|response|statement|entry)?"
    rf"(?:\s+(?:from|by|for)\s+(?:the\s+)?(?P<sp2>{SPEAKER}))?"
)
_STORE_COLON = re.compile(_STORE_HEADER + r"\s*[:\u2014-]\s*(?P<text>.*)$", _FLAGS)
_STORE_QUOTED = re.compile(
    _STORE_HEADER + r"\s*(?P<text>([\"'\u201c\u2018]).*)$", _FLAGS
)
_STORE_PLAIN = re.compile(r"^\s+(?:that\s+)?(?P<text>\S.*)$", _FLAGS)
_SPEAKER_SAID = re.compile(
    rf"^(?:the\s+)?(?P<sp1>{SPEAKER})\s+(?:says|said|wrote|asked|answered|replied)\s*:\s*(?P<text>.*)$",
    _FLAGS,
)
_QUOTES = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019"}


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and _QUOTES.get(text[0]) == text[-1]:
        return text[1:-1]
    return text


def _store(query: str) -> ParsedQuery | None:
    said = _SPEAKER_SAID.match(query)
    match = said
    if match is None:
        verb = _STORE_VERB.match(query)
        if verb is None:
            return None
        rest = verb.group("rest")
        match = (
            _STORE_COLON.match(rest)
            or _STORE_QUOTED.match(rest)
            or _STORE_PLAIN.match(rest)
        )
        if match is None:
            raise _not_understood(
                f"{_quote(query)} looks like a store but has no utterance text; "
                "put the text after a colon"
            )
    fields: dict[str, Any] = {"text": _unquote(match.group("text"))}
    groups = match.groupdict()
    speakers = {s.lower() for s in (groups.get("sp1"), groups.get("sp2")) if s}
    if len(speakers) > 1:
        raise InvalidRequest(f"the query names two speakers: {', '.join(sorted(speakers))}")
    if speakers:
        fields["speaker"] = speakers.pop()
    return ParsedQuery("store", fields)


# --- summarize -------------------------------------------------------------

_SUMMARIZE = re.compile(
    r"^(?:please\s+|can you\s+|could you\s+)?(?:summari[sz]e|sum up|condense|give (?:me )?a summary of|make a summary of)\b(?P<rest>.*)$",
    _FLAGS,
)
_TOKEN_LIMIT = re.compile(
    rf"(?:in|within|under|to|at most|max(?:imum)?|no more than|using)\s+(?P<n>{NUM})\s+tokens?"
    rf"|token\s+limit\s*(?:of|=|:)?\s*(?P<m>{NUM})",
    _FLAGS,
)
_SUMMARIZE_FILLER = re.compile(
    r"\b(?:the|this|our|whole|entire|full|conversation|chat|history|buffer|dialog(?:ue)?|so far|please|everything|it|all)\b|[.?!,]",
    _FLAGS,
)


def _summarize(query: str) -> ParsedQuery | None:
    match = _SUMMARIZE.match(query)
    if match is None:
        return None
    rest = match.group("rest")
    fields: dict[str, Any] = {}
    limit = _TOKEN_LIMIT.search(rest)
    if limit:
        fields["token_limit"] = parse_number(limit.group("n") or limit.group("m"))
        rest = rest[: limit.start()] + rest[limit.end() :]
    leftover = _SUMMARIZE_FILLER.sub(" ", rest).strip()
    if leftover:
        raise _not_understood(f"in {_quote(query)}, {_quote(leftover)} was not understood")
    return ParsedQuery("summarize", fields)


# --- remove ----------------------------------------------------------------

_REMOVE_VERB = re.compile(
    r"^(?:please\s+)?(?P<verb>remove|delete|forget|drop|erase|purge|clear|wipe|evict)\b(?P<rest>.*)$",
    _FLAGS,
)
_REMOVE_ALL = re.compile(
    rf"^(?:(?:all|every|everything|the|whole|entire|of|this)\s*)*(?:{NOUN}|conversation|history|buffer|chat|everything|all)?\s*(?:in|from|of)?\s*(?:the\s+)?(?:conversation|history|buffer|chat)?$",
    _FLAGS,
)
_REMOVE_OLDEST = re.compile(
    rf"^(?:the\s+)?(?:(?P<n1>{NUM})\s+)?(?:oldest|earliest|first)(?:\s+(?P<n2>{NUM}))?(?:\s+(?:one|{NOUN}))?$",
    _FLAGS,
)
_REMOVE_BEFORE_TURN = re.compile(
    rf"^(?:(?:all|the|everything|{NOUN})\s+)*(?:before|prior to|earlier than|older than)\s+turn\s*(?:number\s*)?#?(?P<n>{NUM})$",
    _FLAGS,
)
_BY_SEQ = re.compile(
    rf"^(?:the\s+)?(?:utterance|message|entry|item|seq)\s*(?:number|no\.?|seq|#)?\s*#?(?P<n>\d+)$",
    _FLAGS,
)


def _remove(query: str) -> ParsedQuery | None:
    match = _REMOVE_VERB.match(query)
    if match is None:
        return None
    rest = match.group("rest").strip().rstrip(".!")
    if m := _REMOVE_OLDEST.match(rest):
        n = m.group("n1") or m.group("n2")
        return ParsedQuery("remove", {"oldest": parse_number(n) if n else 1})
    if m := _REMOVE_BEFORE_TURN.match(rest):
        return ParsedQuery("remove", {"before_turn": parse_number(m.group("n"))})
    if m := _BY_SEQ.match(rest):
        return ParsedQuery("remove", {"seq": int(m.group("n"))})
    # "Remove" alone or "remove utterances" names no target: refusing beats guessing.
    if rest and _REMOVE_ALL.match(rest) and (
        match.group("verb").lower() in ("clear", "wipe", "purge")
        or re.search(r"\b(?:all|every|everything|whole|entire)\b", rest, re.I)
    ):
        return ParsedQuery("remove", {"all": True})
    if not rest and match.group("verb").lower() in ("clear", "wipe", "purge"):
        return ParsedQuery("remove", {"all": True})
    raise _not_understood(
        f"could not tell which utterances {_quote(query)} should remove "
        "(say 'oldest', 'before turn N', 'utterance N' or 'all')"
    )


# --- retrieve --------------------------------------------------------------

_RETRIEVE_VERB = re.compile(
    r"^(?:please\s+|can you\s+|could you\s+)?(?P<verb>get|show|find|search(?:\s+for)?|list|retrieve|fetch|give(?:\s+me)?|return|recall|look\s+up|display|read|what)\b(?P<rest>.*)$",
    _FLAGS,
)
_R_SUMMARY = re.compile(r"\b(?:the\s+|running\s+|current\s+)*summary\b", _FLAGS)
_R_WITH = re.compile(r"\b(?:with|and|plus|including)\s*$", _FLAGS)
_R_SPEAKER = re.compile(
    rf"\b(?:(?:from|by|of)\s+(?:the\s+)?(?P<a>{SPEAKER})|(?P<b>{SPEAKER})(?:'s)?(?=\s+{NOUN})"
    rf"|(?:did|has|have|had)\s+(?:the\s+)?(?P<c>{SPEAKER})(?=\s+(?:say|said|write|wrote|mention|ask|tell)))\b",
    _FLAGS,
)
_R_TURNS = re.compile(
    rf"\b(?:in|from|during|for|of)?\s*turns?\s*(?P<a>{NUM})(?:\s*(?:to|through|thru|until|-|and)\s*(?:turn\s*)?(?P<b>{NUM}))?\b",
    _FLAGS,
)
_R_SINCE_TURN = re.compile(rf"\b(?:since|after|from)\s+turn\s*(?P<a>{NUM})\b", _FLAGS)
_R_SEQ = re.compile(
    rf"\b(?:utterance|message|entry|item|seq)\s*(?:number|no\.?|#)?\s*#?(?P<n>\d+)\b", _FLAGS
)
# Only as the object ("Get the context within 500 tokens"), so "Find
# utterances about context switching" stays a topic search.
_R_CONTEXT = re.compile(
    r"^\s*(?:me\s+)?(?:the\s+)?(?:conversation(?:'s)?\s+|prompt\s+|current\s+)?context\b", _FLAGS
)
_R_ARCHIVED = re.compile(rf"\barchived(?=\s+{NOUN})|\b(?:from|in)\s+the\s+archive\b", _FLAGS)
_R_LAST = re.compile(
    rf"\b(?:the\s+)?(?:last|latest|most\s+recent|recent|newest)\s*(?P<n>{NUM})?(?:\s+{NOUN})?",
    _FLAGS,
)
_R_TOPIC = re.compile(
    r"\b(?:about|regarding|concerning|mentioning|on the topic of|related to|that mention|on)\s+(?P<t>.+)$",
    _FLAGS,
)
_R_FILLER = re.compile(
    rf"\b(?:me|the|all|every|of|in|from|this|conversation|history|buffer|chat|everything|"
    rf"{NOUN}|stored|so far|please|said|say|tell|mention|ask|write|did|has|have|we|what|was|were)\b|[.?!,:]",
    _FLAGS,
)


def _retrieve(query: str) -> ParsedQuery | None:
    match = _RETRIEVE_VERB.match(query)
    if match is None:
        return None
    verb = match.group("verb").lower()
    rest = match.group("rest")
    fields: dict[str, Any] = {}

    if m := _R_CONTEXT.search(rest):
        fields["context"] = True
        rest = rest[: m.start()] + " " + rest[m.end() :]
        if limit := _TOKEN_LIMIT.search(rest):
            fields["token_limit"] = parse_number(limit.group("n") or limit.group("m"))
            rest = rest[: limit.start()] + " " + rest[limit.end() :]
    topic = _R_TOPIC.search(rest)
    if m := _R_ARCHIVED.search(rest, 0, topic.start() if topic else len(rest)):
        fields["archived"] = True
        rest = rest[: m.start()] + " " + rest[m.end() :]

    # Speaker and turn filters may follow the topic ("about Paris in turns 3
    # to 6"), so take them out of the whole query before the topic.
    if m := _R_SPEAKER.search(rest):
        fields["speaker"] = (m.group("a") or m.group("b") or m.group("c")).lower()
        rest = rest[: m.start()] + " " + rest[m.end() :]
    if m := _R_SINCE_TURN.search(rest):
        fields["turn_from"] = parse_number(m.group("a"))
        rest = rest[: m.start()] + " " + rest[m.end() :]
    elif m := _R_TURNS.search(rest):
        fields["turn_from"] = parse_number(m.group("a"))
        fields["turn_to"] = parse_number(m.group("b") or m.group("a"))
        rest = rest[: m.start()] + " " + rest[m.end() :]
    if m := _R_TOPIC.search(rest):
        fields["topic"] = _unquote(m.group("t").strip().rstrip("?.!"))
        rest = rest[: m.start()]
    if m := _R_SUMMARY.search(rest):
        before = rest[: m.start()]
        if _R_WITH.search(before) or re.search(NOUN, before, re.I):
            fields["include_summary"] = True
            before = _R_WITH.sub("", before)
        else:
            fields["summary_only"] = True
        rest = before + " " + rest[m.end() :]
    if m := _R_SEQ.search(rest):
        fields["seq"] = int(m.group("n"))
        rest = rest[: m.start()] + " " + rest[m.end() :]
    if m := _R_LAST.search(rest):
        fields["last_n"] = parse_number(m.group("n")) if m.group("n") else 1
        if not m.group("n") and re.search(r"s\s*$", m.group(0)):
            # "the latest utterances" with no count: the whole buffer, newest last.
            fields.pop("last_n")
        rest = rest[: m.start()] + " " + rest[m.end() :]

    leftover = _R_FILLER.sub(" ", rest).strip()
    if leftover and "topic" not in fields and verb.startswith(("find", "search", "look")):
        fields["topic"] = _unquote(leftover.strip("?.! "))
        leftover = ""
    if leftover:
        raise _not_understood(f"in {_quote(query)}, {_quote(leftover)} was not understood")
    return ParsedQuery("retrieve", fields)
