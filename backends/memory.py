"""The in-memory backend: fast, ephemeral, the default."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from chd.backends.base import Change, ConversationState, T, apply_change
from chd.core.errors import StorageFull
from chd.core.utterance import Utterance

__all__ = [
    "MemoryBackend",
    "UTTERANCE_OVERHEAD",
    "CONVERSATION_OVERHEAD",
    "text_bytes",
    "utterance_cost",
    "conversation_cost",
]

# Bytes an utterance costs the process beyond its text: the Utterance, its
# timestamp and seq objects, its slot in the state's lists. Measured with
# bench/bench_memory_budget.py (RSS growth per stored 2-byte utterance):
# 182 B spread over 5,000 conversations, 335 B in one conversation, 553 B
# with one conversation each. Counting only the text let 50,000 two-byte
# utterances grow RSS to 154x a 100 kB budget (issue 28).
UTTERANCE_OVERHEAD = 400
# Bytes a conversation costs beyond its utterances: its state, summary and
# settings objects and its slot in the dict (tracemalloc: about 460 B). Each
# utterance also holds its own copy of the conversation id, and the dict its
# key: with 256-character ids and one utterance each, RSS grew to 2.31x the
# budget while only text plus 400 was counted (outside review of issue 28).
CONVERSATION_OVERHEAD = 500


@dataclass(slots=True)
class _Lock:
    """A conversation's lock and how many transactions hold or wait for it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0


class MemoryBackend:
    """Conversations in a dict, one lock per conversation while it is in use.

    States are replaced, never mutated, so ``read`` hands out the stored
    object itself: a snapshot for free, and different conversations only
    share the short critical sections that count a lock's users.

    A lock exists only while a transaction holds or waits for it: ids that
    are asked about and never stored (refused, read-only, not found) leave
    nothing behind, and neither does a conversation between its writes.

    ``max_bytes`` is the process's budget for utterances (in buffers,
    summary queues and archives; None: no budget), each counted as its UTF-8
    text and conversation id plus ``UTTERANCE_OVERHEAD``, and each
    conversation holding any as its id plus ``CONVERSATION_OVERHEAD``. A change that
    appends utterances past it is refused with ``StorageFull`` before it is
    applied; removals, folds and settings always go through, so a full
    daemon can still be emptied.
    """

    name = "memory"

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        self._states: dict[str, ConversationState] = {}
        self._locks: dict[str, _Lock] = {}
        self._locks_guard = threading.Lock()
        self._bytes = 0
        self._bytes_guard = threading.Lock()
        # Conversations with state, kept as they change (issue 17): the
        # max_conversations check reads it on every new conversation.
        self._count = 0

    @property
    def held_bytes(self) -> int:
        """What the utterances held now cost, as ``max_bytes`` counts them (``utterance_cost``)."""
        return self._bytes

    def lock_count(self) -> int:
        """Conversation locks in existence now: those in use, never more."""
        return len(self._locks)

    def read(self, conversation_id: str) -> ConversationState:
        state = self._states.get(conversation_id)
        return state if state is not None else ConversationState(conversation_id)

    def transact(
        self,
        conversation_id: str,
        decide: Callable[[ConversationState], tuple[Change, T]],
    ) -> T:
        with self._locks_guard:
            entry = self._locks.get(conversation_id)
            if entry is None:
                entry = self._locks[conversation_id] = _Lock()
            entry.users += 1
        try:
            with entry.lock:
                state = self.read(conversation_id)
                change, value = decide(state)
                if not change.is_empty:
                    self._commit(conversation_id, state, change)
                return value
        finally:
            with self._locks_guard:
                entry.users -= 1
                if entry.users == 0:
                    del self._locks[conversation_id]

    def _commit(self, conversation_id: str, state: ConversationState, change: Change) -> None:
        grown = _text_delta(state, change)
        new_state = apply_change(state, change)
        if state.is_empty != new_state.is_empty:
            grown += conversation_cost(conversation_id) * (1 if state.is_empty else -1)
        with self._bytes_guard:
            total = self._bytes + grown
            if (
                change.append
                and grown > 0
                and self.max_bytes is not None
                and total > self.max_bytes
            ):
                raise StorageFull(
                    f"the memory backend's budget is full: its utterances count for {self._bytes} bytes "
                    f"(text and conversation id plus {UTTERANCE_OVERHEAD} each, {CONVERSATION_OVERHEAD} "
                    f"and its id per conversation) and this would make {total}, over "
                    f"max_memory_bytes ({self.max_bytes}); "
                    "nothing was stored, reads and removals still work"
                )
            self._bytes = total
            if state.is_empty != new_state.is_empty:
                self._count += 1 if state.is_empty else -1
            if new_state.is_empty:
                # Nothing stored: keep no entry for it (a cleared conversation).
                self._states.pop(conversation_id, None)
            else:
                self._states[conversation_id] = new_state

    def conversations(self) -> list[str]:
        return sorted(cid for cid, s in self._states.items() if not s.is_empty)

    def count_conversations(self) -> int:
        return self._count

    def close(self) -> None:
        self._states.clear()
        with self._bytes_guard:
            self._bytes = 0
            self._count = 0


def text_bytes(text: str) -> int:
    """UTF-8 length of ``text`` (ASCII text, the common case, without encoding it)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def utterance_cost(utterance: Utterance) -> int:
    """Bytes ``max_bytes`` counts for ``utterance``: its UTF-8 text and conversation id plus the measured overhead."""
    return text_bytes(utterance.text) + text_bytes(utterance.conversation_id) + UTTERANCE_OVERHEAD


def conversation_cost(conversation_id: str) -> int:
    """Bytes ``max_bytes`` counts for a conversation that holds anything, beside its utterances."""
    return text_bytes(conversation_id) + CONVERSATION_OVERHEAD


def _sum(utterances: Iterable[Utterance]) -> int:
    return sum(utterance_cost(u) for u in utterances)


def _text_delta(state: ConversationState, change: Change) -> int:
    """How many bytes (``utterance_cost``) ``change`` adds to ``state`` (negative: frees).

    O(the change) for appends; removals look their utterances up in the
    list they leave, as ``apply_change`` itself does.
    """
    delta = _sum(change.append) + _sum(change.pending_add) + _sum(change.archive_add)
    if change.remove:
        delta -= _sum(u for u in state.utterances if u.seq in change.remove)
    if change.pending_remove:
        delta -= _sum(u for u in state.pending if u.seq in change.pending_remove)
    if change.archive_remove:
        delta -= _sum(u for u in state.archive if u.seq in change.archive_remove)
    if change.update:
        replaced = {u.seq: u for u in change.update}
        delta += sum(
            utterance_cost(replaced[u.seq]) - utterance_cost(u)
            for u in state.utterances
            if u.seq in replaced and u.seq not in change.remove
        )
    return delta
