"""Slots several operations share: speaker, turns, time, seqs, counts, topic, token limit.

Each ``take_*`` finds its slot in a Query, cuts it out and returns its value
(None when absent). Retrieve and remove read the same words the same way,
so "in turns 3 to 6" selects the same utterances in both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from chd.core.days import check_day
from chd.core.errors import InvalidRequest
from chd.core.language.grammar.query import Query
from chd.core.language.grammar.vocab import FLAGS, NOUN, SINGULAR, SPEAKER, speaker_of
from chd.core.language.numbers import (
    NUM,
    NUM_TOKEN,
    ORDINAL,
    digits_value,
    parse_number,
    parse_ordinal,
)

__all__ = [
    "TurnSpan",
    "Count",
    "take_speaker",
    "take_turns",
    "take_time",
    "take_seqs",
    "seq_fields",
    "take_count",
    "split_topic",
    "take_token_limit",
    "take_summary",
    "MAX_SEQ_RANGE",
]

MAX_SEQ_RANGE = 10_000


def _turn_ref(name: str) -> str:
    """'turn 3', 'turn number three', 'turn #3', 'the third turn', 'the 3rd turn'."""
    return (
        rf"(?:(?:the\s+)?turn\s*(?:number\s*|no\.?\s*|\#\s*)?(?P<{name}>{NUM})"
        rf"|(?:the\s+)?(?P<{name}_o>{ORDINAL})\s+turn)"
    )


def _turn_value(match: re.Match[str], name: str) -> int:
    if match.group(name) is not None:
        return parse_number(match.group(name))
    return parse_ordinal(match.group(f"{name}_o"))


# --- speaker ---------------------------------------------------------------------

_SAYING = r"(?:say|said|says|sent|send|write|wrote|ask|asked|mention|mentioned|tell|told|reply|replied|answer|answered|talk|talked|discuss|discussed|bring\s+up|brought\s+up)"
_SPEAKER_PATTERNS = (
    rf"\b(?:(?:said|written|sent|asked|spoken)\s+)?(?:from|by)\s+(?:the\s+)?(?P<s>{SPEAKER})\b",
    rf"\b(?:did|does|has|have|had)\s+(?:the\s+)?(?P<s>{SPEAKER})\s+{_SAYING}\b",
    # At most four qualifiers of one word each: a repeated group that could
    # hold a whole number split a run of number words every way (issue 14:
    # "user " + "two " * 21 + "x" took 4 s, doubling with each word).
    rf"\b(?:the\s+)?(?P<s>{SPEAKER})(?:'s|s')?(?=\s+(?:(?:last|latest|newest|oldest|first|earliest|most\s+recent|recent|previous|{NUM_TOKEN})\s+){{0,4}}{NOUN}\b)",
    rf"\b(?:the\s+)?(?P<s>{SPEAKER})\s+(?=(?:(?:has|have|had|did|does|do|was|is|just|ever|already|previously|actually|also|really)\s+){{0,2}}{_SAYING}\b)",
    rf"\bof\s+the\s+(?P<s>{SPEAKER})\b",
    rf"^(?:the\s+)?(?P<s>{SPEAKER})(?:'s)?$",
)


_ANY_SPEAKER = re.compile(rf"\b{SPEAKER}\b", FLAGS)
# The caller speaking of itself or of the assistant (issue 25: "everything I
# said", "remove my last message" read all speakers' utterances): "my
# messages", "what I asked" are the user's; "your answers", "what did you
# say" the assistant's. "we" stays both speakers ("what did we say").
_COUNTED = rf"(?:(?:last|latest|newest|oldest|first|earliest|most\s+recent|recent|previous|{NUM_TOKEN})\s+){{0,4}}"
_PERSON = (
    ("user", rf"\bmy\s+(?:own\s+)?{_COUNTED}(?:{NOUN}|msgs?)\b"),
    (
        "user",
        r"\b(?:what\s+|everything\s+|anything\s+|all\s+)?i\s+(?:(?:have|had|just|ever|already)\s+){0,2}"
        r"(?:said|say|wrote|write|asked|ask|typed|sent|mentioned|told\s+you)\b",
    ),
    ("assistant", rf"\byour\s+(?:own\s+)?{_COUNTED}(?:{NOUN}|msgs?)\b"),
    (
        "assistant",
        r"\b(?:did\s+you\s+(?:say|write|answer|reply|tell\s+me)|you\s+(?:said|wrote|answered|replied|told\s+me))\b",
    ),
)
_ANY_PERSON = re.compile(r"\b(?:my|i|your|you)\b", FLAGS)


def take_speaker(q: Query) -> str | None:
    """'from the assistant', "the user's messages", 'did the assistant say', 'assistant messages'."""
    if q.search(_ANY_SPEAKER):  # the cheap check first: these patterns are long
        for pattern in _SPEAKER_PATTERNS:
            match = q.take(pattern)
            if match:
                return speaker_of(match.group("s"))
    if q.search(_ANY_PERSON):
        for speaker, pattern in _PERSON:
            match = q.search(pattern)
            if match:
                # The speaker's words go; the noun and the count stay for their own slots.
                noun = re.search(rf"(?:{_COUNTED}(?:{NOUN}|msgs?))$", match.group(0), FLAGS)
                end = match.start() + noun.start() if noun and noun.start() > 0 else match.end()
                q.text = f"{q.text[: match.start()]} {q.text[end:]}"
                return speaker
    return None


# --- turns -------------------------------------------------------------------------


@dataclass(slots=True)
class TurnSpan:
    """Turn conditions as phrased: ranges, before/after, the last k turns."""

    turn_from: int | None = None
    turn_to: int | None = None
    before: int | None = None
    after: int | None = None
    last_turns: int | None = None
    first_turns: int | None = None

    @property
    def given(self) -> bool:
        return any(
            v is not None
            for v in (
                self.turn_from,
                self.turn_to,
                self.before,
                self.after,
                self.last_turns,
                self.first_turns,
            )
        )

    def inclusive(self) -> tuple[int | None, int | None]:
        """As one inclusive range (``last_turns`` aside); raises if it is empty."""
        low, high = self.turn_from, self.turn_to
        if self.after is not None:
            low = self.after + 1 if low is None else max(low, self.after + 1)
        if self.before is not None:
            if self.before == 0:
                raise InvalidRequest("there are no turns before turn 0")
            high = self.before - 1 if high is None else min(high, self.before - 1)
        return low, high


_TO = r"(?:to|through|thru|until|till|-|\u2013|\u2014)"
_TURN_RANGE = (
    rf"\bbetween\s+turns?\s*\#?(?P<a>{NUM})\s+and\s+(?:turn\s*\#?)?(?P<b>{NUM})\b",
    rf"\b(?:(?:in|from|during|for|of|over|across|within)\s+)?(?:the\s+)?turns?\s*(?:number\s*|\#\s*)?"
    rf"(?P<a>{NUM})\s*{_TO}\s*(?:turn\s*\#?)?(?P<b>{NUM})\b",
)
_TURN_BEFORE = rf"\b(?:before|prior\s+to|earlier\s+than|older\s+than|preceding)\s+{_turn_ref('n')}"
_TURN_UPTO = (
    rf"\b(?:up\s+to|until|till|through|thru)\s+(?:and\s+including\s+)?{_turn_ref('n')}",
    rf"\b{_turn_ref('n')}\s+and\s+(?:earlier|before|older|prior)\b",
)
_TURN_AFTER = rf"\b(?:after|later\s+than|newer\s+than|following)\s+{_turn_ref('n')}"
# "from turn 3" is that turn ("the messages from turn 3"); onwards needs
# "since", "starting at" or "from turn 3 on".
_TURN_SINCE = (
    rf"\b(?:since|starting\s+(?:at|from|with))\s+{_turn_ref('n')}(?:\s+on(?:wards?)?)?",
    rf"\bfrom\s+{_turn_ref('n')}\s+on(?:wards?)?\b",
    # "from turn 3 until the end", "turn 3 to the last one" (issue 25: open ranges are ranges).
    rf"\b(?:from\s+)?{_turn_ref('n')}\s*(?:,\s*)?(?:to|until|till|through|thru|up\s+to)\s+(?:the\s+)?"
    rf"(?:very\s+)?(?:end|last(?:\s+(?:one|turn))?|latest(?:\s+(?:one|turn))?|newest(?:\s+(?:one|turn))?)"
    rf"(?:\s+of\s+(?:the\s+)?(?:conversation|chat|history|buffer))?\b",
    rf"\b(?:in\s+|from\s+)?{_turn_ref('n')}\s+(?:and\s+(?:later|after|newer|onwards?|beyond)|on(?:wards?)?)\b",
    # "turn 3 and everything after (it)", "turn 3 and all that follows" (issue 25).
    rf"\b(?:in\s+|from\s+)?{_turn_ref('n')}\s+and\s+(?:everything|all|anything|whatever)\s+(?:(?:that\s+)?(?:comes?\s+|came\s+)?"
    rf"(?:after|later|since|beyond)(?:\s+(?:it|that))?|(?:that\s+)?follows?|following)\b",
)
# "turns of talk" are utterances, as conversation analysts say.
_TURNS = r"turns?\b(?!\s+of\s+(?:talk|speech))"
# "the 2 latest turns" before "the latest turns": each takes its leftmost match.
_TURN_LAST = (
    rf"\b(?:(?:in|from|during|of|over)\s+)?(?:the\s+)?(?P<n>{NUM})\s+(?:last|latest|most\s+recent|newest|final)\s+{_TURNS}",
    rf"\b(?:(?:in|from|during|of|over)\s+)?(?:the\s+)?(?:last|latest|most\s+recent|final|past|previous|newest)\s+(?:(?P<n>{NUM})\s+)?{_TURNS}",
)
# "the first three turns" are turns, not utterances; "the first turn" is turn 1.
_TURN_FIRST = (
    rf"\b(?:(?:in|from|during|of|over)\s+)?(?:the\s+)?(?:first|earliest|oldest|opening|initial)\s+(?P<n>{NUM})\s+{_TURNS}",
    rf"\b(?:(?:in|from|during|of|over)\s+)?(?:the\s+)?(?P<n>{NUM})\s+(?:first|earliest|oldest)\s+{_TURNS}",
    r"\b(?:(?:in|from|during|of|over)\s+)?(?:the\s+)?(?:earliest|oldest)\s+turn\b",
)
_TURN_SINGLE = rf"\b(?:(?:in|from|during|of|for|at|on)\s+)?(?:just\s+|only\s+)?{_turn_ref('n')}\b"


def _first(q: Query, patterns: tuple[str, ...]) -> re.Match[str] | None:
    """Take the first of ``patterns`` that matches."""
    for pattern in patterns:
        if m := q.take(pattern):
            return m
    return None


# "turns 3 and 4": two neighbouring turns are a range; "turns 3 and 5" is not
# one, and stays unexplained (refused) rather than read as 3 to 5.
_TURN_PAIR = re.compile(
    rf"\b(?:the\s+)?turns\s+(?P<a>{NUM})\s+(?:and|&)\s+(?:turn\s+)?(?P<b>{NUM})\b", FLAGS
)


def take_turns(q: Query) -> TurnSpan:
    """Turn ranges, 'before/after turn N', 'since turn N', 'the last 2 turns', 'turn 3'."""
    span = TurnSpan()
    if "turn" not in q.text.lower():
        return span
    if m := _first(q, _TURN_RANGE):
        span.turn_from, span.turn_to = sorted(
            (parse_number(m.group("a")), parse_number(m.group("b")))
        )
    elif (m := q.search(_TURN_PAIR)) and abs(
        parse_number(m.group("a")) - parse_number(m.group("b"))
    ) == 1:
        q.take(_TURN_PAIR)
        span.turn_from, span.turn_to = sorted(
            (parse_number(m.group("a")), parse_number(m.group("b")))
        )
    if m := q.take(_TURN_BEFORE):
        span.before = _turn_value(m, "n")
    if m := _first(q, _TURN_UPTO):
        span.turn_to = _turn_value(m, "n")
    if m := q.take(_TURN_AFTER):
        span.after = _turn_value(m, "n")
    if m := _first(q, _TURN_SINCE):
        span.turn_from = _turn_value(m, "n")
    if m := _first(q, _TURN_LAST):
        span.last_turns = parse_number(m.group("n")) if m.group("n") else 1
    if m := _first(q, _TURN_FIRST):
        span.first_turns = parse_number(m.group("n")) if m.groupdict().get("n") else 1
    if not span.given and (m := q.take(_TURN_SINGLE)):
        span.turn_from = span.turn_to = _turn_value(m, "n")
    return span


# --- time ----------------------------------------------------------------------------

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_UNIT = r"(?P<u>seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?)"
# "10m", "2h", "30s": a letter glued to its number is a unit only there ("10 m" is not read).
_GLUED_UNIT = r"(?P<g>\d+)(?P<gu>[smhdw])"
_TIME_WINDOW = (
    # Without "the" too: "messages in last 10 minutes", "get utts from last 10m" (issue 25).
    # Without "the" only with a number: "from last week" is the calendar week (_TIME_DAY).
    rf"\b(?:(?:in|within|during|over|from|for|of)\s+)?(?:the\s+(?:last|past|previous)\s+(?:(?P<n>{NUM})\s*)?{_UNIT}"
    rf"|(?:last|past|previous)\s+(?:(?P<n2>{NUM})\s*{_UNIT.replace('?P<u>', '?P<u2>')}|{_GLUED_UNIT}))\b",
    rf"\b(?:since|from|after)\s+(?P<n>{NUM})\s*{_UNIT}\s+ago\b",
    rf"\b(?:in|within)\s+(?P<n>{NUM})\s*{_UNIT}\b",
)
# "older than one hour", "from over an hour ago", "more than 30 minutes ago" (issue 25).
_AN = rf"(?:(?P<n>{NUM})|an?|one)"
_TIME_OLDER = (
    rf"\b(?:which\s+are\s+|that\s+are\s+)?older\s+than\s+(?:an?\s+|one\s+)?(?:(?P<n>{NUM})\s*)?{_UNIT}(?:\s+ago)?\b",
    rf"\b(?:(?:from|sent|said|written)\s+)?(?:over|more\s+than|longer\s+than)\s+(?:an?\s+|one\s+)?(?:(?P<n>{NUM})\s*)?{_UNIT}\s+ago\b",
)
_MOMENT = (
    r"(?P<t>\d{4}-\d{2}-\d{2}(?:[t ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?:z|[+-]\d{2}:?\d{2})?)"
)
_TIME_SINCE = rf"\b(?:since|after|from)\s+{_MOMENT}"
_TIME_UNTIL = rf"\b(?:until|till|before|up\s+to)\s+{_MOMENT.replace('?P<t>', '?P<u>')}"
# "in May 2023", "during May of 2023": the month, since its first day until the next's (UTC).
_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_TIME_MONTH = (
    rf"\b(?:in|during|from)\s+(?P<m>{'|'.join(_MONTHS)}|{'|'.join(m[:3] for m in _MONTHS)})\.?"
    r"\s+(?:of\s+)?(?P<y>\d{4})\b"
)


# Days (issue 27): "yesterday", "today", "on Monday", "last week", "on 3 May
# (2023)", "on May 3rd", "on 2023-05-03". Written as data.day and resolved
# when the retrieve runs (daemon/core/days.py), never when read: readings
# are cached. "in the last week" stays a 7-day window (_TIME_WINDOW, tried first).
# A day may follow since / after / before / until (_DAY_RELATION): "since
# yesterday" is from yesterday's start on, never the day alone with "since"
# left in the topic (outside review of issue 27).
_DAY_RELATION = (
    r"(?P<rel>since|after|later\s+than|before|prior\s+to|earlier\s+than|until|till|up\s+to)"
)
_RELATION_OF = {"since": "since", "after": "after", "later": "after", "before": "before"}
_RELATION_OF |= {"prior": "before", "earlier": "before", "until": "until", "till": "until"}
_RELATION_OF |= {"up": "until"}
_WEEKDAY = r"(?P<w>monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?"
_MONTH_NAME = rf"(?:{'|'.join(_MONTHS)}|{'|'.join(m[:3] for m in _MONTHS)}|sept)\.?"
# Any one or two digits, so "on the 32nd of May" is refused as no day of the
# calendar (like "on 31 February") instead of becoming a topic.
_DAY_NUMBER = r"(?:[0-9]{1,2})(?:st|nd|rd|th)?"
_TIME_DAY = (
    rf"\b(?:{_DAY_RELATION}\s+|(?:from|on|during)\s+)?"
    r"(?P<r>(?:the\s+)?day\s+before\s+yesterday|yesterday|today)\b",
    rf"\b(?:{_DAY_RELATION}\s+(?:(?:on|last)\s+)?|(?:on|from|during)\s+(?:last\s+)?|last\s+)"
    rf"{_WEEKDAY}\b",
    rf"\b(?:{_DAY_RELATION}\s+|(?:from|during|in|over)\s+)?(?<!the\s)(?P<k>last|this)\s+week\b",
    rf"\b(?:{_DAY_RELATION}\s+(?:on\s+)?|on\s+)(?:the\s+)?"
    rf"(?:(?P<d>{_DAY_NUMBER})\s+(?:of\s+)?(?P<m>{_MONTH_NAME})"
    rf"|(?P<m2>{_MONTH_NAME})\s+(?:the\s+)?(?P<d2>{_DAY_NUMBER}))(?:,?\s+(?P<y>[0-9]{{4}}))?(?![\w-])",
    r"\bon\s+(?P<iso>[0-9]{4}-[0-9]{2}-[0-9]{2})(?![\w:-])",
)


# What follows "on" when it names a day, not a topic ("messages on 3 May"):
# the topic marker "on" looks ahead for it (no named groups: it is spliced in).
_ON_DAY = (
    rf"(?:{_WEEKDAY.replace('?P<w>', '')}|{_DAY_NUMBER}\s+(?:of\s+)?{_MONTH_NAME}"
    rf"|{_MONTH_NAME}\s+(?:the\s+)?{_DAY_NUMBER}|[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}})(?![\w:-])"
)


def _day_of(m: re.Match[str]) -> str:
    """The data.day a _TIME_DAY match names (see daemon/core/days.py)."""
    found = m.groupdict()
    relation = found.get("rel")
    prefix = f"{_RELATION_OF[relation.split()[0].lower()]} " if relation else ""
    if found.get("r"):
        said = " ".join(found["r"].lower().split())
        return prefix + ("day before yesterday" if said.endswith("before yesterday") else said)
    if found.get("w"):
        return prefix + found["w"].lower()
    if found.get("k"):
        return f"{prefix}{found['k'].lower()} week"
    if found.get("iso"):
        day = found["iso"]
    else:
        month = [n[:3] for n in _MONTHS].index((found["m"] or found["m2"]).lower()[:3]) + 1
        number = int(re.match(r"[0-9]+", found["d"] or found["d2"])[0])  # type: ignore[index]
        day = f"{found['y'] or '-'}-{month:02d}-{number:02d}"
    try:
        return check_day(prefix + day)
    except ValueError as error:
        raise InvalidRequest(str(error)) from None


# Days to come: nothing said is stored there yet, so such a read is a
# mistake to say, not a topic to search ("tomorrow" searched the word).
_FUTURE_DAY = re.compile(
    rf"\b(?:(?:{_DAY_RELATION}|on|from|during|for)\s+)?(?P<f>tomorrow|next\s+(?:week|{_WEEKDAY}))\b",
    FLAGS,
)


def _take_day(q: Query) -> str | None:
    """The one day the query names, cut out; refused when it names two.

    "yesterday and today", "on Monday on Tuesday": one ``day`` cannot hold
    two, and reading the first alone answered for it with full confidence
    while the second was dropped (outside review of issue 27).
    """
    if future := q.search(_FUTURE_DAY):
        raise InvalidRequest(
            f"{future.group('f')!r} is a day to come and nothing is stored there yet; "
            "ask about today or a day before it"
        )
    for pattern in _TIME_DAY:
        if m := q.take(pattern):
            day = _day_of(m)
            for other in _TIME_DAY:
                if second := q.search(other):
                    raise InvalidRequest(
                        f"two days in one question ({m.group(0).strip()!r} and "
                        f"{second.group(0).strip()!r}); ask for one, or for a span with "
                        "since and until ('since yesterday', 'before Monday')"
                    )
            return day
    return None


_ANY_TIME = re.compile(
    r"sec|min|hour|hr|day|week|tomorrow|[0-9][smhdw]\b|[0-9]{4}|\bon\s+(?:the\s+)?[0-9]|\b(?:on|since|after|before|until|till|to|than)\s+(?:the\s+)?(?:[0-9]|"
    + "|".join(m[:3] for m in _MONTHS)
    + ")",
    FLAGS,
)


def _unit_seconds(unit: str) -> int:
    return _UNIT_SECONDS[unit.lower()[0]]


def _window_seconds(m: re.Match[str]) -> int:
    found = m.groupdict()
    if found.get("g"):
        return int(found["g"]) * _unit_seconds(found["gu"])
    if found.get("n2"):
        return parse_number(found["n2"]) * _unit_seconds(found["u2"])
    count = parse_number(found["n"]) if found.get("n") else 1
    return count * _unit_seconds(found["u"])


def take_time(q: Query) -> dict[str, object]:
    """'in the last 10 minutes' -> within_seconds; 'since 2026-01-31T14:00Z' -> since."""
    if not q.search(_ANY_TIME):
        return {}
    for pattern in _TIME_WINDOW:
        if m := q.take(pattern):
            return {"within_seconds": _window_seconds(m)}
    for pattern in _TIME_OLDER:
        if m := q.take(pattern):
            count = parse_number(m.group("n")) if m.group("n") else 1
            return {"older_than_seconds": count * _unit_seconds(m.group("u"))}
    if day := _take_day(q):
        return {"day": day}
    if m := q.take(_TIME_MONTH):
        number = [n[:3] for n in _MONTHS].index(m.group("m").lower()[:3]) + 1
        year = int(m.group("y"))
        first = datetime(year, number, 1, tzinfo=UTC)
        return {
            "since": first,
            "until": datetime(year + number // 12, number % 12 + 1, 1, tzinfo=UTC),
        }
    found: dict[str, object] = {}
    if m := q.take(_TIME_SINCE):
        found["since"] = _moment(m.group("t"))
    if m := q.take(_TIME_UNTIL):
        found["until"] = _moment(m.group("u"))
    return found


def _moment(written: str) -> datetime:
    text = written.upper().replace(" ", "T")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as error:
        raise InvalidRequest(f"{written!r} is not a valid time ({error})") from None
    if moment.tzinfo is None:
        # A time without a zone is read as UTC, the zone of stored timestamps.
        moment = moment.replace(tzinfo=UTC)
    return moment


# --- seqs -------------------------------------------------------------------------------

_SEQ_NOUN = (
    r"(?:utterances?|messages?|entries|entry|items?|seqs?|sequence\s+numbers?|records?|lines?|ids?)"
)
_SEQ_LIST = (
    rf"\b(?:the\s+)?{_SEQ_NOUN}\s*(?:numbered|number|no\.?|\#|seq|id)?\s*(?:=|:)?\s*\#?(?P<a>\d+|{NUM})"
    rf"(?P<rest>(?:\s*(?:,|and|&|or)\s*(?:and\s+)?(?:number\s+|no\.?\s*)?\#?\d+)+|\s*(?:to|through|thru|until|till|-|\u2013)\s*(?:{_SEQ_NOUN}\s*)?\#?\d+)?\b"
)
_OPEN_SEQS = re.compile(
    r"\s*(?:on(?:wards?)?|and\s+(?:later|after|beyond|on(?:wards?)?|newer|everything\s+after|all\s+after))\b",
    FLAGS,
)
_OPEN_SEQS_BEFORE = re.compile(
    r"\b(?:after|since|following|later\s+than|newer\s+than|starting\s+(?:at|from|with))\s*$", FLAGS
)
_SEQ_HASH = r"(?<![\w])(?:\#|\bnumber\s+)(?P<a>\d+|{NUM})\b(?P<rest>)"


def seq_fields(seqs: tuple[int, ...]) -> dict[str, object]:
    """``seq`` for one, ``seqs`` for several, nothing for none."""
    if len(seqs) == 1:
        return {"seq": seqs[0]}
    return {"seqs": list(seqs)} if seqs else {}


def take_seqs(q: Query) -> tuple[int, ...]:
    """'utterance 12', 'messages 3, 5 and 7', 'utterances 3 to 6', '#12' (sorted, unique)."""
    m = q.take(_SEQ_LIST) or q.take(_SEQ_HASH)
    if m is None:
        return ()
    if _OPEN_SEQS.match(q.text, m.start()) or _OPEN_SEQS_BEFORE.search(
        q.text, max(0, m.start() - 30), m.start() + 1
    ):
        # Issue 25: "from message 5 on" was read as message 5 alone. The
        # newest seq is not known here, so an open range of seqs is refused.
        raise InvalidRequest(
            "an open range of seqs ('from message 5 on') is not supported; name its end "
            "('messages 5 to 8') or use turns ('since turn 3')"
        )
    first = parse_number(m.group("a"))
    rest = m.group("rest") or ""
    numbers = [digits_value(n) for n in re.findall(r"\d+", rest)]
    if numbers and re.match(r"\s*(?:to|through|thru|until|till|-|\u2013)", rest, FLAGS):
        low, high = sorted((first, numbers[0]))
        if high - low >= MAX_SEQ_RANGE:
            raise InvalidRequest(f"the seq range {low}-{high} is longer than {MAX_SEQ_RANGE}")
        return tuple(range(low, high + 1))
    return tuple(sorted({first, *numbers}))


# --- counts -----------------------------------------------------------------------------

_NEWEST = r"(?:last|latest|newest|most\s+recent|recent|previous|final)"
_OLDEST = r"(?:first|oldest|earliest)"


@dataclass(frozen=True, slots=True)
class Count:
    """A count as phrased: newest/oldest/top/bare, the number, and the noun's number."""

    kind: str  # "newest" | "oldest" | "top" | "bare"
    n: int | None
    window: bool = False  # "in the last 10 utterances": a window, not a number of hits
    plural: bool | None = None  # None: no noun followed
    after: str | None = None  # the word after a count that no noun followed


