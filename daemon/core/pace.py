"""How long this daemon takes to write and answer a store, per character: what a store's decision must leave time for.

A store is decided (inside the backend's transaction) and then written and
answered; a decision is never undone. Decided just before its deadline, a
large store was kept and answered after it: a 28 MB store under a 2 s
request_timeout answered OK at 2.23 s (issue 28 review), and a caller whose
own deadline was 2 s would have been told DEADLINE_EXCEEDED of a store that
was kept. So the decision asks for the time left to cover the write and the
answer, at the pace the daemon's own stores of a megabyte or more went.
"""

from __future__ import annotations

import threading

__all__ = ["StorePace"]


class StorePace:
    """Seconds per character from a store's decision to its answer, learnt from large stores."""

    # Before any large store was seen: about 50 MB/s, a disk data dir's pace
    # with room to spare (bench/bench_large_deadline.py); the memory backend
    # is faster, and its first large store teaches that.
    DEFAULT = 20e-9
    # Stores this long or longer teach the pace: below it the fixed cost of a
    # commit (an fsync) says nothing about the per-character one.
    LEARN_FROM = 1 << 20
    # Weight of the newest large store in the pace.
    WEIGHT = 0.3
    # The answer's last leg (serializing, sending) is not timed here.
    MARGIN = 1.5

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds_per_char = self.DEFAULT

    def needed(self, chars: int) -> float:
        """Seconds to leave at the decision for a store of ``chars`` characters."""
        return self.MARGIN * self.seconds_per_char * chars

    def observe(self, chars: int, seconds: float) -> None:
        """A store of ``chars`` characters took ``seconds`` from its decision to its answer."""
        if chars < self.LEARN_FROM:
            return
        with self._lock:
            self.seconds_per_char += self.WEIGHT * (seconds / chars - self.seconds_per_char)
