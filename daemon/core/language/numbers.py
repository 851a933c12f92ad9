"""Numbers as callers write them: digits, words, "4k", "4,000", "a dozen", ordinals.

``NUM`` is a regex fragment the grammar rules embed wherever a count may
appear; ``parse_number`` turns what it matched into an int. The rules match
the query as written (only case is ignored), so a topic such as "five
cats" is searched for as written, never rewritten to "5 cats".

Every fragment here matches a bounded number of words, so a pattern that
embeds one never backtracks over a run of number words (issue 14: "two " *
21 after a speaker took seconds when a number could be any length). A value
too large for any field is refused here, before int() or float() can fail
on it.
"""

from __future__ import annotations

import re

from chd.core.errors import InvalidRequest, quote

__all__ = [
    "NUM",
    "NUM_TOKEN",
    "ORDINAL",
    "MAX_DIGITS",
    "parse_number",
    "parse_ordinal",
    "digits_value",
]

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90,
}  # fmt: skip
_COUNTED = {"dozen": 12, "couple": 2, "pair": 2}
_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6,
    "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11,
    "twelfth": 12, "thirteenth": 13, "fourteenth": 14, "fifteenth": 15,
    "twentieth": 20,
}  # fmt: skip

_WORD = "|".join(sorted([*_UNITS, *_TENS, "hundred", "thousand"], key=len, reverse=True))
# Up to six number words: "nine hundred and ninety-nine", "two thousand five hundred".
_WORDS = (
    rf"(?:(?:a|an)\s+(?=hundred|thousand))?(?:{_WORD})(?:(?:\s+and\s+|\s+|-)(?:{_WORD})){{0,5}}"
)

NUM = (
    r"(?<![\w])(?:\d{1,3}(?:,\d{3})+"  # 4,000
    r"|\d+(?:\.\d+)?\s?k(?![a-z])"  # 4k, 1.5k
    r"|\d+"
    r"|(?:a|an)\s+(?:dozen|couple|pair)(?:\s+of)?"
    rf"|{_WORDS})(?![\w])"
)
# One word that is a number: what a pattern repeats when it lists qualifiers.
NUM_TOKEN = rf"(?:\d+|{_WORD})"
ORDINAL = r"(?:\d+(?:st|nd|rd|th)|" + "|".join(_ORDINALS) + r")"

_NUM_FULL = re.compile(NUM + r"$", re.IGNORECASE)


def _words_value(run: str) -> int:
    total, current = 0, 0
    for word in re.split(r"[\s-]+", run.lower()):
        if word in ("a", "an", "and", "of"):
            continue
        if word in _UNITS:
            current += _UNITS[word]
        elif word in _TENS:
            current += _TENS[word]
        elif word in _COUNTED:
            current += _COUNTED[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        elif word == "thousand":
            total += max(current, 1) * 1000
            current = 0
    return total + current


# More digits than any field takes (their maximum is 2**31 - 1). Past this
# the number is refused before int() (which stops at 4,300 digits) or
# float() (which overflows) is asked to convert it.
MAX_DIGITS = 12


def digits_value(digits: str) -> int:
    """A run of digits as an int; InvalidRequest if it is longer than any field takes."""
    digits = digits.lstrip("0") or "0"
    if len(digits) > MAX_DIGITS:
        raise InvalidRequest(
            f"the number {quote(digits, 20)} is too large; "
            f"numbers in a query have at most {MAX_DIGITS} digits"
        )
    return int(digits)


def parse_number(token: str) -> int:
    """What ``NUM`` matched, as an int: "12", "twelve", "4k", "4,000", "a dozen"."""
    text = " ".join(token.strip().lower().split())
    if not _NUM_FULL.match(text):
        raise ValueError(f"not a number: {token!r}")
    if text.replace(",", "").isdigit():
        return digits_value(text.replace(",", ""))
    if text.endswith("k") and text[0].isdigit():
        whole, _, fraction = text[:-1].strip().partition(".")
        # Integer arithmetic: float("9" * 400) is infinite (issue 14).
        thousandths = (fraction + "000")[:3]
        return digits_value(whole + thousandths)
    return _words_value(text)


def parse_ordinal(token: str) -> int:
    """What ``ORDINAL`` matched, as an int: "third" -> 3, "3rd" -> 3."""
    text = token.strip().lower()
    if text[0].isdigit():
        return digits_value(re.match(r"\d+", text).group(0))  # type: ignore[union-attr]
    return _ORDINALS[text]
