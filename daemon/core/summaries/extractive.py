"""The offline summarizer: deterministic extractive summaries that use their budget.

No model and no network, so it is the default without an API key and the
fallback when Claude fails. It writes one line per block of turns, quoting
the sentences worth reading whole and listing the facts of the others::

    Turns 1–6, about Lisbon and Maya: the user said “I'm planning a trip to
    Lisbon with Maya from March 3 to March 5.”; the assistant said “Flight
    LT1200 leaves Frankfurt at 6:00.”; facts: 4 hours; XMBFVZ; 1700 euros

How it chooses (issue 13, measured by bench/bench_retention.py):

* When every informative sentence fits, every one is quoted: a budget with
  room is used, not capped.
* Otherwise the facts come first (names, numbers, dates, codes, versions,
  paths, addresses, messages, and the phrases of words uncommon in English:
  see sentences.py and ``_rare_words``), as a list, cheapest per weight
  first; a long fact that holds chosen ones replaces them when it can pay
  for its extra words. The rest of the budget turns the best sentences
  back into quotes. A fact list packs three to five times more facts per
  token than quotes.
* Weights are inverse document frequencies over everything the call can
  see: the previous summary, the new utterances and, when the caller passes
  one, the rest of the conversation (``SummaryContext``). A word every
  episode repeats weighs little wherever it appears.
* Two sentences are near-repeats only when they state the same facts with
  nearly the same words: sentences that differ in a name, a number or a
  rare word are both kept. A sentence that corrects an earlier one
  ("actually", "instead", "correction") replaces it.
* Topic words in a line's head come from what the line kept, and only when
  they fit.

A later fold re-reads its own lines (head, quotes, fact list), so
attribution and facts survive any number of merges; lines in another format
(a Claude summary before a fallback) are kept as plain sentences.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain

from chd.core.summaries.sentences import (
    MAX_SENTENCE,
    STOPWORDS,
    facts_in,
    facts_of,
    lower_words_of,
    name_words,
    opens_capitalised,
    said_elsewhere,
    split_sentences,
    words_of,
)
from chd.core.summaries.summarizer import SummaryContext
from chd.core.tokens import TokenCounter
from chd.core.utterance import Utterance

__all__ = ["ExtractiveSummarizer", "FACTS_LABEL"]

# Anchored and with one unbounded run whose failure ends the match: linear.
_HEAD = re.compile(r"Turns? (\d+)(?:–(\d+))?(?:, about [A-Za-z' ,\-]+)?: ")
# "the user said “…”", or a speaker named by a "Name: " prefix: "Dr. Okafor said “…”".
_SPEAKER_START = re.compile(
    r"(?:^|; )(?:the (user|assistant|system)|([A-Z][\w.'’\-]{0,30}(?: [A-Z][\w.'’\-]{0,30}){0,3})) "
    r"(?=(?:asked|said|noted) “)"
)
_ROLES = frozenset({"user", "assistant", "system"})
# A speaker's name opening an utterance of a multi-party transcript ("Tomás
# Rivera: the gel is ready"), a title allowed; issue 26: every human there is
# a "user", and the name was read as a fact of every line.
_NAME_PREFIX = re.compile(
    r"((?:[A-Z][a-z]{1,4}\. )?[A-Z][\w'’\-]{0,30}(?: [A-Z][\w'’\-]{0,30}){0,3}): (?=\S)"
)
# Labels that open a line the way a name would, and are not one.
_LABELS_NOT_NAMES = frozenset(
    "note notes update updated edit ps fyi question answer summary error warning todo re subject step q a tip "
    "reminder correction important info status result results action decision agenda hint example".split()
)
_QUOTE = re.compile(r"“([^“”]*)”")
FACTS_LABEL = "facts: "
_DECISION = re.compile(
    r"\b(?:decided|agreed|will|must|need|plan|deadline|budget|prefer|chose|confirmed|"
    r"remember|important|never|always)\b",
    re.IGNORECASE,
)
_CORRECTION = frozenset(
    {"actually", "correction", "instead", "sorry", "rather", "changed", "update", "updated"}
)
# Sentences scoring under this share of the best one, and stating no fact, are small talk.
_MIN_RELATIVE_SCORE = 0.25
_ELLIPSIS = "…"
# cl100k_base token ids from which a one-token word counts as uncommon: the
# first fifth of the table holds the everyday words (" museum" 24925 is
# past it, " station" 8216 is not).
_COMMON_RANKS = 20000
# A line per this many tokens of budget at most: each head costs tokens that
# a fact could use, so old blocks are joined into longer turn ranges.
_TOKENS_PER_BLOCK = 96


@dataclass(slots=True)
class _Block:
    turn_from: int | None  # None: plain text of another summarizer
    turn_to: int | None

    def head(self, topics: Sequence[str] = ()) -> str:
        assert self.turn_from is not None and self.turn_to is not None
        if self.turn_from == self.turn_to:
            head = f"Turn {self.turn_from}"
        else:
            head = f"Turns {self.turn_from}–{self.turn_to}"
        if topics:
            head += ", about " + (
                topics[0] if len(topics) == 1 else ", ".join(topics[:-1]) + " and " + topics[-1]
            )
        return head


@dataclass(slots=True)
class _Sentence:
    order: int
    block: int
    speaker: str  # "" for a plain sentence of another summary
    text: str
    facts: tuple[str, ...]
    score: float = 0.0
    words: frozenset[str] = frozenset()
    items: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (item text, its facts): see _items_of


@dataclass(slots=True)
class _Fact:
    text: str
    block: int
    order: int
    weight: float
    cost: int = 0
    covers: tuple[str, ...] = ()  # shorter facts said word for word inside this one
    facts: tuple[
        str, ...
    ] = ()  # the facts this item states (an item is a fact with its anchor words)
    speaker: str = ""  # a speaker named by a "Name: " prefix; "" for the roles


@dataclass(slots=True)
class _Plan:
    """What goes into the summary: quoted sentences and listed facts."""

    quoted: list[_Sentence] = field(default_factory=list)
    listed: list[_Fact] = field(default_factory=list)


class _ShortCounts:
    """Token counts of facts, words and sentences, remembered: a fold re-counts the same ones."""

    def __init__(self, counter: TokenCounter, most: int = 4096) -> None:
        self._counter = counter
        self._known: dict[str, int] = {}
        self._rare: dict[str, int] = {}
        self._most = most
        # Token ids, when the counter can tell them (tiktoken's can).
        self._ids: Callable[[str], list[int]] | None = getattr(counter, "token_ids", None)

    def __call__(self, text: str) -> int:
        known = self._known.get(text)
        if known is None:
            known = self._counter.count(text)
            if len(text) <= MAX_SENTENCE:
                if len(self._known) >= self._most:
                    self._known.clear()  # a crude bound; refilled by the next folds
                self._known[text] = known
        return known

    def count(self, text: str) -> int:
        return self(text)

    def rarity(self, word: str) -> int:
        """2 for a word (lower case) the tokenizer splits, 1 for one token learned late, else 0."""
        known = self._rare.get(word)
        if known is None:
            if self._ids is not None:
                ids = self._ids(" " + word)
                known = 2 if len(ids) >= 2 else int(bool(ids) and ids[0] >= _COMMON_RANKS)
            else:
                known = 2 if self(" " + word) >= 2 else 0
            if len(self._rare) >= self._most:
                self._rare.clear()
            self._rare[word] = known
        return known


class ExtractiveSummarizer:
    """Deterministic, offline extractive summaries (the ``Summarizer`` protocol)."""

    name = "extractive"
    reads_context = True

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter
        self._count = _ShortCounts(counter)
        # A call renders and counts the same whole text more than once (the
        # plan's last check, the summary with and without topics).
        self._count_text = functools.lru_cache(maxsize=8)(counter.count)

    def summarize(
        self,
        previous: str,
        utterances: Sequence[Utterance],
        token_limit: int,
        context: SummaryContext | None = None,
    ) -> str:
        seen = tuple(u.text for u in context.buffered) if context is not None else ()
        blocks, sentences, listed = _read(previous, utterances, self._count, seen)
        if not sentences and not listed:
            return ""
        _join_blocks(blocks, sentences, listed, max(1, token_limit // _TOKENS_PER_BLOCK))
        weights = _weights(sentences, listed, context)
        _score(sentences, weights)
        sentences = _distinct(sentences)
        # Anchor words per fact by the room there is per fact (issue 26): a
        # fact with what it is about when the budget allows, bare when it is short.
        distinct = len({t for s in sentences for t in s.facts}) + len(listed)
        width = _anchor_width(token_limit, distinct)
        for sentence in sentences:
            sentence.items = _items_of(sentence.text, sentence.facts, width)
        _mark_corrections(sentences, listed)
        facts = _facts(sentences, listed, weights)
        if context is not None and context.summary:
            # Said elsewhere in the summary already: a copy here adds little.
            # As whole words: "€500" is not said by "€5000", nor "2" by "v2.1.0".
            said = said_elsewhere((t for f in facts for t in f.facts), context.summary)
            for fact in facts:
                if fact.facts and all(t in said for t in fact.facts):
                    fact.weight *= 0.2
        for fact in facts:
            fact.cost = self._count(fact.text) + 1
            rarity = self._count.rarity
            fact.weight *= max(_shape_prior(t, rarity) for t in fact.facts or (fact.text,))
        plan = self._plan(blocks, sentences, facts, token_limit)
        text = _render(blocks, plan, with_topics=True, weights=weights)
        if self._count_text(text) > token_limit:
            text = _render(blocks, plan, with_topics=False, weights=weights)
        if not text or self._count_text(text) > token_limit:
            best = max(sentences, key=lambda s: (s.score, -s.order), default=None)
            if best is None:
                return self._whole_items(facts, token_limit)
            clipped = self._clip(best.text, token_limit)
            return clipped if self._counter.count(clipped) <= token_limit else ""
        return text

    # --- choosing --------------------------------------------------------------

    def _plan(
        self, blocks: list[_Block], sentences: list[_Sentence], facts: list[_Fact], limit: int
    ) -> _Plan:
        floor = _MIN_RELATIVE_SCORE * max((s.score for s in sentences), default=0.0)
        worth = [s for s in sentences if s.facts or (s.score > 0 and s.score >= floor)]
        in_worth = _quoted_facts(worth)
        unquoted = [f for f in facts if f.text not in in_worth]
        held = {t for f in unquoted for t in f.covers}
        everything = _Plan(quoted=list(worth), listed=[f for f in unquoted if f.text not in held])
        if self._fits(blocks, everything, limit):
            return everything
        # Facts first, the most weight per token first; a long fact that holds
        # chosen ones replaces them and costs only its extra words.
        budget = limit - self._overhead(blocks, {f.block for f in facts})
        chosen, used = _choose(facts, budget)
        plan = _Plan(listed=chosen)
        # Then quotes, where the room left allows: a quote replaces the
        # facts it holds, so it costs only its extra words.
        listed = {f.text: f for f in plan.listed}
        counted: dict[int, int] = {}
        ranked = sorted(worth, key=lambda s: (-s.score, s.order))
        for sentence in ranked:
            if sentence.order not in counted:
                counted[sentence.order] = self._count(sentence.text) + 4
            cost = counted[sentence.order]
            covered = [
                listed[t] for t in dict.fromkeys(t for t, _ in sentence.items) if t in listed
            ]
            extra = cost - sum(f.cost for f in covered)
            if extra <= budget - used:
                plan.quoted.append(sentence)
                for fact in covered:
                    del listed[fact.text]
                used += extra
        plan.listed = list(listed.values())
        # The estimate is a sum of parts; the rendered text is what must fit.
        # Each round drops about as much as the text is over, so the rounds
        # stay few whatever the input (issue 14: no call may be quadratic).
        while plan.quoted or plan.listed:
            over = self._count_text(_render(blocks, plan, with_topics=False)) - limit
            if over <= 0:
                break
            _drop_weakest(plan, facts, over, counted)
        if not plan.quoted and worth:
            # No sentence fits whole: the start of the best one tells what the facts are about.
            room = limit - self._count_text(_render(blocks, plan, with_topics=False)) - 8
            best = max(worth, key=lambda s: (s.score, -s.order))
            clipped = self._clip(best.text, room) if room >= 8 else ""
            if clipped:
                trial = _Plan([_replace_text(best, clipped)], plan.listed)
                if self._fits(blocks, trial, limit):
                    return trial
        return plan

    def _fits(self, blocks: list[_Block], plan: _Plan, limit: int) -> bool:
        return self._count_text(_render(blocks, plan, with_topics=False)) <= limit

    def _overhead(self, blocks: list[_Block], used: set[int]) -> int:
        return sum(
            self._counter.count(blocks[b].head() + ": " + FACTS_LABEL) + 1
            for b in used
            if blocks[b].turn_from is not None
        )

    def _whole_items(self, facts: Sequence[_Fact], limit: int) -> str:
        """The facts that fit in ``limit`` as "a; b; c", each whole (sum33).

        Cut at a token, "Oakhurst Barn at 11:00 am" ended "Oakhurst Barn at"
        and "USD 5 million" could end "USD 5".
        """
        kept: list[str] = []
        used = 0
        for fact in sorted(facts, key=lambda f: (-f.weight / max(1, f.cost), f.order)):
            if used + fact.cost <= limit:
                kept.append(fact.text)
                used += fact.cost
        text = "; ".join(kept)
        # Each item is at least a token: dropping as many items as the text is over
        # fits it in a round or two, whatever the count (issue 14: nothing quadratic).
        while kept and (over := self._count_text(text) - limit) > 0:
            del kept[-over:]
            text = "; ".join(kept)
        return text

    def _clip(self, text: str, limit: int) -> str:
        cut = self._counter.truncate(text, max(limit - 1, 0)).rstrip()
        return cut + _ELLIPSIS if cut else ""


# --- reading -------------------------------------------------------------------


def _read(
    previous: str, utterances: Sequence[Utterance], counter: _ShortCounts, seen: Sequence[str] = ()
) -> tuple[list[_Block], list[_Sentence], list[_Fact]]:
    """The blocks, sentences and listed facts of the previous summary and the new utterances.

    ``seen``: texts read only to learn names ("Kenji" mid-sentence in the
    buffer makes "Kenji booked it." a name here).
    """
    blocks: list[_Block] = []
    raw: list[tuple[int, str, str]] = []  # block, speaker, sentence
    listed: list[tuple[int, str, str, int]] = []  # block, named speaker, item, its group
    for line in previous.splitlines():
        line = line.strip()
        if not line:
            continue
        parsed = _parse_line(line)
        if parsed is None:
            blocks.append(_Block(None, None))
            raw.extend((len(blocks) - 1, "", s) for s in split_sentences(line))
            continue
        first, last, phrases, items = parsed
        blocks.append(_Block(first, last))
        raw.extend((len(blocks) - 1, speaker, quote) for speaker, quote in phrases)
        for speaker, item in items:
            group = len(listed)
            listed.extend((len(blocks) - 1, speaker, piece, group) for piece in _pieces_of(item))
    if utterances:
        blocks.append(
            _Block(min(u.turn_number for u in utterances), max(u.turn_number for u in utterances))
        )
        named = _speaker_names([u.text for u in utterances] + list(seen))
        for u in utterances:
            speaker, text = _speaker_of(u.speaker, u.text, named)
            raw.extend((len(blocks) - 1, speaker, s) for s in split_sentences(text))
    read = [_whole_words(text) for _, _, text in raw]
    # Names only ever decide whether a sentence's first word is one
    # (facts_in), and every name is capitalised: without a capitalised
    # opener there is nothing to look for (issue 17: the buffer's names
    # were a fifth of a fold's reading).
    names: set[str] = set()
    if any(map(opens_capitalised, read)):
        names = name_words(s for _, _, s in raw)
        for text in seen:
            names.update(name_words(_sentences_of(text)))
        names.update(_unknown_openers((s for _, _, s in raw), counter))
    rare, uncommon = _rare_words((s for _, _, s in raw), counter)
    sentences = [
        _Sentence(order, block, speaker, text, facts_in(words, names, rare, uncommon))
        for order, ((block, speaker, text), words) in enumerate(zip(raw, read))
    ]
    offset = len(sentences)
    facts = [
        # A one-word item an earlier fold listed is its own fact: reading the
        # facts of every listed item again was a fifth of a fold's time.
        _Fact(
            text,
            block,
            offset + group,
            0.0,
            facts=_listed_facts(text, names, rare, uncommon),
            speaker=speaker,
        )
        for block, speaker, text, group in listed
    ]
    return blocks, sentences, facts


# Facts stated in one sentence share an item, joined by this (issue 26: "Oakhurst
# USD 9,800" reads as what the number is about; the bare list split them apart).
_GROUP_JOIN = ", "


def _pieces_of(item: str) -> list[str]:
    """The facts of one listed item, each a piece a later fold can keep or drop (a group: see _GROUP_JOIN)."""
    if _GROUP_JOIN not in item:
        return [item]
    pieces = [piece for piece in item.split(_GROUP_JOIN) if piece]
    # A comma inside brackets or quotes is part of one fact ("(a, b)"): not a group's joint.
    if any(_balanced(piece) != piece or piece.count("'") % 2 for piece in pieces):
        return [item]
    return pieces


def _grouped(facts: Iterable[_Fact]) -> list[str]:
    """The texts of ``facts`` (in order), those of one sentence joined into one item."""
    out: list[str] = []
    last = None
    for fact in facts:
        if out and fact.order == last:
            out[-1] += _GROUP_JOIN + fact.text
        else:
            out.append(fact.text)
        last = fact.order
    return out


def _name_prefix(text: str) -> str:
    match = _NAME_PREFIX.match(text[:80])
    if match is None:
        return ""
    name = match.group(1)
    return "" if name.split(" ", 1)[0].lower().rstrip(".") in _LABELS_NOT_NAMES else name


def _speaker_names(texts: Sequence[str]) -> set[str]:
    """The "Name: " prefixes that open at least two of ``texts``: speakers, not a one-off label."""
    seen: set[str] = set()
    names: set[str] = set()
    for text in texts:
        name = _name_prefix(text)
        if name:
            (names if name in seen else seen).add(name)
    return names


def _speaker_of(speaker: str, text: str, names: set[str]) -> tuple[str, str]:
    """(who said ``text``, ``text`` without its "Name: " prefix) when the prefix is a known speaker."""
    if speaker != "user" or not names:
        return speaker, text
    name = _name_prefix(text)
    if name in names:
        return name, text[len(name) + 2 :]
    return speaker, text


def _listed_facts(
    text: str, names: set[str], rare: set[str], uncommon: set[str]
) -> tuple[str, ...]:
    if " " not in text:
        return (text,)
    return _item_facts(text)


@functools.lru_cache(maxsize=8192)
def _item_facts(text: str) -> tuple[str, ...]:
    """The facts of an item an earlier fold listed, by their shape alone (the item came from facts)."""
    return tuple(facts_of(text, set())) or (text,)


def _whole_words(text: str) -> str:
    """``text`` without the word a clip cut ("Callum replied from callum@…"): no half fact is read from it."""
    if text.endswith(_ELLIPSIS):
        return text[: -len(_ELLIPSIS)].rsplit(" ", 1)[0]
    return text


def _unknown_openers(sentences: Iterable[str], counter: _ShortCounts) -> set[str]:
    """Capitalised first words the tokenizer splits even in lower case: names ("Folha near the hotel").

    A capital at a sentence start says nothing, but an English word there
    ("Remember", "Tickets") is one token; a word split in lower case is a
    name, unless it reads as a verb form ("Noted", "Pinning").
    """
    out: set[str] = set()
    for sentence in sentences:
        first = sentence.split(" ", 1)[0].rstrip(",.;:!?")
        lowered = first.lower()
        if (
            len(first) >= 3
            and first[0].isupper()
            and first[1:].islower()
            and first.isalpha()
            and lowered not in STOPWORDS
            and not lowered.endswith(("ing", "ed"))
            and counter.rarity(lowered) == 2
        ):
            out.add(first)
    return out


def _rare_words(sentences: Iterable[str], counter: _ShortCounts) -> tuple[set[str], set[str]]:
    """Lower-case words the tokenizer splits ("pydantic", "release-prep"), and the uncommon ones.

    cl100k_base has a single token for every common English word (" refund",
    " mistake"); a word it must split is a name, a tool, an identifier. Its
    tokens are numbered in the order the tokenizer learned them, which
    follows how often they occur in text: a word that is one token past
    ``_COMMON_RANKS`` (" cathedral" 80250, " sesame" 92223, against " hotel"
    9689, " budget" 8199) is uncommon. As the object of a sentence it is
    usually what the conversation is about: the place, the allergen, the
    material (sentences.facts_of).
    """
    # English words only: the table splits nearly every word of other scripts
    # and languages ("übernachten"), which says nothing about its rarity there.
    words = {
        w for s in sentences for w in words_of(s) if w.islower() and len(w) >= 4 and w.isascii()
    }
    split: set[str] = set()
    uncommon: set[str] = set()
    for word in words:
        if word in STOPWORDS:
            continue
        kind = counter.rarity(word)
        if kind == 2:
            split.add(word)
        elif kind == 1:
            uncommon.add(word)
    return split, uncommon


def _parse_line(line: str) -> tuple[int, int, list[tuple[str, str]], list[tuple[str, str]]] | None:
    """A line this summarizer wrote: its turn range, (speaker, quote) pairs and (named speaker, item) pairs."""
    head = _HEAD.match(line)
    if head is None:
        return None
    first = int(head.group(1))
    last = int(head.group(2) or first)
    body = line[head.end() :]
    close = body.rfind("”")
    quoted, tail = (body[: close + 1], body[close + 1 :]) if close >= 0 else ("", body)
    facts: list[tuple[str, str]] = []
    if tail.startswith("; " + FACTS_LABEL):
        facts = _items_said(tail.split(FACTS_LABEL, 1)[1].split("; "))
    elif close < 0 and not _SPEAKER_START.match(body):
        facts = _items_said(body.split("; "))  # a line of facts alone
    elif tail.strip():
        return None
    phrases: list[tuple[str, str]] = []
    if quoted:
        pieces = _SPEAKER_START.split(quoted)
        if len(pieces) < 4 or pieces[0].strip():
            return None
        for role, name, chunk in zip(pieces[1::3], pieces[2::3], pieces[3::3]):
            phrases.extend((role or name, quote) for quote in _QUOTE.findall(chunk))
    if not phrases and not facts:
        return None
    return first, last, phrases, facts


# "Tomás Rivera (user): No. 3": the items from here on are that speaker's.
_LABELLED = re.compile(r"([A-Z][\w.'’\-]{0,30}(?: [A-Z][\w.'’\-]{0,30}){0,4}) \(user\): ")


def _items_said(items: list[str]) -> list[tuple[str, str]]:
    """(named speaker, item) for a fact list, a "Name (user): " label naming the speaker of what follows."""
    out: list[tuple[str, str]] = []
    speaker = ""
    for item in items:
        label = _LABELLED.match(item)
        if label is not None:
            speaker, item = label.group(1), item[label.end() :]
        if item:
            out.append((speaker, item))
    return out


def _join_blocks(
    blocks: list[_Block], sentences: list[_Sentence], facts: list[_Fact], most: int
) -> None:
    """Join neighbouring headed blocks, the two with the least content first, down to ``most``.

    With a heap of neighbour pairs and the items moved once at the end: a
    previous summary of thousands of lines condensed into a small budget
    (a lowered summary_token_limit) cost quadratic time, 3 s for 4,000 lines.
    """
    headed = [b.turn_from is not None for b in blocks]
    count = sum(headed)
    if count <= most:
        return
    size = [0] * len(blocks)
    items: list[_Sentence | _Fact] = [*sentences, *facts]
    for item in items:
        size[item.block] += 1
    after = list(range(1, len(blocks) + 1))  # the next block still there (len: none)
    before = list(range(-1, len(blocks) - 1))
    into = list(range(len(blocks)))  # the block each one was joined into
    # (joined size, left block): ties go to the leftmost pair, as the blocks read.
    pairs = [
        (size[a] + size[a + 1], a) for a in range(len(blocks) - 1) if headed[a] and headed[a + 1]
    ]
    heapq.heapify(pairs)
    while count > most and pairs:
        joined, a = heapq.heappop(pairs)
        b = after[a]
        if into[a] != a or b >= len(blocks) or not headed[b] or size[a] + size[b] != joined:
            continue  # stale: one of the two was joined since
        blocks[a] = _Block(
            min(blocks[a].turn_from, blocks[b].turn_from),  # type: ignore[type-var]
            max(blocks[a].turn_to, blocks[b].turn_to),  # type: ignore[type-var]
        )
        size[a] += size[b]
        into[b] = a
        after[a] = after[b]
        if after[b] < len(blocks):
            before[after[b]] = a
        count -= 1
        for left in (before[a], a):
            right = after[left] if left >= 0 else len(blocks)
            if left >= 0 and right < len(blocks) and headed[left] and headed[right]:
                heapq.heappush(pairs, (size[left] + size[right], left))
    # A block is only ever joined into one on its left: resolved left to right.
    for b in range(len(blocks)):
        into[b] = into[into[b]]
    for item in items:
        item.block = into[item.block]


def _weights(
    sentences: list[_Sentence], facts: list[_Fact], context: SummaryContext | None
) -> dict[str, float]:
    """Inverse document frequency of each lower-cased word over all the call can see."""
    documents: list[frozenset[str]] = [_words_in(s.text) for s in sentences] + [
        _words_in(f.text) for f in facts
    ]
    if context is not None:
        # The same buffered utterances and summary lines come back call after
        # call: their sentences' words are remembered, not read again.
        for line in context.summary.splitlines():
            documents.extend(_sentence_words(line))
        for u in context.buffered:
            documents.extend(_sentence_words(u.text))
    # Counted in C (Counter's update), in the order the loop over documents met the words.
    frequency = Counter(chain.from_iterable(documents))
    total = len(documents)
    return {w: math.log(1 + total / n) for w, n in frequency.items()}


@functools.lru_cache(maxsize=8192)
def _words_in(text: str) -> frozenset[str]:
    return frozenset(lower_words_of(text))


@functools.lru_cache(maxsize=8192)
def _lower_words(text: str) -> tuple[str, ...]:
    return tuple(lower_words_of(text)) or (text.lower(),)


@functools.lru_cache(maxsize=4096)
def _sentences_of(text: str) -> tuple[str, ...]:
    return tuple(split_sentences(text))


@functools.lru_cache(maxsize=4096)
def _sentence_words(text: str) -> tuple[frozenset[str], ...]:
    return tuple(_words_in(sentence) for sentence in _sentences_of(text))


def _score(sentences: list[_Sentence], weights: dict[str, float]) -> None:
    for sentence in sentences:
        tokens = lower_words_of(sentence.text)
        content = sorted(set(tokens) - STOPWORDS)
        sentence.words = frozenset(w for w in content if not w[0].isdigit())
        if not content:
            continue
        # Summed in sorted order so that a tie breaks the same in every process.
        weight = sum(weights.get(w, 1.0) for w in content)
        if sentence.facts:
            weight *= 1.0 + 0.15 * len(sentence.facts)
        if sentence.text.endswith("?") or _DECISION.search(sentence.text):
            weight *= 1.3
        sentence.score = weight / math.sqrt(max(len(tokens), 6))


# Facts of up to this many words (names, "Ticket TCK-48601") make the facts
# inside them redundant; longer ones (messages, decisions) do not.
_SHORT_FACT_WORDS = 3
# A long fact covers the facts said inside it of up to this many words (an
# error message's names and codes). Every run of any length made a fact of
# a few hundred words (a long run of names or measurements) cost cubic time:
# 7 s for 64,000 characters of "3 by 4 by 5".
_COVERED_WORDS = 8

# Near-repeats are looked for among this many earlier sentences with the same
# facts (and corrections among as many before it): a bound, so that a batch of
# thousands of tiny sentences costs linear time.
_WINDOW = 48


def _distinct(sentences: list[_Sentence]) -> list[_Sentence]:
    """Without repeats: same facts and nearly the same words; a correction replaces what it corrects."""
    kept: dict[int, _Sentence] = {}  # by order, in order
    exact: dict[tuple[str, frozenset[str], frozenset[str]], int] = {}
    by_facts: dict[frozenset[str], list[int]] = {}
    recent: list[int] = []
    for sentence in sentences:
        facts = frozenset(sentence.facts)
        key = (sentence.speaker, facts, sentence.words)
        twin = exact.get(key)
        if twin is None:
            correcting = bool(sentence.words & _CORRECTION)
            for order in reversed(by_facts.get(facts, [])[-_WINDOW:]):
                earlier = kept.get(order)
                if (
                    earlier is not None
                    and earlier.speaker == sentence.speaker
                    and (_jaccard(earlier.words, sentence.words) >= 0.8)
                ):
                    twin = order
                    break
            if twin is None and correcting:
                for order in reversed(recent[-_WINDOW:]):
                    earlier = kept.get(order)
                    if (
                        earlier is not None
                        and earlier.facts
                        and _jaccard(earlier.words, sentence.words) >= 0.5
                    ):
                        twin = order
                        break
        if twin is not None and twin in kept:
            del kept[twin]  # the newer wording
        kept[sentence.order] = sentence
        exact[key] = sentence.order
        by_facts.setdefault(facts, []).append(sentence.order)
        recent.append(sentence.order)
    return sorted(kept.values(), key=lambda s: s.order)


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 1.0 if a == b else 0.0
    return len(a & b) / len(a | b)


def _facts(
    sentences: list[_Sentence], listed: list[_Fact], weights: dict[str, float]
) -> list[_Fact]:
    """Every distinct fact once, in the block where it was last stated, weighted by its rarity."""
    where: dict[str, _Fact] = {}
    candidates = [
        _Fact(
            text,
            s.block,
            s.order,
            0.0,
            facts=inner,
            speaker="" if s.speaker in _ROLES else s.speaker,
        )
        for s in sentences
        for text, inner in s.items
    ] + listed
    old: dict[str, int] = {}  # old value -> where it was marked superseded
    for s in sentences:
        for value in superseded_by(s.items):
            old[value] = max(old.get(value, -1), s.order)
    listed_ids = {id(f) for f in listed}
    for fact in sorted(candidates, key=lambda f: f.order):
        # An item of the previous summary predates every sentence that marks it
        # superseded (its order only numbers it after them).
        if fact.facts and all(
            t in old if id(fact) in listed_ids else old.get(t, -1) > fact.order for t in fact.facts
        ):
            continue  # a later sentence says it changed: the state is the new value (was this)
        where.pop(fact.text, None)
        where[fact.text] = fact
    # "TCK-48601" is kept verbatim inside "Ticket TCK-48601": one of them is
    # enough. A longer fact (an error message, a decision after a colon)
    # costs more than the names in it, so those stay facts of their own and
    # the plan lists the long one only when it can pay for its extra words.
    inside: set[str] = set()
    for text in where:
        words = text.split(" ")
        if 1 < len(words) <= _SHORT_FACT_WORDS:
            inside.update(_runs(words, text))
    for text in inside & set(where):
        del where[text]
    for fact in where.values():
        words = fact.text.split(" ")
        if len(words) > _SHORT_FACT_WORDS:
            fact.covers = tuple(
                sorted(t for t in _runs(words, fact.text, _COVERED_WORDS) if t in where)
            )
        if " (was " in fact.text:
            # The marked value replaces its bare copy when chosen after it (issue 26).
            fact.covers = tuple(sorted({*fact.covers, *(t for t in fact.facts if t in where)}))
    for fact in where.values():
        fact.weight = sum(_fact_weight(t, weights) for t in fact.facts or (fact.text,))
        if "(was " in fact.text:
            # The old value is worth a little: it says the state changed.
            fact.weight += _WAS_WEIGHT * sum(
                _fact_weight(old, weights) for old in _WAS.findall(fact.text)
            )
    return sorted(where.values(), key=lambda f: f.order)


def _fact_weight(text: str, weights: dict[str, float]) -> float:
    words = _lower_words(text)
    weight = 1.0 + sum(weights.get(w, 1.0) for w in words) / len(words)
    if text.islower() and text.replace("-", "").replace(" ", "").isalpha():
        weight *= 0.5  # a rare word: maybe a name, maybe just an unusual word
    return weight


# A candidate that reads as a word of talk rather than a thing (issue 26: "workable",
# "saved sanity", "picturing", "fussy" filled the lists of the conversations written
# blind; their writers marked names, numbers and nouns). Weighed at this share.
_TALK_WEIGHT = 0.4
# Endings of adjectives, adverbs and verb forms; a "-y" after t, r or c is a noun ("party").
_NOT_NOUN = ("ing", "ed", "able", "ible", "ous", "ful", "ive", "ly", "less", "ish")
_LETTER_RUN = re.compile(r"(\w)\1\1")  # "noooo"


def _shape_prior(text: str, rarity: Callable[[str], int]) -> float:
    """``_TALK_WEIGHT`` for a lower-case candidate that ends like an adjective or a verb, else 1.

    Numbers, codes, quoted literals, names and identifiers the tokenizer
    splits ("release-prep", "mypy") keep their weight, and so do nouns
    ("engineered oak", "walk-in shower"), which the tuning set's writers marked.
    """
    if any(c.isdigit() or c in "@/_#'\"`" for c in text):
        return 1.0
    words = text.split(" ")
    if any(w[:1].isupper() for w in words):
        return 1.0
    if text.islower() and any(rarity(w) == 2 for w in words if w.isalpha() or "-" in w):
        return 1.0
    last = words[-1].lower()
    if (
        last.endswith(_NOT_NOUN)
        or (last.endswith("y") and last[-2:-1] not in "trc")
        or _LETTER_RUN.search(last)
    ):
        return _TALK_WEIGHT
    return 1.0


def _runs(words: list[str], whole: str, most: int | None = None) -> set[str]:
    """The runs of ``words`` shorter than all of them (``whole``), of at most ``most`` words."""
    longest = len(words) if most is None else most
    return {
        run
        for i in range(len(words))
        for j in range(i + 1, min(len(words), i + longest) + 1)
        if (run := " ".join(words[i:j])) != whole
    }


def _choose(facts: Sequence[_Fact], budget: int) -> tuple[list[_Fact], int]:
    """The facts to list within ``budget`` tokens, the most weight per token first, and the tokens they take."""
    chosen: dict[str, _Fact] = {}
    held: set[str] = set()  # inside a chosen long fact
    stated: set[str] = set()  # the facts the chosen items state
    used = 0
    for fact in sorted(facts, key=lambda f: (-f.weight / f.cost, f.order)):
        if fact.text in held or (
            fact.facts and stated.issuperset(fact.facts) and " (was " not in fact.text
        ):
            continue
        inner = [chosen[t] for t in fact.covers if t in chosen]
        extra = fact.cost - sum(f.cost for f in inner)
        if used + extra <= budget:
            for f in inner:
                del chosen[f.text]
            chosen[fact.text] = fact
            held.update(fact.covers)
            stated.update(fact.facts)
            used += extra
    return list(chosen.values()), used


def _quoted_facts(quoted: Sequence[_Sentence]) -> set[str]:
    return {t for s in quoted for t, _ in s.items}


def _replace_text(sentence: _Sentence, text: str) -> _Sentence:
    return _Sentence(
        sentence.order,
        sentence.block,
        sentence.speaker,
        text,
        sentence.facts,
        sentence.score,
        items=sentence.items,
    )


def _drop_weakest(plan: _Plan, facts: Sequence[_Fact], over: int, counted: dict[int, int]) -> None:
    """Facts before prose: unquote the weakest sentences (listing their facts), else drop the weakest facts.

    Drops items worth about ``over`` tokens at once.
    """
    if plan.quoted:
        plan.quoted.sort(key=lambda s: (s.score, -s.order))
        freed = 0
        dropped: list[_Sentence] = []
        while plan.quoted and freed < over:
            weakest = plan.quoted.pop(0)
            dropped.append(weakest)
            freed += counted.get(weakest.order, len(weakest.text) // 4 + 4)
        still = _quoted_facts(plan.quoted)
        listed = {f.text for f in plan.listed}
        wanted = {t for s in dropped for t, _ in s.items} - still - listed
        plan.listed.extend(f for f in facts if f.text in wanted)
        return
    plan.listed.sort(key=lambda f: (f.weight / f.cost, -f.order))
    freed = 0
    cut = 0
    while cut < len(plan.listed) and (freed < over or cut == 0):
        freed += plan.listed[cut].cost
        cut += 1
    del plan.listed[:cut]


# --- items: a fact with what it is about --------------------------------------------

# Issue 26: a bare list ("75 micrograms; 12:30; 5.3 mmol/L") does not say what
# a number measures. An item is a fact with the content words before it in
# its clause (the noun it measures, the name of what it identifies), the
# function words dropped: "levothyroxine dose 75 µg"; facts whose words
# touch share one item. Anchor words per fact, by the room per fact:
_ANCHOR_WORDS = ((16, 2), (9, 1))
# Words that keep the phrase after a fact with it: "75 µg of levothyroxine".
_LINKS = frozenset({"of", "for", "per"})
_EDGE_LEADING = "\"'([{<“‘"
_EDGE_TRAILING = "\"')]}>.,;:!?”’…"
_CLAUSE_ENDS = (";", ":", ".", "!", "?", "—", "–")
_PAIRS = (("(", ")"), ("[", "]"), ("{", "}"), ("“", "”"))


def _anchor_width(limit: int, facts: int) -> int:
    per_fact = limit / max(1, facts)
    return next((width for room, width in _ANCHOR_WORDS if per_fact >= room), 0)


@functools.lru_cache(maxsize=8192)
def _items_of(
    sentence: str, facts: tuple[str, ...], width: int
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The items of one sentence: each fact with up to ``width`` content words before it in its clause.

    Linear in the sentence: each fact is looked for once from where the
    previous one ended, and every window is at most ``2 * width + 5`` tokens
    besides the fact. A number never stands alone at an item's edge where its
    clause goes on (issue 26): it keeps the noun or "per" phrase after it, and
    a bare one ("7:30", "2,000") with no word saying what it counts is no item.
    """
    if not facts:
        return ()
    tokens = sentence.split(" ")
    cores = [t.lstrip(_EDGE_LEADING).rstrip(_EDGE_TRAILING) for t in tokens]
    spans: list[tuple[int, int, str]] = []
    start = 0
    for fact in dict.fromkeys(facts):
        words = [w.lstrip(_EDGE_LEADING).rstrip(_EDGE_TRAILING) for w in fact.split(" ")]
        at = _find(cores, words, start)
        if at < 0:
            at = _find(cores, words, 0)
        if at < 0:
            spans.append((-1, -1, fact))
            continue
        spans.append((at, at + len(words), fact))
        start = at + len(words)
    was = _corrected(cores, spans)
    windows: list[tuple[int, int, list[str]]] = []  # first token, end, the facts inside
    keep: set[int] = set()  # function words an item keeps: a range's "to", a bare number's label
    for a, b, fact in sorted(spans, key=lambda s: s[0]):
        number = any(c.isdigit() for c in fact)
        if a < 0 or (width == 0 and not number):
            windows.append((a, b, [fact]))
            continue
        # A number with nothing saying what it counts ("7:30", "2,000"); a currency or a
        # percent sign is a unit ("£9,100", "3%"). A version, a "#4100", an ISO date or a
        # year is an identifier that reads alone (LoCoMo's "8 May, 2023" lost its year
        # when the year had to carry a word).
        bare = (
            number
            and not any(c.isalpha() or c in _UNIT_SIGNS for c in fact)
            and _IDENTIFIER.fullmatch(fact) is None
        )
        lo, hi = _context(tokens, cores, a, b, width, keep, number)
        last = fact.rsplit(" ", 1)[-1]
        if number and _has_digit(last) and not (width == 0 and last[:1] in "€$£¥₹"):
            # Not for an amount in a currency at no room: its currency is its unit, and
            # the words after it cost the tuning set more than they kept (docs).
            hi = max(hi, _number_tail(tokens, cores, b, keep))
        if (
            windows
            and windows[-1][0] >= 0
            and windows[-1][1] == a == lo
            and _compound(windows[-1][2][-1], fact)
            and not tokens[a - 1].endswith(_CLAUSE_ENDS + (",",))
        ):
            lo = a - 1  # "2 h 45 min": one quantity in two units is one item (sum33)
        if (
            _TIME.match(fact)
            and a >= 2
            and lo == a
            and cores[a - 1].lower() == "at"
            and windows
            and windows[-1][0] >= 0
            and windows[-1][1] == a - 1
            and not tokens[a - 2].endswith(_CLAUSE_ENDS + (",",))
        ):
            # "Oakhurst Barn at 11:00 am": a time said at a place or a day is one item with
            # it (sum33); listed apart, "11:00 am" was kept without where it was.
            lo = a - 2  # inside the window before: the two are one item
            keep.add(a - 1)
        # "from 17:30 to 18:00" as a change: the new value is inside the old one's window.
        within = fact in was and bool(windows) and windows[-1][0] >= 0 and a < windows[-1][1]
        if bare and lo == a and hi == b and not within:
            # Nothing in its clause says what it counts: a bare "2,000" or "7:30" reads
            # as a value of anything, so it is no item (issue 26, "or is not kept").
            windows.append((-2, -2, [fact]))
            continue
        if windows and windows[-1][0] >= 0 and lo < windows[-1][1]:
            begins, ends, inside = windows[-1]
            windows[-1] = (begins, max(ends, hi), inside)
            inside.append(fact)
        else:
            windows.append((lo, hi, [fact]))
    fact_at = {a: (b, fact) for a, b, fact in spans if a >= 0}
    old = set(was.values())
    cue = {
        j
        for a, b, f in spans
        if f in old
        for j in (*range(max(0, a - 2), a), b)
        if j < len(cores) and cores[j].lower() in _CUE_WORDS | {"from", "to"}
    }
    items: list[tuple[str, tuple[str, ...]]] = []
    for lo, hi, inner in windows:
        if lo == -2:
            continue
        if old.issuperset(inner):
            continue
        if lo < 0:
            items.append((_balanced(inner[0]), tuple(inner)))
            continue
        words = []
        i = lo
        while i < hi:
            if i in fact_at:
                end, fact = fact_at[i]
                if fact in was.values():
                    i = max(end, i + 1)
                    continue  # said as the old value of another: "(was …)" after the new one
                words.append(
                    fact + (f" (was {_old_shown(fact, was[fact])})" if fact in was else "")
                )
                i = max(end, i + 1)
                continue
            core = cores[i].strip("-–—")  # "awesome--", "- vibes": a dash is no word
            if i in cue or not any(c.isalnum() for c in core):
                i += 1
                continue
            if core and (
                core.lower() not in STOPWORDS or i in keep or (core.lower() in _LINKS and i > lo)
            ):
                words.append(core)
            i += 1
        items.append((_balanced(" ".join(words)), tuple(inner)))
    return tuple(items)


