"""The daemon's limits and switches, with the spec's defaults."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Settings"]


@dataclass(frozen=True, slots=True)
class Settings:
    """Per-daemon limits. Every field can be set by flag or ``CHD_*`` variable.

    ``buffer_size`` and ``max_tokens`` bound the rolling buffer (the oldest
    utterances leave first when either is exceeded); ``summary_token_limit``
    bounds the running summary; ``eviction_batch`` is how many utterances
    leave at least once the buffer overflows; ``max_utterance_chars`` refuses oversized
    utterances before anything is stored. ``eviction_policy`` is ``fifo`` or
    ``importance`` (important utterances leave last); ``query_classifier``
    lets Claude classify queries the rule parser is unsure of (needs
    ANTHROPIC_API_KEY). A conversation may override buffer_size, max_tokens,
    summary_token_limit, eviction_policy and eviction_batch (see daemon/core/memory/configure.py).
    ``summary_segments`` is how many
    segments (each with its own provenance) the summary is split into at most;
    ``archive_evicted`` keeps folded utterances cold in the backend
    (docs/summarization.md). ``fold_delay`` is how many seconds the
    background worker lets a conversation's evictions gather before it
    folds them in one summarizer call.
    """

    buffer_size: int = 20
    max_tokens: int = 8000
    summary_token_limit: int = 512
    max_utterance_chars: int = 32_000
    eviction_batch: int = 5
    summarization_enabled: bool = True
    eviction_policy: str = "fifo"
    query_classifier: bool = False
    summary_segments: int = 4
    archive_evicted: bool = False
    fold_delay: float = 0.25

    def __post_init__(self) -> None:
        for name in (
            "buffer_size",
            "max_tokens",
            "summary_token_limit",
            "max_utterance_chars",
            "eviction_batch",
            "summary_segments",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        delay = self.fold_delay
        if (
            isinstance(delay, bool)
            or not isinstance(delay, (int, float))
            or not 0 <= delay < math.inf
        ):
            raise ValueError(
                f"fold_delay must be a finite number of seconds, at least 0, got {delay!r}"
            )
        if self.eviction_policy not in ("fifo", "importance"):
            raise ValueError(
                f"eviction_policy must be fifo or importance, got {self.eviction_policy!r}"
            )
