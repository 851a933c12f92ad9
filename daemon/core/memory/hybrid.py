"""Hybrid topic search: the lexical ranking plus vector similarity from an ``Embedder`` (issue 27).

Runs only when the daemon has an embedder (embedder.py); otherwise search.py
alone ranks. Utterance vectors are cached in the conversation's index, made
at search time for the utterances that have none yet (one batch), so a
store never waits for a model and the store path is unchanged. Fusion: the
lexical scores scaled to the best one, plus ``EMBED_WEIGHT`` times the
cosine of the utterance and the topic, over the lexical hits and the
``VECTOR_CANDIDATES`` utterances nearest the topic (which may share no word
with it: that is what the embedder is for).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from chd.core.memory.embedder import Embedder, normalized
from chd.core.memory.search import Hit

if TYPE_CHECKING:
    from chd.core.memory.index import ConversationIndex, IndexedDoc

__all__ = ["fuse", "EMBED_WEIGHT", "VECTOR_CANDIDATES"]

log = logging.getLogger(__name__)

# Tuned on LoCoMo 1-5 with WordLlamaEmbedder (docs/search.md): 0.1, 0.25 and 0.5 all
# raised recall@10; 0.25 was the one that raised recall at 1, 5 and 10.
EMBED_WEIGHT = 0.25
VECTOR_CANDIDATES = 50
_BATCH = 256


def _vectors(
    index: ConversationIndex, embedder: Embedder, text_of: Callable[[int], str]
) -> dict[int, Sequence[float]]:
    vectors = index.vectors
    missing = [seq for seq in index.docs if seq not in vectors]
    for start in range(0, len(missing), _BATCH):
        batch = missing[start : start + _BATCH]
        for seq, vector in zip(batch, embedder.embed([text_of(seq) for seq in batch])):
            vectors[seq] = normalized(vector)
            index.vector_dimensions = len(vectors[seq])
        index.vector_changes += 1
    return vectors


def _similarities(index: ConversationIndex, query: Sequence[float]) -> dict[int, float]:
    """The cosine of ``query`` and every indexed utterance's vector.

    With numpy (which embedding packages bring), the vectors are kept as one
    matrix between searches, made again only when the indexed utterances
    changed: building it per search was most of a hybrid search's ~10 ms at
    600 utterances (bench_locomo.py --embedder wordllama).
    """
    vectors = index.vectors
    try:
        import numpy
    except ImportError:  # pure Python: fine for a buffer, slow for a large archive
        return {seq: sum(a * b for a, b in zip(query, v)) for seq, v in vectors.items()}
    if not vectors:
        return {}
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
    embedder: Embedder,
    topic: str,
    hits: list[Hit],
    admits: Callable[[int, IndexedDoc], bool] | None,
    limit: int,
    text_of: Callable[[int], str],
    extra: Sequence[tuple[str, float]] = (),
) -> tuple[list[Hit], list[float]]:
    """``hits`` (lexical, best first) fused with vector similarity, best ``limit`` first.

    ``extra`` are other documents (summary segments: text, lexical score)
    scored the same way; their fused scores come back second. Called under
    the index's lock. An embedder that fails leaves everything as it was
    (the contract in embedder.py).
    """
    try:
        _vectors(index, embedder, text_of)
        query = normalized(embedder.embed([topic])[0])
        others = (
            [normalized(v) for v in embedder.embed([text for text, _ in extra])] if extra else []
        )
    except Exception:
        log.exception("the embedder failed; this search is lexical only")
        return hits[:limit], [score for _, score in extra]
    docs = index.docs
    similarity = {
        seq: value
        for seq, value in _similarities(index, query).items()
        if admits is None or admits(seq, docs[seq])
    }
    best = max((h.score for h in hits), default=0.0) or 1.0
    lexical = {h.seq: h.score / best for h in hits}
    nearest = heapq.nlargest(
        VECTOR_CANDIDATES, similarity.items(), key=lambda item: (item[1], item[0])
    )
    candidates = set(lexical) | {seq for seq, _ in nearest}
    fused = {
        seq: lexical.get(seq, 0.0) + EMBED_WEIGHT * similarity.get(seq, 0.0) for seq in candidates
    }
    ranked = [
        Hit(seq, score)
        for seq, score in heapq.nlargest(limit, fused.items(), key=lambda item: (item[1], item[0]))
    ]
    extra_scores = [
        score / best + EMBED_WEIGHT * sum(a * b for a, b in zip(query, vector))
        for (_, score), vector in zip(extra, others)
    ]
    return ranked, extra_scores
