"""The blind corpora (tests/corpus/blind, issue 25): never a wrong text or operation, and a floor understood.

Corpora a, c, d, e and g are tuning sets; corpora b and f are the reported ones,
and this test prints only their counts, never their entries or misses.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bench.bench_understanding import judge_corpus_entry

BLIND = Path(__file__).resolve().parent / "corpus" / "blind"
# A little under the figures reached by issue 25's fifth pass
# (docs/understanding.md): a 93.8 %, c 93.3 %, d 93.3 %, e 82.0 %, g 50.6 %
# (tuning); b 82.0 % and f 58.5 % (reported: only their counts are ever printed).
FLOORS = {"a": 0.92, "b": 0.81, "c": 0.92, "d": 0.92, "e": 0.80, "f": 0.57, "g": 0.49}
# The reported corpora still have wrong answers (measured, not looked at): they
# may not grow. The tuning corpora have none, and may get none; d's one other
# wrong effect is the search's recall, not the parser's reading ("the table
# booking" is read as that topic; the ranked search does not return "Booked:
# Chez Marie").
MOST_WRONG = {
    "a": Counter(),
    "c": Counter(),
    "d": Counter({"wrong-effect": 1}),
    "e": Counter(),
    "g": Counter(),
    "b": Counter({"wrong-text": 2, "wrong-operation": 1, "wrong-effect": 2}),
    "f": Counter({"wrong-text": 2, "wrong-operation": 1, "wrong-effect": 1}),
}


def _counts(name: str) -> tuple[Counter[str], int]:
    path = BLIND / f"understanding_{name}.jsonl"
    entries = [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    return Counter(judge_corpus_entry(entry).outcome for entry in entries), len(entries)


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_blind_corpus_wrong_answers_never_grow_and_understood_stays_above_its_floor(
    name: str,
) -> None:
    """Wrong text, wrong operations and other wrong effects at most as measured; understood above the floor."""
    counts, total = _counts(name)
    for outcome in ("wrong-text", "wrong-operation", "wrong-effect"):
        assert counts[outcome] <= MOST_WRONG[name][outcome], dict(counts)
    assert counts["understood"] / total >= FLOORS[name], dict(counts)


@pytest.mark.xfail(strict=True, reason="issue 25 is not done: corpus b still has wrong answers")
def test_reported_corpus_has_no_wrong_text_or_operation() -> None:
    """The goal: 0 stores with wrong text and 0 wrong operations on the reported corpus too."""
    counts, _ = _counts("b")
    assert counts["wrong-text"] == 0 and counts["wrong-operation"] == 0, dict(counts)
