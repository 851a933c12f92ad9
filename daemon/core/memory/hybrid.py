"""Hybrid topic search: the lexical ranking plus vector similarity from an ``Embedder`` (issue 27).

Runs only when the daemon has an embedder (embedder.py); otherwise search.py
alone ranks. Utterance vectors are cached in the conversation's index, made
at search time for the utterances that have none yet (in batches), so a
store never waits for a model and the store path is unchanged. Fusion: the
lexical scores scaled to the best one, plus ``EMBED_WEIGHT`` times the
cosine of the utterance and the topic, over the lexical hits and the
``VECTOR_CANDIDATES`` utterances nearest the topic (which may share no word
with it: that is what the embedder is for) that are at least
``MIN_SIMILARITY`` alike.

The embedder is never called under the index's lock (a store takes that
lock to keep the index in step): a search notes what needs a vector under
the lock, lets ``HybridSearch``'s threads call the model without it, and
takes the lock again only to install each batch of vectors and to fuse. It
waits for the model at most its share of the call's deadline
(``EMBED_SHARE``, at most ``EMBED_WAIT``), then answers with the lexical
ranking; the abandoned call stops after its current batch (outside review
of issue 27: a 20 s embedder held stores 40 s and froze every worker).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chd.core.memory.embedder import Embedder, usable_vectors
from chd.core.memory.search import Hit

if TYPE_CHECKING:
    from chd.core.memory.index import ConversationIndex, IndexedDoc

__all__ = [
    "HybridSearch",
    "Embedded",
    "Fused",
    "fuse",
    "EMBED_WEIGHT",
    "VECTOR_CANDIDATES",
    "MIN_SIMILARITY",
]

log = logging.getLogger(__name__)

# Tuned on LoCoMo 1-5 with WordLlamaEmbedder (docs/search.md): 0.1, 0.25 and 0.5 all
# raised recall@10; 0.25 was the one that raised recall at 1, 5 and 10.
EMBED_WEIGHT = 0.25
VECTOR_CANDIDATES = 50
# An utterance that shares no word with the topic is a hit only if its
# cosine with the topic is at least this: without a floor every search
# returned the 50 nearest utterances, however unrelated ("quantum physics"
# against talk of gardens at cosines of -0.02..0.01; outside review). With
# wordllama, related pairs measured 0.33-0.75 ("vehicle" / "my car broke
# down", "bicycle" / "my bike has a flat tire") and unrelated ones -0.17..0.23.
MIN_SIMILARITY = 0.3
_BATCH = 256
# The share of the time left before a call's deadline a search waits for
# the embedder, leaving the rest to answer lexically; and the most it waits
# when the call has no deadline.
EMBED_SHARE = 0.5
EMBED_WAIT = 10.0
# Threads calling the embedder; a hung model holds at most these.
EMBED_THREADS = 2


@dataclass(frozen=True, slots=True)
class Embedded:
    """The topic's unit vector and those of the extra documents (None where unusable)."""

    query: tuple[float, ...]
    extras: list[tuple[float, ...] | None]


@dataclass(frozen=True, slots=True)
class Fused:
    """The fused hits (best first), how many vector-only hits joined, the extras' fused scores."""

    hits: list[Hit]
    added: int
    extra_scores: list[float]


class HybridSearch:
    """An embedder and the threads that call it, so no search holds a lock across a model call.

    Daemon threads, at most ``threads`` at once, not an executor's: a hung
    model would keep an executor's thread, and with it the process, from
    ever exiting. A search that finds every thread busy waits for one
    within its share of the deadline, like for the model.
    """

    def __init__(self, embedder: Embedder, threads: int = EMBED_THREADS) -> None:
        self.embedder = embedder
        self._slots = threading.BoundedSemaphore(threads)
        self._closed = False

    def close(self) -> None:
        """Start no more model calls; calls in progress are abandoned (their threads end with them)."""
        self._closed = True

    def missing(self, index: ConversationIndex) -> tuple[int, list[int]]:
        """Under the index's lock: its generation and the seqs that need a vector."""
        vectors, refused = index.vectors, index.unembeddable
        return index.generation, [s for s in index.docs if s not in vectors and s not in refused]

    def embed(
        self,
        index: ConversationIndex,
        generation: int,
        missing: Sequence[tuple[int, str]],
        topic: str,
        extras: Sequence[str],
        deadline: float | None,
    ) -> Embedded | None:
        """Vectors for ``missing`` installed in ``index``, and the topic's; None: search lexically.

        Called without the index's lock. Waits at most the search's share of
        ``deadline`` (a ``time.monotonic`` instant).
        """
        wait = EMBED_WAIT
        if deadline is not None:
            wait = min(wait, max(0.0, (deadline - time.monotonic()) * EMBED_SHARE))
        until = time.monotonic() + wait
        if self._closed:
            return None
        if not self._slots.acquire(timeout=wait):
            log.warning(
                "every embedder thread was busy for %.3gs (its share of the call's deadline); "
                "this search is lexical only",
                wait,
            )
            return None
        stop = threading.Event()
        done = threading.Event()
        outcome: list[Embedded | None] = [None]

        def run() -> None:
            try:
                outcome[0] = self._work(index, generation, missing, topic, extras, stop)
            except Exception:
                if not stop.is_set():
                    log.exception("the embedder failed; this search is lexical only")
            finally:
                self._slots.release()
                done.set()

        threading.Thread(target=run, name="chd-embed", daemon=True).start()
        if done.wait(max(0.0, until - time.monotonic())):
            return outcome[0]
        stop.set()
        log.warning(
            "the embedder did not answer within %.3gs (its share of the call's deadline); "
            "this search is lexical only",
            wait,
        )
        return None

    def _work(
        self,
        index: ConversationIndex,
        generation: int,
        missing: Sequence[tuple[int, str]],
        topic: str,
        extras: Sequence[str],
        stop: threading.Event,
    ) -> Embedded | None:
        problems: list[str] = []
        for start in range(0, len(missing), _BATCH):
            if stop.is_set():
                return None
            batch = missing[start : start + _BATCH]
            reply = self.embedder.embed([text for _, text in batch])
            # Checked outside the lock (~10 ms for 256 vectors of 256 numbers).
            vectors, why = usable_vectors(reply, len(batch), index.vector_dimensions)
            with index.lock:
                if index.generation != generation:
                    return None  # rebuilt meanwhile: these seqs may name other utterances now
                _install(index, [seq for seq, _ in batch], vectors)
            if why:
                problems.append(why)
        if stop.is_set():
            return None
        reply = self.embedder.embed([topic, *extras])
        vectors, why = usable_vectors(reply, 1 + len(extras), index.vector_dimensions)
        with index.lock:
            if vectors[0] is not None and not index.vector_dimensions:
                index.vector_dimensions = len(vectors[0])
        if why:
            problems.append(why)
        if problems:
            log.warning(
                "the embedder gave unusable vectors (%s); they were dropped and those texts are "
                "ranked by their words only",
                "; ".join(dict.fromkeys(problems)),
            )
        if vectors[0] is None:
            return None
        return Embedded(vectors[0], vectors[1:])