def _plural(noun: str | None) -> bool | None:
    if not noun:
        return None
    return re.fullmatch(SINGULAR, noun, FLAGS) is None


# "the 3 oldest" before "the oldest": each pattern takes its leftmost match,
# and "oldest utterances" alone would leave the 3 behind.
_COUNT_PATTERNS = (
    (
        "window",
        rf"\b(?:in|among|within|from|of|over|across)\s+the\s+(?P<k>{_NEWEST}|{_OLDEST})\s+(?P<n>{NUM})(?:\s+(?P<noun>{NOUN}))?\b",
    ),
    ("nk", rf"\b(?:the\s+)?(?P<n>{NUM})\s+(?P<k>{_NEWEST}|{_OLDEST})(?:\s+(?P<noun>{NOUN}))?\b"),
    (
        "kn",
        rf"\b(?:the\s+)?(?P<k>{_NEWEST}|{_OLDEST})(?:\s+(?P<n>{NUM}))?(?:\s+(?P<noun>{NOUN}))?\b",
    ),
    ("top", rf"\b(?:the\s+)?(?:top|best)\s+(?P<n>{NUM})(?:\s+(?P<noun>{NOUN}))?\b"),
    ("bare", rf"\b(?P<n>{NUM})\s+(?:(?:more|other)\s+)?(?P<noun>{NOUN})\b"),
)


