"""Folding: move a conversation's queued evicted utterances into its summary.

The queue is ``ConversationState.pending`` in the backend, so it is as
durable as the backend. A fold reads the queue, runs the summarizer outside
any transaction (it may take seconds), then commits the new summary and takes
the batch off the queue in the same transaction, and only if nothing changed
meanwhile: a remove that raced the summarizer is never undone by a summary of
what it deleted, and a crash before the commit leaves the batch queued.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Sequence

from chd.backends.base import Backend, Change, ConversationState
from chd.core.errors import StorageError
from chd.core.summaries.segments import compact, fold_into
from chd.core.memory.configure import effective_settings
from chd.core.settings import Settings
from chd.core.summaries.summarizer import Summarized
from chd.core.summaries.writer import SummaryWriter
from chd.core.tokens import TokenCounter
from chd.core.utterance import Summary, Utterance

__all__ = ["FOLD_BATCH_TOKENS", "FoldReport", "Folder"]

log = logging.getLogger(__name__)

# One summarizer call takes at most this many tokens of queued utterances,
# so a queue that grew during an outage becomes several bounded prompts.
FOLD_BATCH_TOKENS = 6000
# A fold that keeps losing the commit to concurrent removes stops after this
# many tries; the batch stays queued for the next fold.
_COMMIT_ATTEMPTS = 3


@dataclass(slots=True)
class FoldReport:
    """What one ``Folder.fold`` call did.

    ``done``: the queue was empty when it returned. ``written``: the texts
    the summarizer produced, in order (their ``error`` says whether the
    offline fallback wrote them). ``error``: why folding stopped early.
    """

    done: bool
    folded: int = 0
    written: list[Summarized] = field(default_factory=list)
    error: str = ""


class Folder:
    """Folds queued utterances into segment summaries, one conversation at a time."""

    def __init__(
        self,
        backend: Backend,
        settings: Settings,
        writer: SummaryWriter,
        counter: TokenCounter,
    ) -> None:
        self.backend = backend
        self.settings = settings
        self.writer = writer
        self.counter = counter
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # A backend shared by replicas may lease a conversation's fold to one
        # of them (backends.base.Leases); others fold under the lock alone.
        self._lease = getattr(backend, "lease", None)

    def fold(self, conversation_id: str, patient: bool = True, wait: float | None = None) -> FoldReport:
        """Fold everything queued for the conversation.

        One fold per conversation runs at a time, under a lock. A caller
        that cannot wait (a read that must answer with a current summary)
        gives up on the lock after ``wait`` seconds and folds with the
        offline summarizer, without the lock: the commit check keeps that
        safe, and the fold it overtook starts again on what is left.

        Args:
            patient: False for a caller who is waiting (see SummaryWriter).
            wait: seconds to wait for a fold in progress (None: as long as it takes).
        """
        lock = self._lock(conversation_id)
        if lock.acquire(timeout=-1 if wait is None else wait):
            try:
                if self._lease is None:
                    return self._fold(conversation_id, patient, "")
                try:
                    with self._lease(conversation_id) as held:
                        if held:
                            return self._fold(conversation_id, patient, "")
                except StorageError as exc:
                    return FoldReport(done=False, error=f"{type(exc).__name__}: {exc}")
                if wait is None:  # the worker retries later; the leaseholder folds meanwhile
                    return FoldReport(done=False, error="another replica is folding this conversation")
            finally:
                lock.release()
            because = "another replica was folding this conversation"
        else:
            because = f"{self.writer.name} was still busy with this conversation after {wait:g} s"
        return self._fold(conversation_id, patient, because + "; folded offline so the answer is current")

    def _fold(self, conversation_id: str, patient: bool, offline_because: str) -> FoldReport:
        report = FoldReport(done=False)
        races = 0
        while True:
            state = self.backend.read(conversation_id)
            # A conversation's own summary_token_limit (daemon/core/memory/configure.py) wins.
            limit = effective_settings(self.settings, state.settings).summary_token_limit
            batch = _batch(state.pending, FOLD_BATCH_TOKENS)
            if not batch and state.summary.tokens <= limit:
                report.done = True
                return report
            try:
                summary, written = self._merge(state.summary, batch, limit, patient, offline_because)
            except Exception as exc:
                # Offline fallback failed too: the batch stays queued.
                log.exception("folding conversation %s failed", conversation_id)
                report.error = f"{type(exc).__name__}: {exc}"
                return report
            report.written.extend(written)
            try:
                committed = self.backend.transact(
                    conversation_id, _commit(state, batch, summary, self.settings.archive_evicted)
                )
            except StorageError as exc:
                # A full or failing disk must not fail the store that
                # queued the batch nor the read that wanted it folded;
                # the batch stays queued and the worker retries later.
                log.warning("fold of conversation %s not saved (%s); the batch stays queued",
                            conversation_id, exc)
                report.error = f"{type(exc).__name__}: {exc}"
                return report
            if committed:
                report.folded += len(batch)
                continue
            races += 1
            if races >= _COMMIT_ATTEMPTS:
                report.error = "the conversation kept changing while it was being summarized"
                return report

    def _merge(
        self,
        summary: Summary,
        batch: Sequence[Utterance],
        limit: int,
        patient: bool,
        offline_because: str,
    ) -> tuple[Summary, list[Summarized]]:
        def write(previous: str, utterances: Sequence[Utterance], limit: int) -> Summarized:
            return self.writer.write(previous, utterances, limit, patient, offline_because)

        if not batch:
            # A summary over a budget lowered since it was written: condense it.
            return compact(
                summary,
                limit=limit,
                max_segments=self.settings.summary_segments,
                write=write,
                counter=self.counter,
            )
        return fold_into(
            summary,
            batch,
            limit=limit,
            max_segments=self.settings.summary_segments,
            write=write,
            counter=self.counter,
        )

    def _lock(self, conversation_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(conversation_id, threading.Lock())


def _batch(pending: Sequence[Utterance], max_tokens: int) -> list[Utterance]:
    """The oldest queued utterances up to ``max_tokens`` (at least one)."""
    batch: list[Utterance] = []
    tokens = 0
    for utterance in pending:
        if batch and tokens + utterance.tokens > max_tokens:
            break
        batch.append(utterance)
        tokens += utterance.tokens
    return batch


def _commit(state: ConversationState, batch: Sequence[Utterance], summary: Summary, archive: bool):
    seqs = {u.seq for u in batch}

    def decide(current: ConversationState) -> tuple[Change, bool]:
        still_queued = {u.seq for u in current.pending}
        if current.summary != state.summary or not seqs <= still_queued:
            return Change(), False
        return (
            Change(
                summary=summary,
                pending_remove=seqs,
                archive_add=list(batch) if archive else [],
            ),
            True,
        )

    return decide
