"""How text becomes search terms: lower-cased words, American spelling, lemmas, no stopwords.

The index (index.py) counts these terms per utterance and the ranking
(search.py) scores queries made of them; both must agree on one definition.

A word becomes its term in three steps (issue 27): British spellings are
folded to American ones ("colour" and "color" are one term), the word is
lemmatized with the query language's lemmatizer (simplemma, through
``chd.core.language.grammar.normalize.lemma``: "painted" finds "paint"), and
plurals the lemmatizer left are folded ("forecasts" finds "forecast").
Lemmas raised LoCoMo recall@10 on the tuning conversations 1-5 from 0.574
to 0.601 and on the held-out 6-10 from 0.562 to 0.597 (docs/search.md);
the Snowball stemmer bm25s uses did less (0.597 / 0.588).
"""

from __future__ import annotations

import re

from chd.core.language.grammar.normalize import lemma

__all__ = ["cached_bytes", "query_terms", "terms", "term_counts"]

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(
    "a an and are as at be by did do does for from has have i in is it of on or "
    "so that the this to was we were what when where which who with you "
    # Pronouns, the "s" of "Nate's", question and auxiliary words: a question
    # names its person with a pronoun or a possessive as often as not, and
    # these matched half the conversation. LoCoMo 1-5 R@1/5/10
    # 0.367/0.578/0.663 -> 0.370/0.596/0.674 (docs/search.md).
    "his her he she him they them their my me our your its s t how why "
    "would could can will been being had not but if".split()
)
# Words of a question that say what kind of answer is wanted, not what it
# is about ("what kind of books", "would she likely enjoy"): dropped from a
# topic, never from an utterance (where "kind" may be the topic). LoCoMo 1-5
# R@1/5/10 0.370/0.596/0.674 -> 0.373/0.598/0.675.
_QUESTION = frozenset("kind type likely ever might".split())

# British -> American endings. Both an utterance and a query go through the
# same folding, so a fold only has to avoid merging two different words:
# -our only for words of 6+ letters (colour, flavour, neighbour; not four,
# hour, your, tour), -tre for 5+ (centre, theatre; not acre).
_BRITISH = (
    (re.compile(r"^(\w{3,})our(s?)$"), r"\1or\2"),
    (re.compile(r"^(\w{3,})is(e|ed|es|ing|ation|ations)$"), r"\1iz\2"),
    (re.compile(r"^(\w{2,})ys(e|ed|es|ing)$"), r"\1yz\2"),
    (re.compile(r"^(\w{2,})tre(s?)$"), r"\1ter\2"),
)


# -our- inside a word (favourite, colourful, neighbourhood); 6+ letters and
# a consonant before it, so "four", "your", "hours", "journey" stay.
_OUR_INSIDE = re.compile(
    r"^(\w{2,}[^aeiou\W])our(ite|ites|able|ful|fully|hood|hoods|ing|ed|less|ist|ists)$"
)
# A doubled l before an ending (travelling, cancelled, labelled, modelling):
# the lemmatizer leaves "travell", so fold before it. A vowel before the ll
# and 3+ letters before that: "calling", "filling", "telling" keep theirs.
_DOUBLE_L = re.compile(r"^(\w{3,}[aeiou])ll(ing|ed|er|ers)$")
# Words the patterns cannot fold without merging others.
_BRITISH_WORDS = {
    "ageing": "aging",
    "aluminium": "aluminum",
    "catalogue": "catalog",
    "cheque": "check",
    "dialogue": "dialog",
    "grey": "gray",
    "jewellery": "jewelry",
    "licence": "license",
    "mould": "mold",
    "moustache": "mustache",
    "mum": "mom",
    "offence": "offense",
    "plough": "plow",
    "practise": "practice",
    "practised": "practiced",
    "practising": "practicing",
    "programme": "program",
    "programmes": "programs",
    "pyjamas": "pajamas",
    "sceptical": "skeptical",
}


def _american(word: str) -> str:
    word = _BRITISH_WORDS.get(word, word)
    for pattern, replacement in _BRITISH:
        word = pattern.sub(replacement, word)
    word = _OUR_INSIDE.sub(r"\1or\2", word)
    return _DOUBLE_L.sub(r"\1l\2", word)


# Words the lemmatizer gets wrong ("gone" -> "gan", then "gin").
_LEMMA_FIXES = {"gone": "go"}


def _stem(word: str) -> str:
    if word in _LEMMA_FIXES:
        return _LEMMA_FIXES[word]
    # Folded again after the lemmatizer, which gives some American words a
    # British lemma ("neighborhood" -> "neighbourhood"). Lemmatized twice:
    # a plural noun's lemma may be a verb form ("paintings" -> "painting"),
    # whose own lemma the verb's forms share ("painted", "painting" -> "paint").
    # The second pass changed no LoCoMo 1-5 figure in the 4th digit.
    return _plural(_american(lemma(lemma(_american(word)))))


def _plural(word: str) -> str:
    # Plurals the lemmatizer does not know ("forecasts" finds "forecast").
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


def query_terms(topic: str) -> list[str]:
    """The distinct terms of a topic, sorted, without the words that only shape a question.

    Sorted: scores are float sums over the terms, and set order (which
    follows PYTHONHASHSEED) would let equal scores tie differently per process.
    A topic made only of such words ("kind") keeps them.
    """
    found = set(terms(topic))
    return sorted(found - _QUESTION or found)


def term_counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    get = counts.get
    for term in terms(text):
        counts[term] = get(term, 0) + 1
    return counts
