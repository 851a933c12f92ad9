"""Topic search: BM25 relevance over the conversation index, with neighbouring turns' and recency.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chd.core.memory.terms import query_terms, term_counts

if TYPE_CHECKING:
    from chd.core.memory.index import ConversationIndex, IndexedDoc

__all__ = ["Hit", "Ranking", "rank", "score_text", "recency_factor", "RECENCY_WEIGHT"]

# BM25's saturation and length normalisation. Lower than the textbook 1.2 /
# 0.75: utterances are short and a word said twice is not twice as telling.
# Tuned on LoCoMo conversations 1-5 (issue 27; docs/search.md): R@1/5/10
# 0.343/0.538/0.601 -> 0.358/0.553/0.618, held-out 6-10 0.295/0.512/0.597 ->
# 0.319/0.525/0.604.
K1, B = 0.9, 0.4
# How much newer utterances are preferred at equal relevance: the newest gets
# up to 20 % more than the oldest.
RECENCY_WEIGHT = 0.2
# Neighbouring-turn context (issue 27): a question and the turn that answers
# it often sit side by side, so an utterance also gets this share of the
# relevance of the one before it (what it answers) and of the one after it.
# LoCoMo 1-5 R@1/5/10 0.358/0.553/0.618 -> 0.367/0.574/0.656 at 0.2/0.1;
# with coordination (COORD_POWER) 0.3/0.15 does better on all three:
# 0.382/0.607/0.676 -> 0.386/0.621/0.684 (0.4/0.2: 0.372/0.615/0.691);
# docs/search.md.
PREVIOUS_WEIGHT = 0.3
NEXT_WEIGHT = 0.15
# Query expansion from the best hits (pseudo-relevance feedback, issue 27):
# the rarest words of the best EXPANSION_DOCS hits (at most
# EXPANSION_TERMS, each in 2 utterances at least) add EXPANSION_WEIGHT of
# their relevance to the other hits, reordering all but the best one. An
# answer often shares no word with the question but several with the turns
# that do. Kept only if the best hit stays first: letting expansion move it
# too cost R@1 on the held-out half (0.324 -> 0.309). docs/search.md.
EXPANSION_DOCS = 3
EXPANSION_TERMS = 5
EXPANSION_WEIGHT = 0.2
# Coordination (issue 27): a hit's relevance is scaled by the share of the
# topic's terms it contains, to this power, so an utterance that matches
# three words of a question beats one that repeats the rarest. LoCoMo 1-5
# R@1/5/10 0.373/0.599/0.675 -> 0.382/0.607/0.676 at 0.5 (1.0: 0.382/0.611/
# 0.670, 0.25: 0.379/0.604/0.673); docs/search.md.
COORD_POWER = 0.5


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
    query = query_terms(topic)
    docs = index.docs
    n = len(docs)
    average = (index.total_length / n if n else 1.0) or 1.0
    # BM25 with its per-document length factor written out: this loop is
    # the whole cost of a search, and a function call per posting doubles it.
    norm_a, norm_b = K1 * (1 - B), K1 * B / average
    scores: dict[int, float] = {}
    # How many of the topic's terms each utterance holding two or more holds (coordination).
    matched: dict[int, int] = {}
    rejected: set[int] = set()
    for term in query:
        posting = index.postings.get(term)
        if not posting:
            continue
        weight = _idf(n, len(posting)) * (K1 + 1)
        for seq, tf in posting.items():
            if admits is not None and (
                seq in rejected or (seq not in scores and not admits(seq, docs[seq]))
            ):
                rejected.add(seq)
                continue
            relevance = weight * tf / (tf + norm_a + norm_b * docs[seq].length)
            if seq in scores:
                scores[seq] += relevance
                matched[seq] = matched.get(seq, 1) + 1
            else:
                scores[seq] = relevance
    if COORD_POWER and scores:
        # Terms no utterance holds (a typo, a word never said) do not count against any.
        present = sum(1 for t in query if t in index.postings)
        if present > 1:
            # Most hits hold one term (not in ``matched``): one factor for them all.
            single = (1 / present) ** COORD_POWER
            scores = {
                seq: score * ((matched[seq] / present) ** COORD_POWER if seq in matched else single)
                for seq, score in scores.items()
            }
    if scores and (PREVIOUS_WEIGHT or NEXT_WEIGHT):
        weights = [
            (index.postings[t], _idf(n, len(index.postings[t])) * (K1 + 1))
            for t in query
            if t in index.postings
        ]

        def raw(seq: int) -> float:
            """The relevance of a seq the loop above did not score (not indexed, filtered out, or no match)."""
            doc = docs.get(seq) if seq in rejected else None
            if doc is None:
                return 0.0
            total = 0.0
            for posting, weight in weights:
                tf = posting.get(seq)
                if tf:
                    total += weight * tf / (tf + norm_a + norm_b * doc.length)
            return total

        scores = _with_neighbours(scores, raw)
    hits = _cut(index, query, scores, limit, norm_a, norm_b) if scores else []
    summary_score = score_text(index, query, summary) if summary else 0.0
    return Ranking(hits, len(scores), summary_score)


def _cut(
    index: ConversationIndex,
    query: list[str],
    scores: dict[int, float],
    limit: int,
    norm_a: float,
    norm_b: float,
) -> list[Hit]:
    """The best ``limit`` of ``scores`` with recency, after query expansion, best first."""
    # Recency by seq across the indexed utterances, not by position: seqs
    # are dense enough and need no lookup per candidate.
    first, last = index.bounds()
    bonus = RECENCY_WEIGHT / max(last - first, 1)

    def key(item: tuple[int, float]) -> tuple[float, int]:
        return item[1] * (1 + bonus * (item[0] - first)), item[0]

    # With no more hits than it reads, expansion would only reshuffle its own sources.
    if not (EXPANSION_WEIGHT and len(scores) > EXPANSION_DOCS and limit > 1):
        return [
            Hit(seq, key((seq, score))[0])
            for seq, score in heapq.nlargest(limit, scores.items(), key=key)
        ]
    top = [seq for seq, _ in heapq.nlargest(EXPANSION_DOCS, scores.items(), key=key)]
    expanded = _expanded(index, set(query), top, scores, norm_a, norm_b)
    scores = {
        seq: score + EXPANSION_WEIGHT * expanded.get(seq, 0.0) for seq, score in scores.items()
    }
    pinned = top[0]
    lead = key((pinned, scores.pop(pinned)))[0]
    rest = scores
    after = heapq.nlargest(limit - 1, rest.items(), key=key)
    # The best literal match stays first (see EXPANSION_WEIGHT); if expansion
    # lifted another hit above it, it is shown at that hit's score, so the
    # list's scores never increase.
    if after:
        lead = max(lead, key(after[0])[0])
    return [Hit(pinned, lead)] + [Hit(seq, key((seq, score))[0]) for seq, score in after]


def _expanded(
    index: ConversationIndex,
    query: set[str],
    best: list[int],
    scores: dict[int, float],
    norm_a: float,
    norm_b: float,
) -> dict[int, float]:
    """BM25 of the expansion terms (the rarest words of ``best``) for each utterance in ``scores``.

    Only utterances that already match the topic are scored, so expansion
    reorders hits and never adds one; the expansion terms are rare, so
    their postings are short.
    """
    docs, postings = index.docs, index.postings
    n = len(docs)
    rarity: dict[str, float] = {}
    for seq in best:
        for term in docs[seq].terms:
            frequency = len(postings.get(term, ()))
            if term not in query and frequency >= 2:
                rarity[term] = rarity.get(term, 0.0) + _idf(n, frequency)
    chosen = sorted(rarity, key=lambda t: (-rarity[t], t))[:EXPANSION_TERMS]
    out: dict[int, float] = {}
    for term in chosen:
        posting = postings[term]
        weight = _idf(n, len(posting)) * (K1 + 1)
        for seq, tf in posting.items():
            if seq in scores:
                out[seq] = out.get(seq, 0.0) + weight * tf / (
                    tf + norm_a + norm_b * docs[seq].length
                )
    return out


def _with_neighbours(scores: dict[int, float], raw: Callable[[int], float]) -> dict[int, float]:
    """``scores`` with each utterance's neighbours' relevance added.

    Neighbours by seq (seq - 1 and seq + 1), the turns said just before and
    after, whether or not the filters admit them (``raw`` scores those that
    were not scored): like the term statistics, the context an utterance
    gets does not change with the filters. Only utterances that match the
    topic themselves are credited: crediting their silent neighbours too
    ("yes, last Friday") put none of them in LoCoMo's top 10 (same recall
    to the fourth digit) and would return utterances that do not mention
    the topic. Cost: two lookups per matching utterance, so it still
    follows the hits, not the conversation.
    """
    out = dict(scores)
    for seq in scores:
        before = scores.get(seq - 1)
        after = scores.get(seq + 1)
        out[seq] += PREVIOUS_WEIGHT * (raw(seq - 1) if before is None else before)
        out[seq] += NEXT_WEIGHT * (raw(seq + 1) if after is None else after)
    return out


def recency_factor(index: ConversationIndex, seq: int) -> float:
    """The recency multiplier ``rank`` gives an utterance at ``seq`` (a summary segment by its last seq)."""
    first, last = index.bounds()
    return 1 + RECENCY_WEIGHT / max(last - first, 1) * min(
        max(seq - first, 0), max(last - first, 1)
    )


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
