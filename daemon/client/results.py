"""What the client's typed methods return: small frozen dataclasses, numbers as ints.

A Struct carries every number as a double (docs/protocol.md); these read
the wire dicts back into the types the protocol means: seqs, turns and
token counts as ``int``, scores as ``float``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Answer",
    "Utterance",
    "SearchHit",
    "Stored",
    "StoredMany",
    "Removed",
    "Summary",
    "Context",
    "plain",
]


def plain(value: Any) -> Any:
    """``value`` with every whole double back as an int (5.0 -> 5), recursively."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole ``Query`` response: what ``Client.query`` returns.

    ``result`` and ``metadata`` are the response's Structs as dicts, whole
    numbers as ints.
    """

    operation: str
    result: dict[str, Any]
    metadata: dict[str, Any]

    @property
    def conversation(self) -> str:
        return str(self.metadata.get("conversation_id", ""))


@dataclass(frozen=True, slots=True)
class Utterance:
    """One stored utterance (docs/protocol.md, "Utterances").

    ``turn`` is the wire's ``turn_number`` and ``index`` its
    ``utterance_index`` (None for an archived utterance, which has none).
    """

    seq: int
    speaker: str
    text: str
    turn: int
    timestamp: str
    tokens: int
    conversation: str
    important: bool = False
    index: int | None = None
    archived: bool = False

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> Utterance:
        index = wire.get("utterance_index")
        return cls(
            seq=int(wire["seq"]),
            speaker=str(wire["speaker"]),
            text=str(wire["text"]),
            turn=int(wire["turn_number"]),
            timestamp=str(wire.get("timestamp", "")),
            tokens=int(wire.get("tokens", 0)),
            conversation=str(wire.get("conversation_id", "")),
            important=bool(wire.get("important", False)),
            index=None if index is None else int(index),
            archived=bool(wire.get("archived", False)),
        )


@dataclass(frozen=True, slots=True)
class SearchHit:
    """An utterance a topic search found, and its relevance (BM25 blended with recency)."""

    utterance: Utterance
    score: float


@dataclass(frozen=True, slots=True)
class Stored:
    """A store's answer: the utterance as stored, and the seqs it evicted toward the summary."""

    utterance: Utterance
    evicted: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class StoredMany:
    """A store-many's answer: the utterances as stored, in order, and every seq evicted toward the summary.

    ``replayed`` is True when the daemon answered a batch it already held
    under the call's idempotency key (its oldest utterances may be folded
    away by then, so there may be fewer than were sent).
    """

    utterances: tuple[Utterance, ...]
    evicted: tuple[int, ...] = ()
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class Removed:
    """A remove's answer: the seqs deleted (buffer, queue and archive) and the summary segments it touched."""

    seqs: tuple[int, ...]
    summary_segments_dropped: int = 0
    summary_segments_rebuilt: int = 0


@dataclass(frozen=True, slots=True)
class Summary:
    """The running summary ("Get summary") or a summary made on request ("Summarize").

    ``through_seq`` and ``pending`` say what the running summary covers;
    ``token_limit`` and ``utterances_covered`` are set for a summarize.
    """

    text: str
    tokens: int
    through_seq: int = 0
    pending: int = 0
    summarizer: str = ""
    token_limit: int | None = None
    utterances_covered: int | None = None


@dataclass(frozen=True, slots=True)
class Context:
    """The summary plus the newest utterances that fit ``token_limit``, as one text to paste."""

    text: str
    tokens: int
    token_limit: int
    summary: str
    utterances: tuple[Utterance, ...] = field(default_factory=tuple)


def utterances_of(answer: Answer) -> list[Utterance]:
    return [Utterance.from_wire(u) for u in answer.result.get("utterances", [])]


def hits_of(answer: Answer) -> list[SearchHit]:
    return [
        SearchHit(Utterance.from_wire(u), float(u.get("score", 0.0)))
        for u in answer.result.get("utterances", [])
    ]


def stored_of(answer: Answer) -> Stored:
    result = answer.result
    return Stored(
        Utterance.from_wire(result["utterance"]), tuple(int(s) for s in result.get("evicted", []))
    )


def stored_many_of(answer: Answer) -> StoredMany:
    result = answer.result
    return StoredMany(
        tuple(Utterance.from_wire(u) for u in result["utterances"]),
        tuple(int(s) for s in result.get("evicted", [])),
        bool(answer.metadata.get("replayed", False)),
    )


def removed_of(answer: Answer) -> Removed:
    result = answer.result
    return Removed(
        tuple(int(s) for s in result.get("removed", [])),
        int(result.get("summary_segments_dropped", 0)),
        int(result.get("summary_segments_rebuilt", 0)),
    )


def summary_of(answer: Answer) -> Summary:
    result, meta = answer.result, answer.metadata
    limit, covered = result.get("token_limit"), result.get("utterances_covered")
    return Summary(
        text=str(result.get("summary", "")),
        tokens=int(result.get("summary_tokens", result.get("tokens", 0))),
        through_seq=int(result.get("summary_through_seq", meta.get("summary_through_seq", 0))),
        pending=int(result.get("summary_pending", meta.get("summary_pending", 0))),
        summarizer=str(meta.get("summarizer", "")),
        token_limit=None if limit is None else int(limit),
        utterances_covered=None if covered is None else int(covered),
    )


def context_of(answer: Answer) -> Context:
    result = answer.result
    return Context(
        text=str(result.get("context", "")),
        tokens=int(result.get("tokens", 0)),
        token_limit=int(result.get("token_limit", 0)),
        summary=str(result.get("summary", "")),
        utterances=tuple(Utterance.from_wire(u) for u in result.get("utterances", [])),
    )


def result_of(answer: Answer) -> dict[str, Any]:
    return answer.result
