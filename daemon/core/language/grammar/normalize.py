"""Instruction words to the grammar's own words: spelling, lemmas, bounded typo correction (issue 25).

Queries written by people who never saw the grammar misspell its words
("remvoe", "evrything"), abbreviate them ("plz", "msgs", "convo"), inflect
them ("deleted", "summarised") or use another verb for the same operation
("erase", "recap", "flag"). This module rewrites such *instruction* words
into words the rules read, from three sources:

- grammar/lexicon.toml, a reviewable table of words and phrases per operation;
- a lemmatizer (simplemma, which ships its English data): "deleting" -> "delete";
- a bounded typo correction against the grammar's own vocabulary: edit
  distance 1 (letters swapped count as one edit) for words of 4-7 letters,
  2 for longer ones, only when exactly one vocabulary word is that close,
  and never for a word the English dictionary knows, a number, a word that
  starts with a capital inside the sentence (a name), or anything quoted.

It never touches an utterance: the parser calls it only on queries that are
not stores, with quoted spans left as they are, and the words after a topic
marker ("about ...") are the caller's and stay as written. Store headers use
``Normalizer.word`` on their instruction words alone (grammar/store_header.py).
The rules first read the query as written; only when they refuse it does the
parser read the normalized text, so a query the rules understood before is
read exactly as before.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from chd.core.language.grammar.vocab import SPEAKER

__all__ = [
    "LEXICON",
    "WORDS",
    "PHRASES",
    "COMMENTARY",
    "SCOPE",
    "WRITE_FORMS",
    "Normalizer",
    "write_operations",
    "removal_idiom",
    "developer_syntax",
    "operation_label",
    "lemma",
    "vocabulary_of",
    "without_needless_reason",
    "phrases",
]

LEXICON = tomllib.loads(Path(__file__).with_name("lexicon.toml").read_text(encoding="utf-8"))

_REWRITE_SECTIONS = (
    "spelling",
    "remove",
    "retrieve",
    "summarize",
    "mark",
    "configure",
    "speakers",
    "nouns",
    "phrases",
)
_ALL_REWRITES: dict[str, str] = {
    k.lower(): v for s in _REWRITE_SECTIONS for k, v in LEXICON[s].items()
}
# One word -> its replacement; several words -> theirs (matched whole, case aside).
WORDS: dict[str, str] = {k: v for k, v in _ALL_REWRITES.items() if " " not in k}
PHRASES: dict[str, str] = {k: v for k, v in _ALL_REWRITES.items() if " " in k}
COMMENTARY = frozenset(LEXICON["commentary"]["words"].split())
SCOPE = frozenset(LEXICON["scope"]["words"].split())


def _forms(verb: str) -> set[str]:
    """A verb's inflected forms, spelled by rule (remove: removes, removed, removing)."""
    stem = verb[:-1] if verb.endswith("e") else verb
    forms = {verb, verb + "s", verb + "es", verb + "d", verb + "ed", stem + "ing", stem + "ed"}
    if (
        len(verb) > 2
        and verb[-1] not in "aeiouwxy"
        and verb[-2] in "aeiou"
        and verb[-3] not in "aeiou"
    ):
        forms |= {verb + verb[-1] + "ed", verb + verb[-1] + "ing"}  # drop: dropped, dropping
    return forms


# "forgot" is never a command ("I forgot what the weather was"); "can be forgotten" is.
_IRREGULAR = {"forget": {"forgotten", "forgetting"}}
# Word form -> the write operation it names ("deleted" -> remove).
WRITE_FORMS: dict[str, str] = {
    form: operation
    for operation, words in LEXICON["writes"].items()
    for verb in words.split()
    for form in _forms(verb) | _IRREGULAR.get(verb, set())
}

_WORD = re.compile(r"[^\W\d_][\w'\u2019-]*|\d+", re.UNICODE)
_TOKEN = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*", re.UNICODE)


