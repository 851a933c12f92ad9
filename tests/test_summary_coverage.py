"""Summary coverage (daemon/core/summaries/coverage.py): which evicted utterances' keys show in the summary."""

from __future__ import annotations

import random

import pytest

from chd.core.summaries.coverage import summary_coverage
from chd.core.utterance import Summary, SummarySegment

PUNCTUATION = "\"'()[]{}<>“”‘’.,;:!?…"


def reference_covered(text: str, keys: list[str]) -> int:
    """The definition, spelled out: every run of up to 4 trimmed words of a line, or a longer key as written."""
    phrases: set[str] = set()
    for line in text.splitlines():
        words = [w.strip(PUNCTUATION) for w in line.split()]
        for i in range(len(words)):
            for j in range(i + 1, min(len(words), i + 4) + 1):
                phrases.add(" ".join(words[i:j]))
    return sum(1 for k in keys if k in phrases or (k.count(" ") >= 4 and k in text))


def summary_of(texts: list[str], keys: list[str]) -> Summary:
    per = -(-len(keys) // len(texts)) if keys else 0
    segments = tuple(
        SummarySegment(
            text,
            1,
            i * 10 + 1,
            i * 10 + 10,
            i + 1,
            i + 1,
            keys=tuple(keys[i * per : (i + 1) * per]),
        )
        for i, text in enumerate(texts)
    )
    return Summary(segments, len(texts) * 10, len(texts))


class TestCoveredKeys:
    """A key is covered when it is a run of the summary's words, punctuation aside."""

    @pytest.mark.parametrize(
        "texts, key, covered",
        [
            (["The ferry leaves at 9:40, from pier 3."], "9:40", True),
            (["The ferry leaves at 9:40, from pier 3."], "pier 3", True),
            (["The ferry leaves at 9:40, from pier 3."], "9:40 from", True),  # the comma is trimmed
            (["The ferry leaves at 9:40, from pier 3."], "ier 3", False),  # not at a word's start
            (["The ferry leaves at 9:40, from pier 3."], "pier", True),
            (["The ferry leaves at 9:40, from pier 3."], "pie", False),  # not at a word's end
            (["leaves at", "9:40 today"], "at 9:40", False),  # across segments (lines)
            (["leaves at\n9:40 today"], "at\n9:40", False),
            (["one two three four five six"], "one two three four", True),
            (
                ["one two three four five six"],
                "one two three four five",
                True,
            ),  # longer: as written
            (
                ["one, two three four five"],
                "one two three four five",
                False,
            ),  # longer: not as written
            (["a  ... b"], "a  b", True),  # "..." trims to an empty word between them
        ],
    )
    def test_a_key_is_covered_only_as_a_run_of_whole_words_of_one_line(self, texts, key, covered):
        """Word boundaries, trimmed punctuation, lines and long keys decide as the definition says."""
        coverage = summary_coverage(summary_of(texts, [key]))
        assert (coverage.keyed, coverage.covered) == (1, int(covered))

    def test_random_summaries_and_keys_agree_with_the_definition(self):
        """Thousands of generated summaries with keys drawn from their own runs and from elsewhere."""
        rng = random.Random(17)
        vocabulary = [
            "pier",
            "3",
            "9:40",
            "the",
            "Ferry",
            "",
            "...",
            "(gull)",
            "tide,",
            "“storm”",
            "a-b",
            "é",
        ]
        for _ in range(2000):
            lines = [
                " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 8)))
                for _ in range(rng.randint(1, 4))
            ]
            texts = [
                "\n".join(lines[: len(lines) // 2 + 1]),
                "\n".join(lines[len(lines) // 2 + 1 :]) or "x",
            ]
            words = [w.strip(PUNCTUATION) for w in " ".join(lines).split()]
            keys = []
            for _ in range(6):
                i = rng.randrange(len(words) + 1)
                run = words[i : i + rng.randint(1, 6)]
                keys.append(
                    " ".join(run)
                    if rng.random() < 0.7
                    else rng.choice(vocabulary) + " " + rng.choice(words or ["x"])
                )
            keys = [k for k in keys if k]
            summary = summary_of(texts, keys)
            assert summary_coverage(summary).covered == reference_covered(summary.text, keys), (
                texts,
                keys,
            )
