"""How text becomes search terms: lower-cased words, light stemming, no stopwords.

The index (index.py) counts these terms per utterance and the ranking
(search.py) scores queries made of them; both must agree on one definition.
"""

from __future__ import annotations

import re

__all__ = ["cached_bytes", "terms", "term_counts"]

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
# of an index update (bench/bench_search.py). Bounded in bytes, not entries:
# a word is any run of letters, and 400 searches for distinct 1 MB topics
# once kept 400 MiB here. Long words are not kept at all (they are rare in
# speech, and stemming one is cheap next to reading it), so the budget holds
# many short ones. The count is approximate under threads (no lock on the
# hot path); it only decides when to start over.
_TERMS: dict[str, str] = {w: "" for w in _STOP}
_CACHED_WORD_MAX = 40  # characters
_ENTRY_OVERHEAD = 120  # bytes of a dict slot and two small str objects, about
_TERMS_BUDGET = 24 * 1024 * 1024  # bytes: about the old 200,000 short words
_terms_bytes = 0


def _term(word: str) -> str:
    global _terms_bytes
    term = _TERMS.get(word)
    if term is not None:
        return term
    term = _stem(word)
    if len(word) > _CACHED_WORD_MAX:
        return term
    if _terms_bytes > _TERMS_BUDGET:
        _TERMS.clear()
        _TERMS.update((w, "") for w in _STOP)
        _terms_bytes = 0
    _TERMS[word] = term
    _terms_bytes += _ENTRY_OVERHEAD + len(word) + len(term)
    return term


def cached_bytes() -> int:
    """About how many bytes the word cache holds (bounded by ``_TERMS_BUDGET``)."""
    return _terms_bytes


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