@lru_cache(maxsize=4096)
def lemma(word: str) -> str:
    """The English lemma of a lower-case word ("deleting" -> "delete"), or the word itself."""
    import simplemma  # imported on first use: its English data takes ~0.2 s to load

    return simplemma.lemmatize(word, lang="en").lower()


@lru_cache(maxsize=4096)
def _english(word: str) -> bool:
    import simplemma

    return bool(simplemma.is_known(word, lang="en"))


def _max_distance(word: str) -> int:
    # Issue 25: one edit for words of 4-7 letters, two for longer; none below 4
    # ("teh" and "u" are in the lexicon instead: too many words are that close).
    if len(word) < 4:
        return 0
    return 1 if len(word) <= 7 else 2


_OWNERS = frozenset("user assistant system".split())


class Normalizer:
    """Rewrites words of an instruction into ``vocabulary`` (the words some rules read)."""

    def __init__(self, vocabulary: Iterable[str], lemmas: bool = True) -> None:
        self.lemmas = lemmas
        self.vocabulary = frozenset(w.lower() for w in vocabulary)
        self._targets = sorted(self.vocabulary | set(WORDS))
        self._cache: dict[tuple[str, bool], str] = {}

    def word(self, word: str, first: bool = False) -> str:
        """``word`` in the grammar's words; may be several words, or "" for commentary."""
        key = (word, first)
        if key in self._cache:
            return self._cache[key]
        result = self._word(word, first)
        if len(self._cache) < 8192:
            self._cache[key] = result
        return result

    def _word(self, word: str, first: bool) -> str:
        low = word.lower().replace("\u2019", "'")
        if low in WORDS:
            return WORDS[low]
        if low.endswith("'s") and low[:-2].isalpha() and low[:-2] not in self.vocabulary:
            # "the assistent's reply": the owner's name corrected, the possessive kept.
            base = self._word(word[:-2], first)
            # Only into a speaker's name: "everythings's messages" is no owner the rules know.
            return f"{base}'s" if base.lower() in _OWNERS else word
        if low in self.vocabulary or not low.isalpha():
            return word  # numbers, "data.text", "o'clock": never corrected
        if low in COMMENTARY:
            return ""
        base = lemma(low) if self.lemmas else low
        if base != low:
            if base in WORDS:
                return WORDS[base]
            if base in self.vocabulary:
                return base
        if (word[0].isupper() and not first) or _english(low):
            return word  # a name ("Paris"), or an English word the grammar does not know
        fixed = self.typo(low)
        if fixed is None:
            return word
        return WORDS.get(fixed, fixed)

    def typo(self, word: str) -> str | None:
        """The one vocabulary word within the allowed edit distance of ``word``, if exactly one is."""
        limit = _max_distance(word)
        if limit == 0:
            return None
        from rapidfuzz.distance import OSA
        from rapidfuzz.process import extract

        found = extract(word, self._targets, scorer=OSA.distance, score_cutoff=limit, limit=3)
        if not found:
            return None
        best = found[0][1]
        closest = {choice for choice, score, _ in found if score == best}
        return next(iter(closest)) if len(closest) == 1 else None

    def words(self, text: str) -> str:
        """Each word of ``text`` normalized; punctuation and spacing kept."""
        out: list[str] = []
        position = 0
        first = True
        for m in _WORD.finditer(text):
            out.append(text[position : m.start()])
            out.append(self.word(m.group(0), first))
            first = (
                text[m.end() : m.end() + 1] in (".", "!", "?", ":", ";")
                if m.end() < len(text)
                else False
            )
            position = m.end()
        out.append(text[position:])
        return "".join(out)


_PHRASES_RE = re.compile(
    r"\b(?:"
    + "|".join(re.escape(p).replace(r"\ ", r"\s+") for p in sorted(PHRASES, key=len, reverse=True))
    + r")\b",
    re.IGNORECASE,
)


def phrases(text: str) -> str:
    """The lexicon's multi-word forms replaced ("get rid of" -> "delete")."""
    return _PHRASES_RE.sub(lambda m: PHRASES[" ".join(m.group(0).lower().split())], text)


