"""The running summary as segments with provenance, always within its budget.

A segment is summary text plus the seq and turn range of the utterances it
was made from. Keeping several segments instead of one blob is what lets a
remove forget: "Remove before turn 4" drops the segments made only from
those turns and rebuilds (or drops) the ones that mix them with later turns.

How a folded batch enters the summary (``fold_into``), issue 13:

* The batch is written into a segment of its own with all the room the
  other segments leave, and at least its fair share of the budget: the
  whole budget is used, there is no fixed quarter per call.
* A fair share is proportional to the number of utterances a segment
  stands for, and a segment smaller than its share keeps its size (the rest
  goes to the others). When the joined text is over the limit, the segment
  furthest over its share is condensed to it, and again until the text
  fits: every part of the conversation keeps room in proportion to its
  length, none is emptied to make room for another.
* While there are more segments than slots, the two neighbours holding the
  least text are merged (the least informative, whatever their age); when
  their joined text fits their shares it is kept as it is, otherwise the
  summarizer condenses the two together, seeing what it must drop.
* A segment's fallback mark (``error``) survives merges and condensing: the
  content it lost is not restored by rewriting its summary, only by a
  rewrite from the originals (folding.py).

Every write gets the rest of the summary as read-only context, so weights
and a model's picture span the conversation, not one batch.

Everything here is a pure function of its arguments and the ``write``
callable, so it is tested without a daemon.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from chd.core.summaries.sentences import utterance_key
from chd.core.summaries.summarizer import Summarized, SummaryContext
from chd.core.tokens import TokenCounter, count_joined
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
    "allocations",
]

# Below this many tokens a segment says too little to be worth its own
# line; small budgets get fewer, larger segments.
MIN_SEGMENT_TOKENS = 48

# (previous, utterances, token_limit, context) -> what the summarizer wrote.
Write = Callable[[str, Sequence[Utterance], int, SummaryContext], Summarized]


# Coverage is estimated from at most this many keys per segment (halved when
# over), so the summary record does not grow with the length of the conversation.
MAX_KEYS = 64


def _keys(utterances: Sequence[Utterance], earlier: Sequence[str] = ()) -> tuple[str, ...]:
    """``earlier`` plus one key per utterance, for coverage (summaries/coverage.py), at most MAX_KEYS."""
    keys = [*earlier, *(utterance_key(u.text) for u in utterances)]
    while len(keys) > MAX_KEYS:
        keys = keys[::2]
    return tuple(keys)


def segment_count(limit: int, max_segments: int) -> int:
    """How many segments a budget of ``limit`` tokens is split into."""
    return max(1, min(max_segments, limit // MIN_SEGMENT_TOKENS))


def _size(segment: SummarySegment) -> int:
    return max(1, segment.seq_to - segment.seq_from + 1)


def allocations(segments: Sequence[SummarySegment], limit: int) -> list[int]:
    """Each segment's fair share of ``limit``: by utterances stood for, a small one keeping its size."""
    total = max(0, limit - max(0, len(segments) - 1))  # a newline between segments
    out = [0] * len(segments)
    open_ = set(range(len(segments)))
    while open_:
        weight = sum(_size(segments[i]) for i in open_)
        share = {i: total * _size(segments[i]) / weight for i in open_}
        small = [i for i in open_ if segments[i].tokens <= share[i]]
        if not small:
            for i in open_:
                out[i] = max(1, int(share[i]))
            break
        for i in small:
            out[i] = segments[i].tokens
            total -= segments[i].tokens
            open_.discard(i)
    return out


def fold_into(
    summary: Summary,
    batch: Sequence[Utterance],
    *,
    limit: int,
    max_segments: int,
    write: Write,
    counter: TokenCounter,
    context: SummaryContext = SummaryContext(),
) -> tuple[Summary, list[Summarized]]:
    """The summary with ``batch`` folded in, and every text the summarizer wrote.

    ``batch`` is non-empty and in seq order; ``context`` carries the
    utterances still buffered (read-only). The result's joined text never
    exceeds ``limit`` tokens.
    """
    slots = segment_count(limit, max_segments)
    segments = list(summary.segments)
    written: list[Summarized] = []
    last = segments[-1] if segments else None
    placeholder = SummarySegment("", limit, batch[0].seq, batch[-1].seq, 0, 0)
    previous, error = "", ""
    if (
        last is not None
        and last.seq_to < batch[0].seq
        and allocations([*segments, placeholder], limit)[-1] < MIN_SEGMENT_TOKENS
    ):
        # Too small a share to say anything on its own: the batch extends
        # the newest segment, which is rewritten with both in view.
        segments.pop()
        previous, error = last.text, last.error
        placeholder = replace(placeholder, seq_from=last.seq_from)
    elif len(segments) >= slots:
        segments = _merge_least(segments, slots - 1, limit, write, counter, written, context)
    others = assemble(segments, summary.through_seq, counter).tokens
    fair = allocations([*segments, placeholder], limit)[-1]
    room = max(limit - others - (1 if segments else 0), fair, 1)
    outcome = write(previous, batch, room, _around(segments, None, context))
    written.append(outcome)
    turns = [u.turn_number for u in batch]
    if previous:
        assert last is not None
        turns += [last.turn_from, last.turn_to]
    segments.append(
        SummarySegment(
            text=outcome.text,
            tokens=counter.count(outcome.text),
            seq_from=placeholder.seq_from,
            seq_to=batch[-1].seq,
            turn_from=min(turns),
            turn_to=max(turns),
            made_by=outcome.made_by,
            error=outcome.error or error,
            keys=_keys(batch, last.keys if previous and last is not None else ()),
        )
    )
    segments.sort(key=lambda s: s.seq_from)
    through = max(summary.through_seq, batch[-1].seq)
    return _within(segments, through, limit, slots, write, counter, written, context), written


