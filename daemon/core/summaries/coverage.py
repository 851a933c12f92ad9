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


def _phrases(text: str, longest: int = 4) -> set[str]:
    """Every run of up to ``longest`` words of ``text``, punctuation trimmed: keys are looked up in it
    in linear time instead of one substring search of the whole text per key."""
    out: set[str] = set()
    for line in text.splitlines():
        words = [w.strip("\"'()[]{}<>“”‘’.,;:!?…") for w in line.split()]
        for i in range(len(words)):
            for j in range(i + 1, min(len(words), i + longest) + 1):
                out.add(" ".join(words[i:j]))
    return out


def summary_coverage(summary: Summary) -> Coverage:
    text = summary.text
    phrases = _phrases(text)
    keys = [k for s in summary.segments for k in s.keys if k]
    held = {u.seq for u in summary.held}
    ranges = tuple(
        (s.seq_from, s.seq_to) for s in summary.segments if any(s.seq_from <= q <= s.seq_to for q in held)
    )
    return Coverage(
        keyed=len(keys),
        covered=sum(1 for k in keys if k in phrases or (k.count(" ") >= 4 and k in text)),
        offline_only=sum(s.seq_to - s.seq_from + 1 for s in summary.segments if s.error),
        awaiting_rewrite=len(summary.held),
        originals_dropped=summary.held_dropped,
        rewrite_ranges=ranges,
    )
