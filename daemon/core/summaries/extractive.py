"""The offline summarizer: deterministic extractive summaries within a token budget.

No model and no network, so it is the default without an API key and the
fallback when Claude fails. It keeps the most informative sentences (rare
content words, numbers, names, questions, decisions) of the previous summary
and the new utterances, drops small talk and near-repeats, and writes one
line per block of turns saying who said what::

    Turns 1–3, about weather and tomorrow: the user asked “What's the weather
    today?” and “How about tomorrow?”; the assistant said “Tomorrow will be
    sunny with a high of 24.”

A later fold re-reads its own lines (head, speaker, quotes), so attribution
survives any number of merges; lines in another format (a Claude summary
before a fallback) are kept as plain sentences.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

from chd.core.tokens import TokenCounter
from chd.core.utterance import Utterance

__all__ = ["ExtractiveSummarizer"]

_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|$)")
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*|\d[\d.,:]*")
_STOPWORDS = frozenset(
    """a about above after again all also am an and any are as at be because been
    before being below between both but by can could did do does doing down during
    each few for from further had has have having he her here hers him his how i if
    in into is it its itself just let me more most my no nor not now of off ok okay
    on once only or other our ours out over own please same she should so some such
    than thank thanks that the their theirs them then there these they this those
    through to too under until up very was we were what when where which while who
    whom why will with would yes you your yours sure right well oh hi hello i'm
    i'll i've i'd it's that's you're let's can't don't isn't get got go going know
    like maybe much many one really think want yeah great good fine cool per ask
    asking asked glad welcome anything else something help""".split()
)
_DECISION = re.compile(
    r"\b(?:decided|agreed|will|must|need|plan|deadline|budget|prefer|chose|confirmed|"
    r"remember|important|don't|never|always)\b",
    re.IGNORECASE,
)
# Lines this summarizer writes, read back on the next fold.
_LINE = re.compile(r"^(?P<head>Turns? \d+(?:–\d+)?(?:, about [A-Za-z' ,\-]+)?): (?P<body>.+)$")
# "; the user asked “" can only start a phrase: quoted text holds no curly quotes.
_SPEAKER_START = re.compile(r"(?:^|; )the (user|assistant|system) (?=(?:asked|said|noted) “)")
_QUOTE = re.compile(r"“([^”]*)”")
# What the new material may take of the summary, in tokens of its own, even
# when the budget would allow all of it: otherwise it is a transcript, not a
# summary. About 60 % of a short batch, tending to 40 % of a long one, and
# never under two typical sentences, so a small batch keeps more than one.
def _keep(tokens: int) -> float:
    return max(min(0.6 * tokens, 24 + 0.4 * tokens), 40)


# Sentences scoring under this share of the best one are small talk.
_MIN_RELATIVE_SCORE = 0.25
# Tokens a quoted sentence costs beyond its own: quote marks, a joining word,
# now and then "the user said". An estimate for the greedy pass; the
# rendered text is counted exactly afterwards.
_UNIT_OVERHEAD = 4
_HEAD_OVERHEAD = 2
_ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class _Unit:
    """One sentence that may go into the summary."""

    order: int
    block: int
    speaker: str  # "" for a plain sentence of an earlier summary
    text: str
    new: bool
    score: float = 0.0


def _content_words(text: str) -> list[str]:
    return _content(_WORD.findall(text))


def _content(tokens: list[str]) -> list[str]:
    """The lower-cased tokens that are not stopwords."""
    lowered = [t.lower() for t in tokens]
    return [w for w in lowered if w not in _STOPWORDS]


def _clean(sentence: str) -> str:
    # Curly quotes delimit sentences in the output; inside one they would end it.
    return " ".join(sentence.replace("“", '"').replace("”", '"').split())


def _sentences(text: str) -> list[str]:
    return [s for m in _SENTENCE.finditer(text) if (s := _clean(m.group(0)))]


def _score(text: str, frequency: dict[str, int], documents: int, tokens: list[str], words: list[str]) -> float:
    """``tokens`` is ``_WORD.findall(text)`` and ``words`` their ``_content``: the caller has both."""
    if not words:
        return 0.0
    # Rare words carry more of what makes a sentence worth keeping. Summed in
    # sorted order: float addition in set order would depend on
    # PYTHONHASHSEED, and a tie would then break differently per process.
    weight = sum(math.log(1 + documents / frequency.get(w, 1)) for w in sorted(set(words)))
    if any(t[0].isdigit() for t in tokens):
        weight *= 1.3
    if any(t[0].isupper() for t in tokens[1:]):
        weight *= 1.2
    if text.endswith("?") or _DECISION.search(text):
        weight *= 1.3
    # Divide by sqrt(length) so long rambling sentences do not win by size
    # alone; below six words, so a terse "Booked." does not win by brevity.
    return weight / math.sqrt(max(len(tokens), 6))


def _likeness_words(text: str) -> frozenset[str]:
    """The words _alike compares: content words that are not numbers."""
    return frozenset(w for w in _content_words(text) if not w[0].isdigit())


def _alike(wa: frozenset[str], wb: frozenset[str]) -> bool:
    """Near-repeats ("Message 6 about X", "Message 7 about X") add nothing new."""
    if not wa or not wb:
        return False
    return len(wa & wb) / len(wa | wb) >= 0.7


def _verb(speaker: str, text: str) -> str:
    if speaker == "system":
        return "noted"
    return "asked" if text.endswith("?") else "said"


def _join_quotes(texts: list[str]) -> str:
    quoted = [f"“{t}”" for t in texts]
    if len(quoted) == 1:
        return quoted[0]
    return ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _head(utterances: Sequence[Utterance], sentences: Sequence[list[str]]) -> str:
    """``sentences``: the tokens of each sentence of ``utterances``, in order."""
    first = min(u.turn_number for u in utterances)
    last = max(u.turn_number for u in utterances)
    head = f"Turn {first}" if first == last else f"Turns {first}–{last}"
    topics = _topics(sentences)
    if topics:
        head += ", about " + (
            topics[0] if len(topics) == 1 else ", ".join(topics[:-1]) + " and " + topics[-1]
        )
    return head


def _topics(sentences: Sequence[list[str]], most: int = 3) -> list[str]:
    """Content words said at least twice in the block: most frequent, then names, first."""
    counts: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    names: dict[str, str] = {}
    common: set[str] = set()  # also seen in lower case: a word, not a name
    for tokens in sentences:
        for position, word in enumerate(tokens):
            key = word.lower()
            if len(key) < 4 or not key.isalpha() or key in _STOPWORDS:
                continue
            counts[key] = counts.get(key, 0) + 1
            first_seen.setdefault(key, len(first_seen))
            if word[0].islower():
                common.add(key)
            elif position:
                names[key] = word  # capitalised mid-sentence: a name
    names = {k: v for k, v in names.items() if k not in common}
    repeated = [w for w, n in counts.items() if n >= 2]
    repeated.sort(key=lambda w: (-counts[w], w not in names, first_seen[w]))
    return [names.get(w, w) for w in repeated[:most]]


class ExtractiveSummarizer:
    """Deterministic, offline extractive summaries (the ``Summarizer`` protocol)."""

    name = "extractive"

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter

    def summarize(self, previous: str, utterances: Sequence[Utterance], token_limit: int) -> str:
        heads, units = self._units(previous, utterances)
        if not units:
            return ""
        chosen = self._select(heads, units, token_limit)
        if not chosen:
            # Not even a head fits: the best sentence alone, cut to the limit.
            best = max(units, key=lambda u: (u.new, u.score, -u.order))
            return self._counter.fit(best.text, token_limit)
        text = self._render(heads, chosen)
        if self._counter.count(text) > token_limit:
            text = self._counter.fit(text, token_limit)
        return text

    # --- reading ---------------------------------------------------------------

    def _units(
        self, previous: str, utterances: Sequence[Utterance]
    ) -> tuple[list[str | None], list[_Unit]]:
        heads: list[str | None] = []
        raw: list[tuple[int, str, str, bool]] = []  # block, speaker, sentence, new
        for line in previous.splitlines():
            line = line.strip()
            if not line:
                continue
            block = len(heads)
            match = _LINE.match(line)
            phrases = _phrases(match.group("body")) if match else []
            if phrases:
                assert match is not None
                heads.append(match.group("head"))
                raw.extend((block, speaker, quote, False) for speaker, quote in phrases)
            else:
                heads.append(None)
                raw.extend((block, "", s, False) for s in _sentences(line))
        earlier = len(raw)
        if utterances:
            block = len(heads)
            for u in utterances:
                raw.extend((block, u.speaker, s, True) for s in _sentences(u.text))
        # Each sentence's tokens once: the head's topics, the content words
        # and the score each found them again, per fold.
        tokens = [_WORD.findall(sentence) for _, _, sentence, _ in raw]
        if utterances:
            heads.append(_head(utterances, tokens[earlier:]))
        words = [_content(t) for t in tokens]
        frequency: dict[str, int] = {}
        for content in words:
            for word in set(content):
                frequency[word] = frequency.get(word, 0) + 1
        seen: set[str] = set()
        units: list[_Unit] = []
        for order, (block, speaker, sentence, new) in enumerate(raw):
            key = " ".join(words[order]) or sentence.lower()
            if key in seen:
                continue
            seen.add(key)
            score = _score(sentence, frequency, len(raw), tokens[order], words[order])
            units.append(_Unit(order, block, speaker, sentence, new, score))
        return heads, units

    # --- choosing --------------------------------------------------------------

    def _select(self, heads: list[str | None], units: list[_Unit], limit: int) -> list[_Unit]:
        ranked = sorted(units, key=lambda u: (-u.score, u.order))
        # The best new sentence goes in first: a full summary must still take
        # in what was just evicted instead of only keeping its old lines.
        best_new = next((u for u in ranked if u.new), None)
        if best_new is not None:
            ranked.remove(best_new)
            ranked.insert(0, best_new)
        # Each text's tokens and likeness words once per call: comparing every
        # candidate with every chosen unit recomputed them, and that loop was
        # a third of a fold (py-spy of bench/bench_backends.py, default scenario).
        counted: dict[str, int] = {}
        likeness: dict[str, frozenset[str]] = {}

        def tokens(text: str) -> int:
            if text not in counted:
                counted[text] = self._counter.count(text)
            return counted[text]

        def words(text: str) -> frozenset[str]:
            if text not in likeness:
                likeness[text] = _likeness_words(text)
            return likeness[text]

        new_tokens = sum(tokens(u.text) for u in units if u.new)
        new_cap = _keep(new_tokens)
        floor = _MIN_RELATIVE_SCORE * max((u.score for u in units), default=0.0)
        chosen: list[_Unit] = []
        blocks: set[int] = set()
        cost = new_cost = 0
        for unit in ranked:
            if chosen and (unit.score <= 0 or unit.score < floor):
                continue  # small talk: "Thanks!", "Sure."
            mine = words(unit.text)
            twin = next((c for c in chosen if _alike(mine, words(c.text))), None)
            if twin is not None:
                # A near-repeat: keep the newer wording ("the budget is now
                # 1500 euros" corrects "the budget is 1200 euros").
                if unit.order > twin.order and twin is not best_new:
                    chosen[chosen.index(twin)] = unit
                    blocks.add(unit.block)
                continue
            size = tokens(unit.text) + _UNIT_OVERHEAD
            if chosen and unit.new and new_cost + size > new_cap:
                continue
            extra = size
            head = heads[unit.block]
            if unit.block not in blocks and head is not None:
                extra += tokens(head) + _HEAD_OVERHEAD
            if cost + extra > limit:
                if not chosen:
                    # Nothing fits whole: keep the start of the best sentence.
                    room = max(limit - (extra - tokens(unit.text)), 1)
                    clipped = self._clip(unit.text, room)
                    if clipped:
                        chosen.append(_replace_text(unit, clipped))
                        blocks.add(unit.block)
                        cost = limit
                continue
            chosen.append(unit)
            blocks.add(unit.block)
            cost += extra
            new_cost += size if unit.new else 0
        chosen.sort(key=lambda u: u.order)
        # The greedy pass estimated; the rendered text is what must fit.
        while len(chosen) > 1 and self._counter.count(self._render(heads, chosen)) > limit:
            weakest = min(
                (u for u in chosen if u is not best_new), key=lambda u: (u.score, -u.order)
            )
            chosen.remove(weakest)
        return chosen

    def _clip(self, text: str, limit: int) -> str:
        cut = self._counter.truncate(text, max(limit - 1, 0)).rstrip()
        return cut + _ELLIPSIS if cut else ""

    # --- writing ---------------------------------------------------------------

    def _render(self, heads: list[str | None], chosen: list[_Unit]) -> str:
        lines: list[str] = []
        for block in sorted({u.block for u in chosen}):
            units = [u for u in chosen if u.block == block]
            head = heads[block]
            if head is None:
                lines.append(" ".join(u.text for u in units))
                continue
            phrases: list[str] = []
            run: list[_Unit] = []
            for unit in units:
                if run and unit.speaker != run[0].speaker:
                    phrases.append(_phrase(run))
                    run = []
                run.append(unit)
            phrases.append(_phrase(run))
            lines.append(f"{head}: " + "; ".join(phrases))
        return "\n".join(lines)



def _phrase(run: list[_Unit]) -> str:
    """What one speaker said in a row: 'the user said “A” and asked “B”'."""
    speaker = run[0].speaker
    parts: list[str] = []
    texts: list[str] = []
    verb = _verb(speaker, run[0].text)
    for unit in run:
        if _verb(speaker, unit.text) != verb:
            parts.append(f"{verb} {_join_quotes(texts)}")
            verb, texts = _verb(speaker, unit.text), []
        texts.append(unit.text)
    parts.append(f"{verb} {_join_quotes(texts)}")
    return f"the {speaker} " + " and ".join(parts)


def _phrases(body: str) -> list[tuple[str, str]]:
    """(speaker, sentence) pairs of a line this summarizer wrote; [] for other text."""
    pieces = _SPEAKER_START.split(body)
    if len(pieces) < 3 or pieces[0].strip():
        return []
    out: list[tuple[str, str]] = []
    for speaker, chunk in zip(pieces[1::2], pieces[2::2]):
        out.extend((speaker, quote) for quote in _QUOTE.findall(chunk))
    return out


def _replace_text(unit: _Unit, text: str) -> _Unit:
    return _Unit(unit.order, unit.block, unit.speaker, text, unit.new, unit.score)
