"""Eviction policies: which utterances leave a full buffer, in which order.

``fifo`` (the spec's default) evicts the oldest first. ``importance`` evicts
the oldest *unimportant* utterances first and important ones only when
nothing else is left to make room, oldest important first — the frontal
cortex marks what must stay in context ("Mark utterance 12 as important").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import attrgetter

from chd.core.settings import Settings
from chd.core.utterance import Utterance

__all__ = ["POLICIES", "evictions_for_store", "evictions_to_fit"]

POLICIES: tuple[str, ...] = ("fifo", "importance")
_TOKENS = attrgetter("tokens")


def _in_eviction_order(buffer: Sequence[Utterance], policy: str) -> Iterator[Utterance]:
    if policy == "importance":
        yield from (u for u in buffer if not u.important)
        yield from (u for u in buffer if u.important)
    else:
        yield from buffer


def _select(
    buffer: Sequence[Utterance],
    settings: Settings,
    extra_count: int,
    extra_tokens: int,
    batch: int,
    buffer_tokens: int | None = None,
) -> list[Utterance]:
    count = len(buffer) + extra_count
    if buffer_tokens is None:
        buffer_tokens = sum(map(_TOKENS, buffer))
    tokens = buffer_tokens + extra_tokens
    if count <= settings.buffer_size and tokens <= settings.max_tokens:
        return []
    chosen: list[Utterance] = []
    topping_up_stops_at_important = settings.eviction_policy == "importance"
    for utterance in _in_eviction_order(buffer, settings.eviction_policy):
        fits = count <= settings.buffer_size and tokens <= settings.max_tokens
        # Once it fits, top the batch up, but never with an important
        # utterance that did not have to go: the batch exists to fold less
        # often, not to forget more.
        if fits and (
            len(chosen) >= batch or (utterance.important and topping_up_stops_at_important)
        ):
            break
        chosen.append(utterance)
        count -= 1
        tokens -= utterance.tokens
    chosen.sort(key=lambda u: u.seq)
    return chosen


def evictions_for_store(
    buffer: Sequence[Utterance],
    incoming: Utterance,
    settings: Settings,
    buffer_tokens: int | None = None,
) -> list[Utterance]:
    """The utterances that leave so ``incoming`` fits both limits, in seq order.

    Once something must go, at least ``eviction_batch`` go together (the
    spec's 21st utterance evicts 1-5): the summarizer then folds a batch at a
    time instead of running on every store of a full buffer. A batch never
    takes more than half the buffer: a budget manager that sets a small
    buffer_size (say 5, with the default batch of 5) must not see it drop to
    one utterance on every overflow.
    """
    batch = min(settings.eviction_batch, max(1, settings.buffer_size // 2), len(buffer))
    return _select(buffer, settings, 1, incoming.tokens, batch, buffer_tokens)


def evictions_to_fit(buffer: Sequence[Utterance], settings: Settings) -> list[Utterance]:
    """The utterances that leave so the buffer fits newly lowered limits (no batch top-up)."""
    return _select(buffer, settings, 0, 0, 0)
