"""Sorted sets of seqs stored as runs, so a 10,000-utterance buffer is one pair.

A conversation's buffer and summary queue are ascending seqs with few gaps
(seqs only leave from the front, or one at a time by an explicit remove), so
``[[1, 10000]]`` stands for the whole buffer and a store rewrites a few bytes
of it instead of a list that grows with the buffer.
"""

from __future__ import annotations

import operator
from bisect import bisect_right
from collections.abc import Iterable, Iterator

__all__ = ["SeqRuns"]


class SeqRuns:
    """An immutable sorted set of positive ints as inclusive ``[first, last]`` runs."""

    __slots__ = ("_runs", "_count", "_json")

    def __init__(self, runs: Iterable[tuple[int, int]] = ()) -> None:
        self._runs: tuple[tuple[int, int], ...] = tuple((int(a), int(b)) for a, b in runs)
        previous = None
        for first, last in self._runs:
            if first > last or (previous is not None and first <= previous + 1):
                raise ValueError(f"seq runs must be ascending and disjoint: {list(self._runs)}")
            previous = last
        self._count = sum(last - first + 1 for first, last in self._runs)
        self._json: str | None = None

    @classmethod
    def _trusted(cls, runs: tuple[tuple[int, int], ...], count: int) -> SeqRuns:
        """Runs already known to be ascending and disjoint, without checking them again.

        A store derives its buffer from the stored one by one append; checking
        and recounting every run each time was a tenth of its Python cost.
        """
        made = object.__new__(cls)
        made._runs = runs
        made._count = count
        made._json = None
        return made

    @classmethod
    def of(cls, seqs: Iterable[int]) -> SeqRuns:
        """The runs of ascending ``seqs``; raises ValueError if they are not ascending."""
        seqs = seqs if isinstance(seqs, list) else list(seqs)
        if seqs and seqs[-1] - seqs[0] == len(seqs) - 1 and all(map(operator.lt, seqs, seqs[1:])):
            # One run, told without a step per seq (an import's usual buffer and archive).
            return cls._trusted(((seqs[0], seqs[-1]),), len(seqs))
        runs: list[list[int]] = []
        for seq in seqs:
            if runs and seq == runs[-1][1] + 1:
                runs[-1][1] = seq
            elif runs and seq <= runs[-1][1]:
                raise ValueError(
                    f"seqs must be ascending and unique, got {seq} after {runs[-1][1]}"
                )
            else:
                runs.append([seq, seq])
        return cls((a, b) for a, b in runs)

    def without(self, seqs: Iterable[int]) -> SeqRuns:
        if not seqs:  # the common case, a store that evicts nothing
            return self
        drop = sorted(set(seqs))
        if not drop:
            return self
        out: list[tuple[int, int]] = []
        i = 0
        for first, last in self._runs:
            while i < len(drop) and drop[i] < first:
                i += 1
            start = first
            while i < len(drop) and drop[i] <= last:
                if drop[i] > start:
                    out.append((start, drop[i] - 1))
                start = drop[i] + 1
                i += 1
            if start <= last:
                out.append((start, last))
        return SeqRuns(out)

    def with_added(self, seqs: Iterable[int]) -> SeqRuns:
        add = sorted(set(seqs))
        if not add:
            return self
        if not self._runs or add[0] > self._runs[-1][1]:
            # The common case, a store: new seqs go after every existing one.
            return self._appended(add)
        return SeqRuns.of(sorted({*self, *add}))

    def _appended(self, add: list[int]) -> SeqRuns:
        """``add`` (ascending, unique, above every seq here) joined on at the end."""
        runs = list(self._runs)
        for seq in add:
            if runs and seq == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], seq)
            else:
                runs.append((seq, seq))
        return SeqRuns._trusted(tuple(runs), self._count + len(add))

    @property
    def last(self) -> int:
        """The highest seq; IndexError when empty."""
        return self._runs[-1][1]

    def __contains__(self, seq: object) -> bool:
        if not isinstance(seq, int):
            return False
        i = bisect_right(self._runs, (seq, float("inf"))) - 1
        return i >= 0 and self._runs[i][0] <= seq <= self._runs[i][1]

    def __iter__(self) -> Iterator[int]:
        for first, last in self._runs:
            yield from range(first, last + 1)

    def __len__(self) -> int:
        return self._count

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SeqRuns) and self._runs == other._runs

    def __hash__(self) -> int:
        return hash(self._runs)

    def __repr__(self) -> str:
        return f"SeqRuns({list(self._runs)})"

    def to_record(self) -> list[list[int]]:
        return [[a, b] for a, b in self._runs]

    def to_json(self) -> str:
        """``to_record()`` as compact JSON, e.g. ``[[1,10000]]`` (made once: every
        store writes the queue's and the archive's runs again, unchanged)."""
        if self._json is None:
            self._json = "[" + ",".join(f"[{a:d},{b:d}]" for a, b in self._runs) + "]"
        return self._json
