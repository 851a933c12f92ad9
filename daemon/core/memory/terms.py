"""How text becomes search terms: lower-cased words, light stemming, no stopwords.

The index (index.py) counts these terms per utterance and the ranking
(search.py) scores queries made of them; both must agree on one definition.
"""

from __future__ import annotations

import re

__all__ = ["terms", "term_counts"]

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(
    "a an and are as at be by did do does for from has have i in is it of on or "
    "so that the this to was we were what when where which who with you".split()
)

def _stem(word: str) -> str:
    # Light plural folding so "forecasts" finds "forecast"; a full stemmer
    # would be a dependency for little gain on short utterances.
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


# word -> its term ("" for a stopword). Memoised because tokenizing is most
# of an index update (bench/bench_search.py); bounded so odd input cannot
# grow it without limit.
_TERMS: dict[str, str] = {w: "" for w in _STOP}
_TERMS_LIMIT = 200_000


def _term(word: str) -> str:
    term = _TERMS.get(word)
    if term is None:
        if len(_TERMS) > _TERMS_LIMIT:
            _TERMS.clear()
            _TERMS.update((w, "") for w in _STOP)
        term = _TERMS[word] = _stem(word)
    return term


def terms(text: str) -> list[str]:
    """Lower-cased, lightly stemmed words of ``text`` without stopwords."""
    out = []
    for word in _WORD.findall(text.lower()):
        term = _TERMS.get(word)
        if term is None:
            term = _term(word)
        if term:
            out.append(term)
    return out


def term_counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    get = counts.get
    for term in terms(text):
        counts[term] = get(term, 0) + 1
    return counts