def _context(
    tokens: list[str], cores: list[str], a: int, b: int, width: int, keep: set[int], number: bool
) -> tuple[int, int]:
    """The window of the fact at ``a:b``: ``width`` content words before it in its clause, a linked phrase after.

    A number also keeps, whatever the room, the word right before it that
    changes what it says (issue 26): an approximation or a rate ("about 80
    %", "by 7:30", "per 10 mL"), the weekday of a date ("Wednesday 7
    October"), a range's "to" ("10 to 20 percent").
    """
    lo, taken = a, 0
    j = a - 1
    while (
        j >= 0 and taken < width and a - j <= 2 * width + 1 and not tokens[j].endswith(_CLAUSE_ENDS)
    ):
        if cores[j] and cores[j].lower() not in STOPWORDS and any(c.isalnum() for c in cores[j]):
            taken += 1
            lo = j
        j -= 1
    if (
        taken == 0
        and number
        and a > 0
        and not tokens[a - 1].endswith(_CLAUSE_ENDS + (",",))
        and cores[a - 1].lower() in _QUALIFIERS
    ):
        lo = a - 1
        keep.add(a - 1)
    if number and a > 0 and lo == a and cores[a - 1].lower() in _WEEKDAYS:
        lo = a - 1  # "Wednesday 7 October": the day a date falls on is part of it
    if lo < a and cores[a - 1].lower() in _RANGE_WORDS and a >= 2 and _has_digit(cores[a - 2]):
        keep.add(a - 1)  # "10 to 20 percent": the range, not two numbers
    hi = b
    if (
        width
        and b < len(tokens)
        and cores[b].lower() in _LINKS
        and not tokens[b - 1].endswith(_CLAUSE_ENDS + (",",))
    ):
        k = b + 1
        while k < len(tokens) and k <= b + 2 and cores[k] and cores[k].lower() not in STOPWORDS:
            hi = k + 1
            if tokens[k].endswith(_CLAUSE_ENDS + (",",)):
                break
            k += 1
    return lo, hi


