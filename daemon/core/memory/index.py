"""An incremental inverted index of everything one conversation holds, kept as a cache.

Buffer, summary queue and archive together (issue 27; why one index for the
three is in ``ConversationIndex.sync``).

Why incremental and not a library such as ``bm25s`` (issue 5, measured on the
target machine): bm25s answers a top-5 query in 18 us at 20 documents but
rebuilds its whole index on every change (1 ms at 1k, 2.4 s at 100k
documents), while a plain inverted index updates in ~10 us per document and
answers in 3 us / 38 us / 3.5 ms at 20 / 1k / 100k. The buffer changes on
every store and is read far less often, so the per-change cost decides:
postings (term -> {seq: term frequency}) updated one utterance at a time.

The index is derived data, never a source of truth. It lives in the daemon
process, is rebuilt from the backend after a restart, and is checked against
the state it is used with before every search (``sync``): another daemon on
the same backend, or a remove in this one, is caught up with then. The check
is O(1) because seqs are never reused and only ever appended at the tail
(backends/base.py): once the index has seen every seq below ``next_seq``, a
state with the same count, first seq and last seq holds exactly the
index's utterances (proof in ``ConversationIndex.sync``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from chd.backends.base import ConversationState
from chd.core.memory.terms import term_counts
from chd.core.utterance import Utterance

__all__ = ["IndexedDoc", "ConversationIndex", "IndexCache", "WHERE", "held_parts", "index_bytes"]


@dataclass(frozen=True, slots=True)
class IndexedDoc:
    """What the index keeps per utterance: its terms and what the filters need.

    Speaker, turn and time never change for a seq, so filters run on the
    index alone; only the ``important`` flag changes, and the index ignores it.
    """

    terms: tuple[str, ...]
    length: int
    speaker: str
    turn: int
    timestamp: str


# What the index's Python objects cost, estimated per part (CPython 3.11,
# tracemalloc over 2- to 2,000-word utterances, 10- to 200,000-word
# vocabularies; the estimate was within 10 % of the measure or above it):
# an utterance's IndexedDoc, tuple header and dict slots; one (term, seq)
# posting with its slot in the terms tuple; a term's own posting dict and
# slot, plus its string, which the term cache may share but need not.
DOC_BYTES = 200
POSTING_BYTES = 48
TERM_BYTES = 272
# One embedding vector: a list of floats (8 + 24 per dimension) and its row
# in the numpy matrix (4 per dimension).
VECTOR_BYTES_PER_DIMENSION = 36


class ConversationIndex:
    """Postings for one conversation's utterances, wherever they live. Not thread-safe: hold ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.postings: dict[str, dict[int, int]] = {}
        self.docs: dict[int, IndexedDoc] = {}
        self.total_length = 0
        # The estimated bytes of postings and docs (see DOC_BYTES); vectors apart.
        self.term_bytes = 0
        # Every seq below next_seq that any later state holds is indexed.
        self.next_seq = 1
        # Seqs in ascending order; removed ones are skipped lazily (see _edge).
        self._order: deque[int] = deque()
        # Unit vectors of utterances, made by hybrid.py when an embedder is
        # configured (empty otherwise); dropped with their utterance.
        self.vectors: dict[int, Sequence[float]] = {}
        # hybrid.py's matrix of ``vectors`` and the count of changes it was made at.
        self.vector_changes = 0
        self.vector_matrix: tuple[Any, ...] | None = None
        self.vector_dimensions = 0
        # Seqs whose vector the embedder gave unusable (hybrid.py): not asked again.
        self.unembeddable: set[int] = set()
        # Counts rebuilds: a seq may name another utterance after one (an
        # import over a newer conversation), so vectors made for the seqs
        # of an earlier generation are not installed (hybrid.py).
        self.generation = 0

    @property
    def bytes(self) -> int:
        """About how many bytes this index holds: terms, postings, docs and vectors."""
        return self.term_bytes + len(self.vectors) * (
            64 + VECTOR_BYTES_PER_DIMENSION * self.vector_dimensions
        )

    # --- updates -----------------------------------------------------------------

    def add(self, utterance: Utterance) -> None:
        counts = term_counts(utterance.text)
        seq = utterance.seq
        for term, tf in counts.items():
            posting = self.postings.get(term)
            if posting is None:
                self.postings[term] = {seq: tf}
                self.term_bytes += TERM_BYTES + len(term)
            else:
                posting[seq] = tf
        self.term_bytes += DOC_BYTES + POSTING_BYTES * len(counts)
        length = sum(counts.values())
        self.docs[seq] = IndexedDoc(
            tuple(counts), length, utterance.speaker, utterance.turn_number, utterance.timestamp
        )
        self.total_length += length
        self._order.append(seq)
        if seq >= self.next_seq:
            self.next_seq = seq + 1

    def discard(self, seq: int) -> None:
        doc = self.docs.pop(seq, None)
        if doc is None:
            return
        if self.vectors.pop(seq, None) is not None:
            self.vector_changes += 1
        self.unembeddable.discard(seq)
        for term in doc.terms:
            posting = self.postings[term]
            del posting[seq]
            if not posting:
                del self.postings[term]
                self.term_bytes -= TERM_BYTES + len(term)
        self.term_bytes -= DOC_BYTES + POSTING_BYTES * len(doc.terms)
        self.total_length -= doc.length
        if len(self._order) > 2 * len(self.docs) + 64:
            self._order = deque(s for s in self._order if s in self.docs)

    def note_store(self, utterance: Utterance, evicted: Iterable[int]) -> bool:
        """Apply one committed store if the index is current up to it.

        ``evicted`` are the seqs the store took out of the conversation for
        good; those it moved to the queue or the archive stay indexed.

        A store that another thread committed first (or another daemon) is
        not known here, so the update is skipped and ``sync`` catches up.
        """
        if utterance.seq != self.next_seq:
            return False
        for seq in evicted:
            self.discard(seq)
        self.add(utterance)
        return True

    # --- keeping in step with the backend ----------------------------------------

    def _edge(self, left: bool) -> int | None:
        order = self._order
        while order:
            seq = order[0] if left else order[-1]
            if seq in self.docs:
                return seq
            order.popleft() if left else order.pop()
        return None

    def bounds(self) -> tuple[int, int]:
        """The first and last indexed seq ((0, 0) when empty)."""
        first, last = self._edge(True), self._edge(False)
        return (first or 0, last or 0)

    def matches(self, state: ConversationState) -> bool:
        """O(1): does the index hold exactly what ``state`` holds? (see ``sync``)."""
        parts = held_parts(state)
        if len(self.docs) != sum(len(p) for p in parts):
            return False
        if not self.docs:
            return True
        return self._edge(True) == min(p[0].seq for p in parts if p) and self._edge(False) == max(
            p[-1].seq for p in parts if p
        )

    def sync(self, state: ConversationState) -> None:
        """Bring the index in step with ``state``: its buffer, queue and archive together.

        One index over the three lists, not one per list, because an
        utterance only ever moves between them (evicted to the queue, folded
        into the archive): the union changes by stores at the tail and by
        removes, never by a move, so moves cost the index nothing and where
        a hit lives is looked up for the hits alone (issue 27).

        Soundness of the O(1) check: the index holds every seq below
        ``next_seq`` that the state can still hold, and a state's seqs not
        in the index are therefore all >= ``next_seq`` > the index's last
        seq. If both have the same last seq, the state has nothing the index
        lacks; with the same count they are the same set. A state that breaks
        the premise (seqs going backwards, e.g. an import over a newer
        conversation) fails the final check and the index is rebuilt.
        """
        if state.next_seq < self.next_seq:
            self._rebuild(state)
            return
        if self.matches(state):
            self.next_seq = state.next_seq
            return
        parts = held_parts(state)
        # The common changes, cheaply: new utterances at the tail (of the
        # buffer, or already evicted if this index missed their store) ...
        new: list[Utterance] = []
        for part in parts:
            start = len(part)
            while start and part[start - 1].seq >= self.next_seq:
                start -= 1
            new += part[start:]
        for utterance in sorted(new, key=_seq):
            self.add(utterance)
        # ... drops at the head (folds without an archive, the archive's bound) ...
        first = min((p[0].seq for p in parts if p), default=state.next_seq)
        while (head := self._edge(True)) is not None and head < first:
            self.discard(head)
        # ... and anything else (removes by seq, speaker, turn) by one pass.
        held = sum(len(p) for p in parts)
        if len(self.docs) != held:
            present = {u.seq for p in parts for u in p}
            for seq in [s for s in self.docs if s not in present]:
                self.discard(seq)
        self.next_seq = state.next_seq
        if not self.matches(state):
            self._rebuild(state)

    def _rebuild(self, state: ConversationState) -> None:
        self.postings.clear()
        self.vectors.clear()
        self.unembeddable.clear()
        self.vector_changes += 1
        self.generation += 1
        self.docs.clear()
        self._order.clear()
        self.total_length = 0
        self.term_bytes = 0
        for utterance in sorted((u for p in held_parts(state) for u in p), key=_seq):
            self.add(utterance)
        self.next_seq = state.next_seq


