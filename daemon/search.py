"""Topic search over a conversation's buffer: BM25 relevance blended with recency.

The buffer holds tens of utterances by default, so the scores are computed
over the candidates at query time; nothing has to be kept in step with
every store and remove.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from daemon.utterance import Utterance

__all__ = ["Hit", "rank", "terms"]

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(
    "a an and are as at be by did do does for from has have i in is it of on or "
    "so that the this to was we were what when where which who with you".split()
)
K1, B = 1.2, 0.75
# How much newer utterances are preferred at equal relevance: the newest gets
# up to 20 % more than the oldest.
RECENCY_WEIGHT = 0.2


def _stem(word: str) -> str:
    # Light plural folding so "forecasts" finds "forecast"; a full stemmer
    # would be a dependency for little gain on short utterances.
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def terms(text: str) -> list[str]:
    """Lower-cased, lightly stemmed words of ``text`` without stopwords."""
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP]


@dataclass(frozen=True, slots=True)
class Hit:
    utterance: Utterance
    score: float


def rank(candidates: Sequence[Utterance], topic: str) -> list[Hit]:
    """Candidates that mention the topic, best first (ties: newer first)."""
    query = set(terms(topic))
    if not query or not candidates:
        return []
    docs = [Counter(terms(u.text)) for u in candidates]
    average = sum(sum(d.values()) for d in docs) / len(docs) or 1.0
    frequency = Counter(t for d in docs for t in query if t in d)
    n = len(docs)
    hits: list[Hit] = []
    for position, (utterance, doc) in enumerate(zip(candidates, docs)):
        length = sum(doc.values())
        score = 0.0
        for term in query:
            tf = doc.get(term, 0)
            if not tf:
                continue
            idf = math.log(1 + (n - frequency[term] + 0.5) / (frequency[term] + 0.5))
            score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))
        if score > 0:
            recency = position / (n - 1) if n > 1 else 1.0
            hits.append(Hit(utterance, score * (1 + RECENCY_WEIGHT * recency)))
    hits.sort(key=lambda h: (-h.score, -h.utterance.seq))
    return hits