# Function words that change what a number says: "about 80 %", "by 7:30".
# "per 10 mL", "every 2 hours": a rate, not an amount.
_QUALIFIERS = frozenset(
    "about around approx approximately roughly nearly almost by per every ~".split()
)
_UNIT_SIGNS = frozenset("€$£¥₹%°")
_WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())
_IDENTIFIER = re.compile(r"#\S+|[<>=~!]*\d+\.\d+\.\d+\S*|\S*/\S*|\d{4}-\d\d-\d\d|(?:1[89]|20)\d\d")
# Words that join two numbers into a range ("10 to 20 percent", "B4 to B9").
_RANGE_WORDS = frozenset({"to", "and", "or", "-", "–"})


def _has_digit(text: str) -> bool:
    return any(c.isdigit() for c in text)


# A time of day: "11:00 am", "7:30", "4 pm" (not "4,000 rpm": "5810R at 4,000 rpm" is a
# rate, and kept as one item it cost the tuning set's coding conversation 5 points).
_TIME = re.compile(r"\d{1,2}(?::\d\d)? ?(?:am|pm|a\.m\.|p\.m\.)$|\d{1,2}:\d\d$", re.IGNORECASE)
# A unit and the smaller one a quantity goes on in: "2 h 45 min", "5 ft 10 in".
_SUBUNITS = {
    "h": "min",
    "hr": "min",
    "hrs": "min",
    "hour": "minutes",
    "hours": "minutes",
    "min": "s",
    "ft": "in",
    "feet": "inches",
    "lb": "oz",
    "lbs": "oz",
    "kg": "g",
    "m": "cm",
}


