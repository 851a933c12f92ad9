"""The ``context`` retrieve: the summary plus the newest utterances that fit a budget.

This is the spec's summary injection, the text an orchestrator pastes into a
prompt. The running summary goes first (it is the oldest part of the
conversation), then as many of the newest utterances as fit, oldest first.
A summary that alone exceeds the budget is cut at a sentence end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chd.core.tokens import TokenCounter
from chd.core.utterance import Utterance

__all__ = ["Context", "build_context", "SUMMARY_HEADER", "RECENT_HEADER"]

SUMMARY_HEADER = "Summary of the earlier conversation:"
RECENT_HEADER = "Most recent utterances:"


@dataclass(frozen=True, slots=True)
class Context:
    """The rendered context and what went into it."""

    text: str
    tokens: int
    summary: str
    utterances: tuple[Utterance, ...]


def _line(u: Utterance) -> str:
    return f"[turn {u.turn_number}] {u.speaker}: {u.text}"


def _render(summary: str, utterances: Sequence[Utterance]) -> str:
    parts: list[str] = []
    if summary:
        parts.append(f"{SUMMARY_HEADER}\n{summary}")
    if utterances:
        parts.append(RECENT_HEADER + "\n" + "\n".join(_line(u) for u in utterances))
    return "\n\n".join(parts)


def build_context(
    summary: str, buffer: Sequence[Utterance], limit: int, counter: TokenCounter
) -> Context:
    """The context within ``limit`` tokens (counted on the rendered text)."""
    if summary and counter.count(_render(summary, ())) > limit:
        room = max(limit - counter.count(SUMMARY_HEADER) - 1, 0)
        summary = counter.fit(summary, room)
        while summary and counter.count(_render(summary, ())) > limit:
            summary = counter.truncate(summary, counter.count(summary) - 1)
    used = counter.count(_render(summary, ())) + counter.count(RECENT_HEADER) + 2
    # Newest first until the budget is spent; line counts are added up, so
    # the rendered total is checked exactly below.
    chosen: list[Utterance] = []
    for utterance in reversed(buffer):
        cost = counter.count(_line(utterance)) + 1
        if used + cost > limit:
            break
        chosen.append(utterance)
        used += cost
    chosen.reverse()
    text = _render(summary, chosen)
    while chosen and counter.count(text) > limit:
        chosen.pop(0)
        text = _render(summary, chosen)
    return Context(text, counter.count(text), summary, tuple(chosen))
