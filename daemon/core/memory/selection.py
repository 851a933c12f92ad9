"""Which utterances a retrieve or a remove is about.

Both operations share one filter model — speaker, an inclusive turn range,
seqs, a time cutoff — combined with AND, so "what did the assistant say in
turns 3 to 6" and "remove the assistant's messages in turns 3 to 6" pick the
same utterances.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from chd.backends.base import ConversationState
from chd.core.days import day_bounds, parse_zone
from chd.core.errors import InvalidRequest, NotFound
from chd.core.language.intents import RemoveIntent, RetrieveIntent, SummarizeIntent
from chd.core.utterance import SummarySegment, Utterance

__all__ = [
    "Filters",
    "epoch",
    "position_of",
    "missing_seq_message",
    "first_of_last_turns",
    "retrieve_filters",
    "remove_victims",
    "check_at_most",
    "archived_victims",
    "segment_touched",
    "summarize_scope",
]


def epoch(timestamp: str) -> float:
    """An RFC 3339 timestamp as seconds since the epoch (unparseable: 0, i.e. oldest)."""
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return 0.0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@dataclass(frozen=True, slots=True)
class Filters:
    """Conditions an utterance must meet; None means no condition."""

    speaker: str | None = None
    turn_from: int | None = None
    turn_to: int | None = None
    seqs: frozenset[int] | None = None
    after: float | None = None  # epoch seconds, inclusive
    before: float | None = None  # epoch seconds, exclusive ("older than an hour", "until")
    seq_from: int | None = None  # windows such as "the last 5" become seq bounds
    seq_to: int | None = None

    @property
    def is_open(self) -> bool:
        return (
            self.speaker is None
            and self.turn_from is None
            and self.turn_to is None
            and self.seqs is None
            and self.after is None
            and self.before is None
            and self.seq_from is None
            and self.seq_to is None
        )

    def admits_fields(self, seq: int, speaker: str, turn: int, timestamp: str) -> bool:
        """The check on plain fields (the timestamp is parsed only for a time filter)."""
        return (
            (self.speaker is None or speaker == self.speaker)
            and (self.turn_from is None or turn >= self.turn_from)
            and (self.turn_to is None or turn <= self.turn_to)
            and (self.seqs is None or seq in self.seqs)
            and (self.seq_from is None or seq >= self.seq_from)
            and (self.seq_to is None or seq <= self.seq_to)
            and (self.after is None or epoch(timestamp) >= self.after)
            and (self.before is None or epoch(timestamp) < self.before)
        )

    def admits(self, u: Utterance) -> bool:
        return self.admits_fields(u.seq, u.speaker, u.turn_number, u.timestamp)


def position_of(utterances: Sequence[Utterance], seq: int) -> int | None:
    """The index of ``seq`` in a seq-ordered list, by bisection (O(log n))."""
    i = bisect_left(utterances, seq, key=lambda u: u.seq)
    return i if i < len(utterances) and utterances[i].seq == seq else None


def missing_seq_message(state: ConversationState, seq: int) -> str:
    if state.next_seq == 1:  # seqs start at 1: nothing was ever stored
        return f"there is no utterance {seq}: the conversation holds no utterances yet"
    if seq >= state.next_seq:
        return f"there is no utterance {seq} yet (the newest is {state.next_seq - 1})"
    if position_of(state.pending, seq) is not None:
        return f"utterance {seq} was evicted and is waiting to be folded into the summary"
    if seq <= state.summary.through_seq:
        return f"utterance {seq} was evicted and folded into the summary"
    return f"utterance {seq} is no longer in the buffer (evicted or removed)"


def first_of_last_turns(utterances: Sequence[Utterance], count: int) -> int | None:
    """The lowest turn among the ``count`` highest turns present (None if empty).

    Turns present, not ``last_turn`` arithmetic: a caller may set turn numbers
    with gaps, and "the last 2 turns" means the two newest that exist.
    """
    kept = sorted({u.turn_number for u in utterances}, reverse=True)[:count]
    return min(kept) if kept else None


def last_of_first_turns(utterances: Sequence[Utterance], count: int) -> int | None:
    """The highest turn among the ``count`` lowest turns present (None if empty)."""
    kept = sorted({u.turn_number for u in utterances})[:count]
    return max(kept) if kept else None


def _cap(high: int | None, ceiling: int | None) -> int | None:
    """``high`` lowered to ``ceiling``; an empty buffer (None) leaves no turn (-1)."""
    ceiling = -1 if ceiling is None else ceiling
    return ceiling if high is None else min(high, ceiling)


def _seq_set(seq: int | None, seqs: tuple[int, ...]) -> frozenset[int] | None:
    chosen = set(seqs)
    if seq is not None:
        chosen.add(seq)
    return frozenset(chosen) if chosen else None


def _narrow(low: int | None, high: int | None, floor: int | None) -> tuple[int | None, int | None]:
    if floor is None:
        return low, high
    return (floor if low is None else max(low, floor)), high


def retrieve_filters(state: ConversationState, intent: RetrieveIntent, now: float) -> Filters:
    """The filters of a retrieve; a seq that is not in the buffer is NOT_FOUND."""
    seqs = _seq_set(intent.seq, intent.seqs)
    for seq in sorted(seqs or ()):
        if position_of(state.utterances, seq) is None:
            raise NotFound(missing_seq_message(state, seq))
    low, high = intent.turn_from, intent.turn_to
    if intent.last_turns is not None:
        low, high = _narrow(low, high, first_of_last_turns(state.utterances, intent.last_turns))
    if intent.first_turns is not None:
        high = _cap(high, last_of_first_turns(state.utterances, intent.first_turns))
    after: float | None = None
    if intent.since is not None:
        after = intent.since.timestamp()
    if intent.within_seconds is not None:
        window = now - intent.within_seconds
        after = window if after is None else max(after, window)
    before = None if intent.older_than_seconds is None else now - intent.older_than_seconds
    if intent.until is not None:
        until = intent.until.timestamp()
        before = until if before is None else min(before, until)
    if intent.day is not None:
        # Resolved now, not when read: see daemon/core/days.py.
        zone = parse_zone(intent.timezone) if intent.timezone is not None else UTC
        try:
            first, end = day_bounds(intent.day, now, zone)
        except ValueError as error:
            raise InvalidRequest(f"data.day: {error}") from None
        if first is not None:
            after = first if after is None else max(after, first)
        if end is not None:
            before = end if before is None else min(before, end)
    return Filters(intent.speaker, low, high, seqs, after, before=before)


def remove_victims(state: ConversationState, intent: RemoveIntent) -> list[Utterance]:
    """The utterances a remove deletes, in seq order; raise before deleting too many."""
    if intent.all:
        chosen = sorted([*state.pending, *state.utterances], key=lambda u: u.seq)
    else:
        chosen = _chosen(state, intent)
    check_at_most(chosen, intent)
    return chosen


def check_at_most(chosen: Sequence[Utterance], intent: RemoveIntent) -> None:
    """Refuse a remove choosing more than its ``at_most`` (buffered, queued or archived alike)."""
    if intent.at_most is not None and len(chosen) > intent.at_most:
        shown = ", ".join(str(u.seq) for u in chosen[:10]) + (", ..." if len(chosen) > 10 else "")
        raise InvalidRequest(
            f"this remove matches {len(chosen)} utterances (seq {shown}) but asks for at most "
            f"{intent.at_most}; nothing was removed. Name one by seq ('Remove utterance "
            f"{chosen[0].seq}'), or say plainly that all of them go ('Remove all the "
            f"assistant's messages')"
        )


def _remove_filters(state: ConversationState, intent: RemoveIntent) -> Filters:
    low, high = intent.turn_bounds
    if intent.last_turns is not None:
        first = first_of_last_turns(state.utterances, intent.last_turns)
        # An empty buffer has no last turns: select none (a turn after every
        # turn), never no turn filter at all, which would select everything
        # queued, archived and summarized.
        low, high = _narrow(low, high, state.last_turn + 1 if first is None else first)
    if intent.first_turns is not None:
        high = _cap(high, last_of_first_turns(state.utterances, intent.first_turns))
    now = time.time()
    after = None if intent.within_seconds is None else now - intent.within_seconds
    before = None if intent.older_than_seconds is None else now - intent.older_than_seconds
    return Filters(
        intent.speaker, low, high, _seq_set(intent.seq, intent.seqs), after, before=before
    )


def _summarized(state: ConversationState, seq: int) -> bool:
    """Whether ``seq``'s content is in the archive or inside a summary segment's range."""
    return position_of(state.archive, seq) is not None or any(
        s.seq_from <= seq <= s.seq_to for s in state.summary.segments
    )


def _chosen(state: ConversationState, intent: RemoveIntent) -> list[Utterance]:
    seqs = _seq_set(intent.seq, intent.seqs)
    for seq in sorted(seqs or ()):
        if (
            position_of(state.utterances, seq) is None
            and position_of(state.pending, seq) is None
            and not _summarized(state, seq)
        ):
            raise NotFound(missing_seq_message(state, seq))
    filters = _remove_filters(state, intent)
    if intent.oldest is not None or intent.newest is not None:
        # "the oldest 3" counts what is in the buffer, not what already left it.
        chosen = [u for u in state.utterances if filters.admits(u)]
        if intent.oldest is not None:
            chosen = chosen[: intent.oldest]
        elif intent.newest is not None:
            chosen = chosen[-intent.newest :]
    else:
        pool = sorted([*state.pending, *state.utterances], key=lambda u: u.seq)
        chosen = [u for u in pool if filters.admits(u)]
    return chosen


def archived_victims(state: ConversationState, intent: RemoveIntent) -> list[Utterance]:
    """Archived utterances a remove deletes too, so forgetting reaches the cold copies."""
    if intent.all:
        return list(state.archive)
    if intent.oldest is not None or intent.newest is not None:
        return []  # "the oldest 3" counts the buffer only
    filters = _remove_filters(state, intent)
    return [u for u in state.archive if filters.admits(u)]


def segment_touched(
    state: ConversationState, intent: RemoveIntent, chosen: Sequence[Utterance] = ()
) -> Callable[[SummarySegment], bool]:
    """Whether a summary segment may hold content of what the remove deletes.

    A segment keeps its seq and turn ranges, not who said what, so a remove
    by speaker or time touches every segment in its turn range: forgetting
    must err on the side of forgetting. Not so a remove limited by
    ``at_most`` ("remove the assistant's message"): it deletes the few
    utterances it ``chosen`` (and any seq it names), never whole segments of
    unknown others.
    """
    if intent.all:
        return lambda s: True
    if intent.oldest is not None or intent.newest is not None:
        return lambda s: False
    filters = _remove_filters(state, intent)
    seqs = filters.seqs
    if intent.at_most is not None:
        seqs = frozenset({u.seq for u in chosen} | set(seqs or ()))

    def touched(s: SummarySegment) -> bool:
        if seqs is not None and not any(s.seq_from <= q <= s.seq_to for q in seqs):
            return False
        return (filters.turn_from is None or s.turn_to >= filters.turn_from) and (
            filters.turn_to is None or s.turn_from <= filters.turn_to
        )

    return touched


def summarize_scope(
    state: ConversationState, intent: SummarizeIntent
) -> tuple[str, list[Utterance]]:
    """What a summarize covers: the summary text to build on and the buffered utterances.

    For a turn range, only summary segments overlapping it and utterances
    inside it; otherwise the whole summary and the whole buffer.
    """
    low, high = intent.turn_from, intent.turn_to
    if intent.last_turns is not None:
        low, high = _narrow(low, high, first_of_last_turns(state.utterances, intent.last_turns))
    if intent.first_turns is not None:
        high = _cap(high, last_of_first_turns(state.utterances, intent.first_turns))
    if intent.last_n is not None:
        # The newest n utterances alone: what the summary holds is older.
        chosen = [u for u in state.utterances if Filters(turn_from=low, turn_to=high).admits(u)]
        return "", chosen[-intent.last_n :]
    if low is None and high is None:
        return state.summary.text, list(state.utterances)
    filters = Filters(turn_from=low, turn_to=high)
    segments = [
        s
        for s in state.summary.segments
        if (low is None or s.turn_to >= low) and (high is None or s.turn_from <= high)
    ]
    return "\n".join(s.text for s in segments), [u for u in state.utterances if filters.admits(u)]
