"""Store phrasings. The text after the header is kept verbatim.

Store is recognised before every other operation and takes everything after
its header as the utterance, which is why "Add utterance: remove all files"
stores that sentence instead of deleting anything: storing is the safe
reading of a query that starts like a store.
"""

from __future__ import annotations

import re
from typing import Any

from chd.core.errors import InvalidRequest
from chd.core.language.grammar.query import strip_politeness
from chd.core.language.grammar.vocab import FLAGS, SPEAKER, speaker_of

__all__ = ["read_store"]

_POLITE = re.compile(
    r"^(?:please\s+|kindly\s+|(?:can|could|would|will)\s+you\s+(?:please\s+)?"
    r"|i(?:'d|\s+would)\s+like\s+(?:you\s+)?to\s+|go\s+ahead\s+and\s+)*",
    FLAGS,
)
_VERB = re.compile(
    r"^(?:add|store|record|remember|save|log|append|insert|note(?:\s+down)?|write\s+down|memori[sz]e)\b(?P<rest>.*)$",
    FLAGS,
)
_HEADER = (
    r"^\s*(?:(?:a|an|the|this|new|following|another|next)\s+)*"
    rf"(?:(?P<sp1>{SPEAKER})(?:'s)?\s*)?"
    r"(?:utterance|message|turn|line|reply|response|statement|entry|note|question|answer|text)?"
    rf"(?:\s*\b(?:from|by|for|of)\s+(?:the\s+)?(?P<sp2>{SPEAKER}))?"
    r"(?:\s*\b(?:to|in|into)\s+(?:the\s+)?(?:conversation|history|buffer|chat|log|memory))?"
    rf"(?:\s*\b(?:from|by|for)\s+(?:the\s+)?(?P<sp3>{SPEAKER}))?"
    r"(?:\s*\b(?:saying|that\s+says|which\s+says|reading|with\s+(?:the\s+)?text))?"
)
_COLON = re.compile(_HEADER + r"\s*[:\u2014]\s*(?P<text>.*)$", FLAGS)
_QUOTED = re.compile(_HEADER + r"\s*(?P<text>([\"'\u201c\u2018]).*)$", FLAGS)
_PLAIN = re.compile(r"^\s+(?:that\s+)?(?P<text>\S.*)$", FLAGS)
_BARE = re.compile(_HEADER + r"\s*$", FLAGS)
_SPEAKER_SAID = re.compile(
    rf"^(?:the\s+)?(?P<sp1>{SPEAKER})\s*(?:says|said|wrote|asked|answered|replied|responded)?\s*:\s*(?P<text>.*)$"
    rf"|^(?:the\s+)?(?P<sp2>{SPEAKER})\s+(?:says|said|wrote|asked|answered|replied|responded),?\s+(?P<quoted>([\"\u201c]).*)$",
    FLAGS,
)
_QUOTES = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019"}


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and _QUOTES.get(text[0]) == text[-1]:
        return text[1:-1]
    return text


def read_store(query: str) -> dict[str, Any] | None:
    """The store fields of ``query`` (text verbatim, speaker if named), or None.

    'Add utterance' with no text gives no ``text`` field: data.text may carry it.
    """
    text = _POLITE.sub("", query.strip(), count=1)
    match = _SPEAKER_SAID.match(text)
    if match is None:
        verb = _VERB.match(text)
        if verb is None:
            return None
        rest = verb.group("rest")
        match = _COLON.match(rest) or _QUOTED.match(rest)
        if match is None and _BARE.match(strip_politeness(rest)):
            return _speaker_fields(_BARE.match(strip_politeness(rest)), {})  # type: ignore[arg-type]
        match = match or _PLAIN.match(rest)
        if match is None:
            return None
    groups = match.groupdict()
    body = groups.get("text") if groups.get("text") is not None else groups.get("quoted")
    return _speaker_fields(match, {"text": _unquote(body or "")})


def _speaker_fields(match: re.Match[str], fields: dict[str, Any]) -> dict[str, Any]:
    groups = match.groupdict()
    speakers = {speaker_of(s) for k in ("sp1", "sp2", "sp3") if (s := groups.get(k))}
    if len(speakers) > 1:
        raise InvalidRequest(f"the query names two speakers: {', '.join(sorted(speakers))}")
    if speakers:
        fields["speaker"] = speakers.pop()
    return fields