def _compound(first: str, second: str) -> bool:
    """Whether ``first`` and ``second`` are one quantity in two units ("2 h" and "45 min")."""
    a, b = first.split(" "), second.split(" ")
    if len(a) != 2 or len(b) != 2 or not (_has_digit(a[0]) and _has_digit(b[0])):
        return False
    return _SUBUNITS.get(a[1].lower(), "-").rstrip("s") == b[1].lower().rstrip("s")


def _number_tail(tokens: list[str], cores: list[str], b: int, keep: set[int]) -> int:
    """Where a number's item ends: with the word after it in its clause ("3% processing fee", "130 seated").

    A number that loses the noun or unit after it says something else
    ("USD 75" of "USD 75 per hour"), so that word is kept, and a range's
    other end ("10 to 20 percent") with its "to".
    """
    if b >= len(tokens) or tokens[b - 1].endswith(_CLAUSE_ENDS + (",",)):
        return b
    core = cores[b]
    low = core.lower()
    if low in _RANGE_WORDS and b + 1 < len(tokens) and _has_digit(cores[b + 1]):
        keep.add(b)
        return b + 2
    if low in _LINKS:
        keep.add(b)
        hi = b
        k = b + 1  # "per square metre": the phrase, up to two words
        while k < len(tokens) and k <= b + 2 and cores[k] and cores[k].lower() not in STOPWORDS:
            hi = k + 1
            if tokens[k].endswith(_CLAUSE_ENDS + (",",)):
                break
            k += 1
        return hi
    # A noun or a participle ("fee", "seated"), not a verb of the sentence ("arrives").
    if (
        core
        and any(c.isalnum() for c in core)
        and low not in STOPWORDS
        and not (low.endswith("s") and not low.endswith("ss"))
    ):
        return b + 1
    return b