# --- developer forms: key=value, comparisons, ranges, flags ----------------------------

_SPEAKER_NAMES = r"(?:user|assistant|system)"
_Q = r"[\"'`]?"
_BELOW_MOST = 100  # "seq < N" lists seqs 1..N-1: kept short


def _below(m: re.Match[str]) -> str:
    """ "seq < 3" is utterances 1 to 2; "seq < 1" holds none, left for the rules to refuse."""
    n = int(m.group(1)) if len(m.group(1)) <= 3 else 0
    return f" utterances 1 to {n - 1} " if 1 < n <= _BELOW_MOST else m.group(0)


_SYNTAX: tuple[tuple[re.Pattern[str], Any], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), replacement)
    for pattern, replacement in (
        (r"[{}]", " "),
        (rf"{_Q}\b(?:turns?|turn_number)\b{_Q}\s*>=\s*{_Q}(\d+){_Q}", r" from turn \1 on "),
        (rf"{_Q}\b(?:turns?|turn_number)\b{_Q}\s*>\s*{_Q}(\d+){_Q}", r" after turn \1 "),
        (rf"{_Q}\b(?:turns?|turn_number)\b{_Q}\s*<=\s*{_Q}(\d+){_Q}", r" up to turn \1 "),
        (rf"{_Q}\b(?:turns?|turn_number)\b{_Q}\s*<\s*{_Q}(\d+){_Q}", r" before turn \1 "),
        (
            rf"{_Q}\b(?:turns?|turn_number)\b{_Q}\s*(?:==?|:)\s*{_Q}(\d+)\s*(?:-|\.\.\.?|to)\s*(\d+){_Q}",
            r" turns \1 to \2 ",
        ),
        (rf"{_Q}\b(?:turns?|turn_number)\b{_Q}\s*(?:==?|:)\s*{_Q}(\d+){_Q}", r" turn \1 "),
        (
            rf"{_Q}\b(?:seqs?|ids?)\b{_Q}\s*(?:==?|:)\s*{_Q}(\d+)\s*(?:-|\.\.\.?)\s*(\d+){_Q}",
            r" utterances \1 to \2 ",
        ),
        (rf"{_Q}\b(?:seqs?|ids?)\b{_Q}\s*(?:==?|:)\s*{_Q}(\d+){_Q}", r" utterance \1 "),
        # "seq between 3 and 5", "seq <= 4", "seq < 3" (issue 25: SQL-minded developers).
        (r"\b(?:seqs?|ids?)\s+between\s+(\d+)\s+and\s+(\d+)\b", r" utterances \1 to \2 "),
        (rf"{_Q}\b(?:seqs?|ids?)\b{_Q}\s*<=\s*{_Q}(\d+){_Q}", r" utterances 1 to \1 "),
        (rf"{_Q}\b(?:seqs?|ids?)\b{_Q}\s*<\s*{_Q}(\d+){_Q}", _below),
        (r"\b(?:seqs?|ids?)\s+in\s*[(\[]\s*(\d+(?:\s*,\s*\d+)*)\s*[)\]]", r" utterances \1 "),
        (
            rf"{_Q}\b(?:speaker|role|from|by|who)\b{_Q}\s*(?:==?|:)\s*{_Q}({_SPEAKER_NAMES}){_Q}",
            r" from the \1 ",
        ),
        (rf"{_Q}\blast_n\b{_Q}\s*(?:==?|:)\s*{_Q}(\d+){_Q}", r" last \1 "),
        (rf"{_Q}\bfirst_n\b{_Q}\s*(?:==?|:)\s*{_Q}(\d+){_Q}", r" first \1 "),
        (r"(?<![\w.])(\d+)\s*\.\.\.?\s*(\d+)\b", r"\1 to \2"),
        (r"(?<!\w)-n\s*(\d+)\b", r" \1 "),
        (r"(?<!\w)--(oldest|newest|first|last|speaker|turn)\b", r" \1 "),
        (
            r"^\s*select\s+(?:\*|text|all)\s+from\s+(?=utterances|messages|history|conversation)",
            " get ",
        ),
        (r"^\s*delete\s+from\s+(?=utterances|messages|history|conversation)", " delete "),
        (r"\bwhere\s+(?=(?:from|turns?|utterances?|after|before|up)\b)", " "),
        (r"^\s*(?:messages|rows|utterances|entries)\s+(?=utterances?\b)", " get "),
        (r"\s\*\s", " "),
    )
)


