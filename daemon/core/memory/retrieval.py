"""Retrieve: the utterances a RetrieveIntent asks for, from one state snapshot.

Order of work: the filters (speaker, turns, seqs, time) choose candidates;
``last_n``/``first_n`` keep the newest/oldest n of those; then either the
topic ranks them (best first, at most ``limit``, each with its score, and
the running summary scored as a separate hit) or they come back in
conversation order.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import replace
from typing import Any

from chd.backends.base import ConversationState
from chd.core.memory.index import ConversationIndex, IndexedDoc
from chd.core.language.intents import RetrieveIntent
from chd.core.memory.search import rank
from chd.core.memory.selection import Filters, position_of, retrieve_filters
from chd.core.utterance import Summary, Utterance

__all__ = ["DEFAULT_TOPIC_LIMIT", "find_utterances"]

# A topic search returns at most this many hits unless ``limit`` says
# otherwise; ``matches`` in the result tells how many there were in all.
DEFAULT_TOPIC_LIMIT = 20


def _windowed(state: ConversationState, filters: Filters, intent: RetrieveIntent) -> Filters:
    """``filters`` narrowed to the newest ``last_n`` / oldest ``first_n`` it admits."""
    count = intent.last_n if intent.last_n is not None else intent.first_n
    if count is None:
        return filters
    newest = intent.last_n is not None
    edge: int | None = None
    seen = 0
    for u in reversed(state.utterances) if newest else state.utterances:
        if seen == count:
            break
        if filters.admits(u):
            seen += 1
            edge = u.seq
    if edge is None:
        # Nothing admitted, or a count of 0: an empty window.
        return replace(filters, seqs=frozenset())
    return replace(filters, seq_from=edge) if newest else replace(filters, seq_to=edge)


def _seq_span(buffer: list[Utterance], filters: Filters) -> tuple[int, int]:
    """The positions ``[start, stop)`` that can hold an utterance within the seq bounds.

    The buffer is in seq order, so a window ("the last 5") is found by
    bisection instead of testing every buffered utterance: testing all 250
    of a buffer was most of the rest of a retrieve's time after parsing
    (py-spy of bench/bench_backends.py).
    """
    start = 0 if filters.seq_from is None else bisect_left(buffer, filters.seq_from, key=_seq)
    stop = len(buffer) if filters.seq_to is None else bisect_right(buffer, filters.seq_to, key=_seq)
    return start, stop


def _seq(u: Utterance) -> int:
    return u.seq


def _summary_hit(summary: Summary, filters: Filters, score: float) -> dict[str, Any] | None:
    """The summary as a hit, if it matched and the filters can apply to it.

    A summary mixes speakers and has no single time or seq, so only turn
    filters can be checked against it (by the turns its segments cover).
    """
    if score <= 0 or not summary.segments:
        return None
    if filters.speaker or filters.seqs is not None or filters.after is not None or filters.before is not None:
        return None
    if filters.seq_from is not None or filters.seq_to is not None:
        return None
    low = filters.turn_from if filters.turn_from is not None else -1
    high = filters.turn_to if filters.turn_to is not None else float("inf")
    segments = [s for s in summary.segments if s.turn_to >= low and s.turn_from <= high]
    if not segments:
        return None
    return {
        "text": summary.text,
        "score": round(score, 4),
        "summary_through_seq": summary.through_seq,
        "turn_from": min(s.turn_from for s in segments),
        "turn_to": max(s.turn_to for s in segments),
    }


def find_utterances(
    state: ConversationState,
    intent: RetrieveIntent,
    index: ConversationIndex | None,
    now: float,
) -> dict[str, Any]:
    """The ``result`` of a retrieve (without the summary fields the core adds).

    ``index`` is this conversation's cached index; it is synced to ``state``
    here, under its lock, so it always answers for exactly this snapshot.
    """
    filters = _windowed(state, retrieve_filters(state, intent, now), intent)
    buffer = state.utterances
    if intent.topic is None:
        start, stop = _seq_span(buffer, filters)
        window = enumerate(buffer[start:stop], start)
        return {"utterances": [u.to_dict(i) for i, u in window if filters.admits(u)]}
    if index is None:
        index = ConversationIndex()

    def admits(seq: int, doc: IndexedDoc) -> bool:
        return filters.admits_fields(seq, doc.speaker, doc.turn, doc.timestamp)

    with index.lock:
        index.sync(state)
        ranking = rank(
            index,
            intent.topic,
            None if filters.is_open else admits,
            intent.limit or DEFAULT_TOPIC_LIMIT,
            state.summary.text,
        )
    utterances = []
    for hit in ranking.hits:
        position = position_of(buffer, hit.seq)
        assert position is not None, "the index was synced to this state"
        utterances.append(buffer[position].to_dict(position) | {"score": round(hit.score, 4)})
    result: dict[str, Any] = {
        "utterances": utterances,
        "ranked": True,
        "matches": ranking.matches,
    }
    hit = _summary_hit(state.summary, filters, ranking.summary_score)
    if hit is not None:
        result["summary_hit"] = hit
    return result
