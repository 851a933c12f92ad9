"""Per-conversation limits: what the budget manager sets and reads.

A conversation's overrides live in the backend (``ConversationState.settings``)
so every daemon sharing that backend applies the same limits; the daemon's
``Settings`` supply whatever a conversation does not override. Lowering a
limit takes effect at once: the utterances that no longer fit are evicted
(into the summary queue, then folded) and a summary over a lowered
``summary_token_limit`` is shortened, in the same query.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping

from backends.base import Change, ConversationState
from daemon.eviction import evictions_to_fit
from daemon.intents import ConfigureIntent
from daemon.settings import Settings
from daemon.utterance import Summary, SummarySegment

if TYPE_CHECKING:
    from daemon.core import ConversationHistory

__all__ = ["CONFIGURABLE", "effective_settings", "settings_view", "configure"]

CONFIGURABLE: tuple[str, ...] = ("buffer_size", "max_tokens", "summary_token_limit", "eviction_policy")


def effective_settings(settings: Settings, overrides: Mapping[str, Any]) -> Settings:
    """The daemon's settings with one conversation's overrides applied."""
    known = {k: v for k, v in overrides.items() if k in CONFIGURABLE}
    return replace(settings, **known) if known else settings


def settings_view(settings: Settings) -> dict[str, Any]:
    """The configurable limits as a wire dict."""
    return {name: getattr(settings, name) for name in CONFIGURABLE}


def configure(
    history: ConversationHistory, intent: ConfigureIntent, conversation_id: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Set (or with nothing to set, read) a conversation's limits.

    Returns the ``result`` and ``metadata`` of the response.
    """
    base = history.settings

    def decide(state: ConversationState) -> tuple[Change, tuple[Settings, list[int], dict[str, Any]]]:
        overrides = {} if intent.reset else dict(state.settings)
        overrides.update(intent.changes)
        current = effective_settings(base, overrides)
        if overrides == state.settings:
            return Change(), (current, [], overrides)
        evicted = evictions_to_fit(state.utterances, current)
        change = Change(
            settings=overrides,
            remove={u.seq for u in evicted},
            pending_add=evicted if base.summarization_enabled else [],
        )
        return change, (current, [u.seq for u in evicted], overrides)

    current, evicted, overrides = history.backend.transact(conversation_id, decide)
    if evicted and base.summarization_enabled:
        history.fold(conversation_id)
    shortened = _shorten_summary(history, conversation_id, current.summary_token_limit)
    state = history.backend.read(conversation_id)
    return (
        {
            "settings": settings_view(current),
            "overrides": dict(sorted(overrides.items())),
            "changed": sorted(intent.changes) + (["reset"] if intent.reset else []),
            "evicted": evicted,
            "summary_tokens": state.summary.tokens,
            "summary_shortened": shortened,
        },
        {"conversation_id": conversation_id, "items_affected": len(evicted), "tokens_used": 0},
    )


def _shorten_summary(history: ConversationHistory, conversation_id: str, limit: int) -> bool:
    """Re-summarize a summary left over a lowered limit; True if it was shortened.

    Committed only if the summary is still the one that was shortened, so a
    concurrent fold is never overwritten (the next configure or fold retries).
    """
    state = history.backend.read(conversation_id)
    summary = state.summary
    if summary.tokens <= limit or not summary.segments:
        return False
    text = history.summarizer.summarize(summary.text, [], limit)
    if history.counter.count(text) > limit:
        text = history.counter.truncate(text, limit)
    first, last = summary.segments[0], summary.segments[-1]
    segment = SummarySegment(
        text=text,
        tokens=history.counter.count(text),
        seq_from=first.seq_from,
        seq_to=last.seq_to,
        turn_from=min(s.turn_from for s in summary.segments),
        turn_to=max(s.turn_to for s in summary.segments),
    )
    shorter = Summary((segment,), summary.through_seq, segment.tokens)

    def commit(current: ConversationState) -> tuple[Change, bool]:
        if current.summary != summary:
            return Change(), False
        return Change(summary=shorter), True

    return history.backend.transact(conversation_id, commit)