def held_parts(
    state: ConversationState,
) -> tuple[list[Utterance], list[Utterance], list[Utterance]]:
    """Where a conversation's utterances live, in the order ``WHERE`` names them."""
    return state.utterances, state.pending, state.archive


# The places an indexed utterance can live, as a hit names them.
WHERE = ("buffer", "pending", "archive")


def _seq(u: Utterance) -> int:
    return u.seq


def index_bytes(max_memory_bytes: int) -> int:
    """The share of ``max_memory_bytes`` the search indexes may take: half.

    The utterances themselves measured 0.6x to 1.2x the budget in RSS
    (docs/operations.md), so half for the indexes keeps the process within
    the documented 2x.
    """
    return max_memory_bytes // 2


class IndexCache:
    """One ConversationIndex per conversation id, least recently searched dropped first.

    Bounded because a durable backend may hold far more conversations than
    are searched; a dropped index is rebuilt from the backend when needed.
    Bounded by conversations, by indexed utterances (buffer, queue and
    archive alike: with archives of up to ``max_archived_utterances``, 256
    conversations could hold millions) and, when ``max_bytes`` is set, by
    the estimated bytes of all indexes (``ConversationIndex.bytes``).

    The byte bound is needed because an index costs far more than the text
    it covers: 50 conversations of 2,000 distinct-word utterances within a
    20 MB ``max_memory_bytes`` took RSS from 147 MB to 1,083 MB once each
    was searched (outside review of issue 28; bench/bench_index_memory.py).
    The conversation being searched is kept while it fits; one whose index
    alone exceeds ``max_bytes`` is dropped after its search (``trim``) and
    built again on the next, so it costs memory only while it is searched.
    """

    def __init__(
        self,
        max_conversations: int = 256,
        max_documents: int = 1_000_000,
        max_bytes: int | None = None,
    ) -> None:
        self._indexes: OrderedDict[str, ConversationIndex] = OrderedDict()
        self._guard = threading.Lock()
        self.max_conversations = max_conversations
        self.max_documents = max_documents
        self.max_bytes = max_bytes
        # The estimated bytes of the cached indexes, as last counted (``trim``, ``grew``).
        self._bytes = 0

    def get(self, conversation_id: str) -> ConversationIndex:
        with self._guard:
            index = self._indexes.get(conversation_id)
            if index is None:
                index = self._indexes[conversation_id] = ConversationIndex()
            else:
                self._indexes.move_to_end(conversation_id)
            while len(self._indexes) > self.max_conversations:
                self._indexes.popitem(last=False)
            # Sizes change after get() (stores, first syncs), so the document
            # bound is enforced here, on the next search of any conversation.
            documents = sum(len(i.docs) for i in self._indexes.values())
            while documents > self.max_documents and len(self._indexes) > 1:
                _, dropped = self._indexes.popitem(last=False)
                documents -= len(dropped.docs)
            return index

    def trim(self) -> None:
        """Drop the least recently searched indexes until the rest fit in ``max_bytes``.

        Called after a search (sizes read without the indexes' locks are
        estimates anyway); sums every cached index, which a search can
        afford and a store cannot (see ``grew``). The most recent index is
        dropped too when it alone is over the bound.
        """
        if self.max_bytes is None:
            return
        with self._guard:
            self._bytes = sum(i.bytes for i in self._indexes.values())
            self._evict()

    def grew(self, conversation_id: str, index: ConversationIndex, delta: int) -> None:
        """Note that a store changed the cached ``index`` by ``delta`` bytes; trim if that went over.

        O(1) unless it evicts: summing 256 cached indexes on every store
        cost 50 us. The running total drifts only by changes to an index
        dropped while it was being changed, and every search recounts it.
        """
        if self.max_bytes is None:
            return
        with self._guard:
            if self._indexes.get(conversation_id) is index:
                self._bytes += delta
                self._evict()

    def _evict(self) -> None:
        while self._bytes > self.max_bytes and self._indexes:  # type: ignore[operator]
            _, dropped = self._indexes.popitem(last=False)
            self._bytes -= dropped.bytes

    @property
    def bytes(self) -> int:
        """The estimated bytes of every cached index."""
        with self._guard:
            return sum(i.bytes for i in self._indexes.values())

    def peek(self, conversation_id: str) -> ConversationIndex | None:
        """The index if one is cached, without creating it or refreshing its place."""
        return self._indexes.get(conversation_id)

    def __len__(self) -> int:
        return len(self._indexes)