# "Operation: configure. buffer_size=50", "op=remove seqs=2-4", "Action:
# add_utterance; role: assistant; ..." (issue 25, agents and developers): a
# label naming the operation is that operation's verb, and the labels of its
# parts ("Target:", "Filter:") are glue.
_OPERATION_LABEL = re.compile(
    r"^\s*\{?\s*[\"']?(?:operation|op|action|task|command|cmd|intent)[\"']?\s*[:=]\s*[\"']?(?P<op>[a-z_]+)[\"']?\s*[.;,]?\s*",
    re.IGNORECASE,
)
_OPERATION_VERB = {
    "store": "store", "add": "add", "add_utterance": "add", "save": "save", "persist": "store", "append": "add",
    "retrieve": "get", "get": "get", "read": "get", "fetch": "get", "get_utterances": "get", "search": "find",
    "remove": "remove", "delete": "delete", "remove_utterance": "remove", "remove_utterances": "remove",
    "summarize": "summarize", "summarise": "summarize", "summary": "summarize",
    "configure": "configure", "config": "configure", "set": "set",
    "mark": "mark", "stats": "stats", "get_stats": "stats", "statistics": "stats",
}  # fmt: skip
_PART_LABEL = re.compile(
    r"(?:^|(?<=[\s.;,]))(?:target|filter|filters|selection|select|scope|params|parameters|args|arguments|where)\s*:\s*",
    re.IGNORECASE,
)


def operation_label(text: str) -> str:
    """ "Operation: remove. Target: seq 6." -> "remove seq 6."; other text as it is."""
    m = _OPERATION_LABEL.match(text[:200])
    if m is None or (verb := _OPERATION_VERB.get(m.group("op").lower())) is None:
        return text
    rest = text[m.end() :]
    if verb not in ("store", "add", "save"):
        rest = _PART_LABEL.sub(" ", rest)
        rest = _IMPORTANT_FLAG.sub(
            lambda f: (
                " as important"
                if f.group(1).lower() in ("true", "yes", "1")
                else " as not important"
            ),
            rest,
        )
    if verb == "summarize":
        rest = _SUMMARY_LIMIT.sub(r" in \1 tokens", rest)
    return f"{verb} {rest}".strip()


_IMPORTANT_FLAG = re.compile(r"\s*\bimportant\s*[:=]\s*(true|false|yes|no|1|0)\b", re.IGNORECASE)
_SUMMARY_LIMIT = re.compile(
    r"\b(?:token_limit|max_tokens|tokens|limit)\s*[:=]\s*(\d+)\b", re.IGNORECASE
)


def developer_syntax(text: str) -> str:
    """``turn>=3`` -> "from turn 3 on", ``seq=7`` -> "utterance 7", ``2..5`` -> "2 to 5", ``tail -n 2`` -> "tail 2"."""
    if (
        not any(c in text for c in "=<>{-.*")
        and "select" not in text.lower()
        and " in " not in text.lower()
        and " between " not in text.lower()
    ):
        return text
    # "WHERE speaker='user' AND turn >= 2": in a developer's conditions "and" is what a
    # read's filters do anyway (all at once), not two selections (issue 25).
    text = _CONDITIONS_AND.sub(_conjoined, text)
    for pattern, replacement in _SYNTAX:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())


