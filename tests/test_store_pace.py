"""The pace a store's decision leaves time for (daemon/core/pace.py) learns from large stores only."""

from __future__ import annotations

from chd.core.pace import StorePace


def test_large_stores_teach_the_pace_and_small_ones_do_not() -> None:
    pace = StorePace()
    pace.observe(1000, 5.0)  # a small store's fixed cost (an fsync) says nothing per character
    assert pace.seconds_per_char == StorePace.DEFAULT
    for _ in range(30):
        pace.observe(8 << 20, 0.0)  # the memory backend: next to nothing
    assert pace.needed(28 << 20) < 0.01
    pace.observe(8 << 20, 8.0)  # a slow disk: the next decisions leave more time
    assert pace.needed(1 << 20) > 0.4