def compact(
    summary: Summary,
    *,
    limit: int,
    max_segments: int,
    write: Write,
    counter: TokenCounter,
    context: SummaryContext = SummaryContext(),
) -> tuple[Summary, list[Summarized]]:
    """The summary brought within ``limit`` (after the budget was lowered)."""
    slots = segment_count(limit, max_segments)
    written: list[Summarized] = []
    merged = _within(
        list(summary.segments), summary.through_seq, limit, slots, write, counter, written, context
    )
    return merged, written


def _around(
    segments: Sequence[SummarySegment],
    skip: SummarySegment | None,
    context: SummaryContext,
    parts: tuple[tuple[int, int, str], ...] = (),
) -> SummaryContext:
    """``context`` with the text of every segment but ``skip``: what a write may read."""
    rest = "\n".join(s.text for s in segments if s is not skip and s.text)
    return SummaryContext(summary=rest, buffered=context.buffered, parts=parts)


def _within(
    segments: list[SummarySegment],
    through_seq: int,
    limit: int,
    slots: int,
    write: Write,
    counter: TokenCounter,
    written: list[Summarized],
    context: SummaryContext,
) -> Summary:
    """Merge down to ``slots`` segments, then condense the ones furthest over their share until the text fits."""
    if len(segments) > slots:
        segments = _merge_least(segments, slots, limit, write, counter, written, context)
    summary = assemble(segments, through_seq, counter)
    tries = 0
    while summary.tokens > limit and segments:
        shares = allocations(segments, limit)
        excess = [s.tokens - share for s, share in zip(segments, shares)]
        i = max(range(len(segments)), key=lambda k: (excess[k], -k))
        target = shares[i] if excess[i] > 0 else segments[i].tokens - (summary.tokens - limit)
        target = max(1, target - tries)  # joining may cost a token more than the parts
        segments[i] = _condensed(segments[i], target, segments, write, counter, written, context)
        summary = assemble(segments, through_seq, counter)
        tries += 1
        if tries > 2 * len(segments) + 4:
            return _trimmed(list(summary.segments), through_seq, limit, counter)
    return summary


def _condensed(
    segment: SummarySegment,
    limit: int,
    segments: Sequence[SummarySegment],
    write: Write,
    counter: TokenCounter,
    written: list[Summarized],
    context: SummaryContext,
) -> SummarySegment:
    outcome = write(segment.text, (), limit, _around(segments, segment, context))
    written.append(outcome)
    text = outcome.text
    if counter.count(text) > limit:  # a writer ignoring the limit
        text = counter.truncate(text, limit)
    return replace(
        segment,
        text=text,
        tokens=counter.count(text),
        made_by=outcome.made_by,
        # A condensed fallback segment is still one: its lost content stays lost.
        error=outcome.error or segment.error,
    )


def _merge_least(
    segments: list[SummarySegment],
    most: int,
    limit: int,
    write: Write,
    counter: TokenCounter,
    written: list[Summarized],
    context: SummaryContext,
) -> list[SummarySegment]:
    """Merge the neighbours holding the least text until at most ``most`` segments remain."""
    segments = list(segments)
    while len(segments) > max(1, most):
        k = min(
            range(len(segments) - 1), key=lambda i: (segments[i].tokens + segments[i + 1].tokens, i)
        )
        first, second = segments[k], segments[k + 1]
        joined = SummarySegment(
            text="\n".join(t for t in (first.text, second.text) if t),
            tokens=0,
            seq_from=first.seq_from,
            seq_to=second.seq_to,
            turn_from=min(first.turn_from, second.turn_from),
            turn_to=max(first.turn_to, second.turn_to),
            made_by=first.made_by if first.made_by == second.made_by else second.made_by,
            error=first.error or second.error,
            keys=_keys((), (*first.keys, *second.keys)),
        )
        joined = replace(
            joined, tokens=count_joined(counter, [t for t in (first.text, second.text) if t])
        )
        rest = [*segments[:k], joined, *segments[k + 2 :]]
        share = allocations(rest, limit)[k]
        if joined.tokens > share:
            parts = (
                (first.turn_from, first.turn_to, first.text),
                (second.turn_from, second.turn_to, second.text),
            )
            outcome = write(joined.text, (), share, _around(rest, joined, context, parts))
            written.append(outcome)
            text = (
                outcome.text
                if counter.count(outcome.text) <= share
                else counter.truncate(outcome.text, share)
            )
            joined = replace(
                joined,
                text=text,
                tokens=counter.count(text),
                made_by=outcome.made_by,
                error=outcome.error or joined.error,
            )
        segments = rest
        segments[k] = joined
    return segments


def assemble(
    segments: Sequence[SummarySegment], through_seq: int, counter: TokenCounter
) -> Summary:
    """A Summary of ``segments`` whose ``tokens`` is the exact count of the joined text."""
    kept = tuple(s for s in segments if s.text.strip())
    return Summary(kept, through_seq, count_joined(counter, [s.text for s in kept]) if kept else 0)


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
                keys=_keys(survivors),
            )
        )
        rebuilt += 1
    if not dropped and not rebuilt:
        return Forgotten(None)
    # Originals kept for a Claude rewrite go with the segments a remove touched:
    # a remove must not leave removed text anywhere.
    touched = [s for s in summary.segments if touches(s)]
    held = tuple(
        u for u in summary.held if not any(s.seq_from <= u.seq <= s.seq_to for s in touched)
    )
    trimmed = _trimmed(kept, summary.through_seq, limit, counter)
    return Forgotten(
        replace(
            trimmed,
            held=held,
            held_dropped=summary.held_dropped,
            held_dropped_through=summary.held_dropped_through,
        ),
        dropped,
        rebuilt,
    )


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
