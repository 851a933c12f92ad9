"""Generated paraphrases (tests/paraphrase.py), judged by their effect on the demo conversation.

A seeded sample of each operation runs through ConversationHistory. Stores
must keep exactly the utterance or be refused, and no phrasing may run an
operation other than the one it asks for when that would store or delete
something nobody asked for. Each operation also has an understanding floor,
set at what the rules reach today so that a regression fails; raise a floor
when the rules get better. bench/bench_understanding.py prints the full figures.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.paraphrase import OPERATIONS, SPLITS, Variant, Verdict, judged, variants

# Variants judged per operation and split (a sample: the suite's time budget is small).
SAMPLE = {"store": 250, "retrieve": 120, "remove": 120, "summarize": 60}

# Share understood by effect, per operation, on the tuning split.
FLOORS = {"store": 0.99, "retrieve": 0.90, "remove": 0.70, "summarize": 0.55}

# Operations other than the one asked for, per operation: stores must have
# none, ever. The others are ceilings at today's count (issue 12 wants zero;
# lower them as the read, remove and summary rules widen).
WRONG_OPERATION_CEILINGS = {"store": 0, "retrieve": 0, "remove": 0.16, "summarize": 0.05}


@pytest.fixture(scope="module")
def verdicts() -> dict[tuple[str, str], list[tuple[Variant, Verdict]]]:
    return {
        (operation, split): list(judged(variants(operation, SAMPLE[operation], split)))
        for operation in OPERATIONS
        for split in SPLITS
    }


def _failures(results: list[tuple[Variant, Verdict]], outcome: str) -> list[str]:
    return [f"{v.query!r}: {verdict.detail}" for v, verdict in results if verdict.outcome == outcome]


class TestGenerator:
    """The generator itself: deterministic, large, and labelled."""

    def test_the_same_seed_gives_the_same_variants(self) -> None:
        """Two runs with one seed produce identical queries and expectations."""
        for operation in OPERATIONS:
            assert variants(operation, 200) == variants(operation, 200)

    def test_another_seed_gives_other_variants(self) -> None:
        """A second seed is not the first one reshuffled into the same queries."""
        first = {v.query for v in variants("store", 300, seed=1)}
        second = {v.query for v in variants("store", 300, seed=2)}
        assert len(first & second) < 30

    @pytest.mark.parametrize("operation", OPERATIONS)
    def test_thousands_of_distinct_variants_per_operation(self, operation: str) -> None:
        """Each operation yields at least 2,000 distinct queries in each split."""
        for split in SPLITS:
            assert len({v.query for v in variants(operation, 2000, split)}) == 2000

    def test_the_held_out_split_uses_other_words(self) -> None:
        """The held-out store verbs are none of the tuning ones."""
        def verbs(split: str) -> set[str]:
            return {dict(v.classes)["verb"] for v in variants("store", 500, split) if "verb" in dict(v.classes)}

        assert verbs("tuning") and verbs("held-out") and not verbs("tuning") & verbs("held-out")

    def test_every_variant_says_what_it_expects_and_its_classes(self) -> None:
        """A store expects its exact text and speaker; every variant names its form."""
        for variant in variants("store", 300):
            assert variant.expect.text and variant.expect.speaker in ("user", "assistant", "system")
            assert "form" in dict(variant.classes)
            assert variant.expect.text in variant.query


@pytest.mark.parametrize("split", SPLITS)
def test_no_store_keeps_any_text_but_the_utterance(verdicts, split: str) -> None:  # type: ignore[no-untyped-def]
    """Zero stores with wrong text: the utterance is kept exactly, or the store is refused."""
    assert _failures(verdicts[("store", split)], "wrong-text") == []


@pytest.mark.parametrize("split", SPLITS)
def test_no_store_runs_as_another_operation_and_none_changes_the_wrong_speaker(verdicts, split: str) -> None:  # type: ignore[no-untyped-def]
    """A store phrasing never reads, removes or summarizes, and keeps the speaker it names."""
    results = verdicts[("store", split)]
    assert _failures(results, "wrong-operation") == []
    assert _failures(results, "wrong-effect") == []


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("operation", ["retrieve", "remove", "summarize"])
def test_no_read_remove_or_summary_is_taken_for_a_store(verdicts, operation: str, split: str) -> None:  # type: ignore[no-untyped-def]
    """Whatever else goes wrong with a read, remove or summary phrasing, it never stores anything."""
    stored = [f for f in _failures(verdicts[(operation, split)], "wrong-operation") if f.split(": ran ")[1].startswith("store")]
    assert stored == []


@pytest.mark.parametrize("operation", OPERATIONS)
def test_operations_other_than_the_one_asked_for_stay_under_their_ceiling(verdicts, operation: str) -> None:  # type: ignore[no-untyped-def]
    """Wrong operations per operation stay at or below today's count (zero for stores and reads)."""
    results = verdicts[(operation, "tuning")]
    wrong = _failures(results, "wrong-operation")
    assert len(wrong) <= WRONG_OPERATION_CEILINGS[operation] * len(results), wrong[:10]


@pytest.mark.parametrize("operation", OPERATIONS)
def test_understanding_stays_above_its_floor(verdicts, operation: str) -> None:  # type: ignore[no-untyped-def]
    """The share of tuning-split variants understood by effect does not fall below its floor."""
    results = verdicts[(operation, "tuning")]
    outcomes = Counter(verdict.outcome for _, verdict in results)
    share = outcomes["understood"] / len(results)
    examples = [f"{v.query!r}: {verdict.outcome} {verdict.detail}" for v, verdict in results if verdict.outcome != "understood"]
    assert share >= FLOORS[operation], f"{share:.3f} < {FLOORS[operation]}: {examples[:10]}"
