"""The demo conversation of docs/query-language.md, seeded straight into a backend.

Seqs 1-8, turns 1-4 (user opens each turn, the assistant answers). Seqs 1-4
are two hours old and 5-8 one minute old, so time filters have something to
separate. Written through ``Backend.transact`` so the timestamps can be set.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from chd.backends.base import Change, ConversationState
from chd.core.history import ConversationHistory
from chd.core.language.guide import DEMO_CONVERSATION
from chd.core.utterance import Utterance

__all__ = ["seed_demo", "OLD_SEQS", "RECENT_SEQS"]

OLD_SEQS = (1, 2, 3, 4)
RECENT_SEQS = (5, 6, 7, 8)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def seed_demo(
    history: ConversationHistory,
    conversation_id: str = "default",
    important: Iterable[int] = (),
    settings: dict[str, Any] | None = None,
) -> None:
    now = datetime.now(UTC)
    marked = set(important)
    utterances, turn = [], 0
    for seq, (speaker, text) in enumerate(DEMO_CONVERSATION, start=1):
        turn += speaker == "user"
        age = timedelta(hours=2) if seq in OLD_SEQS else timedelta(minutes=1)
        utterances.append(
            Utterance(
                conversation_id=conversation_id,
                seq=seq,
                speaker=speaker,  # type: ignore[arg-type]
                text=text,
                turn_number=turn,
                timestamp=_stamp(now - age),
                tokens=history.counter.count(text),
                important=seq in marked,
            )
        )

    def decide(state: ConversationState) -> tuple[Change, None]:
        return Change(
            append=utterances,
            next_seq=len(utterances) + 1,
            last_turn=turn,
            settings=dict(settings) if settings else None,
        ), None

    history.backend.transact(conversation_id, decide)