_NEXT_WORD = re.compile(r"\s*([\w']+)")


def take_count(q: Query) -> Count | None:
    """'the last 5', 'the 3 oldest', 'the most recent message', 'top 3', '5 utterances'."""
    for form, pattern in _COUNT_PATTERNS:
        m = q.take(pattern)
        if m is None:
            continue
        n = parse_number(m.group("n")) if m.group("n") else None
        noun = m.groupdict().get("noun")
        after = _NEXT_WORD.match(q.text, m.start()) if noun is None else None
        word = after.group(1) if after else None
        if form in ("top", "bare"):
            return Count(form, n, plural=_plural(noun), after=word)
        kind = "oldest" if re.fullmatch(_OLDEST, m.group("k"), FLAGS) else "newest"
        return Count(kind, n, window=form == "window", plural=_plural(noun), after=word)
    return None


# --- topic --------------------------------------------------------------------------------

_STRONG_TOPIC = (
    r"\b(?:about|regarding|concerning|re:|on\s+the\s+(?:topic|subject)\s+of|related\s+to|relating\s+to"
    r"|(?:having\s+)?to\s+do\s+with|mentioning|(?:that|which|who)\s+mention(?:s|ed)?|containing"
    r"|(?:that|which)\s+contains?|with\s+the\s+(?:words?|phrase|term)|matching|referring\s+to"
    r"|(?:that|which)\s+refers?\s+to|talking\s+about|discussing|(?:that|which)\s+discuss(?:es|ed)?"
    r"|on\s+the\s+subject|(?:that|which)\s+touch(?:es)?\s+(?:on|upon)|touching\s+(?:on|upon)"
    r"|(?:that|which)\s+(?:deal|deals|dealt)\s+with|dealing\s+with|(?:that|which)\s+(?:cover|covers|covered)"
    rf"|covering|to\s+do\s+with|mentions?\s+of|references?\s+to|(?:any|anything)\s+(?:said\s+)?(?:on|about)|(?:that|which)\s+(?:concern|concerns|concerned)"
    # "From now on ..." is a time, not a topic (issue 25 review).
    rf"|(?<!now\s)(?<!here\s)on(?!\s+(?:the\s+)?(?:turn|{_ON_DAY})))\s+"
)
# "messages where the budget was mentioned": the topic sits between two
# markers, so it is bounded (80 characters) to keep the search linear.
_WHERE_TOPIC = re.compile(
    r"\b(?:where|in\s+which|wherever)\s+(?P<topic>[^.?!,]{1,80}?)\s+(?:was|were|is|are|got|gets|has\s+been|had\s+been)\s+"
    r"(?:mentioned|discussed|brought\s+up|talked\s+about|raised|named|referred\s+to|covered)\b",
    FLAGS,
)
# "who said X", "did anyone mention X", "did the user say X": the verb only
# marks a topic after a subject, so "tell me the last 5" has no topic "me the last 5".
_WEAK_TOPIC = (
    rf"\b(?:did|has|have|had|who|anyone|anybody|someone|somebody|ever|was|were|i|we|you|{SPEAKER}|{NOUN})"
    rf"(?:\s+(?:the\s+)?{SPEAKER})?(?:\s+ever)?\s+(?P<v>say|said|mention(?:s|ed)?|talk(?:ed)?\s+about"
    rf"|discuss(?:ed)?|br(?:ing|ought)\s+up|ask(?:ed)?\s+about|write|wrote)\s+(?:anything\s+(?:like\s+)?)?"
)


