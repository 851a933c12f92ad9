"""A custom backend, loaded by ``module:Class`` like a user's would be.

It works the way a Redis backend behind several daemons would (WATCH the
conversation, decide, MULTI/EXEC, start over if another writer got in):
each state is stored with a version, ``transact`` decides without holding
any lock and commits only if the version is unchanged, retrying otherwise.
docs/backends.md walks through it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from chd.backends.base import Change, ConversationState, T, apply_change
from chd.core.errors import StorageError

__all__ = ["OptimisticBackend"]


class OptimisticBackend:
    """Compare-and-set over versioned states; ``decide`` may run several times."""

    name = "optimistic"

    def __init__(self, max_attempts: int = 10_000, **options: Any) -> None:
        self.options = options  # what `chd serve` passed (--data-dir, --durability)
        # apply_change returns new objects and nothing mutates a stored one,
        # so a stored state doubles as the snapshot read() hands out.
        self._rows: dict[str, tuple[int, ConversationState]] = {}
        # Stands in for the store's own atomic compare-and-set (Redis EXEC);
        # held only to compare and swap, never while deciding.
        self._swap = threading.Lock()
        self._max_attempts = max_attempts

    def read(self, conversation_id: str) -> ConversationState:
        row = self._rows.get(conversation_id)
        return ConversationState(conversation_id) if row is None else row[1]

    def transact(
        self,
        conversation_id: str,
        decide: Callable[[ConversationState], tuple[Change, T]],
    ) -> T:
        for _ in range(self._max_attempts):
            version, state = self._rows.get(
                conversation_id, (0, ConversationState(conversation_id))
            )
            change, value = decide(state)
            if change.is_empty:
                return value
            new_state = apply_change(state, change)
            with self._swap:
                if self._rows.get(conversation_id, (0, None))[0] != version:
                    continue  # another writer committed first: decide again
                self._rows[conversation_id] = (version + 1, new_state)
            return value
        raise StorageError(f"conversation {conversation_id!r} too contended; gave up")

    def conversations(self) -> list[str]:
        return sorted(cid for cid, (_, state) in self._rows.items() if not state.is_empty)

    def close(self) -> None:
        self._rows.clear()