_CONDITIONS_AND = re.compile(
    # Possessive and anchored at a word's start: a long word is tried once, not once per letter.
    r"(?P<left>(?<!\w)(?P<lkey>[A-Za-z_]\w*+)\s*+(?:==|=|>=|<=|!=|<|>)\s*+(?:'[^'\n]{0,200}'|\"[^\"\n]{0,200}\"|[^\s'\"=<>!]++))"
    r"\s+(?:and|&&)\s+(?=(?P<rkey>[A-Za-z_]\w*+)\s*+(?:==|=|>=|<=|!=|<|>))",
    re.IGNORECASE,
)


def _conjoined(m: re.Match[str]) -> str:
    # Two conditions on one key ("seq=3 and seq=5") are a list, read as written.
    same = m.group("lkey").lower() == m.group("rkey").lower()
    return m.group(0) if same else f"{m.group('left')} "


# --- writes anywhere -------------------------------------------------------------------

# "The utterance with seq 6 can be removed", "Turn 1 should go", "turn 2 is no longer needed":
# a remove whose verb comes last. Read as "delete <what>"; the rules then read <what> strictly.
_MODAL = (
    r"(?:(?:can|could|should|must|may|might|shall|will|ought\s+to|needs?\s+to|has\s+to|have\s+to)"
    r"\s+(?:now\s+|safely\s+|just\s+|also\s+|all\s+)?(?:be|get)|(?:is|are)(?:\s+now)?(?:\s+to\s+be)?|needs?\s+to\s+be)"
)
_PASSIVE = re.compile(
    rf"^(?P<obj>[^\"\u201c]{{1,300}}?)\s++{_MODAL}\s+(?P<v>[a-z]+)(?P<rest>\b.*)$",
    re.IGNORECASE | re.DOTALL,
)
_GONE = re.compile(
    r"^(?P<obj>[^\"\u201c]{1,300}?)\s++(?:(?:can|could|should|must|may)(?:\s+now|\s+safely|\s+just|\s+all)?\s+go"
    r"|(?:is|are)\s+no\s+longer\s+(?:needed|relevant|necessary|required|wanted|useful)"
    r"|(?:is|are)\s+not\s+needed\s+any\s*more)\b(?P<rest>.*)$",
    re.IGNORECASE | re.DOTALL,
)
# A reason after a remove that only repeats it: ", don't need it anymore".
_NOT_NEEDED = re.compile(
    r"\s*[,;.\u2014\u2013-]+\s*(?:(?:we|i)\s+)?(?:don't|do\s+not|no\s+longer)\s+need\s+(?:it|them|this|that|these|those)"
    r"(?:\s+any\s*more)?\s*[.!]*\s*$"
    r"|\s*[,;.\u2014\u2013-]+\s*(?:it's|it\s+is|they're|they\s+are)\s+no\s+longer\s+(?:needed|relevant)\s*[.!]*\s*$",
    re.IGNORECASE,
)


# "Utterance number 4 you must remove", "Last message, remove it", "The
# oldest utterance, remove please": a remove verb said after what it removes
# (issue 25, non-native order). Read as "<verb> <what> <rest>".
_LATE_REMOVE = re.compile(
    r"^(?P<obj>[^\"\u201c]{1,200}?)[\s,;\u2014\u2013-]++(?:(?:you|we|i)\s+)?(?:(?:must|should|can|could|shall|will|please|pls|plz)\s+)*"
    r"(?P<v>remove|delete|erase|drop|discard|wipe|del)(?:\s+(?:it|them|this|that|these|those|em|everything|all(?:\s+of\s+(?:it|them))?))?\b(?P<rest>.{0,200})$",
    re.IGNORECASE | re.DOTALL,
)


# A word of another language glossed in English: "a resumo (summary)", "a riassunto — a
# summary —", "Kaydet (save)" (issue 25, corpus g). The gloss is read in its place when the
# word is not English and the gloss is one of the grammar's words.
_GLOSS = re.compile(
    r"\b(?P<w>[^\W\d_]{3,30})\s*(?:\(\s*(?:an?\s+|the\s+)?(?P<g>[a-z]{3,20})\s*\)"
    r"|[\u2014\u2013]\s*(?:an?\s+|the\s+)?(?P<d>[a-z]{3,20})\s*[\u2014\u2013])",
    re.IGNORECASE,
)


