"""The in-memory backend: fast, ephemeral, the default."""

from __future__ import annotations

import threading
from typing import Callable

from chd.backends.base import Change, ConversationState, T, apply_change

__all__ = ["MemoryBackend"]


class MemoryBackend:
    """Conversations in a dict, one lock per conversation.

    States are replaced, never mutated, so ``read`` hands out the stored
    object itself: a snapshot for free, and different conversations only
    share the short critical section that creates a lock.
    """

    name = "memory"

    def __init__(self) -> None:
        self._states: dict[str, ConversationState] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # Conversations with state, kept as they change (issue 17): the
        # max_conversations check reads it on every new conversation.
        self._count = 0

    def _lock(self, conversation_id: str) -> threading.Lock:
        lock = self._locks.get(conversation_id)
        if lock is None:
            with self._locks_guard:
                lock = self._locks.setdefault(conversation_id, threading.Lock())
        return lock

    def read(self, conversation_id: str) -> ConversationState:
        state = self._states.get(conversation_id)
        return state if state is not None else ConversationState(conversation_id)

    def transact(
        self,
        conversation_id: str,
        decide: Callable[[ConversationState], tuple[Change, T]],
    ) -> T:
        with self._lock(conversation_id):
            state = self.read(conversation_id)
            change, value = decide(state)
            if not change.is_empty:
                new_state = apply_change(state, change)
                self._states[conversation_id] = new_state
                if state.is_empty != new_state.is_empty:
                    with self._locks_guard:
                        self._count += 1 if state.is_empty else -1
            return value

    def conversations(self) -> list[str]:
        return sorted(cid for cid, s in self._states.items() if not s.is_empty)

    def count_conversations(self) -> int:
        return self._count

    def close(self) -> None:
        self._states.clear()
        self._count = 0
