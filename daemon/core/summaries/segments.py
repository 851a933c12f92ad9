"""The running summary as segments with provenance, always within its budget.

A segment is summary text plus the seq and turn range of the utterances it
was made from. Keeping several segments instead of one blob is what lets a
remove forget: "Remove before turn 4" drops the segments made only from
those turns and rebuilds (or drops) the ones that mix them with later turns.

How a folded batch enters the summary (``fold_into``):

* Each segment may hold ``share`` = limit / segments tokens. A batch is
  merged into the newest segment while that one is under three quarters of
  its share (and the batch is not itself larger than a share: a queue that
  grew while the worker was busy gets a segment of its own), else it starts
  a new segment. The summarizer sees only the
  segment it extends, so a segment never holds content from outside its range.
* While there are more segments than ``max_segments``, or the joined text is
  over the limit, the two oldest are merged into one (the oldest turns are
  condensed the most, as in a person's memory).

Everything here is a pure function of its arguments and the ``write``
callable, so it is tested without a daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

from chd.core.summaries.summarizer import Summarized
from chd.core.tokens import TokenCounter
from chd.core.utterance import Summary, SummarySegment, Utterance

__all__ = [
    "MIN_SEGMENT_TOKENS",
    "Write",
    "Forgotten",
    "segment_count",
    "fold_into",
    "compact",
    "forget",
    "assemble",
]

# Below this many tokens a segment says too little to be worth its own
# line; small budgets get fewer, larger segments.
MIN_SEGMENT_TOKENS = 48
_EXTEND_BELOW = 0.75

Write = Callable[[str, Sequence[Utterance], int], Summarized]


def segment_count(limit: int, max_segments: int) -> int:
    """How many segments a budget of ``limit`` tokens is split into."""
    return max(1, min(max_segments, limit // MIN_SEGMENT_TOKENS))


def _share(limit: int, segments: int) -> int:
    # One token per segment is kept for the newline that joins them.
    return max(1, (limit - (segments - 1)) // segments)


def fold_into(
    summary: Summary,
    batch: Sequence[Utterance],
    *,
    limit: int,
    max_segments: int,
    write: Write,
    counter: TokenCounter,
) -> tuple[Summary, list[Summarized]]:
    """The summary with ``batch`` folded in, and every text the summarizer wrote.

    ``batch`` is non-empty and in seq order. The result's joined text never
    exceeds ``limit`` tokens.
    """
    slots = segment_count(limit, max_segments)
    share = _share(limit, slots)
    segments = list(summary.segments)
    last = segments[-1] if segments else None
    written: list[Summarized] = []
    if (
        last is not None
        and last.seq_to < batch[0].seq
        and last.tokens < _EXTEND_BELOW * share
        and sum(u.tokens for u in batch) <= share
    ):
        segments.pop()
        previous, seq_from, turn_from = last.text, last.seq_from, last.turn_from
    else:
        previous, seq_from, turn_from = "", batch[0].seq, batch[0].turn_number
    outcome = write(previous, batch, share)
    written.append(outcome)
    segments.append(
        SummarySegment(
            text=outcome.text,
            tokens=counter.count(outcome.text),
            seq_from=seq_from,
            seq_to=batch[-1].seq,
            turn_from=min(turn_from, *(u.turn_number for u in batch)),
            turn_to=max(u.turn_number for u in batch),
            made_by=outcome.made_by,
            error=outcome.error,
        )
    )
    segments.sort(key=lambda s: s.seq_from)
    through = max(summary.through_seq, batch[-1].seq)
    return _within(segments, through, limit, slots, share, write, counter, written), written


def compact(
    summary: Summary,
    *,
    limit: int,
    max_segments: int,
    write: Write,
    counter: TokenCounter,
) -> tuple[Summary, list[Summarized]]:
    """The summary merged down to fit ``limit`` (after the budget was lowered)."""
    slots = segment_count(limit, max_segments)
    written: list[Summarized] = []
    merged = _within(
        list(summary.segments), summary.through_seq, limit, slots, _share(limit, slots),
        write, counter, written,
    )
    return merged, written


def _within(
    segments: list[SummarySegment],
    through_seq: int,
    limit: int,
    slots: int,
    share: int,
    write: Write,
    counter: TokenCounter,
    written: list[Summarized],
) -> Summary:
    """Merge the oldest segments until there are ``slots`` at most and the text fits."""
    while True:
        summary = assemble(segments, through_seq, counter)
        if len(segments) <= slots and summary.tokens <= limit:
            return summary
        if len(segments) == 1:
            only = segments[0]
            outcome = write(only.text, (), limit)
            written.append(outcome)
            segments = [_rewritten(only, outcome, counter)]
            if counter.count(outcome.text) > limit:  # a writer ignoring the limit
                text = counter.truncate(outcome.text, limit)
                segments = [replace(segments[0], text=text, tokens=counter.count(text))]
            continue
        first, second = segments[0], segments[1]
        budget = share if len(segments) > 2 else max(share, limit - second.tokens - 1)
        outcome = write(first.text + "\n" + second.text, (), budget)
        written.append(outcome)
        merged = SummarySegment(
            text=outcome.text,
            tokens=counter.count(outcome.text),
            seq_from=first.seq_from,
            seq_to=second.seq_to,
            turn_from=min(first.turn_from, second.turn_from),
            turn_to=max(first.turn_to, second.turn_to),
            made_by=outcome.made_by,
            error=outcome.error,
        )
        segments = [merged, *segments[2:]]


def _rewritten(segment: SummarySegment, outcome: Summarized, counter: TokenCounter) -> SummarySegment:
    return replace(
        segment,
        text=outcome.text,
        tokens=counter.count(outcome.text),
        made_by=outcome.made_by,
        error=outcome.error,
    )


def assemble(
    segments: Sequence[SummarySegment], through_seq: int, counter: TokenCounter
) -> Summary:
    """A Summary of ``segments`` whose ``tokens`` is the exact count of the joined text."""
    kept = tuple(s for s in segments if s.text.strip())
    text = "\n".join(s.text for s in kept)
    return Summary(kept, through_seq, counter.count(text) if kept else 0)


@dataclass(frozen=True, slots=True)
class Forgotten:
    """What a remove did to the summary."""

    summary: Summary | None  # None: unchanged
    dropped: int = 0
    rebuilt: int = 0


def forget(
    summary: Summary,
    limit: int,
    touches: Callable[[SummarySegment], bool],
    remaining: Callable[[SummarySegment], Sequence[Utterance]],
    rebuild: Callable[[Sequence[Utterance], int], Summarized],
    counter: TokenCounter,
) -> Forgotten:
    """The summary without the content of removed utterances.

    Args:
        touches: whether a segment was made from any removed utterance.
        remaining: the archived utterances a touched segment was made from
            that survive the remove ([] without an archive).
        rebuild: summarizes survivors into at most a given number of tokens.
        limit: the summary's token budget, held after the rebuild too.
    """
    kept: list[SummarySegment] = []
    dropped = rebuilt = 0
    for segment in summary.segments:
        if not touches(segment):
            kept.append(segment)
            continue
        survivors = remaining(segment)
        if not survivors:
            dropped += 1
            continue
        # No larger than before, so the summary cannot outgrow its budget.
        outcome = rebuild(survivors, segment.tokens)
        kept.append(
            SummarySegment(
                text=outcome.text,
                tokens=counter.count(outcome.text),
                seq_from=survivors[0].seq,
                seq_to=survivors[-1].seq,
                turn_from=min(u.turn_number for u in survivors),
                turn_to=max(u.turn_number for u in survivors),
                made_by=outcome.made_by,
                error=outcome.error,
            )
        )
        rebuilt += 1
    if not dropped and not rebuilt:
        return Forgotten(None)
    return Forgotten(_trimmed(kept, summary.through_seq, limit, counter), dropped, rebuilt)


def _trimmed(
    segments: list[SummarySegment], through_seq: int, limit: int, counter: TokenCounter
) -> Summary:
    """``segments`` assembled, the longest cut until the joined text fits ``limit``.

    Joining can cost a token or two more than the parts (a newline does not
    always merge into its neighbours), so the exact count decides.
    """
    summary = assemble(segments, through_seq, counter)
    while summary.tokens > limit and summary.segments:
        parts = list(summary.segments)
        longest = max(range(len(parts)), key=lambda i: parts[i].tokens)
        cut = max(parts[longest].tokens - (summary.tokens - limit), 0)
        text = counter.truncate(parts[longest].text, cut)
        parts[longest] = replace(parts[longest], text=text, tokens=counter.count(text))
        summary = assemble(parts, through_seq, counter)
    return summary