def glossed(text: str, vocabulary: frozenset[str]) -> str:
    """``text`` with each foreign word that an English gloss follows replaced by the gloss."""

    def gloss(m: re.Match[str]) -> str:
        word, meant = m.group("w"), (m.group("g") or m.group("d")).lower()
        if _english(word.lower()) or meant not in vocabulary:
            return m.group(0)
        return meant

    return (
        _GLOSS.sub(gloss, text) if ("(" in text or "\u2014" in text or "\u2013" in text) else text
    )


# Non-native questions about speech (issue 25): "What said the assistant in turn 2?",
# "What user was saying?", "What was the bot answering?" read as "what did the X say".
_SPEECH_PAST = {
    "said": "say", "wrote": "write", "answered": "answer", "replied": "reply", "asked": "ask",
    "told": "tell", "sent": "send", "saying": "say", "writing": "write", "answering": "answer",
    "replying": "reply", "asking": "ask", "telling": "tell",
}  # fmt: skip
_SPEECH_INVERTED = re.compile(
    rf"^(?P<w>what|which\s+(?:things?|messages?))\s+"
    rf"(?:(?P<v>said|wrote|answered|replied|asked|told|sent)\s+(?P<t>the\s+)?(?P<s>{SPEAKER})\b"
    rf"|(?:(?:was|were|is|has\s+been|had\s+been)\s+)?(?P<t2>the\s+)?(?P<s2>{SPEAKER})\s+"
    rf"(?:was|were|is|has\s+been|had\s+been)?\s*(?P<v2>saying|writing|answering|replying|asking|telling)\b)",
    re.IGNORECASE,
)


def speech_question(text: str) -> str | None:
    """ "What said the assistant ..." as "what did the assistant say ...", or None."""
    m = _SPEECH_INVERTED.match(text)
    if m is None:
        return None
    speaker = m.group("s") or m.group("s2")
    verb = _SPEECH_PAST[(m.group("v") or m.group("v2")).lower()]
    return f"{m.group('w')} did the {speaker} {verb}{text[m.end() :]}"


def _names_a_remove(text: str) -> bool:
    return any(WRITE_FORMS.get(w.lower()) == "remove" for w in _TOKEN.findall(text))


def removal_idiom(text: str) -> str | None:
    """ "<what> can be deleted" / "<what> should go" / "<what>, remove it" as "delete <what>", or None."""
    head = text[:400]
    if (m := _PASSIVE.match(head)) and WRITE_FORMS.get(m.group("v").lower()) == "remove":
        obj, rest = m.group("obj"), m.group("rest") + text[400:]
    elif (m := _GONE.match(head)) and not _names_a_remove(m.group("obj")):
        # "Delete turn 1. It is no longer relevant": the remove is already asked; the rest says why.
        obj, rest = m.group("obj"), m.group("rest") + text[400:]
    elif (m := _LATE_REMOVE.match(head)) and len(text) <= 400 and len(m.group("obj").split()) >= 2:
        # Two words at least: "Plese delete ..." is a courtesy, not an object.
        obj, rest = m.group("obj").strip(" ,"), m.group("rest")
    else:
        return None
    return _NOT_NEEDED.sub("", f"delete {obj.strip()}{rest}")


# The lexicon's write idioms of several words ("do away with", "get rid of").
_WRITE_PHRASES = re.compile(
    r"\b(?:"
    + "|".join(
        re.escape(p).replace(r"\ ", r"\s+")
        for section in ("remove", "mark", "configure")
        for p in LEXICON[section]
        if " " in p
    )
    + r")\b",
    re.IGNORECASE,
)
_PHRASE_OPERATION = {
    p: section for section in ("remove", "mark", "configure") for p in LEXICON[section] if " " in p
}


