"""The conversation history core: answers ``query(text, metadata, data)``.

Transport-free on purpose: the gRPC servicer and the tests call the same
object, and nothing here imports grpc. Every write goes through
``Backend.transact`` with a pure decision function, so the core holds no
conversation state of its own and a failed query changes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from backends.base import Backend, Change, ConversationState
from backends.memory import MemoryBackend
from daemon.classifier import QueryClassifier
from daemon.configure import configure, effective_settings
from daemon.errors import InvalidRequest, StorageError, TooLarge
from daemon.eviction import evictions_for_store
from daemon.fields import as_str
from daemon.index import IndexCache
from daemon.instructions import INSTRUCTIONS, PURPOSE
from daemon.intents import (
    ConfigureIntent,
    Intent,
    MarkIntent,
    RemoveIntent,
    RetrieveIntent,
    StatsIntent,
    StoreIntent,
    SummarizeIntent,
    build_intent,
)
from daemon.marking import mark
from daemon.retrieval import find_utterances
from daemon.selection import remove_victims, segments_removed, summarize_scope
from daemon.settings import Settings
from daemon.stats import conversation_stats
from daemon.summarizer import ExtractiveSummarizer, Summarizer
from daemon.tokens import TokenCounter, default_counter
from daemon.understanding import understand
from daemon.utterance import Speaker, Summary, SummarySegment, Utterance, now_rfc3339

__all__ = ["ConversationHistory", "QueryResult", "DEFAULT_CONVERSATION"]

log = logging.getLogger(__name__)

DEFAULT_CONVERSATION = "default"
MAX_CONVERSATION_ID = 256
# A summarizer racing a remove of the utterances it is folding starts over;
# after this many tries the batch stays queued for the next fold.
_FOLD_ATTEMPTS = 3


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
    ) -> None:
        self.backend: Backend = backend if backend is not None else MemoryBackend()
        self.settings = settings or Settings()
        self.counter: TokenCounter = counter or default_counter()
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer(self.counter)
        # Claude for queries the rules are unsure of; None: the rules alone.
        self.classifier = classifier
        # Search indexes: a cache derived from the backend (daemon/index.py).
        self.indexes = IndexCache()
        self._fold_locks: dict[str, threading.Lock] = {}
        self._fold_locks_guard = threading.Lock()

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
        understood = understand(text, metadata, data, self.classifier)
        outcome = self.execute(understood.intent, conversation_id)
        outcome.metadata["confidence"] = understood.confidence
        if understood.interpreted_by != "rules":
            outcome.metadata["interpreted_by"] = understood.interpreted_by
        return outcome

    def interpret(
        self, text: str, metadata: Mapping[str, Any], data: Mapping[str, Any]
    ) -> Intent:
        """The typed intent for a query; ``data.operation`` skips the parser."""
        return understand(text, metadata, data, self.classifier).intent

    def execute(self, intent: Intent, conversation_id: str) -> QueryResult:
        if isinstance(intent, StoreIntent):
            return self._store(intent, conversation_id)
        if isinstance(intent, RetrieveIntent):
            return self._retrieve(intent, conversation_id)
        if isinstance(intent, RemoveIntent):
            return self._remove(intent, conversation_id)
        if isinstance(intent, SummarizeIntent):
            return self._summarize(intent, conversation_id)
        if isinstance(intent, ConfigureIntent):
            return QueryResult("configure", *configure(self, intent, conversation_id))
        if isinstance(intent, MarkIntent):
            return QueryResult("mark", *mark(self.backend, intent, conversation_id))
        if isinstance(intent, StatsIntent):
            state = self.backend.read(conversation_id)
            stats = conversation_stats(state, effective_settings(self.settings, state.settings))
            return QueryResult(
                "stats", stats, {"conversation_id": conversation_id, "items_affected": 0, "tokens_used": 0}
            )
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
        timestamp = now_rfc3339()

        def decide(state: ConversationState) -> tuple[Change, tuple[Utterance, list[Utterance], int]]:
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
            )
            evicted = evictions_for_store(state.utterances, utterance, limits)
            change = Change(
                append=[utterance],
                remove={u.seq for u in evicted},
                pending_add=evicted if settings.summarization_enabled else [],
                next_seq=state.next_seq + 1,
                last_turn=max(state.last_turn, turn),
            )
            index = len(state.utterances) - len(evicted)
            return change, (utterance, evicted, index)

        utterance, evicted, index = self.backend.transact(conversation_id, decide)
        self._note_store(conversation_id, utterance, evicted)
        if evicted and settings.summarization_enabled:
            self.fold(conversation_id)
        return QueryResult(
            "store",
            {"utterance": utterance.to_dict(index), "evicted": [u.seq for u in evicted]},
            {"conversation_id": conversation_id, "items_affected": 1, "tokens_used": tokens},
        )

    def _retrieve(self, intent: RetrieveIntent, conversation_id: str) -> QueryResult:
        wants_summary = intent.include_summary or intent.summary_only
        if wants_summary:
            self.fold(conversation_id)
        state = self.backend.read(conversation_id)
        result: dict[str, Any] = {}
        tokens_used = 0
        utterances: list[dict[str, Any]] = []
        if not intent.summary_only:
            index = self.indexes.get(conversation_id) if intent.topic is not None else None
            result = find_utterances(state, intent, index, time.time())
            utterances = result["utterances"]
            tokens_used += sum(u["tokens"] for u in utterances)
        metadata: dict[str, Any] = {
            "conversation_id": conversation_id,
            "items_affected": len(utterances),
        }
        if wants_summary:
            result |= _summary_fields(state)
            tokens_used += state.summary.tokens
            metadata |= _summary_coverage(state)
        metadata["tokens_used"] = tokens_used
        return QueryResult("retrieve", result, metadata)

    def _remove(self, intent: RemoveIntent, conversation_id: str) -> QueryResult:
        def decide(state: ConversationState) -> tuple[Change, tuple[list[Utterance], int]]:
            buffer, pending, summary = state.utterances, state.pending, state.summary
            victims = remove_victims(state, intent)
            gone = segments_removed(summary, intent)
            dropped = len(gone)
            if intent.all:
                new_summary: Summary | None = Summary() if summary.segments else None
            else:
                new_summary = self._summary_without(summary, gone) if gone else None
            seqs = {u.seq for u in victims}
            change = Change(
                remove=seqs & {u.seq for u in buffer},
                pending_remove=seqs & {u.seq for u in pending},
                summary=new_summary,
            )
            return change, (victims, dropped)

        removed, dropped = self.backend.transact(conversation_id, decide)
        return QueryResult(
            "remove",
            {"removed": [u.seq for u in removed], "summary_segments_dropped": dropped},
            {
                "conversation_id": conversation_id,
                "items_affected": len(removed),
                "tokens_used": sum(u.tokens for u in removed),
            },
        )

    def _summarize(self, intent: SummarizeIntent, conversation_id: str) -> QueryResult:
        self.fold(conversation_id)
        state = self.backend.read(conversation_id)
        limit = intent.token_limit or effective_settings(self.settings, state.settings).summary_token_limit
        previous, covered = summarize_scope(state, intent)
        if covered or previous:
            text = self._bounded_summary(previous, covered, limit)
        else:
            text = ""
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
            | _summary_coverage(state),
        )

    # --- summarization -----------------------------------------------------------

    def fold(self, conversation_id: str) -> bool:
        """Fold queued evicted utterances into the running summary.

        The summarizer runs outside any transaction (it may be slow); the
        commit then checks that the batch is still queued, so a remove that
        raced it is never undone by a summary of what it deleted. Returns
        True when the queue is empty afterwards. Utterances leave the queue
        only in the commit that stores the summary holding them.
        """
        with self._fold_lock(conversation_id):
            for _ in range(_FOLD_ATTEMPTS):
                state = self.backend.read(conversation_id)
                batch = state.pending
                if not batch:
                    return True
                try:
                    limit = effective_settings(self.settings, state.settings).summary_token_limit
                    text = self._bounded_summary(state.summary.text, batch, limit)
                except Exception:
                    # The batch stays queued: nothing is lost, the next fold retries.
                    log.exception("summarizer failed for conversation %s", conversation_id)
                    return False
                summary = _merged_summary(state.summary, batch, text, self.counter.count(text))
                try:
                    if self.backend.transact(conversation_id, _commit_fold(state, batch, summary)):
                        return True
                except StorageError:
                    # A full disk must not fail the store that queued the batch
                    # (already committed) nor the read that wanted it folded.
                    log.warning("fold of conversation %s not saved; the batch stays queued", conversation_id)
                    return False
            return False

    def _bounded_summary(self, previous: str, utterances: Sequence[Utterance], limit: int) -> str:
        text = self.summarizer.summarize(previous, utterances, limit)
        if self.counter.count(text) > limit:
            # The budget is a hard limit whatever the summarizer returned.
            text = self.counter.truncate(text, limit)
        return text

    def _summary_without(self, summary: Summary, gone: Sequence[SummarySegment]) -> Summary:
        kept = tuple(s for s in summary.segments if s not in gone)
        text = "\n".join(s.text for s in kept)
        return Summary(kept, summary.through_seq, self.counter.count(text) if kept else 0)

    def _note_store(self, conversation_id: str, utterance: Utterance, evicted: list[Utterance]) -> None:
        # Keep a live search index in step with this store (~20 us at 10k
        # utterances, bench/bench_search.py) so the next search does not pay
        # for it; an index nobody searched yet is built on first search instead.
        index = self.indexes.peek(conversation_id)
        if index is not None:
            with index.lock:
                index.note_store(utterance, (u.seq for u in evicted))

    def _fold_lock(self, conversation_id: str) -> threading.Lock:
        with self._fold_locks_guard:
            return self._fold_locks.setdefault(conversation_id, threading.Lock())

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


def _merged_summary(
    previous: Summary, batch: Sequence[Utterance], text: str, tokens: int
) -> Summary:
    seq_from = previous.segments[0].seq_from if previous.segments else batch[0].seq
    turn_from = previous.segments[0].turn_from if previous.segments else batch[0].turn_number
    segment = SummarySegment(
        text=text,
        tokens=tokens,
        seq_from=seq_from,
        seq_to=batch[-1].seq,
        turn_from=min(turn_from, *(u.turn_number for u in batch)),
        turn_to=max(u.turn_number for u in batch),
    )
    return Summary((segment,), max(previous.through_seq, batch[-1].seq), tokens)


def _commit_fold(state: ConversationState, batch: Sequence[Utterance], summary: Summary):
    seqs = [u.seq for u in batch]

    def decide(current: ConversationState) -> tuple[Change, bool]:
        still_queued = {u.seq for u in current.pending}
        if current.summary != state.summary or not set(seqs) <= still_queued:
            return Change(), False
        return Change(summary=summary, pending_remove=set(seqs)), True

    return decide


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