_SENTENCE_BREAK = re.compile(r"[?!,;]|\.\s")
# "what the user said in short", "what did the bot say to that": a weak
# marker's object never starts with a preposition or an adverb.
_ADVERBIAL = frozenset(
    """in at on during to for before after since until by with from earlier later today yesterday
    recently again briefly just so then there here when while""".split()
)
_ORDER_WORDS = frozenset(
    "last latest lastly recently newest first earliest oldest most recent before previously earlier".split()
)


def _take_where_topic(q: Query) -> str | None:
    m = q.search(_WHERE_TOPIC) if "where" in q.text.lower() or "which" in q.text.lower() else None
    if m is None:
        return None
    q.text = f"{q.text[: m.start()]} {q.text[m.end() :]}"
    return q.restore(m.group("topic")).strip(" ,.?!") or None


_THIS_CONVERSATION = re.compile(
    r"(?:this|the|our|that|my|current)\s+(?:ticket|conversation|convo|chat|thread|session|call|case"
    r"|history|transcript|dialog(?:ue)?)",
    re.IGNORECASE,
)


def split_topic(q: Query) -> tuple[Query, str | None]:
    """Cut the topic off a query: the part after 'about', 'regarding', 'mentioning'...

    Filters may follow the topic ("about Paris in turns 3 to 6"); they are
    taken off the topic's end only, so a topic such as "the last day of the
    trip" is not mistaken for a time filter. Returns the query without the
    topic (filters after the topic moved into it) and the topic, if any.
    """
    if (where := _take_where_topic(q)) is not None:
        return q, where
    for marker in (_STRONG_TOPIC, _WEAK_TOPIC):
        m = q.search(marker)
        if m is None:
            continue
        tail = q.text[m.end() :]
        # A weak marker's verb stays with the head: "did the assistant say" names the speaker.
        head = q.text[: m.end("v")] if marker is _WEAK_TOPIC else q.text[: m.start()]
        tail, trailing = _peel_filters(tail)
        topic = q.restore(tail).strip(" ,.?!")
        if not topic:
            if marker is _WEAK_TOPIC:
                continue
            return q, None
        if marker is _WEAK_TOPIC and (
            all(w.lower() in _ORDER_WORDS for w in topic.split())
            or topic.split()[0].lower() in _ADVERBIAL
            or topic[0] in "(["  # "what did the assistant say (turn 2)": a filter in brackets
        ):
            # "what did the bot say last": an order, not a topic (issue 25).
            continue
        if m.group(0).lower().strip() == "on" and _THIS_CONVERSATION.fullmatch(topic):
            # "the last 4 messages on this ticket": where, not what about (issue 25, corpus g).
            continue
        if _SENTENCE_BREAK.search(tail.strip(" ,.?!")) and (
            marker is _WEAK_TOPIC or m.group(0).lower().strip() == "on"
        ):
            # "what did we say last? show me ...", "... on my phone, can't scroll":
            # a weak marker's topic ends with its clause; a longer one is no topic.
            continue
        q.text = f"{head} {trailing}"
        return q, topic
    return q, None


