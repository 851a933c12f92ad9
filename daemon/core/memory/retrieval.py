"""Retrieve: the utterances a RetrieveIntent asks for, from one state snapshot.

Order of work: the filters (speaker, turns, seqs, time) choose candidates;
``last_n``/``first_n`` keep the newest/oldest n of those; then either the
topic ranks them (best first, at most ``limit``, each with its score, and
the running summary scored as a separate hit) or they come back in
conversation order.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from dataclasses import replace
from typing import Any

from chd.backends.base import ConversationState
from chd.core.errors import InvalidRequest, quote
from chd.core.language.intents import WHERE_PLACES, RetrieveIntent
from chd.core.memory.hybrid import HybridSearch, fuse
from chd.core.memory.index import WHERE, ConversationIndex, IndexedDoc, held_parts
from chd.core.memory.search import rank, recency_factor, score_text
from chd.core.memory.selection import Filters, position_of, retrieve_filters
from chd.core.memory.terms import query_terms
from chd.core.utterance import Summary, Utterance

__all__ = ["DEFAULT_TOPIC_LIMIT", "find_utterances"]

# A topic search returns at most this many hits unless ``limit`` says
# otherwise; ``matches`` in the result tells how many there were in all.
DEFAULT_TOPIC_LIMIT = 20
# With an embedder, this many lexical hits at least are fused with the
# vector-nearest utterances before the cut to ``limit``.
HYBRID_POOL = 50


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
    if (
        filters.speaker
        or filters.seqs is not None
        or filters.after is not None
        or filters.before is not None
    ):
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


def _places(intent: RetrieveIntent) -> tuple[str, ...]:
    """Where a topic search looks: all of ``WHERE_PLACES`` unless narrowed.

    A window ("among the last 20"), a seq filter or ``archived`` keep their
    meaning from before issue 27: a window and seqs are the buffer's, and
    ``archived`` is the archive.
    """
    places = intent.where or WHERE_PLACES
    if intent.archived:
        return tuple(p for p in places if p == "archive")
    windowed = (intent.last_n, intent.first_n, intent.last_turns, intent.first_turns, intent.seq)
    if any(w is not None for w in windowed) or intent.seqs:
        return tuple(p for p in places if p == "buffer")
    return places


def _place_of(state: ConversationState, seq: int) -> tuple[str, int]:
    """Which of buffer, pending, archive holds ``seq`` (an indexed seq is in one of them), and where.

    Tested in that order with a range check before each bisection, so an
    archived hit costs two comparisons and one bisection of the archive.
    """
    found = _find(state, seq)
    if found is None:
        raise AssertionError(f"seq {seq} was indexed but is in none of buffer, pending, archive")
    return found


def _find(state: ConversationState, seq: int) -> tuple[str, int] | None:
    for place, part in zip(WHERE, held_parts(state)):
        if part and part[0].seq <= seq <= part[-1].seq:
            position = position_of(part, seq)
            if position is not None:
                return place, position
    return None


def _held(state: ConversationState, seq: int) -> bool:
    return _find(state, seq) is not None


def _text_of(state: ConversationState, seq: int) -> str:
    place, position = _place_of(state, seq)
    return held_parts(state)[WHERE.index(place)][position].text


def _segment_hits(
    state: ConversationState, index: ConversationIndex, topic: str, filters: Filters
) -> list[tuple[float, dict[str, Any]]]:
    """The summary's segments that match ``topic``, scored as documents of the index."""
    if _summary_hit(state.summary, filters, 1.0) is None:
        return []  # no segments, or a filter a summary cannot be checked against
    low = filters.turn_from if filters.turn_from is not None else -1
    high = filters.turn_to if filters.turn_to is not None else float("inf")
    query = query_terms(topic)
    hits = []
    for segment in state.summary.segments:
        if segment.turn_to < low or segment.turn_from > high:
            continue
        score = score_text(index, query, segment.text) * recency_factor(index, segment.seq_to)
        if score > 0:
            hits.append(
                (
                    score,
                    {
                        "where": "summary",
                        "text": segment.text,
                        "tokens": segment.tokens,
                        "score": round(score, 4),
                        "seq_from": segment.seq_from,
                        "seq_to": segment.seq_to,
                        "turn_from": segment.turn_from,
                        "turn_to": segment.turn_to,
                    },
                )
            )
    return hits


