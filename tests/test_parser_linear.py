"""Every grammar entry point reads every adversarial shape in time linear in its size (issue 14).

Each shape of tests/parser_shapes.py (runs of spaces, punctuation, number
words, speaker words, nested quotes, control characters, the issue's
reproductions) is read at two sizes, 8x apart. Linear time grows ~8x (up to ~20x here:
at 500 characters more of the work fits in the CPU's caches); the test
fails past 5x the linear growth, so quadratic growth (64x) or worse is
caught while a busy machine's noise is not. No absolute time is asserted.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.parser_shapes import NORMAL_QUERY, RULES, SHAPES, best_seconds, build, parse_uncached

SMALL, LARGE = 500, 4_000
LIMIT = 5 * LARGE / SMALL


ENTRY_POINTS: dict[str, Callable[[str], object]] = {"parse": parse_uncached, **RULES}


def _growth(read: Callable[[str], object], shape: str, repeats: int) -> float:
    small, large = build(shape, SMALL), build(shape, LARGE)
    return best_seconds(read, large, repeats) / max(best_seconds(read, small, repeats), 1e-6)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_entry_point_reads_every_shape_in_linear_time(entry: str) -> None:
    """Reading 8x more text of any shape takes well under 40x the time."""
    read = ENTRY_POINTS[entry]
    best_seconds(read, build("words", SMALL), 1)  # compile the patterns before timing
    slow = {}
    for shape in SHAPES:
        growth = _growth(read, shape, repeats=2)
        if growth > LIMIT:
            # A busy machine can stall one sample: measure again, more carefully.
            growth = min(growth, _growth(read, shape, repeats=5))
        if growth > LIMIT:
            slow[shape] = round(growth, 1)
    assert not slow, f"{entry} grows faster than linearly on {slow} (8x the text)"


def test_a_megabyte_query_of_any_shape_costs_a_tenth_per_character_of_a_normal_query() -> None:
    """A 1 MB query of any shape is answered or refused (never INTERNAL) at under a tenth of a normal query's cost per character.

    A normal query costs ~7 us a character here, so a tenth is ~0.7 s for a
    megabyte: only the instruction cap and payload-only store reading get there.
    """
    normal = best_seconds(parse_uncached, NORMAL_QUERY, 20) / len(NORMAL_QUERY)
    costly = {}
    for shape in SHAPES:
        text = build(shape, 1_000_000)
        per_char = best_seconds(parse_uncached, text, 1) / len(text)
        if per_char > normal / 10:
            costly[shape] = round(per_char / normal, 3)
    assert not costly, (
        f"per-character cost of 1 MB queries, as a share of a normal query's: {costly}"
    )
