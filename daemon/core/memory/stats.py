"""Stats: what a conversation holds right now, for the budget manager and operators."""

from __future__ import annotations

from collections import Counter
from typing import Any

from chd.backends.base import ConversationState
from chd.core.memory.configure import settings_view
from chd.core.settings import Settings
from chd.core.summaries.coverage import summary_coverage

__all__ = ["conversation_stats"]


def conversation_stats(state: ConversationState, settings: Settings) -> dict[str, Any]:
    """Counts, tokens, turns, summary size and queue length of one conversation.

    ``settings`` are the conversation's effective limits, so the fill ratios
    say how close the next store is to an eviction.
    """
    buffer = state.utterances
    tokens = sum(u.tokens for u in buffer)
    speakers = Counter(u.speaker for u in buffer)
    turns = {u.turn_number for u in buffer}
    return {
        "utterance_count": len(buffer),
        "by_speaker": {s: speakers.get(s, 0) for s in ("user", "assistant", "system")},
        "important_count": sum(1 for u in buffer if u.important),
        "tokens": tokens,
        "turn_count": len(turns),
        "first_turn": min(turns) if turns else None,
        "last_turn": state.last_turn,
        "oldest_seq": buffer[0].seq if buffer else None,
        "newest_seq": buffer[-1].seq if buffer else None,
        "next_seq": state.next_seq,
        "summary_tokens": state.summary.tokens,
        "summary_segments": len(state.summary.segments),
        "summary_through_seq": state.summary.through_seq,
        **_coverage(state),
        "queue_length": len(state.pending),
        "queue_tokens": sum(u.tokens for u in state.pending),
        "buffer_fill": round(len(buffer) / settings.buffer_size, 4),
        "token_fill": round(tokens / settings.max_tokens, 4),
        "settings": settings_view(settings),
    }


def _coverage(state: ConversationState) -> dict[str, Any]:
    """What the summary still holds of the evicted utterances, and what awaits Claude (issue 13)."""
    coverage = summary_coverage(state.summary)
    return {
        "summary_coverage": coverage.share,
        "summary_offline_only_utterances": coverage.offline_only,
        "summary_awaiting_rewrite": coverage.awaiting_rewrite,
        "summary_rewrite_ranges": [list(r) for r in coverage.rewrite_ranges],
        "summary_originals_dropped": coverage.originals_dropped,
    }
