"""The daemon's quantity limits, each refused with its own status and message.

=============================  ==========================  =====================
limit                          where                       status on breach
=============================  ==========================  =====================
max_request_bytes              grpc (receive size)         RESOURCE_EXHAUSTED
max_utterance_chars            core (``Settings``)         RESOURCE_EXHAUSTED
max_conversations              ``LimitedBackend``          RESOURCE_EXHAUSTED
max_utterances_per_conversation ``LimitedBackend``         RESOURCE_EXHAUSTED
max_archived_utterances        ``LimitedBackend``          (oldest dropped, counted)
request_timeout / deadline     ``deadline_guard``          DEADLINE_EXCEEDED
max_concurrent_rpcs            grpc                        RESOURCE_EXHAUSTED
=============================  ==========================  =====================

Counts are checked inside the backend transaction, so a refused store
changes nothing. Deadlines are checked when a worker picks the call up: a
call that waited past its deadline is refused before it does anything. The
deadline is then handed to the core, which checks it again at its own
checkpoints (after the parse, before the decision, before a fold a read
waits for); a change already decided is finished, never half applied.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import grpc

from chd.backends.base import (
    Backend,
    Change,
    ConversationState,
    T,
    count_conversations,
    sizes_after,
)
from chd.core.errors import InvalidRequest, TooLarge
from chd.service.admission import arrived, note_deadline
from chd.service.handlers import Behavior, Guard
from chd.service.wrapped_backend import WrappedBackend

__all__ = ["Limits", "LimitedBackend", "deadline_guard"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-daemon limits; see the module docstring for who enforces each."""

    max_request_bytes: int = 4 * 1024 * 1024
    max_conversations: int = 100_000
    max_utterances_per_conversation: int = 10_000
    max_archived_utterances: int = 10_000
    request_timeout: float = 30.0
    max_concurrent_rpcs: int = 256


class LimitedBackend(WrappedBackend):
    """A Backend that refuses new conversations and utterances over the limits.

    The utterance count is buffer plus the queue awaiting summary: what the
    conversation keeps in storage. It can only pass the buffer size when
    summarizing falls behind (a failing summarizer), so this limit is the
    back-pressure that stops a backlog from filling the disk.
    """

    def __init__(self, backend: Backend, limits: Limits) -> None:
        super().__init__(backend)
        self.limits = limits
        # New conversations are created one at a time so two of them cannot
        # both take the last free place; existing ones never wait on this.
        self._creating = threading.Lock()
        # Archived utterances dropped to keep archives within their bound.
        self.archive_dropped = 0

    def transact(
        self, conversation_id: str, decide: Callable[[ConversationState], tuple[Change, T]]
    ) -> T:
        # A conversation's first change is refused inside the transaction
        # and tried again under the creation lock, where the backend's count
        # (O(1), issue 17) is compared with the limit: no set of known ids
        # to fill at start-up, and a refused store costs what a store costs.
        try:
            return self.inner.transact(conversation_id, self._checked(decide, creating=False))
        except _Creating:
            pass
        with self._creating:
            return self.inner.transact(conversation_id, self._checked(decide, creating=True))

    def _checked(
        self, decide: Callable[[ConversationState], tuple[Change, T]], creating: bool
    ) -> Callable[[ConversationState], tuple[Change, T]]:
        limits = self.limits

        def checked(state: ConversationState) -> tuple[Change, T]:
            if state.is_empty and not creating:
                raise _Creating()
            change, value = decide(state)
            if change.is_empty:
                return change, value
            buffer_size = (change.settings or {}).get("buffer_size")
            if buffer_size is not None and buffer_size > limits.max_utterances_per_conversation:
                # Such a buffer would not evict before the limit, and every
                # store after it would be refused (the daemon's own
                # buffer_size is checked alike at start-up).
                raise InvalidRequest(
                    f"buffer_size {buffer_size} is above the max_utterances_per_conversation "
                    f"limit of {limits.max_utterances_per_conversation}; nothing was changed"
                )
            if state.is_empty:
                held = count_conversations(self.inner)
                if held >= limits.max_conversations:
                    raise TooLarge(
                        f"this daemon already holds {held} conversations, the "
                        f"max_conversations limit; conversation {state.conversation_id!r} was not created"
                    )
            if change.archive_add:
                change = self._archive_bounded(state, change)
            before = len(state.utterances) + len(state.pending)
            after = sum(sizes_after(state, change))
            if after > before and after > limits.max_utterances_per_conversation:
                raise TooLarge(
                    f"conversation {state.conversation_id!r} would keep {after} utterances "
                    f"(buffer plus those awaiting summary), over the max_utterances_per_conversation "
                    f"limit of {limits.max_utterances_per_conversation}; nothing was stored"
                )
            return change, value

        return checked

    def _archive_bounded(self, state: ConversationState, change: Change) -> Change:
        """``change`` dropping the oldest archived utterances past ``max_archived_utterances``.

        Archives grow with every fold while ``archive_evicted`` is on; with
        no bound one conversation's archive would grow without end (issue 17).
        """
        if len(state.archive) + len(change.archive_add) <= self.limits.max_archived_utterances:
            return (
                change  # the usual fold: well inside the bound, without a walk through the archive
            )
        kept = [u.seq for u in state.archive if u.seq not in change.archive_remove]
        added = [u.seq for u in change.archive_add]
        excess = len(kept) + len(added) - self.limits.max_archived_utterances
        if excess <= 0:
            return change
        oldest = set(sorted(kept + added)[:excess])
        log.info(
            "conversation %s: dropping its %d oldest archived utterances (max_archived_utterances %d)",
            state.conversation_id,
            excess,
            self.limits.max_archived_utterances,
        )
        self.archive_dropped += excess  # counted when decided; a retried decide counts again
        return replace(
            change,
            archive_remove=change.archive_remove | (oldest & set(kept)),
            archive_add=[u for u in change.archive_add if u.seq not in oldest],
        )


class _Creating(Exception):
    """A conversation's first change, refused until it holds the creation lock."""


def deadline_guard(request_timeout: float) -> Guard:
    """A guard refusing calls that waited for a worker past their deadline.

    The deadline is the caller's, capped by ``request_timeout`` counted from
    the call's arrival (noted on grpc's polling thread, see
    ``daemon.admission``), so a caller that set none still cannot queue work
    forever.
    """

    def guard(_method: str, behavior: Behavior) -> Behavior:
        def timed(request: Any, context: grpc.ServicerContext) -> Any:
            waited = time.perf_counter() - arrived()
            left = request_timeout - waited
            remaining = context.time_remaining()
            if remaining is not None:
                left = min(left, remaining)
            if left <= 0:
                context.abort(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"the request waited {waited:.3f}s for a worker and its deadline passed "
                    f"(request_timeout is {request_timeout:g}s); nothing was done",
                )
            note_deadline(time.monotonic() + left)
            return behavior(request, context)

        return timed

    return guard
