"""Utterances and summaries: the records a conversation is made of."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

__all__ = [
    "SPEAKERS",
    "Speaker",
    "Utterance",
    "SummarySegment",
    "Summary",
    "now_rfc3339",
    "rfc3339",
]

Speaker = Literal["user", "assistant", "system"]
SPEAKERS: tuple[Speaker, ...] = ("user", "assistant", "system")


# (whole second, its text): every store stamps its utterance, and building
# the date part once a second instead of each time halves the cost.
_second: tuple[int, str] = (-1, "")


def rfc3339(moment: datetime) -> str:
    """``moment`` (aware) in the form ``now_rfc3339`` writes: UTC, microseconds, Z."""
    moment = moment.astimezone(UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond:06d}Z"


def now_rfc3339() -> str:
    """The current time as RFC 3339 in UTC with microseconds, e.g. 2026-11-21T14:00:00.000001Z."""
    global _second
    micros = time.time_ns() // 1000
    whole, fraction = divmod(micros, 1_000_000)
    second, text = _second
    if whole != second:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        _second = (whole, text)
    return f"{text}.{fraction:06d}Z"


@dataclass(frozen=True, slots=True)
class Utterance:
    """One stored utterance.

    ``seq`` is 1-based, monotonic per conversation and never reused, so it
    names an utterance for its whole life; its position in the buffer
    (``utterance_index``) changes as older ones leave and is computed when the
    utterance is returned, never stored.

    ``key`` is the idempotency key its store carried (empty: none): kept with
    the utterance while it is held, so a store sent again with that key is
    answered with this utterance instead of storing it twice (issue 29). It
    is stored, never returned on the wire.
    """

    conversation_id: str
    seq: int
    speaker: Speaker
    text: str
    turn_number: int
    timestamp: str
    tokens: int
    important: bool = False
    key: str = ""

    def differs_from(self, text: str, speaker: str, turn_number: int | None) -> list[str]:
        """The fields in which a store sent again with this utterance's key asks for something else.

        The turn counts only when the store names one: an unnamed turn is whatever the
        store was given the first time.
        """
        return [
            name
            for name, same in (
                ("text", self.text == text),
                ("speaker", self.speaker == speaker),
                ("turn_number", turn_number is None or self.turn_number == turn_number),
            )
            if not same
        ]

    def to_dict(self, utterance_index: int | None = None) -> dict[str, Any]:
        """The wire form; ``utterance_index`` is included when known."""
        out: dict[str, Any] = {
            "seq": self.seq,
            "speaker": self.speaker,
            "text": self.text,
            "turn_number": self.turn_number,
            "timestamp": self.timestamp,
            "tokens": self.tokens,
            "conversation_id": self.conversation_id,
            "important": self.important,
        }
        if utterance_index is not None:
            out["utterance_index"] = utterance_index
        return out

    def to_record(self) -> dict[str, Any]:
        """A plain dict for storage (JSON- and pickle-safe).

        ``idempotency_key`` is written last and only when set, so a record
        without one reads as before and older records need no migration.
        """
        record = self.to_dict()
        if self.key:
            record["idempotency_key"] = self.key
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Utterance:
        # What __init__ would make, with the fields set through their slots:
        # a frozen dataclass's __init__ goes through object.__setattr__ for
        # each, twice the cost, and a state-cache miss decodes every buffered
        # utterance (issue 17). tests/test_core.py checks it against __init__.
        made = object.__new__(cls)
        conversation_id, seq, speaker, text, turn_number, timestamp, tokens, important, key = (
            _UTTERANCE_SLOTS
        )
        conversation_id(made, record["conversation_id"])
        seq(made, int(record["seq"]))
        speaker(made, record["speaker"])
        text(made, record["text"])
        turn_number(made, int(record["turn_number"]))
        timestamp(made, record["timestamp"])
        tokens(made, int(record["tokens"]))
        important(made, bool(record.get("important", False)))
        key(made, str(record.get("idempotency_key", "")))
        return made

    def with_important(self, important: bool) -> Utterance:
        return replace(self, important=important)


# Utterance's slot setters, in from_record's order.
_UTTERANCE_SLOTS = tuple(
    vars(Utterance)[name].__set__
    for name in (
        "conversation_id",
        "seq",
        "speaker",
        "text",
        "turn_number",
        "timestamp",
        "tokens",
        "important",
        "key",
    )
)


@dataclass(frozen=True, slots=True)
class SummarySegment:
    """A piece of the running summary and the utterances it was made from.

    Keeping the seq and turn range per segment lets a remove find which parts
    of the summary hold content of the utterances it deletes. ``made_by``
    names the summarizer that wrote the text (``extractive``,
    ``claude:<model>``); ``error`` says why the configured summarizer was not
    the one that wrote it (empty when it was). ``keys`` holds, per evicted
    utterance folded into it, its most telling word (its first fact, else its
    longest content word): how coverage is measured (summaries/coverage.py).
    """

    text: str
    tokens: int
    seq_from: int
    seq_to: int
    turn_from: int
    turn_to: int
    made_by: str = ""
    error: str = ""
    keys: tuple[str, ...] = ()

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "text": self.text,
            "tokens": self.tokens,
            "seq_from": self.seq_from,
            "seq_to": self.seq_to,
            "turn_from": self.turn_from,
            "turn_to": self.turn_to,
            "made_by": self.made_by,
            "error": self.error,
        }
        if self.keys:  # only when set, so older readers see the record they know
            record["keys"] = list(self.keys)
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> SummarySegment:
        return cls(
            text=record["text"],
            tokens=int(record["tokens"]),
            seq_from=int(record["seq_from"]),
            seq_to=int(record["seq_to"]),
            turn_from=int(record["turn_from"]),
            turn_to=int(record["turn_to"]),
            made_by=str(record.get("made_by", "")),
            error=str(record.get("error", "")),
            keys=tuple(str(k) for k in record.get("keys", ())),
        )


@dataclass(frozen=True, slots=True)
class Summary:
    """The running summary of everything evicted from a conversation's buffer.

    ``through_seq`` is the highest evicted seq folded in (0: nothing yet).
    ``tokens`` counts the joined ``text``, which is what the budget limits.

    ``held`` are the originals of batches the offline summarizer folded while
    Claude was the configured summarizer and failed: kept until Claude
    rewrites their segments from them (issue 13), bounded per conversation.
    ``held_dropped`` counts originals dropped by that bound (oldest first)
    and ``held_dropped_through`` is the highest seq among them: a segment
    reaching down to it keeps its fallback mark even after a rewrite.
    """

    segments: tuple[SummarySegment, ...] = ()
    through_seq: int = 0
    tokens: int = 0
    held: tuple[Utterance, ...] = ()
    held_dropped: int = 0
    held_dropped_through: int = 0

    @property
    def text(self) -> str:
        return "\n".join(s.text for s in self.segments)

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "segments": [s.to_record() for s in self.segments],
            "through_seq": self.through_seq,
            "tokens": self.tokens,
        }
        # Written only when set, so a summary without them reads as before.
        if self.held:
            record["held"] = [u.to_record() for u in self.held]
        if self.held_dropped:
            record["held_dropped"] = self.held_dropped
            record["held_dropped_through"] = self.held_dropped_through
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> Summary:
        if not record:
            return cls()
        return cls(
            segments=tuple(SummarySegment.from_record(s) for s in record["segments"]),
            through_seq=int(record["through_seq"]),
            tokens=int(record["tokens"]),
            held=tuple(Utterance.from_record(u) for u in record.get("held", ())),
            held_dropped=int(record.get("held_dropped", 0)),
            held_dropped_through=int(record.get("held_dropped_through", 0)),
        )

    def with_held(
        self, held: tuple[Utterance, ...], dropped: int = 0, dropped_through: int = 0
    ) -> Summary:
        """This summary with other originals awaiting a rewrite (and more dropped, if any)."""
        return replace(
            self,
            held=held,
            held_dropped=self.held_dropped + dropped,
            held_dropped_through=max(self.held_dropped_through, dropped_through),
        )
