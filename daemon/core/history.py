"""The conversation history core: answers ``query(text, metadata, data)``.

Transport-free on purpose: the gRPC servicer and the tests call the same
object, and nothing here imports grpc. Every write goes through
``Backend.transact`` with a pure decision function, so the core holds no
conversation state of its own and a failed query changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chd.backends.base import Backend, Change, ConversationState, queued_conversations
from chd.backends.memory import MemoryBackend
from chd.core.errors import DaemonError, DeadlineExceeded, InvalidRequest, NotFound, TooLarge, quote
from chd.core.language.classifier import QueryClassifier
from chd.core.language.fields import as_str
from chd.core.language.instructions import INSTRUCTIONS, PURPOSE
from chd.core.language.intents import (
    OPERATIONS,
    ConfigureIntent,
    Intent,
    MarkIntent,
    RemoveIntent,
    RetrieveIntent,
    StatsIntent,
    StoreIntent,
    StoreManyIntent,
    SummarizeIntent,
    build_intent,
)
from chd.core.language.reading_process import reading_deadline
from chd.core.language.understanding import understand
from chd.core.memory.batch import ITEMS, BatchItem, decide_batch, item_key, taken_by_other_kind
from chd.core.memory.configure import configure, effective_settings
from chd.core.memory.context import build_context
from chd.core.memory.embedder import Embedder
from chd.core.memory.eviction import evictions_for_store
from chd.core.memory.hybrid import HybridSearch
from chd.core.memory.index import IndexCache
from chd.core.memory.marking import mark
from chd.core.memory.retrieval import find_utterances
from chd.core.memory.selection import (
    archived_victims,
    check_at_most,
    missing_seq_message,
    remove_victims,
    segment_touched,
    summarize_scope,
)
from chd.core.memory.stats import conversation_stats
from chd.core.pace import StorePace
from chd.core.settings import Settings
from chd.core.summaries.extractive import ExtractiveSummarizer
from chd.core.summaries.folding import Folder, FoldReport, with_pending
from chd.core.summaries.segments import Forgotten, forget
from chd.core.summaries.summarizer import Summarized, Summarizer
from chd.core.summaries.worker import FoldWorker
from chd.core.summaries.writer import SummaryWriter
from chd.core.tokens import TokenCounter, default_counter
from chd.core.tracing import COMMIT, FOLD, NO_TRACER, PARSE, Tracer
from chd.core.utterance import Speaker, Summary, SummarySegment, Utterance, now_rfc3339, rfc3339

__all__ = ["ConversationHistory", "QueryResult", "DEFAULT_CONVERSATION"]

log = logging.getLogger(__name__)

DEFAULT_CONVERSATION = "default"
MAX_CONVERSATION_ID = 256
# Seconds a read waits for a background fold of its conversation before it
# folds offline itself: a healthy model call ends well within it.
READ_WAIT = 10.0

_OPERATION_OF: dict[type, str] = {
    StoreIntent: "store",
    StoreManyIntent: "store",
    RetrieveIntent: "retrieve",
    RemoveIntent: "remove",
    SummarizeIntent: "summarize",
    ConfigureIntent: "configure",
    MarkIntent: "mark",
    StatsIntent: "stats",
}


@dataclass(slots=True)
class QueryResult:
    """What a query returns: the wire response, before any transport."""

    operation: str
    result: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)


class ConversationHistory:
    """Rolling buffers of utterances with running summaries, per conversation."""

    def __init__(
        self,
        backend: Backend | None = None,
        settings: Settings | None = None,
        summarizer: Summarizer | None = None,
        counter: TokenCounter | None = None,
        classifier: QueryClassifier | None = None,
        *,
        writer: SummaryWriter | None = None,
        background: bool = True,
        embedder: Embedder | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        """Args beyond the obvious: ``classifier`` (Claude) reads queries the
        rules are unsure of (None: the rules alone); ``writer`` wraps
        ``summarizer`` with retries and the offline fallback (built from
        ``summarizer`` when None); ``background`` False folds on the store
        itself (no worker threads); ``embedder`` (None: off) adds vector
        similarity to topic search (daemon/core/memory/embedder.py);
        ``tracer`` (None: none) opens spans around the parse, storage
        commits and folds (daemon/core/tracing.py)."""
        self.embedder = embedder
        self.hybrid = HybridSearch(embedder) if embedder is not None else None
        self.tracer: Tracer = tracer or NO_TRACER
        self.backend: Backend = backend if backend is not None else MemoryBackend()
        self.settings = settings or Settings()
        self.counter: TokenCounter = counter or default_counter()
        self.classifier = classifier
        # Search indexes: a cache derived from the backend (daemon/core/memory/index.py).
        self.indexes = IndexCache()
        # What a store's decision leaves time for (daemon/core/pace.py).
        self.store_pace = StorePace()
        self.offline = ExtractiveSummarizer(self.counter)
        if writer is None:
            primary = summarizer or self.offline
            fallback = None if isinstance(primary, ExtractiveSummarizer) else self.offline
            writer = SummaryWriter(primary, self.counter, fallback)
        self.writer = writer
        self.summarizer: Summarizer = writer.primary
        self.folder = Folder(self.backend, self.settings, self.writer, self.counter)
        self.worker: FoldWorker | None = None
        if background:
            self.worker = FoldWorker(self.fold, delay=self.settings.fold_delay)
            self.folder.rewrite_due = self.worker.submit
            self.worker.recover(lambda: queued_conversations(self.backend))

    def close(self, timeout: float = 5.0) -> None:
        """Stop folding, the summarizer and storage, within about ``timeout`` seconds.

        Queued folds stay in the backend for the next start; a memory backend
        has no next start, so what it still had queued is reported as lost.
        """
        until = time.monotonic() + timeout
        if self.worker is not None:
            self.worker.stop(timeout=0)  # takes no more work; a fold in progress goes on
        self.folder.close()  # late model calls in flight are abandoned; their originals stay kept
        closer = getattr(self.summarizer, "close", None)
        if callable(closer):
            # The Claude client's HTTP connections, or the summarizer child
            # (terminated after a short grace): a fold waiting on it fails now.
            closer()
        if self.worker is not None:
            self.worker.stop(timeout=max(0.0, until - time.monotonic()))
        self._report_queued()
        if self.hybrid is not None:
            self.hybrid.close()
        self.backend.close()

    def _report_queued(self) -> None:
        try:
            # The backend's queue index where it has one: a shutdown must not
            # read every one of 100,000 conversations (issue 17).
            queued = {
                cid: len(self.backend.read(cid).pending)
                for cid in queued_conversations(self.backend)
            }
        except Exception:  # a backend failing now says so itself; this is only a report
            return
        queued = {cid: n for cid, n in queued.items() if n}
        if not queued:
            return
        total = sum(queued.values())
        if getattr(self.backend, "name", "") == "memory":
            log.warning(
                "%d evicted utterance(s) of %d conversation(s) were waiting to be summarized and are lost "
                "with the memory backend",
                total,
                len(queued),
            )
        else:
            log.info(
                "%d evicted utterance(s) of %d conversation(s) stay queued for summary at the next start",
                total,
                len(queued),
            )

    # --- the Daemon Interface ------------------------------------------------

    def get_purpose(self) -> str:
        return PURPOSE

    def get_instructions(self) -> str:
        return INSTRUCTIONS

    def query(
        self,
        text: str,
        metadata: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
        deadline: float | None = None,
    ) -> QueryResult:
        """Parse and run one query; raise a DaemonError before changing anything.

        ``deadline`` is a ``time.monotonic()`` instant (None: no deadline).
        Past it, the query stops at its next checkpoint (after the parse,
        before the decision, before a fold a read waits for) with
        DeadlineExceeded; a change already decided is finished, never cut
        in half. The raised error carries ``operation`` (what the query tried
        to do, or ``unknown``), so nobody has to parse the query again.
        """
        metadata = metadata or {}
        data = data or {}
        operation = "unknown"
        try:
            operation = _named_operation(data)
            conversation_id = self._conversation_id(metadata)
            with self.tracer.span(PARSE, conversation_id):
                with reading_deadline(deadline):
                    understood = understand(text, metadata, data, self.classifier)
            operation = _OPERATION_OF.get(type(understood.intent), operation)
            _check_deadline(deadline, "once the query was read")
            outcome = self.execute(understood.intent, conversation_id, deadline)
        except DaemonError as error:
            if error.operation is None:
                error.operation = operation
            raise
        outcome.metadata["confidence"] = understood.confidence
        if understood.interpreted_by != "rules":
            outcome.metadata["interpreted_by"] = understood.interpreted_by
        return outcome

    def execute(
        self, intent: Intent, conversation_id: str, deadline: float | None = None
    ) -> QueryResult:
        if isinstance(intent, StoreIntent):
            return self._store(intent, conversation_id, deadline)
        if isinstance(intent, StoreManyIntent):
            return self._store_many(intent, conversation_id, deadline)
        if isinstance(intent, RetrieveIntent):
            return self._retrieve(intent, conversation_id, deadline)
        if isinstance(intent, RemoveIntent):
            return self._remove(intent, conversation_id, deadline)
        if isinstance(intent, SummarizeIntent):
            return self._summarize(intent, conversation_id, deadline)
        if isinstance(intent, ConfigureIntent):
            return QueryResult(
                "configure",
                *configure(self.backend, self.settings, self._fold_now, intent, conversation_id),
            )
        if isinstance(intent, MarkIntent):
            return QueryResult("mark", *mark(self.backend, intent, conversation_id))
        if isinstance(intent, StatsIntent):
            state = self.backend.read(conversation_id)
            stats = conversation_stats(state, effective_settings(self.settings, state.settings))
            stats |= self.folder.late_stats()
            return QueryResult(
                "stats",
                stats,
                {"conversation_id": conversation_id, "items_affected": 0, "tokens_used": 0},
            )
        raise InvalidRequest(f"unsupported intent {type(intent).__name__}")

    # --- convenience methods named in the spec -------------------------------

    def get_last_n(
        self, n: int, conversation_id: str = DEFAULT_CONVERSATION
    ) -> list[dict[str, Any]]:
        """The newest ``n`` utterances, oldest first."""
        found: list[dict[str, Any]] = self._retrieve(
            RetrieveIntent(last_n=n), conversation_id
        ).result["utterances"]
        return found

    def get_summary(self, conversation_id: str = DEFAULT_CONVERSATION) -> dict[str, Any]:
        """The running summary and what it covers."""
        return self._retrieve(RetrieveIntent(summary_only=True), conversation_id).result

    def add_utterance(
        self,
        text: str,
        speaker: Speaker = "user",
        turn_number: int | None = None,
        conversation_id: str = DEFAULT_CONVERSATION,
    ) -> dict[str, Any]:
        """Store one utterance without going through the language parser."""
        fields: dict[str, Any] = {"text": text, "speaker": speaker}
        if turn_number is not None:
            fields["turn_number"] = turn_number
        intent = build_intent("store", fields, {}, {})
        assert isinstance(intent, StoreIntent)
        return self._store(intent, conversation_id).result

    def _store(
        self, intent: StoreIntent, conversation_id: str, deadline: float | None = None
    ) -> QueryResult:
        settings = self.settings
        if len(intent.text) > settings.max_utterance_chars:
            raise TooLarge(
                f"utterance has {len(intent.text)} characters, more than the limit of "
                f"{settings.max_utterance_chars}"
            )
        tokens = _count_tokens(self.counter, intent.text, deadline)
        timestamp = now_rfc3339() if intent.timestamp is None else rfc3339(intent.timestamp)

        key = intent.idempotency_key
        decided = [0.0]

        def decide(
            state: ConversationState,
        ) -> tuple[Change, tuple[Utterance, list[Utterance], int | None, int, bool]]:
            # Checked again here: waiting for the conversation's lock counts too.
            _check_deadline(deadline, "before the store was decided")
            if key is not None:
                # Decided in the transaction, so two sends of one key store
                # once, on one daemon or on replicas sharing Redis (issue 29).
                held = state.keyed(key)
                if held is not None:
                    return Change(), (
                        _replayed(held[0], intent, key),
                        [],
                        held[1],
                        len(state.pending),
                        True,
                    )
                # A batch under this key is known by its first item's key;
                # once that item has left, the key is forgotten as a single
                # store's is once its utterance has left.
                if state.keyed(item_key(key, 0)) is not None:
                    raise InvalidRequest(taken_by_other_kind(key, single=False))
            # A replay above writes nothing; this store is written and answered.
            _check_time_to_store(deadline, self.store_pace, len(intent.text))
            decided[0] = time.monotonic()
            limits = effective_settings(settings, state.settings)
            if tokens > limits.max_tokens:
                raise TooLarge(
                    f"utterance has {tokens} tokens, more than the buffer's max_tokens of "
                    f"{limits.max_tokens}"
                )
            if intent.turn_number is not None:
                turn = intent.turn_number
            elif intent.speaker == "user":
                turn = state.last_turn + 1
            else:
                # Assistant and system utterances join the current turn; before
                # any user utterance that is turn 0, the preamble.
                turn = state.last_turn
            utterance = Utterance(
                conversation_id=conversation_id,
                seq=state.next_seq,
                speaker=intent.speaker,
                text=intent.text,
                turn_number=turn,
                timestamp=timestamp,
                tokens=tokens,
                key=key or "",
            )
            evicted = evictions_for_store(state.utterances, utterance, limits, state.buffer_tokens)
            queue = settings.summarization_enabled
            change = Change(
                append=[utterance],
                remove={u.seq for u in evicted},
                pending_add=evicted if queue else [],
                archive_add=evicted if not queue and settings.archive_evicted else [],
                next_seq=state.next_seq + 1,
                last_turn=max(state.last_turn, turn),
            )
            index = len(state.utterances) - len(evicted)
            pending = len(state.pending) + (len(evicted) if queue else 0)
            return change, (utterance, evicted, index, pending, False)

        with self.tracer.span(COMMIT, conversation_id):
            utterance, evicted, index, pending, replayed = self.backend.transact(
                conversation_id, decide
            )
        if replayed:
            return QueryResult(
                "store",
                {"utterance": utterance.to_dict(index), "evicted": []},
                {
                    "conversation_id": conversation_id,
                    "items_affected": 0,
                    "tokens_used": 0,
                    "summary_pending": pending,
                    "replayed": True,
                },
            )
        self._note_store(conversation_id, utterance, evicted)
        self.store_pace.observe(len(intent.text), time.monotonic() - decided[0])
        if evicted and settings.summarization_enabled:
            # Summarizing is the worker's job: the store has already returned
            # by the time a slow model answers.
            if self.worker is not None:
                self.worker.submit(conversation_id)
            else:
                self.fold(conversation_id)
        return QueryResult(
            "store",
            {"utterance": utterance.to_dict(index), "evicted": [u.seq for u in evicted]},
            {
                "conversation_id": conversation_id,
                "items_affected": 1,
                "tokens_used": tokens,
                "summary_pending": pending,
            },
        )

    def _store_many(
        self, intent: StoreManyIntent, conversation_id: str, deadline: float | None = None
    ) -> QueryResult:
        """Store ``intent.utterances`` in one commit, all or none (daemon/core/memory/batch.py)."""
        settings = self.settings
        items = []
        for i, one in enumerate(intent.utterances):
            if len(one.text) > settings.max_utterance_chars:
                raise TooLarge(
                    f"{ITEMS}[{i}] has {len(one.text)} characters, more than the limit of "
                    f"{settings.max_utterance_chars}; nothing of the batch was stored"
                )
        stamp = now_rfc3339()
        for one in intent.utterances:
            items.append(
                BatchItem(
                    text=one.text,
                    speaker=one.speaker,
                    turn_number=one.turn_number,
                    timestamp=stamp if one.timestamp is None else rfc3339(one.timestamp),
                    tokens=_count_tokens(self.counter, one.text, deadline),
                )
            )
        queue, archive = settings.summarization_enabled, settings.archive_evicted

        def decide(state: ConversationState) -> tuple[Change, Any]:
            _check_deadline(deadline, "before the store was decided")
            limits = effective_settings(settings, state.settings)
            return decide_batch(state, items, intent.idempotency_key, limits, queue, archive)

        with self.tracer.span(COMMIT, conversation_id):
            batch = self.backend.transact(conversation_id, decide)
        wire = [u.to_dict(p) for u, p in zip(batch.utterances, batch.positions, strict=True)]
        metadata: dict[str, Any] = {
            "conversation_id": conversation_id,
            "items_affected": 0 if batch.replayed else len(wire),
            "tokens_used": 0 if batch.replayed else sum(u.tokens for u in batch.utterances),
            "summary_pending": batch.pending,
        }
        if batch.replayed:
            metadata["replayed"] = True
            return QueryResult("store", {"utterances": wire, "evicted": []}, metadata)
        for utterance, evicted in zip(batch.utterances, batch.evicted_by, strict=True):
            self._note_store(conversation_id, utterance, evicted)
        if batch.evicted and queue:
            if self.worker is not None:
                self.worker.submit(conversation_id)
            else:
                self.fold(conversation_id)
        return QueryResult("store", {"utterances": wire, "evicted": batch.evicted}, metadata)

    def _retrieve(
        self, intent: RetrieveIntent, conversation_id: str, deadline: float | None = None
    ) -> QueryResult:
        if intent.context:
            return self._context(intent, conversation_id, deadline)
        wants_summary = intent.include_summary or intent.summary_only
        report = self._fold_now(conversation_id, deadline) if wants_summary else None
        state = self.backend.read(conversation_id)
        result: dict[str, Any] = {}
        tokens_used = 0
        utterances: list[dict[str, Any]] = []
        if not intent.summary_only:
            # A topic search ranks buffer, queue, archive and summary in one
            # list from one index (issue 27); ``archived`` and ``where`` narrow it.
            index = self.indexes.get(conversation_id) if intent.topic is not None else None
            result = find_utterances(state, intent, index, time.time(), self.hybrid, deadline)
            if index is not None:
                self.indexes.trim()
            utterances = result["utterances"]
            tokens_used += sum(u["tokens"] for u in utterances)
        metadata: dict[str, Any] = {
            "conversation_id": conversation_id,
            "items_affected": len(utterances),
        }
        if intent.archived:
            metadata["archive_evicted"] = self.settings.archive_evicted
        if wants_summary:
            result |= _summary_fields(state)
            if report is not None and report.deferred:
                result["summary"] = with_pending(result["summary"], state.pending)
            tokens_used += state.summary.tokens
            metadata |= self._coverage(state, report)
        metadata["tokens_used"] = tokens_used
        return QueryResult("retrieve", result, metadata)

    def _context(
        self, intent: RetrieveIntent, conversation_id: str, deadline: float | None = None
    ) -> QueryResult:
        """The summary plus the newest utterances that fit, ready to paste into a prompt."""
        report = self._fold_now(conversation_id, deadline)
        state = self.backend.read(conversation_id)
        limits = effective_settings(self.settings, state.settings)
        limit = intent.token_limit or limits.summary_token_limit + limits.max_tokens
        summary = (
            with_pending(state.summary.text, state.pending)
            if report.deferred
            else state.summary.text
        )
        context = build_context(summary, state.utterances, limit, self.counter)
        positions = {u.seq: i for i, u in enumerate(state.utterances)}
        return QueryResult(
            "retrieve",
            {
                "context": context.text,
                "tokens": context.tokens,
                "token_limit": limit,
                "summary": context.summary,
                "utterances": [u.to_dict(positions[u.seq]) for u in context.utterances],
                "summary_through_seq": state.summary.through_seq,
                "summary_pending": len(state.pending),
            },
            {
                "conversation_id": conversation_id,
                "items_affected": len(context.utterances),
                "tokens_used": context.tokens,
            }
            | self._coverage(state, report),
        )

    def _remove(
        self, intent: RemoveIntent, conversation_id: str, deadline: float | None = None
    ) -> QueryResult:
        def decide(state: ConversationState) -> tuple[Change, tuple[list[Utterance], Forgotten]]:
            _check_deadline(deadline, "before the removal was decided")
            victims = remove_victims(state, intent)
            archived = archived_victims(state, intent)
            check_at_most(sorted([*victims, *archived], key=lambda u: u.seq), intent)
            if intent.all:
                segments = len(state.summary.segments)
                forgotten = Forgotten(Summary(), dropped=segments) if segments else Forgotten(None)
            else:
                gone = {u.seq for u in archived}

                def remaining(segment: SummarySegment) -> list[Utterance]:
                    return [
                        u
                        for u in state.archive
                        if segment.seq_from <= u.seq <= segment.seq_to and u.seq not in gone
                    ]

                limit = effective_settings(self.settings, state.settings).summary_token_limit
                forgotten = forget(
                    state.summary,
                    limit,
                    segment_touched(state, intent, [*victims, *archived]),
                    remaining,
                    self._rebuild,
                    self.counter,
                )
                if (
                    intent.seq is not None
                    and not victims
                    and not archived
                    and forgotten.summary is None
                ):
                    raise NotFound(missing_seq_message(state, intent.seq))
            seqs = {u.seq for u in victims}
            change = Change(
                remove=seqs & {u.seq for u in state.utterances},
                pending_remove=seqs & {u.seq for u in state.pending},
                archive_remove={u.seq for u in archived},
                summary=forgotten.summary,
            )
            return change, (sorted([*victims, *archived], key=lambda u: u.seq), forgotten)

        with self.tracer.span(COMMIT, conversation_id):
            removed, forgotten = self.backend.transact(conversation_id, decide)
        self.folder.forget_late(
            conversation_id
        )  # its answers kept for joining may quote what was removed
        return QueryResult(
            "remove",
            {
                "removed": [u.seq for u in removed],
                "summary_segments_dropped": forgotten.dropped,
                "summary_segments_rebuilt": forgotten.rebuilt,
            },
            {
                "conversation_id": conversation_id,
                "items_affected": len(removed),
                "tokens_used": sum(u.tokens for u in removed),
            },
        )

    def _summarize(
        self, intent: SummarizeIntent, conversation_id: str, deadline: float | None = None
    ) -> QueryResult:
        report = self._fold_now(conversation_id, deadline)
        state = self.backend.read(conversation_id)
        limit = (
            intent.token_limit
            or effective_settings(self.settings, state.settings).summary_token_limit
        )
        previous, covered = summarize_scope(state, intent)
        written: Summarized | None = None
        if not covered and self.counter.count(previous) <= limit:
            text = previous  # nothing to add: no need to call a model
        else:
            _check_deadline(deadline, "before the summary was written")
            written = self.writer.write(previous, covered, limit, patient=False)
            text = written.text
        tokens = self.counter.count(text)
        return QueryResult(
            "summarize",
            {
                "summary": text,
                "tokens": tokens,
                "token_limit": limit,
                "utterances_covered": len(covered),
            },
            {
                "conversation_id": conversation_id,
                "items_affected": len(covered),
                "tokens_used": tokens,
            }
            | self._coverage(state, report, written),
        )

    # --- summarization -----------------------------------------------------------

    def fold(self, conversation_id: str) -> bool:
        """Fold the conversation's queued evicted utterances now; True when none are left.

        See daemon/core/summaries/folding.py: utterances leave the queue only in the commit
        that stores the summary holding them.
        """
        with self.tracer.span(FOLD, conversation_id):
            return self.folder.fold(conversation_id).done

    def _fold_now(self, conversation_id: str, deadline: float | None = None) -> FoldReport:
        """Fold what is queued before answering with the summary, so it is never stale.

        The caller is waiting: it waits for a fold in progress at most
        READ_WAIT seconds (no longer than its deadline leaves), and tries the
        configured summarizer once (not at all just after it failed) before
        the offline fallback. A fold is committed whole or not at all, so one
        that ends after the deadline is kept; only the answer is refused.
        """
        _check_deadline(deadline, "before the summary was brought up to date")
        wait = (
            READ_WAIT if deadline is None else max(0.0, min(READ_WAIT, deadline - time.monotonic()))
        )
        with self.tracer.span(FOLD, conversation_id):
            report = self.folder.fold(conversation_id, patient=False, wait=wait)
        _check_deadline(deadline, "while the summary was brought up to date")
        return report

    def _rebuild(self, survivors: Sequence[Utterance], limit: int) -> Summarized:
        # Inside a remove's transaction: the offline summarizer is fast and
        # deterministic, as a decide function must be.
        return Summarized(self.offline.summarize("", survivors, limit), self.offline.name)

    def _coverage(
        self, state: ConversationState, report: FoldReport | None, written: Summarized | None = None
    ) -> dict[str, Any]:
        """What the summary covers and who wrote it, for every response carrying it."""
        out = _summary_coverage(state) | {"summarizer": self.writer.name}
        outcomes = [*(report.written if report else ()), *((written,) if written else ())]
        errors = [w.error for w in outcomes if w.error]
        segments = state.summary.segments
        if not outcomes and segments and segments[-1].error:
            errors.append(segments[-1].error)
        if errors:
            out["summarizer_error"] = errors[-1]
        fallbacks = sum(1 for s in segments if s.error)
        if fallbacks:
            out["summary_fallback_segments"] = fallbacks
        if report is not None and report.error:
            out["fold_error"] = report.error
        if report is not None and report.deferred and state.pending:
            out["summary_pending_verbatim"] = len(state.pending)
        return out

    def _note_store(
        self, conversation_id: str, utterance: Utterance, evicted: list[Utterance]
    ) -> None:
        # Keep a live search index in step with this store (~20 us at 10k
        # utterances, bench/bench_search.py) so the next search does not pay
        # for it; an index nobody searched yet is built on first search instead.
        index = self.indexes.peek(conversation_id)
        if index is not None:
            # Evicted utterances that are queued or archived stay indexed.
            kept = self.settings.summarization_enabled or self.settings.archive_evicted
            with index.lock:
                before = index.bytes
                index.note_store(utterance, () if kept else (u.seq for u in evicted))
                grown = index.bytes - before
            self.indexes.grew(conversation_id, index, grown)

    # --- helpers -------------------------------------------------------------

    @staticmethod
    def _conversation_id(metadata: Mapping[str, Any]) -> str:
        if "conversation_id" not in metadata:
            return DEFAULT_CONVERSATION
        value = as_str("metadata.conversation_id", metadata["conversation_id"])
        if len(value) > MAX_CONVERSATION_ID:
            raise InvalidRequest(
                f"metadata.conversation_id is {len(value)} characters long; "
                f"the limit is {MAX_CONVERSATION_ID}"
            )
        return value


def _named_operation(data: Mapping[str, Any]) -> str:
    """The operation ``data.operation`` names, if it is one (a metrics label: bounded)."""
    named = data.get("operation")
    if isinstance(named, str) and named.strip().lower() in OPERATIONS:
        return named.strip().lower()
    return "unknown"


def _count_tokens(counter: TokenCounter, text: str, deadline: float | None) -> int:
    """``counter.count(text)``, stopping at ``deadline`` when the counter can check it as it goes.

    Counting a megabyte takes about a quarter of a second: a 16 MiB store
    was answered 2.3 s past a 2 s request_timeout, all of it counting (issue 28).
    """
    checked = getattr(counter, "count_checked", None)
    if deadline is None or checked is None:
        return counter.count(text)
    return int(checked(text, lambda: _check_deadline(deadline, "while its tokens were counted")))


def _replayed(utterance: Utterance, intent: StoreIntent, key: str) -> Utterance:
    """The held ``utterance`` a store with its idempotency key answers again, if it is the same store:
    the same text and speaker, and the same turn when the store names one (a retry that asked for
    another speaker would otherwise get back an utterance it did not ask for, unawares)."""
    differs = utterance.differs_from(intent.text, intent.speaker, intent.turn_number)
    if differs:
        raise InvalidRequest(
            f"metadata.idempotency_key {quote(key, 40)} was already used by the store of utterance "
            f"{utterance.seq} with a different {' and '.join(differs)}; use a new key for a new utterance"
        )
    return utterance


def _check_deadline(deadline: float | None, stage: str) -> None:
    """Raise DeadlineExceeded when ``deadline`` (``time.monotonic``) has passed."""
    if deadline is not None and time.monotonic() >= deadline:
        raise DeadlineExceeded(f"the call's deadline passed {stage}; the query was not carried out")


def _check_time_to_store(deadline: float | None, pace: StorePace, chars: int) -> None:
    """Raise DeadlineExceeded when the time left would not cover writing and answering ``chars`` characters.

    A decided store is kept: decided too late, it is answered after the
    deadline, and a caller whose own deadline passed was told
    DEADLINE_EXCEEDED of a store that was kept.
    """
    if deadline is None:
        return
    needed = pace.needed(chars)
    left = deadline - time.monotonic()
    if left < needed:
        raise DeadlineExceeded(
            f"the call's deadline would pass before the store was written and answered: "
            f"{chars:,} characters take about {needed:.2f}s at this daemon's pace and "
            f"{max(left, 0.0):.2f}s were left; nothing was stored"
        )


def _summary_fields(state: ConversationState) -> dict[str, Any]:
    return {
        "summary": state.summary.text,
        "summary_tokens": state.summary.tokens,
    } | _summary_coverage(state)


def _summary_coverage(state: ConversationState) -> dict[str, Any]:
    return {
        "summary_through_seq": state.summary.through_seq,
        "summary_pending": len(state.pending),
    }
