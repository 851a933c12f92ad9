"""The disk backend's stored records: JSON text, each with a schema version.

Records are JSON rather than pickles: a data dir can be read with the
``sqlite3`` shell or another language, and loading one never runs code.
Every record names the schema it was written with, so a chd that meets a
record from a newer version refuses it instead of misreading it.

Keys (all text, so they sort by code point in SQLite):

    chd:schema          the data dir's schema record, written at creation
    m:<conversation>    meta: counters, which seqs are in the buffer, the
                        summary queue and the archive (as SeqRuns), and
                        per-conversation settings
    s:<conversation>    the running summary (written only when it changes)
    u:<conversation>#<seq>  one utterance; its key never changes while it
                        moves from the buffer to the summary queue to the
                        archive
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from backends.seq_runs import SeqRuns
from daemon.errors import StorageError
from daemon.utterance import Summary, Utterance

__all__ = [
    "SCHEMA_VERSION",
    "SCHEMA_KEY",
    "META_PREFIX",
    "Meta",
    "NewerSchema",
    "meta_key",
    "summary_key",
    "utterance_key",
    "encode_meta",
    "decode_meta",
    "encode_utterance",
    "decode_utterance",
    "encode_summary",
    "decode_summary",
    "encode_schema",
    "decode_schema",
]

# Bump when a record's layout changes, and teach decode_* to read the old one.
SCHEMA_VERSION = 1
SCHEMA_KEY = "chd:schema"
T = TypeVar("T")
META_PREFIX = "m:"


class NewerSchema(StorageError):
    """A record was written by a newer chd with a schema this one cannot read."""


def meta_key(conversation_id: str) -> str:
    return META_PREFIX + conversation_id


def summary_key(conversation_id: str) -> str:
    return "s:" + conversation_id


def utterance_key(conversation_id: str, seq: int) -> str:
    # The seq after the last "#" is digits only, so distinct (id, seq) pairs
    # never make the same key whatever characters the id holds.
    return f"u:{conversation_id}#{seq}"


@dataclass(frozen=True, slots=True)
class Meta:
    """The small per-conversation record every operation reads first.

    ``token`` changes with every commit; a state cached in memory is current
    exactly when its token matches the stored one.
    """

    token: str
    next_seq: int = 1
    last_turn: int = 0
    buffer: SeqRuns = field(default_factory=SeqRuns)
    pending: SeqRuns = field(default_factory=SeqRuns)
    archive: SeqRuns = field(default_factory=SeqRuns)
    settings: dict[str, Any] = field(default_factory=dict)
    has_summary: bool = False


# One encoder for every record: json.dumps with options builds a new
# JSONEncoder on every call, a third of the cost of encoding a small record.
_dump = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _load(text: Any, what: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise StorageError(f"{what} is not a chd record (found {type(text).__name__})")
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StorageError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(record, dict):
        raise StorageError(f"{what} is not a JSON object")
    schema = record.get("schema")
    if not isinstance(schema, int):
        raise StorageError(f"{what} has no schema version")
    if schema > SCHEMA_VERSION:
        raise NewerSchema(
            f"{what} was written by a newer chd (storage schema {schema}); "
            f"this chd reads schema {SCHEMA_VERSION}: upgrade chd"
        )
    return record


def encode_schema(created_by: str) -> str:
    return _dump({"schema": SCHEMA_VERSION, "created_by": created_by})


def decode_schema(text: Any) -> int:
    return int(_load(text, "the data dir's schema record")["schema"])


def encode_meta(meta: Meta) -> str:
    return _dump(
        {
            "schema": SCHEMA_VERSION,
            "token": meta.token,
            "next_seq": meta.next_seq,
            "last_turn": meta.last_turn,
            "buffer": meta.buffer.to_record(),
            "pending": meta.pending.to_record(),
            "archive": meta.archive.to_record(),
            "settings": meta.settings,
            "has_summary": meta.has_summary,
        }
    )


def decode_meta(text: Any, conversation_id: str) -> Meta:
    return _parse(text, f"the meta record of conversation {conversation_id!r}", _meta)


def _meta(record: dict[str, Any]) -> Meta:
    return Meta(
        token=str(record["token"]),
        next_seq=int(record["next_seq"]),
        last_turn=int(record["last_turn"]),
        buffer=SeqRuns(tuple(r) for r in record["buffer"]),
        pending=SeqRuns(tuple(r) for r in record["pending"]),
        archive=SeqRuns(tuple(r) for r in record["archive"]),
        settings=dict(record["settings"]),
        has_summary=bool(record["has_summary"]),
    )


def encode_utterance(utterance: Utterance) -> str:
    return _dump({"schema": SCHEMA_VERSION, **utterance.to_record()})


def decode_utterance(text: Any, conversation_id: str, seq: int) -> Utterance:
    return _parse(text, f"utterance {seq} of conversation {conversation_id!r}", Utterance.from_record)


def encode_summary(summary: Summary) -> str:
    return _dump({"schema": SCHEMA_VERSION, **summary.to_record()})


def decode_summary(text: Any, conversation_id: str) -> Summary:
    return _parse(text, f"the summary of conversation {conversation_id!r}", Summary.from_record)


def _parse(text: Any, what: str, build: Callable[[dict[str, Any]], T]) -> T:
    record = _load(text, what)
    try:
        return build(record)
    except (KeyError, TypeError, ValueError) as exc:
        raise StorageError(f"{what} is malformed: {exc!r}") from None
