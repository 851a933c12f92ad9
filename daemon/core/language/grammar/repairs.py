"""Spoken self-corrections: "the last two no wait the last three" means the last three.

People who dictate, or type as they think, correct themselves inside the
sentence ("read me turn two sorry turn three", "set it to four thousand no
sorry six thousand", "the first four actually no just the first two"). A
reader resolves this without a second thought: what follows the marker
replaces the phrase it repeats. A correction is read only when that phrase
is found (the same first word, or a number replacing a number); otherwise
the query is left as it was and the rules refuse what they cannot read.

The result is read by the same rules as any query (a write still needs every
word understood), and only instruction text ever gets here: the store rules
run first, so no utterance is rewritten.
"""

from __future__ import annotations

import re

from chd.core.language.numbers import NUM

__all__ = ["repaired"]

_MARKER = re.compile(
    r"[\s,;.!\u2014\u2013-]+(?:no\s*,?\s*wait|wait\s*,?\s*no|no\s*,?\s*sorry|sorry\s*,?\s*no|actually\s*,?\s*no"
    r"|oops|sorry|i\s+mean|or\s+rather|make\s+(?:that|it))[\s,;:.!\u2014\u2013-]+",
    re.IGNORECASE,
)
# Words that open the corrected phrase without being part of it ("actually no, just the first two").
_OPENERS = frozenset("just only".split())
_TRAILING_NUMBER = re.compile(rf"(?:\b{NUM})\s*$", re.IGNORECASE)
_LEADING_NUMBER = re.compile(rf"^{NUM}\b", re.IGNORECASE)
# A verb in the correction makes it a sentence of its own, which is not read as a repair.
_SENTENCE_WORDS = frozenset(
    """is are was were be been being has have had do does did will would can could should must may
    might shall keep keeps kept stay stays remain remains mark marked important delete remove
    show get set add store""".split()
)
# Bounded: corrections are short, and the marker is looked for in the first few hundred characters.
_LIMIT = 400


_TWO_VALUES = re.compile(
    r"\b(?:instead\s+of|rather\s+than|currently|from\s+\S+\s+to)\b|[(,]\s*(?:was|now|it\s+is|it's)\s+\S*\d",
    re.IGNORECASE,
)


def repaired(text: str) -> str | None:
    """``text`` with one spoken self-correction resolved, or None if it holds none."""
    if len(text) > _LIMIT:
        return None
    marker = _MARKER.search(text)
    if marker is None or marker.start() == 0:
        return None
    left, right = text[: marker.start()], text[marker.end() :].strip()
    if _TWO_VALUES.search(left):
        # "to 20 instead of 30 - no wait, 40": which of the two the correction replaces is
        # a guess (second review of issue 25).
        return None
    words = right.split()
    while words and words[0].lower() in _OPENERS:
        words.pop(0)
    if not words or not left.split():
        return None
    if any(w.lower().strip(",.!?") in _SENTENCE_WORDS for w in words):
        # "Remove utterance 4, no wait, utterance 4 is important": a new sentence, not a phrase.
        return None
    right = " ".join(words)
    if _LEADING_NUMBER.match(right):
        number = _TRAILING_NUMBER.search(left)
        if number is None:
            return None
        return f"{left[: number.start()]}{right}"
    head = words[0].lower()
    lowered = left.lower()
    at = lowered.rfind(f" {head} ")
    if at < 0 and lowered.startswith(f"{head} "):
        at = 0
    if at < 0:
        return None
    # The correction replaces as many words as it has; what followed the
    # replaced phrase stays ("the assistant's replies before turn 3, sorry, the
    # user's replies" keeps "before turn 3").
    replaced = left[at:].split()
    kept = replaced[len(words) :]
    return " ".join([left[:at].strip(), right, *kept]).strip()
