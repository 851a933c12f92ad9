"""Conversations as JSON texts, for ``chd export`` and ``chd import`` in bulk (issue 17).

An export line of an utterance is ``{"record":"utterance","in":WHERE,`` and
then the JSON object of ``Utterance.to_record()`` without its opening brace;
the disk backend keeps each utterance as that same JSON object inside its
block records. Moving that text as it is, instead of decoding it into an
``Utterance`` and encoding it again, is what makes a transfer run at
100,000 utterances a second in Python: per utterance it was two thirds of
the work.

``EncodedConversation`` is a conversation in that form. A backend that can
read or write it without building utterances offers ``read_encoded`` and
``write_encoded`` (``BulkTransfer``, looked up on its class); any other
backend is served through ``ConversationState`` (``from_state`` /
``to_state``). Every text here is checked JSON: an import builds it from a
line it has checked, a backend from a record it wrote.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from chd.backends.base import Change, ConversationState
from chd.backends.records import LONG_TEXT
from chd.core.utterance import Summary, Utterance

__all__ = [
    "EncodedUtterance",
    "EncodedConversation",
    "BulkTransfer",
    "encode_record",
    "RECORD_KEYS",
    "replacing_change",
]

# (seq, whether its text is longer than LONG_TEXT characters, the JSON
# object of Utterance.to_record()). Tuples rather than a dataclass: an
# import makes one per utterance. The flag is the disk backend's placement
# rule (backends/records.py), known for free where the text is at hand.
EncodedUtterance = tuple[int, bool, str]

# The keys of Utterance.to_record(), in its order.
RECORD_KEYS = (
    "seq",
    "speaker",
    "text",
    "turn_number",
    "timestamp",
    "tokens",
    "conversation_id",
    "important",
)

# One encoder for every record: json.dumps with options builds a new encoder each call.
_dump = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def encode_record(utterance: Utterance) -> EncodedUtterance:
    """``utterance`` in encoded form (the JSON text the disk backend stores in its blocks)."""
    return (utterance.seq, len(utterance.text) > LONG_TEXT, _dump(utterance.to_record()))


def _decoded(items: list[EncodedUtterance]) -> list[Utterance]:
    # One json.loads for the list: a call per text costs several times more.
    return [
        Utterance.from_record(r)
        for r in json.loads("[" + ",".join(item[2] for item in items) + "]")
    ]


@dataclass(slots=True)
class EncodedConversation:
    """One conversation, its utterances as JSON texts, each list in seq order."""

    conversation_id: str
    next_seq: int = 1
    last_turn: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    summary: Summary = field(default_factory=Summary)
    buffer: list[EncodedUtterance] = field(default_factory=list)
    pending: list[EncodedUtterance] = field(default_factory=list)
    archive: list[EncodedUtterance] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        """As ``ConversationState.is_empty``."""
        return self.next_seq == 1 and not self.settings

    @property
    def size(self) -> int:
        """How many utterances it holds."""
        return len(self.buffer) + len(self.pending) + len(self.archive)

    @classmethod
    def from_state(cls, state: ConversationState) -> EncodedConversation:
        return cls(
            conversation_id=state.conversation_id,
            next_seq=state.next_seq,
            last_turn=state.last_turn,
            settings=state.settings,
            summary=state.summary,
            buffer=[encode_record(u) for u in state.utterances],
            pending=[encode_record(u) for u in state.pending],
            archive=[encode_record(u) for u in state.archive],
        )

    def to_state(self) -> ConversationState:
        return ConversationState(
            conversation_id=self.conversation_id,
            next_seq=self.next_seq,
            last_turn=self.last_turn,
            utterances=_decoded(self.buffer),
            pending=_decoded(self.pending),
            summary=self.summary,
            settings=dict(self.settings),
            archive=_decoded(self.archive),
        )


@runtime_checkable
class BulkTransfer(Protocol):
    """What a backend offers to export and import without building utterances."""

    def read_encoded(self, conversation_id: str) -> EncodedConversation:
        """The conversation as one snapshot, like ``read``."""
        ...

    def write_encoded(self, batch: Sequence[EncodedConversation], replace: bool) -> None:
        """Write every conversation of ``batch`` in one storage transaction, whole.

        Raises:
            InvalidRequest: a conversation already holds data and ``replace``
                is False; nothing of the batch is written then.
        """
        ...


def replacing_change(current: ConversationState, imported: ConversationState) -> Change:
    """The change that makes ``current`` into ``imported`` (an import with ``--replace``)."""
    return Change(
        remove={u.seq for u in current.utterances},
        pending_remove={u.seq for u in current.pending},
        append=list(imported.utterances),
        pending_add=list(imported.pending),
        archive_remove={u.seq for u in current.archive},
        archive_add=list(imported.archive),
        summary=imported.summary,
        next_seq=imported.next_seq,
        last_turn=imported.last_turn,
        settings=dict(imported.settings),
    )