def find_utterances(
    state: ConversationState,
    intent: RetrieveIntent,
    index: ConversationIndex | None,
    now: float,
    search: HybridSearch | None = None,
    deadline: float | None = None,
) -> dict[str, Any]:
    """The ``result`` of a retrieve (without the summary fields the core adds).

    ``index`` is this conversation's cached index; it is synced to ``state``
    here, under its lock, so it always answers for exactly this snapshot.
    A topic search ranks buffer, queue, archive and summary segments in one
    list (issue 27), each hit with ``where`` it lives and its ``score``.
    With ``search`` (an embedder), vector similarity is fused in, waiting
    for the model at most its share of ``deadline`` (``time.monotonic``).
    """
    if intent.topic is None:
        if intent.archived:
            state = _as_buffer(state, state.archive)
        filters = _windowed(state, retrieve_filters(state, intent, now), intent)
        buffer = state.utterances
        start, stop = _seq_span(buffer, filters)
        window = enumerate(buffer[start:stop], start)
        found = [u.to_dict(i) for i, u in window if filters.admits(u)]
        if intent.archived:
            for u in found:
                del u["utterance_index"]  # an archived utterance has no place in the buffer
                u["archived"] = True
        return {"utterances": found}
    if not query_terms(intent.topic):
        # Such words are not indexed (terms.py): the search would come back
        # empty with nothing saying why (outside review of issue 27: "will",
        # "can", "The Who").
        raise InvalidRequest(
            f"the topic {quote(intent.topic, 60)} has only words too common to search by "
            "(like will, can, how, the); name something the utterances would say, or use "
            "last_n or a speaker instead"
        )
    places = _places(intent)
    # Filters are the buffer's (seqs, windows) or, for ``archived``, the archive's.
    scope = _as_buffer(state, state.archive) if intent.archived else state
    filters = _windowed(scope, retrieve_filters(scope, intent, now), intent)
    if index is None:
        index = ConversationIndex()
    everywhere = all(p in places for p in WHERE)

    def admits(seq: int, doc: IndexedDoc) -> bool:
        if not filters.admits_fields(seq, doc.speaker, doc.turn, doc.timestamp):
            return False
        return everywhere or _place_of(state, seq)[0] in places

    limit = intent.limit or DEFAULT_TOPIC_LIMIT
    searched = any(p in places for p in WHERE)
    filtering = None if filters.is_open and everywhere else admits
    hybrid = searched and search is not None
    with index.lock:
        index.sync(state)
        ranking = rank(
            index,
            intent.topic if searched else "",
            filtering,
            max(limit, HYBRID_POOL) if hybrid else limit,
            state.summary.text,
        )
        segments = _segment_hits(state, index, intent.topic, filters) if "summary" in places else []
        if hybrid:
            assert search is not None
            generation, missing = search.missing(index)
    if hybrid:
        assert search is not None
        # The model is called without the index's lock: stores take it (hybrid.py).
        embedded = search.embed(
            index,
            generation,
            [(seq, _text_of(state, seq)) for seq in missing],
            intent.topic,
            [found["text"] for _, found in segments],
            deadline,
        )
        if embedded is not None:
            with index.lock:
                fused = fuse(
                    index,
                    embedded,
                    ranking.hits,
                    filtering,
                    lambda seq: _held(state, seq),
                    limit,
                    [score for score, _ in segments],
                )
            ranking = replace(ranking, hits=fused.hits, matches=ranking.matches + fused.added)
            segments = [
                (s, found | {"score": round(s, 4)})
                for s, (_, found) in zip(fused.extra_scores, segments)
            ]
        else:
            ranking = replace(ranking, hits=ranking.hits[:limit])
    hits: list[tuple[float, dict[str, Any]]] = []
    for hit in ranking.hits:
        place, position = _place_of(state, hit.seq)
        if place == "buffer":
            row = state.utterances[position].to_dict(position)
        else:
            row = held_parts(state)[WHERE.index(place)][position].to_dict()
            if place == "archive":
                row["archived"] = True
        row |= {"score": round(hit.score, 4), "where": place}
        hits.append((hit.score, row))
    if segments:
        hits = heapq.nlargest(limit, [*hits, *segments], key=lambda h: h[0])
    result: dict[str, Any] = {
        "utterances": [found for _, found in hits],
        "ranked": True,
        "matches": ranking.matches + len(segments),
    }
    summary_hit = _summary_hit(state.summary, filters, ranking.summary_score)
    if summary_hit is not None:
        result["summary_hit"] = summary_hit
    return result


def _as_buffer(state: ConversationState, utterances: list[Utterance]) -> ConversationState:
    """``state`` with ``utterances`` in the buffer's place, to filter the archive alike."""
    return ConversationState(
        conversation_id=state.conversation_id,
        next_seq=state.next_seq,
        last_turn=state.last_turn,
        utterances=utterances,
        summary=state.summary,
        settings=state.settings,
    )