# Words that put an old value after a new one in one sentence: "HL-2026-0471,
# not HL-2026-0417", "18:00 instead of 17:30", "75 µg rather than 50 µg".
_NOT_BEFORE = (("not",), ("instead", "of"), ("rather", "than"), ("no", "longer"))
_CUE_WORDS = frozenset(w for cue in _NOT_BEFORE for w in cue)


def _corrected(cores: list[str], spans: list[tuple[int, int, str]]) -> dict[str, str]:
    """{new fact: old fact} for the facts a sentence states as replaced by the fact before them (issue 26)."""
    was: dict[str, str] = {}
    located = sorted((a, b, f) for a, b, f in spans if a >= 0)
    if _MOVE_CUES.intersection(c.lower() for c in cores):
        # "moved the meeting from 17:30 to 18:00": a change, not a range (sum33).
        for (a, b, old), (a2, _, new) in zip(located, located[1:]):
            if (
                a > 0
                and cores[a - 1].lower() == "from"
                and a2 == b + 1
                and cores[b].lower() == "to"
                and new not in was
                and _same_shape(new, old)
            ):
                was[new] = old
    for k in range(1, len(located)):
        a, _, old = located[k]
        # "not the USD 1.2 million": an article between the cue and the value (sum33).
        start = a - 1 if a > 0 and cores[a - 1].lower() in ("the", "a", "an") else a
        before = tuple(c.lower() for c in cores[max(0, start - 2) : start])
        if not any(before[-len(cue) :] == cue for cue in _NOT_BEFORE):
            continue
        # The value it replaces is the nearest one of its shape before it: in
        # "2 µg DNA per well instead of 2.5 µg", "2 µg", not "DNA".
        for j in range(k - 1, max(-1, k - 4), -1):
            new = located[j][2]
            if new not in was and _same_shape(new, old):
                was[new] = old
                break
    return was


