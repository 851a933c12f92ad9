"""How much of what left the buffer the summary still holds, for ``stats`` and Prometheus.

Each segment keeps one key per evicted utterance folded into it (its first
fact, else its longest content word; ``SummarySegment.keys``). An utterance
counts as covered when its key occurs in the summary text: a cheap,
recomputable stand-in for "some of its content survives". Small talk has no
key and is left out of the share. A segment keeps at most 64 keys (halved
when over: a sample), so the share is an estimate for long conversations;
``offline_only`` counts the seq ranges of the marked segments.
"""

from __future__ import annotations

from dataclasses import dataclass

from chd.core.utterance import Summary

__all__ = ["Coverage", "summary_coverage"]


@dataclass(frozen=True, slots=True)
class Coverage:
    """``covered`` of ``keyed`` evicted utterances show in the summary; the rest says why not."""

    keyed: int
    covered: int
    offline_only: int  # utterances in segments the offline fallback wrote instead of Claude
    awaiting_rewrite: int  # originals kept for a Claude rewrite
    originals_dropped: int  # originals the per-conversation bound dropped, ever
    rewrite_ranges: tuple[tuple[int, int], ...]  # seq ranges of segments awaiting a rewrite

    @property
    def share(self) -> float:
        return round(self.covered / self.keyed, 4) if self.keyed else 1.0


# What a word loses at its ends before keys are matched against it.
_PUNCTUATION = "\"'()[]{}<>“”‘’.,;:!?…"
# A key matches a run of at most this many words (longer keys: as written).
_LONGEST = 4


def _word_runs(text: str) -> str:
    """Each line of ``text`` as its words, punctuation trimmed, joined by one space and padded by one.

    The lines are joined by newlines. A key of up to ``_LONGEST`` words is
    a run of a line's words exactly when it occurs, padded by spaces, in
    this text (``_covers``): the padding and the separators are the only
    spaces, so a match starts and ends at word boundaries, and a key
    without a newline stays on one line.
    """
    return "\n".join(
        " " + " ".join(word.strip(_PUNCTUATION) for word in line.split()) + " "
        for line in text.splitlines()
    )


def _covers(key: str, runs: str, text: str) -> bool:
    """Whether ``key`` shows in the summary: as a run of words, or as written if longer than ``_LONGEST``.

    One substring search per key, in C, instead of a set of every run of
    up to four words of the summary built in Python on every fold (0.8 ms
    of the daemon's interpreter lock per fold at the default budget, with
    ``--metrics-port``; issue 17). Keys are bounded per segment
    (``segments.MAX_KEYS``), so the cost stays linear in the summary's length.
    """
    if key.count(" ") >= _LONGEST:
        return key in text
    return "\n" not in key and f" {key} " in runs


def summary_coverage(summary: Summary) -> Coverage:
    text = summary.text
    runs = _word_runs(text)
    keys = [k for s in summary.segments for k in s.keys if k]
    held = {u.seq for u in summary.held}
    ranges = tuple(
        (s.seq_from, s.seq_to)
        for s in summary.segments
        if any(s.seq_from <= q <= s.seq_to for q in held)
    )
    return Coverage(
        keyed=len(keys),
        covered=sum(1 for k in keys if _covers(k, runs, text)),
        offline_only=sum(s.seq_to - s.seq_from + 1 for s in summary.segments if s.error),
        awaiting_rewrite=len(summary.held),
        originals_dropped=summary.held_dropped,
        rewrite_ranges=ranges,
    )
