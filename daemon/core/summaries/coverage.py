"""How much of what left the buffer the summary still holds, for ``stats`` and Prometheus.

Each segment keeps one key per evicted utterance folded into it (its first
fact, else its longest content word; ``SummarySegment.keys``). An utterance
counts as covered when its key occurs in the summary text: a cheap,
recomputable stand-in for "some of its content survives". Small talk has no
key and is left out of the share.
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


def summary_coverage(summary: Summary) -> Coverage:
    text = summary.text
    keys = [k for s in summary.segments for k in s.keys if k]
    held = {u.seq for u in summary.held}
    ranges = tuple(
        (s.seq_from, s.seq_to) for s in summary.segments if any(s.seq_from <= q <= s.seq_to for q in held)
    )
    return Coverage(
        keyed=len(keys),
        covered=sum(1 for k in keys if k in text),
        offline_only=sum(len(s.keys) for s in summary.segments if s.error),
        awaiting_rewrite=len(summary.held),
        originals_dropped=summary.held_dropped,
        rewrite_ranges=ranges,
    )