def _same_shape(new: str, old: str) -> bool:
    """Both numbers (the same unit word, if any), or both names or codes: a value and the one it replaces."""
    digits = any(c.isdigit() for c in new), any(c.isdigit() for c in old)
    if digits[0] != digits[1]:
        return False
    if not digits[0]:
        return True
    unit = [w for w in new.split(" ") if not any(c.isdigit() for c in w)]
    old_unit = [w for w in old.split(" ") if not any(c.isdigit() for c in w)]
    if unit and old_unit and unit[-1].lower() in _DAY_WORDS and old_unit[-1].lower() in _DAY_WORDS:
        return True  # "15 July, not 30 June": two dates
    if unit and old_unit and new.split(" ")[0] == unit[0] == old_unit[0] == old.split(" ")[0]:
        return True  # "EUR 2,200 plus VAT, not the EUR 2,600": the same currency first
    return not old_unit or not unit or unit[-1:] == old_unit[-1:]


# Verbs that make "from X to Y" a change of a value rather than a range.
_MOVE_CUES = frozenset(
    "moved move moves moving changed change changes switched switch pushed push bumped "
    "rescheduled shifted updated raised lowered increased reduced dropped drops".split()
)
# Words that say a sentence changes a value stated before ("Actually the
# deposit is $5,000", "we moved the tasting to 4 pm").
_CHANGE_CUES = frozenset(
    "actually correction corrected instead changed update updated moved rather switched revised".split()
)
_DAY_WORDS = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday january february march april may june july "
    "august september october november december".split()
)


