"""Folding: move a conversation's queued evicted utterances into its summary.

The queue is ``ConversationState.pending`` in the backend, so it is as
durable as the backend. A fold reads the queue, runs the summarizer outside
any transaction (it may take seconds), then commits the new summary and takes
the batch off the queue in the same transaction, and only if nothing changed
meanwhile: a remove that raced the summarizer is never undone by a summary of
what it deleted, and a crash before the commit leaves the batch queued.

No permanent loss when Claude fails (issue 13). While Claude is the
configured summarizer:

* a batch the offline fallback folded keeps its originals in the summary
  (``Summary.held``, at most ``HELD_MAX_TOKENS`` per conversation, oldest
  dropped first and counted);
* once Claude answers again, a patient fold rewrites every segment holding
  such originals from them and clears its fallback mark (unless originals
  of its range were dropped); until then the worker keeps retrying;
* a reader that cannot wait never commits an offline fold: it answers with
  the summary plus the queued utterances verbatim (``FoldReport.deferred``),
  and the model's result lands when it comes;
* a call that outlives the fold's patience (``SummaryWriter.late_after``)
  goes on in the background (late.py) while the batch is folded offline;
  when it answers, its text replaces that offline segment, in one
  transaction and only if the segment is still the fallback's text for the
  same range (``_land``): a fold, a rewrite, a remove or a clear that came
  first wins, and the late result is dropped and counted.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

from chd.backends.base import Backend, Change, ConversationState
from chd.core.errors import StorageError
from chd.core.memory.configure import effective_settings
from chd.core.settings import Settings
from chd.core.summaries.segments import allocations, assemble, compact, fold_into
from chd.core.summaries.summarizer import Late, Summarized, SummaryContext, trim_items
from chd.core.summaries.writer import SummaryWriter
from chd.core.tokens import TokenCounter
from chd.core.utterance import Summary, SummarySegment, Utterance

__all__ = [
    "FOLD_BATCH_TOKENS",
    "HELD_MAX_TOKENS",
    "PENDING_HEADER",
    "FoldReport",
    "Folder",
    "with_pending",
]

log = logging.getLogger(__name__)

# One summarizer call takes at most this many tokens of queued utterances,
# so a queue that grew during an outage becomes several bounded prompts.
FOLD_BATCH_TOKENS = 6000
# A fold that keeps losing the commit to concurrent removes stops after this
# many tries; the batch stays queued for the next fold.
_COMMIT_ATTEMPTS = 3
# Originals kept per conversation for a Claude rewrite, in tokens: about four
# full default buffers, an outage of a few hundred utterances.
HELD_MAX_TOKENS = 32_000


@dataclass(slots=True)
class FoldReport:
    """What one ``Folder.fold`` call did.

    ``done``: the queue was empty (and no originals await a Claude rewrite)
    when it returned. ``written``: the texts the summarizer produced, in
    order (their ``error`` says whether the offline fallback wrote them).
    ``error``: why folding stopped early. ``deferred``: a waiting reader was
    answered without folding. ``rewritten``: segments Claude rewrote from
    their originals.
    """

    done: bool
    folded: int = 0
    written: list[Summarized] = field(default_factory=list)
    error: str = ""
    # True when a waiting reader got no fold: it answers with the queue verbatim.
    deferred: bool = False
    rewritten: int = 0
    # The summary holds originals awaiting a rewrite by the configured summarizer.
    awaiting_rewrite: bool = False


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
        # A lock per conversation being folded, with how many callers hold
        # or wait for it: the last one out removes it, so the dict does not
        # keep one per conversation ever folded (issue 17).
        self._locks: dict[str, tuple[threading.Lock, list[int]]] = {}
        self._locks_guard = threading.Lock()
        # A backend shared by replicas may lease a conversation's fold to one
        # of them (backends.base.Leases); others fold under the lock alone.
        self._lease = getattr(backend, "lease", None)
        # Offline segments a late call of the configured summarizer may still
        # replace, per conversation: (seq_from, seq_to, text). A rewrite from
        # the originals leaves them alone rather than paying for a second call.
        self._landing: dict[str, set[tuple[int, int, str]]] = {}
        self._landing_guard = threading.Lock()
        # Asks the background worker for a patient fold (set by the history that owns both).
        self.rewrite_due: Callable[[str], None] | None = None

    def late_stats(self) -> dict[str, dict[str, int]]:
        """Late results of the configured summarizer since start, daemon-wide ({} when it has none)."""
        calls = self.writer.late
        if calls is None:
            return {}
        return {
            "summary_late_results": {
                "applied": calls.applied,
                "dropped": calls.dropped,
                "failed": calls.failed,
                "in_flight": calls.in_flight,
            }
        }

    def forget_late(self, conversation_id: str) -> None:
        """After utterances left the conversation: late calls keep nothing of it for joining."""
        if self.writer.late is not None:
            self.writer.late.forget(conversation_id)

    def close(self) -> None:
        """Abandon late calls in flight: their ranges keep their originals for a rewrite after restart."""
        if self.writer.late is not None:
            self.writer.late.stop()

    def fold(
        self, conversation_id: str, patient: bool = True, wait: float | None = None
    ) -> FoldReport:
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
        until = None if wait is None else time.monotonic() + wait
        lock = self._lock(conversation_id)
        try:
            if lock.acquire(timeout=-1 if wait is None else wait):
                try:
                    leased = self._leased(conversation_id, patient, wait, until)
                finally:
                    lock.release()
                if leased is not None:
                    report = leased
                    if report.done and patient and self.writer.keeps_originals:
                        # Outside the lock: a reader must not wait on a rewrite, and
                        # the commit checks that the summary did not change meanwhile.
                        report.done = self._rewrite(conversation_id, report)
                    elif (
                        report.awaiting_rewrite and self.writer.keeps_originals and self.rewrite_due
                    ):
                        # A reader found originals nobody is rewriting (kept before a
                        # restart, whose worker only looks for queues): hand them over.
                        self.rewrite_due(conversation_id)
                    return report
                # Another replica holds the lease and a reader is waiting: as a busy lock.
        finally:
            self._unlock(conversation_id)
        if self.writer.keeps_originals:
            # The model is working on this conversation: its result must land,
            # not be overtaken by a lossy offline fold.
            return FoldReport(
                done=False,
                deferred=True,
                error=f"{self.writer.name} was still busy with this conversation after {wait:g} s; "
                "the utterances not yet summarized are given verbatim",
            )
        return self._fold(
            conversation_id,
            patient,
            f"{self.writer.name} was still busy with this conversation after {wait:g} s; "
            "folded offline so the answer is current",
        )

    def _leased(
        self, conversation_id: str, patient: bool, wait: float | None, until: float | None = None
    ) -> FoldReport | None:
        """Fold under this replica's lease if the backend leases folds (backends.base.Leases).

        None: another replica holds the lease and the caller is a waiting reader.
        """
        if self._lease is None:
            return self._fold(conversation_id, patient, "", until)
        try:
            with self._lease(conversation_id) as held:
                if held:
                    return self._fold(conversation_id, patient, "", until)
        except StorageError as exc:
            return FoldReport(done=False, error=f"{type(exc).__name__}: {exc}")
        if wait is None:  # the worker retries later; the leaseholder folds meanwhile
            return FoldReport(done=False, error="another replica is folding this conversation")
        return None

    def _fold(
        self, conversation_id: str, patient: bool, offline_because: str, until: float | None = None
    ) -> FoldReport:
        """Fold the queue batch by batch; ``until``: when a waiting reader stops waiting for the model."""
        report = FoldReport(done=False)
        races = 0
        while True:
            state = self.backend.read(conversation_id)
            # A conversation's own summary_token_limit (daemon/core/memory/configure.py) wins.
            limit = effective_settings(self.settings, state.settings).summary_token_limit
            if _settled(state.pending, state.summary, limit):
                report.done = True
                report.awaiting_rewrite = bool(state.summary.held)
                return report
            batch = _batch(state.pending, FOLD_BATCH_TOKENS)
            try:
                summary, written = self._merge(
                    conversation_id,
                    state.summary,
                    batch,
                    limit,
                    patient,
                    offline_because,
                    SummaryContext(buffered=newest_context(state.utterances)),
                    until,
                )
            except Exception as exc:
                # Offline fallback failed too: the batch stays queued.
                log.exception("folding conversation %s failed", conversation_id)
                report.error = f"{type(exc).__name__}: {exc}"
                return report
            fell_back = self.writer.keeps_originals and any(w.error for w in written)
            if fell_back and not patient:
                # A reader does not commit what the worker can still give Claude.
                report.deferred = True
                report.error = next(w.error for w in written if w.error)
                return report
            report.written.extend(written)
            summary = _holding(state.summary, summary, batch if fell_back else ())
            try:
                committed, finished = self.backend.transact(
                    conversation_id, _commit(state, batch, summary, self.settings)
                )
            except StorageError as exc:
                # A full or failing disk must not fail the store that
                # queued the batch nor the read that wanted it folded;
                # the batch stays queued and the worker retries later.
                log.warning(
                    "fold of conversation %s not saved (%s); the batch stays queued",
                    conversation_id,
                    exc,
                )
                report.error = f"{type(exc).__name__}: {exc}"
                return report
            if committed:
                report.folded += len(batch)
                self._await_late(conversation_id, summary, written)
                if finished:
                    # What the next round's read would find, as of the commit:
                    # that read was a fifth of a fold's own storage work (issue 17).
                    report.done = True
                    report.awaiting_rewrite = bool(summary.held)
                    return report
                continue
            races += 1
            if races >= _COMMIT_ATTEMPTS:
                report.error = "the conversation kept changing while it was being summarized"
                return report

    def _merge(
        self,
        conversation_id: str,
        summary: Summary,
        batch: Sequence[Utterance],
        limit: int,
        patient: bool,
        offline_because: str,
        context: SummaryContext = SummaryContext(),
        until: float | None = None,
    ) -> tuple[Summary, list[Summarized]]:
        def write(
            previous: str, utterances: Sequence[Utterance], limit: int, context: SummaryContext
        ) -> Summarized:
            return self.writer.write(
                previous,
                utterances,
                limit,
                patient,
                offline_because,
                context,
                late_key=conversation_id,
                wait=None if until is None else until - time.monotonic(),
            )

        if not batch:
            # A summary over a budget lowered since it was written: condense it.
            return compact(
                summary,
                limit=limit,
                max_segments=self.settings.summary_segments,
                write=write,
                counter=self.counter,
                context=context,
            )
        return fold_into(
            summary,
            batch,
            limit=limit,
            max_segments=self.settings.summary_segments,
            write=write,
            counter=self.counter,
            context=context,
        )

    def _rewrite(self, conversation_id: str, report: FoldReport) -> bool:
        """Rewrite with Claude the segments whose originals were kept; True when none await."""
        if any(w.error for w in report.written):
            return False  # Claude failed moments ago: the worker comes back later
        state = self.backend.read(conversation_id)
        summary = state.summary
        if not summary.held:
            return True
        limit = effective_settings(self.settings, state.settings).summary_token_limit
        segments = list(summary.segments)
        shares = allocations(segments, limit)
        held = list(summary.held)
        landing = self._landing_for(conversation_id)
        for i, segment in enumerate(list(segments)):
            mine = [u for u in held if segment.seq_from <= u.seq <= segment.seq_to]
            if not mine or (segment.seq_from, segment.seq_to, segment.text) in landing:
                continue  # a late call for this very text is still running: its reply is the rewrite
            context = SummaryContext(
                summary="\n".join(s.text for s in segments if s is not segments[i]),
                buffered=newest_context(state.utterances),
            )
            # All the room the other segments leave, as a fold gets (segments.fold_into): a
            # rewrite held to the offline text's size could not say more than it did.
            others = assemble(
                segments[:i] + segments[i + 1 :], summary.through_seq, self.counter
            ).tokens
            room = limit - others - (1 if len(segments) > 1 else 0)
            outcome = self.writer.rewrite(
                segment.text, mine, max(room, shares[i], segment.tokens), context
            )
            if outcome is None:
                report.error = f"{len(held)} utterances await a rewrite by {self.writer.name}"
                break
            # The mark stays where the cap dropped originals of this range.
            lost = segment.seq_from <= summary.held_dropped_through
            segments[i] = replace(
                segment,
                text=outcome.text,
                tokens=self.counter.count(outcome.text),
                made_by=outcome.made_by,
                error=segment.error if lost else "",
            )
            held = [u for u in held if u not in mine]
            report.rewritten += 1
        if len(held) == len(summary.held):
            return False
        rewritten = assemble(segments, summary.through_seq, self.counter)
        if rewritten.tokens > limit:
            rewritten, _ = compact(
                rewritten,
                limit=limit,
                max_segments=self.settings.summary_segments,
                write=lambda p, u, n, c: self.writer.write(p, u, n, True, "", c),
                counter=self.counter,
            )
        rewritten = replace(
            rewritten,
            held=tuple(held),
            held_dropped=summary.held_dropped,
            held_dropped_through=summary.held_dropped_through,
        )

        def decide(current: ConversationState) -> tuple[Change, bool]:
            if current.summary != summary:
                return Change(), False
            return Change(summary=rewritten), True

        try:
            committed = self.backend.transact(conversation_id, decide)
        except StorageError as exc:
            report.error = f"{type(exc).__name__}: {exc}"
            return False
        return committed and not held

    def _await_late(
        self, conversation_id: str, summary: Summary, written: Sequence[Summarized]
    ) -> None:
        """After a commit: let each late call replace the offline segment its fallback wrote."""
        for outcome in written:
            if outcome.late is None:
                continue
            late = outcome.late
            first, last = (min(late.seqs), max(late.seqs)) if late.seqs else (0, -1)
            # The text alone could match another offline segment that reads
            # the same: the segment must also span the seqs the call was for.
            target = next(
                (
                    s
                    for s in summary.segments
                    if s.error
                    and s.text == outcome.text
                    and s.made_by == outcome.made_by
                    and s.seq_from <= first
                    and last <= s.seq_to
                ),
                None,
            )
            if target is None:
                # The fold condensed the fallback's text further: no segment is that text any more.
                late.future.add_done_callback(lambda future: self._count_late(future, "dropped"))
                continue
            key = (target.seq_from, target.seq_to, target.text)
            with self._landing_guard:
                self._landing.setdefault(conversation_id, set()).add(key)
            late.future.add_done_callback(
                functools.partial(self._land, conversation_id, target, late)
            )

    def _landing_for(self, conversation_id: str) -> frozenset[tuple[int, int, str]]:
        with self._landing_guard:
            return frozenset(self._landing.get(conversation_id, ()))

    def _count_late(self, future: Future[str], outcome: str) -> None:
        assert self.writer.late is not None
        if not self.writer.late.stopped:
            self.writer.late.count("failed" if future.exception() is not None else outcome)

    def _land(
        self, conversation_id: str, target: SummarySegment, late: Late, future: Future[str]
    ) -> None:
        """Commit a late result in place of ``target``, if it is still that offline text for that range."""
        key = (target.seq_from, target.seq_to, target.text)
        try:
            calls = self.writer.late
            assert calls is not None
            if calls.stopped:
                return  # shutdown: the originals stay for the rewrite after the next start
            error = future.exception()
            if error is not None:
                log.warning(
                    "late %s call for seqs %d-%d of conversation %s failed: %s",
                    self.writer.name,
                    target.seq_from,
                    target.seq_to,
                    conversation_id,
                    error,
                )
                calls.count("failed")
                return
            text = self.writer.bounded(future.result(), late.token_limit)
            try:
                landed = self.backend.transact(conversation_id, self._replacing(target, late, text))
            except (
                Exception
            ) as exc:  # a failing or closed backend: the originals stay for a rewrite
                log.warning(
                    "late %s result for conversation %s not saved (%s)",
                    self.writer.name,
                    conversation_id,
                    exc,
                )
                landed = False
            calls.count("applied" if landed else "dropped")
            log.info(
                "late %s result for seqs %d-%d of conversation %s %s",
                self.writer.name,
                target.seq_from,
                target.seq_to,
                conversation_id,
                "replaced the offline text" if landed else "dropped: the range changed meanwhile",
            )
        finally:
            with self._landing_guard:
                keys = self._landing.get(conversation_id)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._landing[conversation_id]

    def _replacing(
        self, target: SummarySegment, late: Late, text: str
    ) -> Callable[[ConversationState], tuple[Change, bool]]:
        """The transaction putting ``text`` in place of ``target``; False when it is gone or it cannot fit."""

        def decide(current: ConversationState) -> tuple[Change, bool]:
            summary = current.summary
            segments = list(summary.segments)
            i = next((k for k, s in enumerate(segments) if s == target), None)
            if i is None:
                return Change(), False  # folded again, rewritten, removed or cleared meanwhile
            limit = effective_settings(self.settings, current.settings).summary_token_limit
            others = assemble(
                segments[:i] + segments[i + 1 :], summary.through_seq, self.counter
            ).tokens
            held = tuple(
                u
                for u in summary.held
                if not (u.seq in late.seqs and target.seq_from <= u.seq <= target.seq_to)
            )
            # The mark stays while originals of the range were not in this call
            # (an older fallback text it extended) or were dropped by the bound.
            marked = target.seq_from <= summary.held_dropped_through or any(
                target.seq_from <= u.seq <= target.seq_to for u in held
            )
            room = limit - others - (1 if len(segments) > 1 else 0)
            for slack in range(3):  # joining may cost a token more than the parts
                # As Claude's own overage is cut (claude.py): whole items first.
                fitted = (
                    self.writer.bounded(trim_items(text, room - slack, self.counter), room - slack)
                    if room - slack > 0
                    else ""
                )
                if not fitted:
                    return Change(), False
                segments[i] = replace(
                    target,
                    text=fitted,
                    tokens=self.counter.count(fitted),
                    made_by=self.writer.name,
                    error=target.error if marked else "",
                )
                rewritten = assemble(segments, summary.through_seq, self.counter)
                if rewritten.tokens <= limit:
                    rewritten = replace(
                        rewritten,
                        held=held,
                        held_dropped=summary.held_dropped,
                        held_dropped_through=summary.held_dropped_through,
                    )
                    return Change(summary=rewritten), True
            return Change(), False

        return decide

    def _lock(self, conversation_id: str) -> threading.Lock:
        """The conversation's fold lock, counted as used until ``_unlock``."""
        with self._locks_guard:
            lock, users = self._locks.setdefault(conversation_id, (threading.Lock(), [0]))
            users[0] += 1
            return lock

    def _unlock(self, conversation_id: str) -> None:
        with self._locks_guard:
            _, users = self._locks[conversation_id]
            users[0] -= 1
            if not users[0]:
                del self._locks[conversation_id]


