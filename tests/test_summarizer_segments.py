"""The summary as segments with provenance: how batches enter it, how it stays in budget, how it forgets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from chd.core.summaries.extractive import ExtractiveSummarizer
from chd.core.summaries.segments import (
    MIN_SEGMENT_TOKENS,
    compact,
    fold_into,
    forget,
    segment_count,
)
from chd.core.summaries.summarizer import Summarized
from chd.core.tokens import default_counter
from chd.core.utterance import Summary, SummarySegment, Utterance
from tests.talk import fact

COUNTER = default_counter()
OFFLINE = ExtractiveSummarizer(COUNTER)


def offline_write(
    previous: str, utterances: Sequence[Utterance], limit: int, context=None
) -> Summarized:
    return Summarized(OFFLINE.summarize(previous, utterances, limit), OFFLINE.name)


def batch(first_seq: int, size: int = 5, turn_of=lambda seq: (seq + 1) // 2) -> list[Utterance]:
    out = []
    for seq in range(first_seq, first_seq + size):
        speaker = "user" if seq % 2 else "assistant"
        text = fact(seq)
        out.append(Utterance("c", seq, speaker, text, turn_of(seq), "t", COUNTER.count(text)))
    return out


def fold_many(batches: int, limit: int = 512, max_segments: int = 4, size: int = 5) -> Summary:
    summary = Summary()
    for i in range(batches):
        summary, _ = fold_into(
            summary,
            batch(1 + i * size, size),
            limit=limit,
            max_segments=max_segments,
            write=offline_write,
            counter=COUNTER,
        )
    return summary


class TestFoldingBatches:
    """Batches become segments that record the seq and turn ranges they came from."""

    def test_the_first_batch_becomes_one_segment_covering_it(self):
        summary = fold_many(1)
        (segment,) = summary.segments
        assert (segment.seq_from, segment.seq_to, segment.turn_from, segment.turn_to) == (
            1,
            5,
            1,
            3,
        )
        assert segment.made_by == "extractive" and segment.error == ""
        assert summary.through_seq == 5

    def test_a_full_newest_segment_makes_the_next_batch_start_a_new_one(self):
        full = Summary((segment(1, 5, 1, 3, "Fact. " * 100),), 5, 200)
        summary, _ = fold_into(
            full, batch(6), limit=512, max_segments=4, write=offline_write, counter=COUNTER
        )
        assert [(s.seq_from, s.seq_to) for s in summary.segments] == [(1, 5), (6, 10)]
        assert summary.segments[0] == full.segments[0]

    def test_a_batch_too_small_for_a_segment_of_its_own_extends_the_newest(self):
        """A batch whose fair share is under MIN_SEGMENT_TOKENS is written into the newest segment."""
        text = "Turns 1–20: the user said “Alice books a tram.”; facts: " + "; ".join(
            f"A{i}" for i in range(24)
        )
        assert 85 <= COUNTER.count(text) <= 100
        full = Summary((segment(1, 40, 1, 20, text),), 40, COUNTER.count(text))
        summary, _ = fold_into(
            full, batch(41), limit=100, max_segments=4, write=offline_write, counter=COUNTER
        )
        ((seq_from, seq_to, turn_from),) = [
            (s.seq_from, s.seq_to, s.turn_from) for s in summary.segments
        ]
        assert (seq_from, seq_to, turn_from) == (1, 45, 1)
        assert "A0" in summary.text and "Rome" in summary.text  # the old segment and the batch

    def test_a_batch_gets_all_the_room_the_other_segments_leave(self):
        """No fixed share per call: a first batch may fill the whole budget."""
        long = [
            (
                "user" if i % 2 else "assistant",
                f"Order {1000 + i} ships to warehouse W{i} on day {i}.",
                i,
            )
            for i in range(1, 41)
        ]
        utterances = [
            Utterance("c", i, sp, t, turn, "t", COUNTER.count(t))
            for i, (sp, t, turn) in enumerate(long, 1)
        ]
        summary, _ = fold_into(
            Summary(), utterances, limit=400, max_segments=4, write=offline_write, counter=COUNTER
        )
        assert 0.9 * 400 <= summary.tokens <= 400

    def test_no_part_of_the_conversation_is_emptied_to_make_room(self):
        """After many folds every segment keeps a share in proportion to the utterances it stands for."""
        summary = fold_many(40, limit=512, size=5)
        shares = [s.tokens / (s.seq_to - s.seq_from + 1) for s in summary.segments]
        assert min(shares) > 0.4 * max(shares)
        assert summary.tokens > 0.9 * 512

    def test_the_least_informative_neighbours_are_merged_whatever_their_age(self):
        """The two neighbours holding the least text merge, not the two oldest."""
        parts = (
            segment(1, 10, 1, 5, "Turns 1–5: facts: " + "; ".join(f"A{i}" for i in range(40))),
            segment(11, 20, 6, 10, "Turns 6–10: facts: " + "; ".join(f"B{i}" for i in range(40))),
            segment(21, 25, 11, 12, "Turns 11–12: facts: C1"),
            segment(26, 30, 13, 14, "Turns 13–14: facts: D1"),
        )
        full = Summary(parts, 30, COUNTER.count("\n".join(p.text for p in parts)))
        summary, _ = fold_into(
            full,
            batch(31, size=20),
            limit=512,
            max_segments=4,
            write=offline_write,
            counter=COUNTER,
        )
        assert [(s.seq_from, s.seq_to) for s in summary.segments][:3] == [
            (1, 10),
            (11, 20),
            (21, 30),
        ]

    def test_a_fallback_mark_survives_merging_and_condensing(self):
        """Content lost by an offline fold stays marked whoever rewrites its summary later."""
        marked = replace(
            segment(1, 10, 1, 5, "Turns 1–5: facts: " + "; ".join(f"A{i}" for i in range(60))),
            error="claude failed: HTTP 500",
        )
        summary = Summary((marked,), 10, marked.tokens)
        for i in range(6):
            summary, _ = fold_into(
                summary,
                batch(11 + 10 * i, size=10),
                limit=160,
                max_segments=2,
                write=offline_write,
                counter=COUNTER,
            )
        assert summary.segments[0].error == "claude failed: HTTP 500"

    def test_segments_never_outnumber_the_setting_the_oldest_are_merged(self):
        summary = fold_many(12, size=8)
        assert len(summary.segments) == 4
        assert summary.segments[0].seq_from == 1 and summary.segments[0].seq_to > 16
        assert summary.segments[-1].seq_to == 96
        ranges = [(s.seq_from, s.seq_to) for s in summary.segments]
        assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))

    def test_a_small_budget_gets_fewer_segments(self):
        assert segment_count(512, 4) == 4
        assert segment_count(2 * MIN_SEGMENT_TOKENS, 4) == 2
        assert segment_count(10, 4) == 1
        assert len(fold_many(10, limit=60, size=8).segments) == 1

    def test_the_summary_token_count_is_the_count_of_the_joined_text(self):
        summary = fold_many(7, size=6)
        assert summary.tokens == COUNTER.count(summary.text)

    @settings(max_examples=25, deadline=None)
    @given(
        limit=st.integers(min_value=1, max_value=700),
        max_segments=st.integers(min_value=1, max_value=6),
        sizes=st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=10),
    )
    def test_the_summary_never_exceeds_its_budget(self, limit, max_segments, sizes):
        summary, seq = Summary(), 1
        for size in sizes:
            summary, _ = fold_into(
                summary,
                batch(seq, size),
                limit=limit,
                max_segments=max_segments,
                write=offline_write,
                counter=COUNTER,
            )
            seq += size
            assert COUNTER.count(summary.text) <= limit
            assert summary.tokens <= limit

    def test_a_summarizer_ignoring_the_limit_is_still_held_to_it(self):
        def verbose(previous, utterances, limit, context=None):
            return Summarized("Everything. " * 500, "verbose")

        summary = Summary()
        for i in range(3):
            summary, _ = fold_into(
                summary, batch(1 + 5 * i), limit=100, max_segments=4, write=verbose, counter=COUNTER
            )
        assert COUNTER.count(summary.text) <= 100

    def test_a_fallback_is_recorded_on_the_segment_it_wrote(self):
        def degraded(previous, utterances, limit, context=None):
            outcome = offline_write(previous, utterances, limit)
            return Summarized(outcome.text, outcome.made_by, "claude failed: HTTP 529")

        summary, written = fold_into(
            Summary(), batch(1), limit=512, max_segments=4, write=degraded, counter=COUNTER
        )
        assert summary.segments[0].error == "claude failed: HTTP 529"
        assert [w.error for w in written] == ["claude failed: HTTP 529"]


class TestCompacting:
    """A summary written under a larger budget is merged down to a smaller one."""

    def test_a_lowered_budget_is_met_by_merging_the_oldest_segments(self):
        big = fold_many(8, limit=1000, size=8)
        small, written = compact(
            big, limit=150, max_segments=4, write=offline_write, counter=COUNTER
        )
        assert COUNTER.count(small.text) <= 150
        assert small.segments[0].seq_from == 1 and small.segments[-1].seq_to == 64
        assert written


def segment(
    seq_from: int, seq_to: int, turn_from: int, turn_to: int, text: str = "Text."
) -> SummarySegment:
    return SummarySegment(
        text, COUNTER.count(text), seq_from, seq_to, turn_from, turn_to, "extractive"
    )


def rebuild(survivors: Sequence[Utterance], limit: int) -> Summarized:
    return Summarized(OFFLINE.summarize("", survivors, limit), OFFLINE.name)


class TestForgetting:
    """A remove drops or rebuilds every segment holding removed content."""

    SUMMARY = Summary(
        (
            segment(1, 10, 1, 4, "Turns 1–4: the user said “Old plan.”"),
            segment(11, 20, 4, 8, "Turns 4–8: the user said “Middle plan.”"),
            segment(21, 30, 9, 12, "Turns 9–12: the user said “New plan.”"),
        ),
        30,
        30,
    )

    def test_segments_made_only_from_removed_turns_are_dropped(self):
        result = forget(
            self.SUMMARY, 512, lambda s: s.turn_from < 4, lambda s: [], rebuild, COUNTER
        )
        assert result.dropped == 1 and result.rebuilt == 0
        assert [s.seq_from for s in result.summary.segments] == [11, 21]
        assert result.summary.through_seq == 30

    def test_a_segment_mixing_removed_and_kept_turns_is_dropped_without_an_archive(self):
        result = forget(
            self.SUMMARY, 512, lambda s: s.turn_from < 5, lambda s: [], rebuild, COUNTER
        )
        assert result.dropped == 2
        assert [s.seq_from for s in result.summary.segments] == [21]

    def test_a_segment_mixing_removed_and_kept_turns_is_rebuilt_from_the_archive(self):
        archive = batch(11, 10, turn_of=lambda seq: 4 + (seq - 11) // 2)
        survivors = [u for u in archive if u.turn_number >= 5]
        result = forget(
            self.SUMMARY,
            512,
            lambda s: s.turn_from < 5,
            lambda s: [u for u in survivors if s.seq_from <= u.seq <= s.seq_to],
            rebuild,
            COUNTER,
        )
        assert result.dropped == 1 and result.rebuilt == 1
        rebuilt = result.summary.segments[0]
        assert (rebuilt.seq_from, rebuilt.turn_from) == (survivors[0].seq, 5)
        assert "Middle plan" not in result.summary.text
        assert rebuilt.tokens <= self.SUMMARY.segments[1].tokens

    def test_a_remove_touching_no_segment_leaves_the_summary_alone(self):
        result = forget(self.SUMMARY, 512, lambda s: False, lambda s: [], rebuild, COUNTER)
        assert result.summary is None and result.dropped == result.rebuilt == 0