def _mark_corrections(sentences: list[_Sentence], listed: Sequence[_Fact] = ()) -> None:
    """A value a later sentence changes is written "new (was old)" there (issue 26: corrections as state).

    The later sentence must say it changes something (_CHANGE_CUES) and share
    a content word other than its values with the earlier one (the anchor:
    "deposit", "tasting"), and the two values must have the same shape (a
    number with the same unit, or a day). Earlier sentences are looked at in
    a bounded window, so the cost stays linear.
    """
    recent: list[_Sentence] = []
    # The last value said of each counted noun ("6 people", "78 households"), the
    # previous summary's items first: a correction often comes folds after the value.
    counted: dict[tuple[str, ...], str] = {}
    for fact in listed:
        for value in fact.facts:
            if (noun := _counted_noun(value)) is not None:
                counted[noun] = value
    cued_by = None  # the speaker whose last sentence said a count changed
    for sentence in sentences:
        lowered = _lower_words(sentence.text)
        cued = bool(_RECOUNT_CUES.intersection(lowered))
        # "Jonah recounted. It's 81 households": the cue may open the utterance.
        if sentence.facts and counted and (cued or cued_by == (sentence.block, sentence.speaker)):
            # "so 5 people getting ready now": the same counted noun, another number,
            # and a word saying the count changed (sum33).
            recount: dict[str, str] = {}
            for new in sentence.facts:
                noun = _counted_noun(new)
                old = counted.get(noun) if noun is not None else None
                if old is not None and old != new and old not in sentence.facts:
                    if not any(f"{new} (was " in text for text, _ in sentence.items):
                        recount[new] = old
            if recount:
                sentence.items += tuple(
                    (marked, inner)
                    for text, inner in sentence.items
                    if (marked := _with_was(text, inner, recount)) != text
                )
        for value in sentence.facts:
            if (noun := _counted_noun(value)) is not None:
                counted[noun] = value
        cued_by = (sentence.block, sentence.speaker) if cued else None
        if sentence.facts and recent and _CHANGE_CUES.intersection(lowered):
            said = {w for fact in sentence.facts for w in _lower_words(fact)}
            anchors = sentence.words - _CHANGE_CUES - said
            was: dict[str, str] = {}
            for new in sentence.facts:
                if any(f"{new} (was " in text for text, _ in sentence.items):
                    continue
                for earlier in reversed(recent[-_WINDOW:]):
                    if not anchors & earlier.words:
                        continue
                    if new in earlier.facts:
                        break  # said before as it is now: that sentence is no older value of it
                    old = next(
                        (
                            o
                            for o in earlier.facts
                            if o != new and o not in sentence.facts and _same_value_shape(new, o)
                        ),
                        None,
                    )
                    if old is not None:
                        was[new] = old
                        break
            if was:
                # Beside the bare items, not instead of them: when room is short the
                # plan keeps the new value alone (_facts: the marked item covers it).
                sentence.items += tuple(
                    (marked, inner)
                    for text, inner in sentence.items
                    if (marked := _with_was(text, inner, was)) != text
                )
        if sentence.facts:
            recent.append(sentence)


# Words that say a count changed; with the same counted noun, no anchor word is needed.
_RECOUNT_CUES = _CHANGE_CUES | frozenset(
    "now recounted recount drops dropped moves change correction".split()
)
# Units that measure time or money: two such values are often both current
# ("3 days" to pay, "5 days" to ship), so only counted nouns are compared.
_NOT_COUNTED = _DAY_WORDS | frozenset(
    "am pm a.m. p.m. min mins minutes hour hours h day days week weeks month months year years "
    "usd eur gbp cad aud chf dollars euros pounds bucks k percent".split()
)


def _counted_noun(value: str) -> tuple[str, ...] | None:
    """The noun a number counts ("6 people" -> ("people",)), or None when it is no count.

    One number followed by lower-case words of four letters or more, none
    of them a time or money unit: "78 households", "14 centerpieces".
    """
    words = value.lower().split(" ")
    if len(words) < 2 or not any(c.isdigit() for c in words[0]):
        return None
    if not words[0].replace(",", "").replace(".", "").isdigit():
        return None
    rest = tuple(value.split(" ")[1:])
    # A noun, not a unit of measure: "mM", "mg/mL", "kg" are said of many things at once.
    if any(not (w.isalpha() and w.islower() and len(w) > 3) or w in _NOT_COUNTED for w in rest):
        return None
    return rest


