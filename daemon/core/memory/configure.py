"""Per-conversation limits: what the budget manager sets and reads.

A conversation's overrides live in the backend (``ConversationState.settings``)
so every daemon sharing that backend applies the same limits; the daemon's
``Settings`` supply whatever a conversation does not override. Lowering a
limit takes effect at once: the utterances that no longer fit are evicted
(into the summary queue, then folded) and a summary over a lowered
``summary_token_limit`` is shortened, in the same query.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from chd.backends.base import Backend, Change, ConversationState
from chd.core.memory.eviction import evictions_to_fit
from chd.core.settings import Settings

if (
    TYPE_CHECKING
):  # the language's intents: not loaded for `chd import`, which only reads settings here
    from chd.core.language.intents import ConfigureIntent

__all__ = ["CONFIGURABLE", "effective_settings", "settings_view", "configure"]

CONFIGURABLE: tuple[str, ...] = (
    "buffer_size",
    "max_tokens",
    "summary_token_limit",
    "eviction_policy",
    "eviction_batch",
)


def effective_settings(settings: Settings, overrides: Mapping[str, Any]) -> Settings:
    """The daemon's settings with one conversation's overrides applied."""
    known = {k: v for k, v in overrides.items() if k in CONFIGURABLE}
    return replace(settings, **known) if known else settings


def settings_view(settings: Settings) -> dict[str, Any]:
    """The configurable limits as a wire dict."""
    return {name: getattr(settings, name) for name in CONFIGURABLE}


def configure(
    backend: Backend,
    base: Settings,
    fold_now: Callable[[str], object],
    intent: ConfigureIntent,
    conversation_id: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Set (or with nothing to set, read) a conversation's limits.

    ``base`` is the daemon's settings; ``fold_now`` folds the conversation's
    queue before the answer, as a waiting read does. Returns the ``result``
    and ``metadata`` of the response.
    """

    def decide(
        state: ConversationState,
    ) -> tuple[Change, tuple[Settings, list[int], dict[str, Any]]]:
        overrides = {} if intent.reset else dict(state.settings)
        overrides.update(intent.changes)
        current = effective_settings(base, overrides)
        if overrides == state.settings:
            return Change(), (current, [], overrides)
        evicted = evictions_to_fit(state.utterances, current)
        queue = base.summarization_enabled
        # As a store's evictions: queued for the summary, or with no
        # summarizing straight to the archive when one is kept.
        change = Change(
            settings=overrides,
            remove={u.seq for u in evicted},
            pending_add=evicted if queue else [],
            archive_add=evicted if not queue and base.archive_evicted else [],
        )
        return change, (current, [u.seq for u in evicted], overrides)

    before = backend.read(conversation_id).summary.tokens
    current, evicted, overrides = backend.transact(conversation_id, decide)
    # Folds what the lowered limits evicted and condenses a summary left over
    # a lowered summary_token_limit, before this query answers: as a waiting
    # read does (one try of the model, then offline), not with the worker's
    # retries and backoff, which would hold the caller for minutes in an outage.
    fold_now(conversation_id)
    state = backend.read(conversation_id)
    shortened = state.summary.tokens < before
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