def _install(
    index: ConversationIndex, seqs: Sequence[int], vectors: Sequence[tuple[float, ...] | None]
) -> None:
    """Under the lock: cache the usable vectors of seqs still indexed; remember the refused ones."""
    docs = index.docs
    for seq, vector in zip(seqs, vectors):
        if seq not in docs:
            continue  # removed while the model worked
        if vector is not None and index.vector_dimensions not in (0, len(vector)):
            vector = None  # another search's first batch set another length meanwhile
        if vector is None:
            index.unembeddable.add(seq)
        else:
            index.vectors[seq] = vector
            index.vector_dimensions = len(vector)
    index.vector_changes += 1


def _similarities(index: ConversationIndex, query: Sequence[float]) -> dict[int, float]:
    """The cosine of ``query`` and every indexed utterance's vector.

    With numpy (which embedding packages bring), the vectors are kept as one
    matrix between searches, made again only when the indexed utterances
    changed: building it per search was most of a hybrid search's ~10 ms at
    600 utterances (bench_locomo.py --embedder wordllama). Every cached
    vector has ``index.vector_dimensions`` numbers (``usable_vectors``).
    """
    vectors = index.vectors
    if not vectors or len(query) != index.vector_dimensions:
        return {}
    try:
        import numpy
    except ImportError:  # pure Python: fine for a buffer, slow for a large archive
        return {seq: sum(a * b for a, b in zip(query, v)) for seq, v in vectors.items()}
    cached = index.vector_matrix
    if cached is None or cached[0] != len(vectors) or cached[1] != index.vector_changes:
        seqs = list(vectors)
        cached = (
            len(vectors),
            index.vector_changes,
            seqs,
            numpy.asarray([vectors[s] for s in seqs], dtype=numpy.float32),
        )
        index.vector_matrix = cached
    _, _, seqs, matrix = cached
    return dict(zip(seqs, (matrix @ numpy.asarray(query, dtype=numpy.float32)).tolist()))


def fuse(
    index: ConversationIndex,
    embedded: Embedded,
    hits: list[Hit],
    admits: Callable[[int, IndexedDoc], bool] | None,
    held: Callable[[int], bool],
    limit: int,
    extra_scores: Sequence[float] = (),
) -> Fused:
    """``hits`` (lexical, best first) fused with vector similarity, best ``limit`` first.

    Called under the index's lock. ``held`` says whether a seq is in the
    state the search answers for (the index may have moved on while the
    model worked). ``extra_scores`` are the lexical scores of the extra
    documents (summary segments) whose vectors ``embedded`` holds.
    """
    query = embedded.query
    docs = index.docs
    similarity = {
        seq: value
        for seq, value in _similarities(index, query).items()
        if admits is None or admits(seq, docs[seq])
    }
    best = max((h.score for h in hits), default=0.0) or 1.0
    lexical = {h.seq: h.score / best for h in hits}
    nearest = heapq.nlargest(
        VECTOR_CANDIDATES,
        ((seq, s) for seq, s in similarity.items() if s >= MIN_SIMILARITY and seq not in lexical),
        key=lambda item: (item[1], item[0]),
    )
    added = [seq for seq, _ in nearest if held(seq)]
    fused = {
        seq: lexical.get(seq, 0.0) + EMBED_WEIGHT * similarity.get(seq, 0.0)
        for seq in (*lexical, *added)
    }
    ranked = [
        Hit(seq, score)
        for seq, score in heapq.nlargest(limit, fused.items(), key=lambda item: (item[1], item[0]))
    ]
    scores = [
        score / best + (EMBED_WEIGHT * sum(a * b for a, b in zip(query, v)) if v else 0.0)
        for score, v in zip(extra_scores, embedded.extras)
    ]
    return Fused(ranked, len(added), scores)