# How much of the buffer a summarizer sees as read-only context: the newest
# utterances up to this many tokens. The whole buffer made every fold cost
# O(buffer): with 10,000 buffered utterances the offline summarizer re-read
# all of them per fold (12 ms a call), and Claude would be sent all of them.
CONTEXT_BUFFER_TOKENS = 2_000


def newest_context(utterances: Sequence[Utterance]) -> tuple[Utterance, ...]:
    """The newest ``utterances`` whose tokens add up to at most CONTEXT_BUFFER_TOKENS (at least one)."""
    total = 0
    start = len(utterances)
    while start > 0:
        total += utterances[start - 1].tokens
        if total > CONTEXT_BUFFER_TOKENS and start < len(utterances):
            break
        start -= 1
    return tuple(utterances[start:])


PENDING_HEADER = "Not yet summarized:"


def with_pending(summary: str, pending: Sequence[Utterance]) -> str:
    """The summary followed by the queued utterances verbatim, for a reader answered without a fold."""
    if not pending:
        return summary
    lines = "\n".join(f"[turn {u.turn_number}] {u.speaker}: {u.text}" for u in pending)
    return (summary + "\n" if summary else "") + f"{PENDING_HEADER}\n{lines}"


def _holding(before: Summary, after: Summary, fell_back: Sequence[Utterance]) -> Summary:
    """``after`` keeping the originals ``before`` held, plus ``fell_back``, within HELD_MAX_TOKENS."""
    held = [*before.held, *fell_back]
    dropped: list[Utterance] = []
    while held and sum(u.tokens for u in held) > HELD_MAX_TOKENS:
        dropped.append(held.pop(0))
    if dropped:
        log.warning(
            "dropped %d originals kept for a Claude rewrite (over %d tokens)",
            len(dropped),
            HELD_MAX_TOKENS,
        )
    return replace(
        after,
        held=tuple(held),
        held_dropped=before.held_dropped + len(dropped),
        held_dropped_through=max([before.held_dropped_through, *(u.seq for u in dropped)]),
    )


def _settled(queued: Collection[object], summary: Summary, limit: int) -> bool:
    """Nothing left to fold: no utterance queued and the summary within its limit."""
    return not queued and summary.tokens <= limit


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


def _commit(
    state: ConversationState, batch: Sequence[Utterance], summary: Summary, settings: Settings
) -> Callable[[ConversationState], tuple[Change, tuple[bool, bool]]]:
    """The fold's commit: (committed, and whether that left nothing to fold, as ``_fold``'s next read would see)."""
    seqs = {u.seq for u in batch}
    archive = settings.archive_evicted

    def decide(current: ConversationState) -> tuple[Change, tuple[bool, bool]]:
        still_queued = {u.seq for u in current.pending}
        if current.summary != state.summary or not seqs <= still_queued:
            return Change(), (False, False)
        limit = effective_settings(settings, current.settings).summary_token_limit
        finished = _settled(still_queued - seqs, summary, limit)
        return (
            Change(
                summary=summary,
                pending_remove=seqs,
                archive_add=list(batch) if archive else [],
            ),
            (True, finished),
        )

    return decide
