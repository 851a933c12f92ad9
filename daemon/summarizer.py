"""Summarizers: fold evicted utterances into a conversation's running summary.

``ExtractiveSummarizer`` is the offline default: deterministic, no model, no
network. It keeps the most informative sentences (content words, numbers,
names, questions, decisions) of the previous summary and of the new
utterances, says who said them, and fits the token limit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Protocol, Sequence

from daemon.tokens import TokenCounter
from daemon.utterance import Utterance

__all__ = ["Summarizer", "ExtractiveSummarizer"]


class Summarizer(Protocol):
    """Merges a previous summary with newly evicted utterances."""

    def summarize(
        self, previous: str, utterances: Sequence[Utterance], token_limit: int
    ) -> str:
        """A summary of ``previous`` plus ``utterances`` of at most ``token_limit`` tokens.

        Implementations should aim under the limit; the core trims anything
        over it, so the budget holds even for a misbehaving summarizer.
        """
        ...


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
    whom why will with would yes you your yours sure right well oh hi hello""".split()
)
_DECISION = re.compile(
    r"\b(?:decided|agreed|will|must|need|plan|deadline|budget|prefer|chose|confirmed|remember|important)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class _Sentence:
    order: int
    speaker: str  # "" for sentences of the previous summary
    turn: int
    text: str
    score: float


def _content_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if w.lower() not in _STOPWORDS]


def _score(text: str, document_frequency: dict[str, int], documents: int) -> float:
    words = _content_words(text)
    if not words:
        return 0.0
    # Rare words carry more of what makes a sentence worth keeping.
    weight = sum(
        math.log(1 + documents / document_frequency.get(w, 1)) for w in set(words)
    )
    tokens = _WORD.findall(text)
    if any(t[0].isdigit() for t in tokens):
        weight *= 1.3
    if any(t[0].isupper() for t in tokens[1:]):
        weight *= 1.2
    if text.rstrip().endswith("?") or _DECISION.search(text):
        weight *= 1.3
    # Divide by sqrt(length) so long rambling sentences do not win by size alone.
    return weight / math.sqrt(len(tokens))


_VERBS = {("user", True): "asked", ("user", False): "said",
          ("assistant", True): "asked", ("assistant", False): "said",
          ("system", True): "noted", ("system", False): "noted"}  # fmt: skip


def _similar(a: str, b: str) -> bool:
    """Near-repeats ("Message 6 about X", "Message 7 about X") add nothing new."""
    wa = {w for w in _content_words(a) if not w[0].isdigit()}
    wb = {w for w in _content_words(b) if not w[0].isdigit()}
    if not wa or not wb:
        return False
    return len(wa & wb) / len(wa | wb) >= 0.7


class ExtractiveSummarizer:
    """Deterministic, offline extractive summaries."""

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter

    def summarize(
        self, previous: str, utterances: Sequence[Utterance], token_limit: int
    ) -> str:
        candidates = self._candidates(previous, utterances)
        chosen = self._select(candidates, token_limit)
        return self._fit(self._render(chosen), token_limit)

    def _candidates(
        self, previous: str, utterances: Sequence[Utterance]
    ) -> list[_Sentence]:
        raw: list[tuple[str, int, str]] = [
            ("", 0, " ".join(m.group(0).split()))
            for line in previous.splitlines()
            for m in _SENTENCE.finditer(line)
            if m.group(0).strip()
        ]
        for u in utterances:
            for m in _SENTENCE.finditer(u.text):
                sentence = " ".join(m.group(0).split())
                if sentence:
                    raw.append((u.speaker, u.turn_number, sentence))
        frequency: dict[str, int] = {}
        for _, _, sentence in raw:
            for w in set(_content_words(sentence)):
                frequency[w] = frequency.get(w, 0) + 1
        seen: set[str] = set()
        out: list[_Sentence] = []
        for order, (speaker, turn, sentence) in enumerate(raw):
            key = " ".join(_content_words(sentence))
            if key in seen:
                continue
            seen.add(key)
            score = _score(sentence, frequency, len(raw))
            out.append(_Sentence(order, speaker, turn, sentence, score))
        return out

    def _select(self, candidates: list[_Sentence], limit: int) -> list[_Sentence]:
        chosen: list[_Sentence] = []
        ranked = sorted(candidates, key=lambda s: (-s.score, s.order))
        # The best new sentence goes in first: a full summary must still take
        # in what was just evicted instead of only keeping its old lines.
        best_new = next((s for s in ranked if s.speaker), None)
        if best_new is not None:
            ranked.remove(best_new)
            ranked.insert(0, best_new)
        for sentence in ranked:
            if sentence.score <= 0 and chosen:
                continue
            if any(_similar(sentence.text, c.text) for c in chosen):
                continue
            trial = sorted([*chosen, sentence], key=lambda s: s.order)
            if self._counter.count(self._render(trial)) <= limit:
                chosen = trial
        if not chosen and ranked:
            # Not even one sentence fits whole: keep the best one and let
            # _fit trim it, rather than return nothing.
            chosen = [ranked[0]]
        return chosen

    def _render(self, sentences: list[_Sentence]) -> str:
        old = " ".join(s.text for s in sentences if s.speaker == "")
        lines = [old] if old else []
        new = [s for s in sentences if s.speaker != ""]
        if new:
            first, last = new[0].turn, new[-1].turn
            turns = f"Turn {first}" if first == last else f"Turns {first}-{last}"
            parts: list[str] = []
            speaker = None
            for s in new:
                if s.speaker != speaker:
                    verb = _VERBS[(s.speaker, s.text.endswith("?"))]
                    parts.append(f"{s.speaker.capitalize()} {verb}: {s.text}")
                    speaker = s.speaker
                else:
                    parts[-1] += f" {s.text}"
            lines.append(f"{turns}: " + " ".join(parts))
        return "\n".join(lines)

    def _fit(self, text: str, limit: int) -> str:
        fit = getattr(self._counter, "fit", None)
        return fit(text, limit) if fit else self._counter.truncate(text, limit)
