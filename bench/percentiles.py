"""The nearest-rank percentile the benchmarks report (no interpolation: a reported latency was seen)."""

from __future__ import annotations

__all__ = ["percentile"]


def percentile(values: list[float], share: float) -> float:
    """The value below which ``share`` (0..1) of ``values`` fall, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]