# Saying a thing is unwanted asks for its removal, wherever it stands (issue
# 25: "This message of the assistant about hotel, I dont need it" ran as a
# search whose topic held the dismissal).
_DISMISSAL = re.compile(
    r"\b(?:don'?t|dont|do\s+not|no\s+longer)\s+(?:need|want)\s+(?:it|them|this|that|these|those)\b"
    r"|\b(?:is|are|it's|they're)\s+(?:not|no\s+longer)\s+(?:needed|wanted|necessary|required)\b"
    r"|\btake\s+(?:it|them|this|that|these|those)\s+(?:away|out)\b",
    re.IGNORECASE,
)


# A change verb and a setting's name make a configure (issue 25: "Can we
# bump the buffer up to 40 messages?" ran as a read of the last 40). Only
# names that are settings and nothing else, or "buffer ... to N": "make a
# summary of the buffer" is no configure.
_SETTING_CHANGE = re.compile(
    r"\b(?:set|sets|setting|change|changed|changing|update|raise|lower|increase|reduce|decrease|adjust|bump"
    r"|modify|revert|switch|put|make|configure|configured)\b"
    r"(?=.*?\b(?:buffer[\s_-]*(?:size|length|capacity|limit)|max(?:imum)?[\s_-]*tokens?|tokens?[\s_-]*(?:limit|budget)"
    r"|summary[\s_-]*(?:token[\s_-]*)?(?:limit|budget|length|size)|summary_token_limit|buffer_size|max_tokens"
    r"|eviction[\s_-]*(?:policy|batch|strategy|mode)|settings|config(?:uration)?"
    r"|buffer\s+(?:\w+\s+){0,2}?(?:to|at)\s+\d+)\b)"
    r"|\b(?:buffer[\s_-]*(?:size|length|capacity)|max(?:imum)?[\s_-]*tokens|summary[\s_-]*token[\s_-]*limit"
    r"|eviction[\s_-]*(?:policy|batch))\b(?=.*?\b(?:set|change|changed|put|make|raise|lower|increase|reduce|decrease"
    r"|adjust|bump|modify|revert|switch)\b)",
    re.IGNORECASE,
)


def write_operations(text: str) -> set[str]:
    """The write operations whose words appear anywhere in ``text`` (quoted spans aside)."""
    words = {w.lower().replace("\u2019", "'") for w in _TOKEN.findall(text)}
    found = {WRITE_FORMS[w] for w in words if w in WRITE_FORMS}
    if _DISMISSAL.search(text):
        found.add("remove")
    for m in _WRITE_PHRASES.finditer(text):
        found.add(_PHRASE_OPERATION[" ".join(m.group(0).lower().split())])
    if _SETTING_CHANGE.search(text):
        found.add("configure")
    if (
        "remove" not in found
        and ("go" in words or "longer" in words or "needed" in words)
        and removal_idiom(text)
    ):
        found.add("remove")
    return found


def without_needless_reason(text: str) -> str:
    """``text`` without a trailing ", don't need it anymore" (only after a remove)."""
    return _NOT_NEEDED.sub("", text)


_ESCAPES = re.compile(r"\\[a-zA-Z]|\(\?P?<\w+>|\(\?[:=!<]+")


def vocabulary_of(modules: Iterable[object]) -> frozenset[str]:
    """Every word the rules of ``modules`` read: their patterns' words and their word sets.

    The typo correction's targets are the grammar's own words, gathered
    from the grammar itself so that the two cannot drift apart.
    """
    found: set[str] = set()
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, re.Pattern):
                value = value.pattern
            if isinstance(value, str):
                found.update(re.findall(r"[a-z]{2,}", _ESCAPES.sub(" ", value).lower()))
            elif isinstance(value, (frozenset, set, tuple, dict)) and all(
                isinstance(v, str) for v in value
            ):
                found.update(w.lower() for v in value for w in str(v).split() if w.isalpha())
    return frozenset(found)
