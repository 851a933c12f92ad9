"""The query being read: polite wrapping removed, quoted text protected.

Rules cut what they understand out of ``Query.text``; whatever is left and
is not a filler word is *unexplained*, and the share of unexplained words
is what lowers the parser's confidence. Matching ignores case but never
rewrites the words, so a topic comes back as the caller wrote it; outside
quotes, a run of whitespace or control characters reads as one space.

Every pattern here reads a query in time linear in its length (issue 14):
the whitespace runs are collapsed before any rule sees the text, a quote
scan stops at the next opening quote of its kind, and the polite ending is
peeled word by word from a short window at the end, never searched for
from every position.
"""

from __future__ import annotations

import re
from re import Pattern

from chd.core.language.grammar.vocab import FILLERS, FLAGS

__all__ = ["Query", "strip_politeness", "normalize", "QUOTED", "ANY_QUOTE"]

_POLITE_PREFIX = re.compile(
    r"^(?:(?:hey|hi|hello|ok(?:ay)?|so|now|alright|right|well|and|also|then|daemon|chd)\b[,!]?\s*)*"
    r"(?:(?:please|pls|kindly)\s+)?"
    r"(?:(?:can|could|would|will)\s+you\s+(?:please\s+|kindly\s+)?"
    r"|(?:i(?:'d|\s+would)\s+like(?:\s+you)?\s+to|i\s+want(?:\s+you)?\s+to|i\s+need(?:\s+you)?\s+to"
    r"|let(?:'s|\s+us)|go\s+ahead\s+and|be\s+so\s+kind\s+as\s+to|help\s+me)\s+)?"
    r"(?:(?:please|kindly|just)\s+)?",
    FLAGS,
)
_POLITE_ENDING = re.compile(
    r"[\s,]+(?:please|pls|thanks|thank\s+you|thx|for\s+me|if\s+you\s+can|if\s+possible|right\s+now)$",
    FLAGS,
)
# Longer than any polite ending with the separators before it.
_ENDING_WINDOW = 40
_END_PUNCTUATION = " \t\n\r\f\v.!?"
# Quotes open at a word start and close at a word end, so the apostrophes
# of "what's" or "the user's" are not taken for quotes.
# A curly quote's span stops at the next opening quote: unclosed "\u201c"s
# would otherwise each scan to the end of the query (quadratic).
# German, French, Polish and CJK quotes too (issue 25), each span stopping at
# its own kind's next opening quote for the same reason.
QUOTED = re.compile(
    r"\"([^\"]*)\"|\u201c([^\u201c\u201d]*)\u201d|\u2018([^\u2018\u2019]*)\u2019|(?<![\w'])'([^']*)'(?![\w])"
    r"|\u201e([^\u201e\u201c\u201d]*)[\u201c\u201d]|\u00ab([^\u00ab\u00bb]*)\u00bb|\u2039([^\u2039\u203a]*)\u203a"
    r"|\u300c([^\u300c\u300d]*)\u300d|\u300e([^\u300e\u300f]*)\u300f"
)
# Whether a text may hold a quoted span at all (a cheap check before QUOTED).
ANY_QUOTE = re.compile("[\"'\u201c\u2018\u201e\u00ab\u2039\u300c\u300e]")
_BLANKS = re.compile(r"[\s\x00-\x1f\x7f]+")
# Most queries have only single spaces: finding none of these is cheaper
# than replacing every space with itself.
_ODD_BLANK = re.compile(r"[^\S ]|[\x00-\x1f\x7f]|  ")
_PLACEHOLDER = re.compile(r"\u27e6(\d+)\u27e7")
_WORD = re.compile(r"\u27e6\d+\u27e7|[\w'#]+", re.UNICODE)
# What a rule leaves of "what's" or "they're" after taking the word itself.
_CONTRACTION = re.compile(r"'(?:s|re|d|ll|ve|m)", re.IGNORECASE)


def normalize(text: str) -> str:
    """``text`` with each run of whitespace or control characters as one space."""
    if _ODD_BLANK.search(text) is None:
        return text.strip()
    return _BLANKS.sub(" ", text).strip()


def strip_politeness(text: str) -> str:
    """``text`` without "please", "could you", "thanks", "?" and the like around it."""
    text = _POLITE_PREFIX.sub("", text.strip(), count=1)
    end = len(text)
    while True:
        while end and text[end - 1] in _END_PUNCTUATION:
            end -= 1
        ending = _POLITE_ENDING.search(text, max(0, end - _ENDING_WINDOW), end)
        if ending is None:
            return text[:end].strip()
        end = ending.start()


class Query:
    """A query being read by the rules."""

    def __init__(self, text: str) -> None:
        self.original = text
        self.quotes: list[str] = []

        def protect(match: re.Match[str]) -> str:
            self.quotes.append(next(g for g in match.groups() if g is not None))
            return f"\u27e6{len(self.quotes) - 1}\u27e7"

        self.text = strip_politeness(normalize(QUOTED.sub(protect, text)))
        self.total_words = max(len(_WORD.findall(self.text)), 1)

    def search(self, pattern: Pattern[str] | str) -> re.Match[str] | None:
        return (
            re.search(pattern, self.text, FLAGS)
            if isinstance(pattern, str)
            else pattern.search(self.text)
        )

    def take(self, pattern: Pattern[str] | str) -> re.Match[str] | None:
        """Find ``pattern`` and cut it out of the text (it is understood)."""
        match = self.search(pattern)
        if match is not None:
            self.text = f"{self.text[: match.start()]} {self.text[match.end() :]}"
        return match

    def restore(self, fragment: str) -> str:
        """``fragment`` with its quoted parts put back as written (without the quotes)."""
        return _PLACEHOLDER.sub(lambda m: self.quotes[int(m.group(1))], fragment).strip()

    def unexplained(self, extra_fillers: frozenset[str] = frozenset()) -> list[str]:
        """Words left in the text that no rule explained and are not fillers."""
        return [
            self.restore(w)
            for w in _WORD.findall(self.text)
            if w.lower().strip("'") not in FILLERS
            and w.lower() not in extra_fillers
            and not _CONTRACTION.fullmatch(w)
        ]
