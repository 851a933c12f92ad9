"""The conversation history core: answers ``query(text, metadata, data)``.

Transport-free on purpose: the gRPC servicer and the tests call the same
object, and nothing here imports grpc. Every write goes through
``Backend.transact`` with a pure decision function, so the core holds no
conversation state of its own and a failed query changes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from backends.base import Backend, Change, ConversationState
from backends.memory import MemoryBackend
from daemon.errors import InvalidRequest, NotFound, TooLarge
from daemon.fields import as_str
from daemon.instructions import INSTRUCTIONS, PURPOSE
from daemon.intents import (
    Intent,
    RemoveIntent,
    RetrieveIntent,
    StoreIntent,
    SummarizeIntent,
    build_intent,
)
from daemon.context import build_context
from daemon.folding import FoldReport, Folder
from daemon.parser import parse
from daemon.search import rank
from daemon.segments import Forgotten, forget
from daemon.settings import Settings
from daemon.summarizer import ExtractiveSummarizer, Summarized, Summarizer, SummaryWriter
from daemon.tokens import TokenCounter, default_counter
from daemon.utterance import Speaker, Summary, SummarySegment, Utterance, now_rfc3339
from daemon.worker import FoldWorker

__all__ = ["ConversationHistory", "QueryResult", "DEFAULT_CONVERSATION"]

log = logging.getLogger(__name__)

DEFAULT_CONVERSATION = "default"
MAX_CONVERSATION_ID = 256
# Seconds a read waits for a background fold of its conversation before it
# folds offline itself: a healthy model call ends well within it.
READ_WAIT = 10.0


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
        *,
        writer: SummaryWriter | None = None,
        background: bool = True,
    ) -> None:
        """Args beyond the obvious: ``writer`` wraps ``summarizer`` with retries
        and the offline fallback (built from ``summarizer`` when None);
        ``background`` False folds on the store itself (no worker threads)."""
        self.backend: Backend = backend if backend is not None else MemoryBackend()
        self.settings = settings or Settings()
        self.counter: TokenCounter = counter or default_counter()
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
            self.worker = FoldWorker(lambda cid: self.folder.fold(cid).done)
            self.worker.recover(self.backend.conversations, lambda cid: bool(self.backend.read(cid).pending))

    def close(self) -> None:
        """Stop the background worker (queues stay in the backend), then close storage."""
        if self.worker is not None:
            self.worker.stop()
        closer = getattr(self.summarizer, "close", None)
        if callable(closer):
            closer()  # the Claude client's HTTP connections
        self.backend.close()

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
    ) -> QueryResult:
        """Parse and run one query; raise a DaemonError before changing anything."""
        metadata = metadata or {}
        data = data or {}
        conversation_id = self._conversation_id(metadata)
        intent = self.interpret(text, metadata, data)
        return self.execute(intent, conversation_id)

    def interpret(
        self, text: str, metadata: Mapping[str, Any], data: Mapping[str, Any]
    ) -> Intent:
        """The typed intent for a query; ``data.operation`` skips the parser."""
        if "operation" in data:
            operation = as_str("data.operation", data["operation"]).strip().lower()
            return build_intent(operation, {}, metadata, data)
        if not isinstance(text, str):
            raise InvalidRequest("query must be a string")
        parsed = parse(text)
        return build_intent(parsed.operation, parsed.fields, metadata, data)

    def execute(self, intent: Intent, conversation_id: str) -> QueryResult:
        if isinstance(intent, StoreIntent):
            return self._store(intent, conversation_id)
        if isinstance(intent, RetrieveIntent):
            return self._retrieve(intent, conversation_id)
        if isinstance(intent, RemoveIntent):
            return self._remove(intent, conversation_id)
        if isinstance(intent, SummarizeIntent):
            return self._summarize(intent, conversation_id)
        raise InvalidRequest(f"unsupported intent {type(intent).__name__}")

    # --- convenience methods named in the spec -------------------------------

    def get_last_n(self, n: int, conversation_id: str = DEFAULT_CONVERSATION) -> list[dict[str, Any]]:
        """The newest ``n`` utterances, oldest first."""
        return self._retrieve(RetrieveIntent(last_n=n), conversation_id).result["utterances"]

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

    # --- operations ------------------------------------------------------------

    def _store(self, intent: StoreIntent, conversation_id: str) -> QueryResult:
        settings = self.settings
        if len(intent.text) > settings.max_utterance_chars:
            raise TooLarge(
                f"utterance has {len(intent.text)} characters, more than the limit of "
                f"{settings.max_utterance_chars}"
            )
        tokens = self.counter.count(intent.text)
        if tokens > settings.max_tokens:
            raise TooLarge(
                f"utterance has {tokens} tokens, more than the buffer's max_tokens of "
                f"{settings.max_tokens}"
            )
        timestamp = now_rfc3339()

        def decide(state: ConversationState) -> tuple[Change, tuple[Utterance, list[Utterance], int]]:
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
            )
            evicted = _fifo_evictions(state.utterances, utterance, settings)
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
            return change, (utterance, evicted, index, pending)

        utterance, evicted, index, pending = self.backend.transact(conversation_id, decide)
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

    def _retrieve(self, intent: RetrieveIntent, conversation_id: str) -> QueryResult:
        if intent.context:
            return self._context(intent, conversation_id)
        wants_summary = intent.include_summary or intent.summary_only
        report = self._fold_now(conversation_id) if wants_summary else None
        state = self.backend.read(conversation_id)
        result: dict[str, Any] = {}
        tokens_used = 0
        utterances: list[dict[str, Any]] = []
        if not intent.summary_only:
            positions = {u.seq: i for i, u in enumerate(state.utterances)}
            chosen = _filter(state, intent, state.archive if intent.archived else state.utterances)
            if intent.last_n is not None:
                chosen = chosen[len(chosen) - intent.last_n :] if intent.last_n else []
            if intent.topic is not None:
                hits = rank(chosen, intent.topic)
                utterances = [
                    h.utterance.to_dict(positions.get(h.utterance.seq)) | {"score": round(h.score, 4)}
                    for h in hits
                ]
                result["ranked"] = True
            else:
                utterances = [u.to_dict(positions.get(u.seq)) for u in chosen]
            tokens_used += sum(u["tokens"] for u in utterances)
            result["utterances"] = utterances
        metadata: dict[str, Any] = {
            "conversation_id": conversation_id,
            "items_affected": len(utterances),
        }
        if intent.archived:
            metadata["archive_evicted"] = self.settings.archive_evicted
        if wants_summary:
            result |= _summary_fields(state)
            tokens_used += state.summary.tokens
            metadata |= self._coverage(state, report)
        metadata["tokens_used"] = tokens_used
        return QueryResult("retrieve", result, metadata)

    def _context(self, intent: RetrieveIntent, conversation_id: str) -> QueryResult:
        """The summary plus the newest utterances that fit, ready to paste into a prompt."""
        report = self._fold_now(conversation_id)
        state = self.backend.read(conversation_id)
        limit = intent.token_limit or self.settings.summary_token_limit + self.settings.max_tokens
        context = build_context(state.summary.text, state.utterances, limit, self.counter)
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

    def _remove(self, intent: RemoveIntent, conversation_id: str) -> QueryResult:
        limit = self.settings.summary_token_limit

        def decide(state: ConversationState) -> tuple[Change, tuple[list[Utterance], Forgotten]]:
            if intent.all:
                victims, archived = [*state.pending, *state.utterances], list(state.archive)
                segments = len(state.summary.segments)
                forgotten = Forgotten(Summary(), dropped=segments) if segments else Forgotten(None)
            else:
                victims, archived, touches = _selected(state, intent)
                gone = {u.seq for u in archived}

                def remaining(segment: SummarySegment) -> list[Utterance]:
                    return [
                        u for u in state.archive
                        if segment.seq_from <= u.seq <= segment.seq_to and u.seq not in gone
                    ]

                forgotten = forget(state.summary, limit, touches, remaining, self._rebuild, self.counter)
                if intent.seq is not None and not victims and not archived and forgotten.summary is None:
                    raise NotFound(_missing_seq(state, intent.seq))
            seqs = {u.seq for u in victims}
            change = Change(
                remove=seqs & {u.seq for u in state.utterances},
                pending_remove=seqs & {u.seq for u in state.pending},
                archive_remove={u.seq for u in archived},
                summary=forgotten.summary,
            )
            return change, (sorted([*victims, *archived], key=lambda u: u.seq), forgotten)

        removed, forgotten = self.backend.transact(conversation_id, decide)
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

    def _summarize(self, intent: SummarizeIntent, conversation_id: str) -> QueryResult:
        report = self._fold_now(conversation_id)
        state = self.backend.read(conversation_id)
        limit = intent.token_limit or self.settings.summary_token_limit
        written: Summarized | None = None
        if not state.utterances and state.summary.tokens <= limit:
            text = state.summary.text  # nothing to add: no need to call a model
        else:
            written = self.writer.write(state.summary.text, state.utterances, limit, patient=False)
            text = written.text
        tokens = self.counter.count(text)
        return QueryResult(
            "summarize",
            {
                "summary": text,
                "tokens": tokens,
                "token_limit": limit,
                "utterances_covered": len(state.utterances),
            },
            {
                "conversation_id": conversation_id,
                "items_affected": len(state.utterances),
                "tokens_used": tokens,
            }
            | self._coverage(state, report, written),
        )

    # --- summarization -----------------------------------------------------------

    def fold(self, conversation_id: str) -> bool:
        """Fold the conversation's queued evicted utterances now; True when none are left.

        See daemon/folding.py: utterances leave the queue only in the commit
        that stores the summary holding them.
        """
        return self.folder.fold(conversation_id).done

    def _fold_now(self, conversation_id: str) -> FoldReport:
        """Fold what is queued before answering with the summary, so it is never stale.

        The caller is waiting: it waits for a fold in progress at most
        READ_WAIT seconds, and tries the configured summarizer once (not at
        all just after it failed) before the offline fallback.
        """
        return self.folder.fold(conversation_id, patient=False, wait=READ_WAIT)

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
        return out

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


def _fifo_evictions(
    buffer: Sequence[Utterance], incoming: Utterance, settings: Settings
) -> list[Utterance]:
    """The oldest utterances that leave so ``incoming`` fits both limits.

    Once something must go, at least ``eviction_batch`` go together (the
    spec's 21st utterance evicts 1-5): the summarizer then folds a batch at a
    time instead of running on every store of a full buffer.
    """
    count = len(buffer) + 1
    tokens = sum(u.tokens for u in buffer) + incoming.tokens
    needed = 0
    for utterance in buffer:
        if count <= settings.buffer_size and tokens <= settings.max_tokens:
            break
        needed += 1
        count -= 1
        tokens -= utterance.tokens
    if needed:
        needed = max(needed, min(settings.eviction_batch, len(buffer)))
    return list(buffer[:needed])


def _filter(
    state: ConversationState, intent: RetrieveIntent, pool: Sequence[Utterance]
) -> list[Utterance]:
    if intent.seq is not None and not any(u.seq == intent.seq for u in pool):
        raise NotFound(_missing_seq(state, intent.seq))
    low = intent.turn_from if intent.turn_from is not None else -1
    high = intent.turn_to if intent.turn_to is not None else float("inf")
    return [
        u
        for u in pool
        if (intent.seq is None or u.seq == intent.seq)
        and (intent.speaker is None or u.speaker == intent.speaker)
        and low <= u.turn_number <= high
    ]


def _selected(
    state: ConversationState, intent: RemoveIntent
) -> tuple[list[Utterance], list[Utterance], Callable[[SummarySegment], bool]]:
    """A remove's victims in the buffer and queue, in the archive, and which segments it touches."""
    queued = [*state.pending, *state.utterances]
    if intent.seq is not None:
        seq = intent.seq
        return (
            [u for u in queued if u.seq == seq],
            [u for u in state.archive if u.seq == seq],
            lambda s: s.seq_from <= seq <= s.seq_to,
        )
    if intent.oldest is not None:
        return list(state.utterances[: intent.oldest]), [], lambda s: False
    assert intent.before_turn is not None
    turn = intent.before_turn
    return (
        [u for u in queued if u.turn_number < turn],
        [u for u in state.archive if u.turn_number < turn],
        lambda s: s.turn_from < turn,
    )


def _missing_seq(state: ConversationState, seq: int) -> str:
    if seq >= state.next_seq:
        return f"there is no utterance {seq} yet (the newest is {state.next_seq - 1})"
    if seq <= state.summary.through_seq:
        return f"utterance {seq} was evicted and folded into the summary"
    return f"utterance {seq} is no longer in the buffer (evicted or removed)"


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
