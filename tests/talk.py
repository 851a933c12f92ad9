"""Made-up conversation text for the summarization tests.

Every sentence states a different fact (names, places, things and numbers
all vary), so no two are near-repeats that a summarizer may rightly merge.
"""

from __future__ import annotations

__all__ = ["fact"]

_NAMES = [
    "Alice",
    "Bruno",
    "Chen",
    "Dana",
    "Emeka",
    "Fatima",
    "Goran",
    "Hana",
    "Ivan",
    "Jun",
    "Kofi",
]
_CITIES = [
    "Berlin",
    "Paris",
    "Rome",
    "Oslo",
    "Lima",
    "Quito",
    "Hanoi",
    "Cairo",
    "Perth",
    "Dakar",
    "Riga",
    "Bern",
    "Nice",
]
_THINGS = [
    "train tickets",
    "a hotel room",
    "museum passes",
    "a rental car",
    "ferry seats",
    "concert tickets",
    "a guided tour",
]


def fact(i: int) -> str:
    """The i-th fact, e.g. 'Bruno books a hotel room in Paris for 37 euros.'"""
    return (
        f"{_NAMES[i % len(_NAMES)]} books {_THINGS[i % len(_THINGS)]} in "
        f"{_CITIES[i % len(_CITIES)]} for {i * 37 + 5} euros."
    )
