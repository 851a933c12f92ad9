"""Topic search: BM25 relevance over the conversation index, blended with recency.

Scores come from the incremental index in index.py (why an index
and not a query-time scan is explained there). Term statistics (document
frequency, average length) are those of the whole buffer, so how rare a word
is does not change with the filters; the filters only decide which
utterances may be hits, and they are applied before the hits are ranked and
cut to ``limit``. The running summary is scored as one more document and
reported apart from the utterance hits.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from chd.core.memory.terms import term_counts, terms

if TYPE_CHECKING:
    from chd.core.memory.index import ConversationIndex, IndexedDoc

__all__ = ["Hit", "Ranking", "rank", "score_text", "recency_factor", "RECENCY_WEIGHT"]

K1, B = 1.2, 0.75
# How much newer utterances are preferred at equal relevance: the newest gets
# up to 20 % more than the oldest.
RECENCY_WEIGHT = 0.2


@dataclass(frozen=True, slots=True)
class Hit:
    seq: int
    score: float


@dataclass(frozen=True, slots=True)
class Ranking:
    """The best hits (best first), how many utterances matched, the summary's score."""

    hits: list[Hit]
    matches: int
    summary_score: float


def _bm25(idf: float, tf: int, length: int, average: float) -> float:
    return idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))


def _idf(documents: int, frequency: int) -> float:
    return math.log(1 + (documents - frequency + 0.5) / (frequency + 0.5))


def rank(
    index: ConversationIndex,
    topic: str,
    admits: Callable[[int, IndexedDoc], bool] | None,
    limit: int,
    summary: str = "",
) -> Ranking:
    """Utterances of ``index`` that mention ``topic`` and pass ``admits``, best first.

    ``admits`` None means no filter. Ties go to the newer utterance. Only the
    postings of the query's terms are visited, so the cost follows how many
    utterances mention the topic, not the buffer's size.
    """
    # Sorted: scores are float sums over the terms, and set order (which
    # follows PYTHONHASHSEED) would let equal scores tie differently per process.
    query = sorted(set(terms(topic)))
    docs = index.docs
    n = len(docs)
    average = (index.total_length / n if n else 1.0) or 1.0
    # BM25 with its per-document length factor written out: this loop is
    # the whole cost of a search, and a function call per posting doubles it.
    norm_a, norm_b = K1 * (1 - B), K1 * B / average
    scores: dict[int, float] = {}
    rejected: set[int] = set()
    for term in query:
        posting = index.postings.get(term)
        if not posting:
            continue
        weight = _idf(n, len(posting)) * (K1 + 1)
        for seq, tf in posting.items():
            if admits is not None and (seq in rejected or (seq not in scores and not admits(seq, docs[seq]))):
                rejected.add(seq)
                continue
            scores[seq] = scores.get(seq, 0.0) + weight * tf / (tf + norm_a + norm_b * docs[seq].length)
    hits: list[Hit] = []
    if scores:
        # Recency by seq across the buffer, not by position: seqs are dense
        # enough in a buffer and need no lookup per candidate.
        first, last = index.bounds()
        bonus = RECENCY_WEIGHT / max(last - first, 1)
        best = heapq.nlargest(limit, scores.items(), key=lambda item: (item[1] * (1 + bonus * (item[0] - first)), item[0]))
        hits = [Hit(seq, score * (1 + bonus * (seq - first))) for seq, score in best]
    summary_score = score_text(index, query, summary) if summary else 0.0
    return Ranking(hits, len(scores), summary_score)


def recency_factor(index: ConversationIndex, seq: int) -> float:
    """The recency multiplier ``rank`` gives an utterance at ``seq`` (a summary segment by its last seq)."""
    first, last = index.bounds()
    return 1 + RECENCY_WEIGHT / max(last - first, 1) * min(max(seq - first, 0), max(last - first, 1))


def score_text(index: ConversationIndex, query: Sequence[str], text: str) -> float:
    """BM25 of ``text`` as if it were one more document of the index."""
    counts = term_counts(text)
    length = sum(counts.values())
    n = len(index.docs) + 1
    average = (index.total_length + length) / n or 1.0
    score = 0.0
    for term in query:
        tf = counts.get(term, 0)
        if tf:
            frequency = len(index.postings.get(term, ())) + 1
            score += _bm25(_idf(n, frequency), tf, length, average)
    return score