_TRAILING = (
    rf"\s*,?\s*(?:(?:in|from|during|for|of|over|across|within)\s+)?(?:the\s+)?turns?\s*\#?{NUM}\s*{_TO}\s*(?:turn\s*\#?)?{NUM}",
    rf"\s*,?\s*between\s+turns?\s*\#?{NUM}\s+and\s+(?:turn\s*\#?)?{NUM}",
    rf"\s*,?\s*(?:before|after|since|until|up\s+to|from|in|during|at|starting\s+(?:at|from))\s+{_turn_ref('x')}(?:\s+on(?:wards?)?)?",
    rf"\s*,?\s*(?:(?:in|within|during|over|from|for|of)\s+)?(?:the\s+(?:last|past|previous)\s+(?:{NUM}\s*)?{_UNIT}"
    rf"|(?:last|past|previous)\s+(?:{NUM}\s*{_UNIT.replace('?P<u>', '?:')}|\d+[smhdw]\b))",
    rf"\s*,?\s*(?:in|during|from|over)\s+the\s+(?:last|latest|most\s+recent|past|previous)\s+(?:{NUM}\s+)?{_TURNS}",
    rf"\s*,?\s*(?:in|during|from|over|of)\s+the\s+(?:first|earliest|oldest|opening|initial)\s+{NUM}\s+turns",
    rf"\s*,?\s*(?:in|among|within|from|of)\s+the\s+(?:{_NEWEST}|{_OLDEST})\s+{NUM}(?:\s+{NOUN})?",
    rf"\s*,?\s*(?:(?:said|written|sent)\s+)?(?:from|by)\s+(?:the\s+)?{SPEAKER}",
    r"\s*,?\s*(?:so\s+far|thus\s+far|up\s+to\s+now|until\s+now|till\s+now|to\s+date|please|in\s+(?:the|this)\s+(?:conversation|chat|history|buffer))",
    r"\s*,?\s*(?:with|and|plus|including)\s+(?:the\s+)?(?:running\s+)?summary",
    # Times end a topic too (issue 27): "about the garden in May 2023", "... since 2023-05-01".
    rf"\s*,?\s*{_TIME_MONTH}",
    *(rf"\s*,?\s*{pattern}" for pattern in _TIME_DAY),
    rf"\s*,?\s*{_TIME_SINCE}",
    rf"\s*,?\s*{_TIME_UNTIL}",
)


