"""The redis backend's meta record: a conversation's counters, settings and which seqs are where."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from chd.backends.records import _dump
from chd.backends.seq_runs import SeqRuns
from chd.core.errors import StorageError

__all__ = ["Meta", "META_SCHEMA"]

# The meta record's own layout version (the utterance and summary records
# are the disk backend's, which carry theirs).
META_SCHEMA = 1


@dataclass(slots=True)
class Meta:
    """The meta record: what every operation reads first.

    ``summary_at`` and ``updated_at`` name the commit that last wrote the
    summary and the last that rewrote a stored utterance in place (a mark):
    a replica whose cached state was read at another commit fetches those
    again, and otherwise only the seqs it has not seen.
    """

    conversation_id: str
    next_seq: int = 1
    last_turn: int = 0
    buffer: SeqRuns = SeqRuns()
    pending: SeqRuns = SeqRuns()
    archive: SeqRuns = SeqRuns()
    settings: dict[str, Any] | None = None
    summary_at: str = ""
    updated_at: str = ""

    def encode(self) -> str:
        settings = _dump(self.settings) if self.settings else "{}"
        return (
            f'{{"schema":{META_SCHEMA},"id":{_dump(self.conversation_id)},"next_seq":{self.next_seq:d},'
            f'"last_turn":{self.last_turn:d},"buffer":{self.buffer.to_json()},'
            f'"pending":{self.pending.to_json()},"archive":{self.archive.to_json()},'
            f'"settings":{settings},"summary_at":"{self.summary_at}","updated_at":"{self.updated_at}"}}'
        )

    @classmethod
    def decode(cls, text: str, conversation_id: str) -> Meta:
        what = f"the meta record of conversation {conversation_id!r} in Redis"
        try:
            record = json.loads(text)
            if record["schema"] > META_SCHEMA:
                raise StorageError(
                    f"{what} was written by a newer chd (schema {record['schema']}): upgrade chd"
                )
            return cls(
                conversation_id=conversation_id,
                next_seq=int(record["next_seq"]),
                last_turn=int(record["last_turn"]),
                buffer=SeqRuns(tuple(r) for r in record["buffer"]),
                pending=SeqRuns(tuple(r) for r in record["pending"]),
                archive=SeqRuns(tuple(r) for r in record["archive"]),
                settings=dict(record["settings"]),
                summary_at=str(record["summary_at"]),
                updated_at=str(record["updated_at"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"{what} is malformed: {exc!r}") from None