def _old_shown(new: str, old: str) -> str:
    """The old value as the reader needs it: a bare number takes the new value's unit and label.

    "They're 24 pallets, not 26" -> "24 pallets (was 26 pallets)"; "USD 3,800,
    not 2,800" -> "USD 3,800 (was USD 2,800)": "(was 26)" said 26 of what only
    to someone who read the sentence.
    """
    if " " in old or any(c.isalpha() for c in old) or not any(c.isdigit() for c in old):
        return old
    words = new.split(" ")
    digits = [i for i, w in enumerate(words) if any(c.isdigit() for c in w)]
    if len(digits) != 1 or old[:1] in "€$£":
        return old
    at = digits[0]
    value = old
    if words[at][:1] in "€$£" and old[:1].isdigit():
        value = words[at][0] + old
    if words[at].endswith("%") and not old.endswith("%"):
        value += "%"
    return " ".join([*words[:at], value, *words[at + 1 :]])


def _with_was(text: str, facts: tuple[str, ...], was: dict[str, str]) -> str:
    for new in facts:
        if new in was and f"{new} (was " not in text:
            text = text.replace(new, f"{new} (was {_old_shown(new, was[new])})", 1)
    return text


def _same_value_shape(new: str, old: str) -> bool:
    """Two values one can replace the other: numbers with the same words around them, or two days."""
    new_digits, old_digits = any(c.isdigit() for c in new), any(c.isdigit() for c in old)
    if new_digits and old_digits:
        words = [w.lower() for w in new.split(" ") if not any(c.isdigit() for c in w)]
        old_words = [w.lower() for w in old.split(" ") if not any(c.isdigit() for c in w)]
        currency = (new[:1] in "€$£") == (old[:1] in "€$£")
        return words == old_words and currency and (":" in new) == (":" in old)
    if new_digits or old_digits:
        return False
    return new.lower() in _DAY_WORDS and old.lower() in _DAY_WORDS


def superseded_by(items: Sequence[tuple[str, tuple[str, ...]]]) -> set[str]:
    """The old values the items mark "(was …)"."""
    return {m.group(1) for text, _ in items for m in _WAS.finditer(text)}


_WAS = re.compile(r"\(was ([^()]{1,80})\)")
_WAS_MARK = re.compile(r" \(was [^()]{1,80}\)")
# What the old value in "new (was old)" adds to the new one's weight.
_WAS_WEIGHT = 0.2


def _find(cores: list[str], words: list[str], start: int) -> int:
    n = len(words)
    first = words[0]
    for i in range(start, len(cores) - n + 1):
        if cores[i] == first and cores[i : i + n] == words:
            return i
    return -1


def _balanced(item: str) -> str:
    """``item`` without the brackets and quotes that do not close in it ("9.4(b" -> "9.4b")."""
    if not any(c in item for c in '()[]{}“”"`'):
        return item
    for opening, closing in _PAIRS:
        if item.count(opening) != item.count(closing):
            item = item.replace(opening, "").replace(closing, "")
    for mark in ('"', "`"):
        if item.count(mark) % 2:
            item = item.replace(mark, "")
    return item


# --- writing ---------------------------------------------------------------------


def _render(
    blocks: list[_Block], plan: _Plan, *, with_topics: bool, weights: dict[str, float] | None = None
) -> str:
    lines: list[str] = []
    # Grouped in one pass: a scan of every item per block was quadratic in a
    # large budget's blocks (2.2 s of a 4 s call at 2,000 lines).
    quoted_in: dict[int, list[_Sentence]] = {}
    for sentence in sorted(plan.quoted, key=lambda s: s.order):
        quoted_in.setdefault(sentence.block, []).append(sentence)
    listed_in: dict[int, list[str]] = {}
    if any(fact.speaker for fact in plan.listed):
        listed_in = _by_speaker(plan.listed)
    else:
        by_block: dict[int, list[_Fact]] = {}
        for fact in sorted(plan.listed, key=lambda f: f.order):
            by_block.setdefault(fact.block, []).append(fact)
        listed_in = {b: _grouped(fs) for b, fs in by_block.items()}
    for b in sorted(quoted_in.keys() | listed_in.keys()):
        sentences = quoted_in.get(b, [])
        facts = listed_in.get(b, [])
        block = blocks[b]
        if block.turn_from is None:
            parts = [s.text for s in sentences]
            if facts:
                parts.append("Facts: " + "; ".join(facts))
            lines.append(" ".join(parts))
            continue
        phrases: list[str] = []
        run: list[_Sentence] = []
        for sentence in sentences:
            if run and sentence.speaker != run[0].speaker:
                phrases.append(_phrase(run))
                run = []
            run.append(sentence)
        if run:
            phrases.append(_phrase(run))
        if facts:
            # Labelled only after quotes: a line of facts alone needs no label.
            phrases.append((FACTS_LABEL if phrases else "") + "; ".join(facts))
        # A fact list names its own topics; a head's topics help read quotes.
        topics = _topics(sentences, weights or {}) if with_topics and sentences else []
        lines.append(f"{block.head(topics)}: " + "; ".join(phrases))
    return "\n".join(lines)


def _by_speaker(listed: Sequence[_Fact]) -> dict[int, list[str]]:
    """Each block's items: the roles' first, then each named speaker's under one label (issue 26)."""
    facts_by: dict[int, dict[str, list[_Fact]]] = {}
    for fact in sorted(listed, key=lambda f: f.order):
        facts_by.setdefault(fact.block, {"": []}).setdefault(fact.speaker, []).append(fact)
    groups = {b: {who: _grouped(fs) for who, fs in by.items()} for b, by in facts_by.items()}
    out: dict[int, list[str]] = {}
    for b, by in groups.items():
        unnamed = list(by.pop(""))
        labelled: list[str] = []
        for speaker, said in by.items():
            if len(facts_by[b][speaker]) < 2:
                # A label costs about five tokens: worth it for two facts, not for one
                # (LoCoMo: labels were a tenth of a 2,048-token summary).
                unnamed.append(said[0])
                continue
            labelled.append(f"{speaker} (user): {said[0]}")
            labelled.extend(said[1:])
        out[b] = unnamed + labelled
    return out


def _topics(sentences: Sequence[_Sentence], weights: dict[str, float], most: int = 3) -> list[str]:
    """The words of what a line kept that weigh most: said at least twice, names first."""
    counts: dict[str, int] = {}
    shown: dict[str, str] = {}
    common: set[str] = set()  # also seen in lower case: a word, not a name
    for text in (s.text for s in sentences):
        for word in words_of(text):
            key = word.lower()
            if len(key) < 4 or not key.isalpha() or key in STOPWORDS:
                continue
            counts[key] = counts.get(key, 0) + 1
            shown.setdefault(key, word)
            if word[0].islower():
                common.add(key)
    names = {k for k, w in shown.items() if w[0].isupper() and k not in common}
    repeated = [w for w, n in counts.items() if n >= 2]
    repeated.sort(key=lambda w: (w not in names, -counts[w] * weights.get(w, 1.0), w))
    return [w if w in common else shown[w] for w in repeated[:most]]


def _verb(speaker: str, text: str) -> str:  # a named speaker is a person: "said", "asked"
    if speaker == "system":
        return "noted"
    return "asked" if text.endswith("?") else "said"


def _join_quotes(texts: list[str]) -> str:
    quoted = [f"“{t}”" for t in texts]
    if len(quoted) == 1:
        return quoted[0]
    return ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _phrase(run: list[_Sentence]) -> str:
    """What one speaker said in a row: 'the user said “A” and asked “B”'."""
    speaker = run[0].speaker or "user"
    parts: list[str] = []
    texts: list[str] = []
    verb = _verb(speaker, run[0].text)
    for sentence in run:
        if _verb(speaker, sentence.text) != verb:
            parts.append(f"{verb} {_join_quotes(texts)}")
            verb, texts = _verb(speaker, sentence.text), []
        texts.append(sentence.text)
    parts.append(f"{verb} {_join_quotes(texts)}")
    who = f"the {speaker}" if speaker in _ROLES else speaker
    return f"{who} " + " and ".join(parts)