_TRAILING_AT_END = tuple(re.compile(pattern + r"$", FLAGS) for pattern in _TRAILING)
# Longer than any one filter above (their numbers are bounded, and the
# query's whitespace runs are single spaces): each filter is looked for in
# this window at the end, not from every position of the topic, which made
# a topic followed by many spaces cubic (issue 14).
_FILTER_WINDOW = 200
# A topic ends with a few filters ("in turns 3 to 6 from the user"), not a
# hundred: past this many the rest stays in the topic, and the work stays small.
_MAX_FILTERS = 6


def _peel_filters(tail: str) -> tuple[str, str]:
    """Split ``tail`` into the topic and the filters that end it."""
    filters: list[str] = []
    end = len(tail)
    changed = True
    while changed and len(filters) < _MAX_FILTERS:
        changed = False
        while end and tail[end - 1] in " ?.!":
            end -= 1
        for pattern in _TRAILING_AT_END:
            m = pattern.search(tail, max(0, end - _FILTER_WINDOW), end)
            if m and m.end() > m.start():
                filters.append(tail[m.start() : end])
                end = m.start()
                changed = True
                break
    return tail[:end], " ".join(reversed(filters))


# --- token limit and summary ------------------------------------------------------------------

_TOKENS_TAIL = r"\s+(?:max(?:imum)?|at\s+most|tops|or\s+(?:less|fewer|under|below)|or\s+so)"
_TOKENS_AFTER = rf"(?:{_TOKENS_TAIL})?"
# The limit's own words first: "limit 70 tokens" must not leave "limit" behind.
_TOKEN_LIMIT = (
    rf"\btoken\s+(?:limit|budget|cap)\s*(?:of|=|:|is)?\s*(?P<n>{NUM})\b",
    rf"\b(?:in|within|under|with|using|inside)\s+(?:a|an|the)\s+(?P<n>{NUM})[\s-]*tokens?\s+(?:budget|limit|cap|max(?:imum)?)\b",
    rf"\b(?:with\s+)?(?:a\s+)?(?:limit|budget|cap|maximum|max)\s*(?:of|=|:|is)?\s*(?P<n>{NUM})\s*tokens?\b{_TOKENS_AFTER}",
    rf"\b(?:(?:stay(?:ing)?|keep(?:\s+it)?|kept|staying)\s+)?(?:(?:using|with|in|within|at)\s+)?(?:in|within|under|to|at\s+most|max(?:imum)?|no\s+more\s+than|no\s+longer\s+than|not\s+more\s+than"
    rf"|using|of|below|up\s+to|limited\s+to|capped\s+at|cap(?:ped)?\s+it\s+at|with\s+a\s+limit\s+of|fitting\s+(?:in|into)|less\s+than|fewer\s+than|into|at|around|about)"
    rf"\s+(?:at\s+most\s+|about\s+|roughly\s+|around\s+|only\s+|just\s+)?(?P<n>{NUM})\s*tokens?\b{_TOKENS_AFTER}",
    rf"\b(?P<n>{NUM})[\s-]*tokens?(?:{_TOKENS_TAIL}"
    r"|(?=\s+(?:summary|recap|synopsis|overview|digest|rundown|limit)\b|\s*$|\s*[,;\])]))",
)


def take_token_limit(q: Query) -> int | None:
    """'in 200 tokens', 'a 200-token summary', 'token limit 200', 'within 1k tokens'."""
    for pattern in _TOKEN_LIMIT:
        if m := q.take(pattern):
            return parse_number(m.group("n"))
    return None


_SUMMARY = r"(?P<with>\b(?:with|and|plus|including|along\s+with|as\s+well\s+as)\s+(?:also\s+)?)?\b(?:the\s+|a\s+)?(?:(?:running|current|latest|rolling|stored|conversation(?:'s)?)\s+)*summary\b"


def take_summary(q: Query) -> re.Match[str] | None:
    """'the summary', 'the running summary', 'with the summary' (group ``with``)."""
    return q.take(_SUMMARY) if "summary" in q.text.lower() else None
