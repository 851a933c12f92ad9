"""Marking utterances important: the frontal cortex's say in what stays in context.

The flag is stored on the utterance (``Utterance.important``) and is what the
``importance`` eviction policy reads; under ``fifo`` it is kept and reported
but does not change the eviction order.
"""

from __future__ import annotations

from typing import Any

from chd.backends.base import Backend, Change, ConversationState
from chd.core.errors import NotFound
from chd.core.language.intents import MarkIntent
from chd.core.memory.selection import missing_seq_message, position_of
from chd.core.utterance import Utterance

__all__ = ["mark", "mark_change"]


def mark_change(
    state: ConversationState, intent: MarkIntent
) -> tuple[Change, tuple[Utterance, int, bool]]:
    """The change that sets the flag; NOT_FOUND if the seq is not in the buffer."""
    position = position_of(state.utterances, intent.seq)
    if position is None:
        raise NotFound(
            missing_seq_message(state, intent.seq) + "; only buffered utterances can be marked"
        )
    utterance = state.utterances[position]
    if utterance.important == intent.important:
        return Change(), (utterance, position, False)
    marked = utterance.with_important(intent.important)
    return Change(update=[marked]), (marked, position, True)


def mark(
    backend: Backend, intent: MarkIntent, conversation_id: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Mark or unmark one utterance; the ``result`` and ``metadata`` of the response."""
    utterance, position, changed = backend.transact(
        conversation_id, lambda state: mark_change(state, intent)
    )
    return (
        {"utterance": utterance.to_dict(position), "changed": changed},
        {
            "conversation_id": conversation_id,
            "items_affected": 1 if changed else 0,
            "tokens_used": 0,
        },
    )
