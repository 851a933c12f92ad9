"""A store-many's decision: several utterances in one commit, as that many single stores would leave them.

An orchestrator that writes a whole turn, or imports a history, pays one
decision and one commit for the batch instead of one per utterance
(issue 31). The decision walks the items in order exactly as single stores
would (seq, turn, evictions with the conversation's limits), on a private
copy of the buffer, and returns one ``Change``; a batch longer than the
buffer sends its own first items straight to the summary queue. Any item
that would be refused refuses the whole batch: the decision raises before a
delta exists, so nothing is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chd.backends.base import Change, ConversationState
from chd.core.errors import InvalidRequest, TooLarge, quote
from chd.core.memory.eviction import evictions_for_store
from chd.core.settings import Settings
from chd.core.utterance import Speaker, Utterance

__all__ = ["BatchItem", "Batch", "decide_batch", "item_key", "ITEMS", "KEY_SEPARATOR"]

# How errors name an item: the wire field the batch came in.
ITEMS = "data.utterances"


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One utterance of the batch, counted and timed before the decision."""

    text: str
    speaker: Speaker
    turn_number: int | None
    timestamp: str
    tokens: int


@dataclass(frozen=True, slots=True)
class Batch:
    """What the decision stored: the batch's utterances in order with their
    buffer position after the commit (None: already in the queue or the
    archive), what each item's store evicted (for the search index), every
    seq that left the buffer, and the queue's length after it."""

    utterances: list[Utterance]
    positions: list[int | None]
    evicted_by: list[list[Utterance]]
    evicted: list[int]
    pending: int
    replayed: bool = False


def decide_batch(
    state: ConversationState,
    items: Sequence[BatchItem],
    key: str | None,
    limits: Settings,
    queue: bool,
    archive: bool,
) -> tuple[Change, Batch]:
    """The change storing ``items`` in order, or the batch stored earlier with ``key``.

    ``limits`` are the conversation's effective settings; ``queue`` sends
    evictions to the summary queue, else ``archive`` to the archive (else
    they are dropped), as a single store does.
    """
    if key is not None:
        if state.keyed(key) is not None:
            raise InvalidRequest(taken_by_other_kind(key, single=True))
        replayed = _replayed(state, items, key)
        if replayed is not None:
            return Change(), replayed
    for i, item in enumerate(items):
        if item.tokens > limits.max_tokens:
            raise TooLarge(
                f"{ITEMS}[{i}] has {item.tokens} tokens, more than the buffer's max_tokens of "
                f"{limits.max_tokens}; nothing of the batch was stored"
            )
    buffer = list(state.utterances)
    tokens = state.buffer_tokens
    seq, last_turn = state.next_seq, state.last_turn
    stored: list[Utterance] = []
    evicted_by: list[list[Utterance]] = []
    gone: list[Utterance] = []
    for i, item in enumerate(items):
        if item.turn_number is not None:
            turn = item.turn_number
        elif item.speaker == "user":
            turn = last_turn + 1
        else:
            turn = last_turn  # assistant and system utterances join the current turn
        utterance = Utterance(
            conversation_id=state.conversation_id,
            seq=seq,
            speaker=item.speaker,
            text=item.text,
            turn_number=turn,
            timestamp=item.timestamp,
            tokens=item.tokens,
            key="" if key is None else item_key(key, i),
        )
        evicted = evictions_for_store(buffer, utterance, limits, tokens)
        if evicted:
            _drop(buffer, evicted)
            tokens -= sum(u.tokens for u in evicted)
            gone.extend(evicted)
        buffer.append(utterance)
        tokens += utterance.tokens
        stored.append(utterance)
        evicted_by.append(evicted)
        seq += 1
        last_turn = max(last_turn, turn)
    first_new = state.next_seq
    gone.sort(key=lambda u: u.seq)
    kept_new = [u for u in buffer if u.seq >= first_new]
    change = Change(
        append=kept_new,
        remove={u.seq for u in gone if u.seq < first_new},
        pending_add=gone if queue else [],
        archive_add=gone if not queue and archive else [],
        next_seq=seq,
        last_turn=last_turn,
    )
    offset = len(buffer) - len(kept_new)
    position = {u.seq: offset + i for i, u in enumerate(kept_new)}
    return change, Batch(
        utterances=stored,
        positions=[position.get(u.seq) for u in stored],
        evicted_by=evicted_by,
        evicted=[u.seq for u in gone],
        pending=len(state.pending) + (len(gone) if queue else 0),
    )


def _drop(buffer: list[Utterance], evicted: list[Utterance]) -> None:
    """Take ``evicted`` (seq order) out of ``buffer`` in place."""
    k = len(evicted)
    if buffer[k - 1].seq == evicted[-1].seq and buffer[0].seq == evicted[0].seq:
        del buffer[:k]  # fifo: the oldest, a memmove rather than a Python loop
        return
    leaving = {u.seq for u in evicted}
    buffer[:] = [u for u in buffer if u.seq not in leaving]


def item_key(key: str, i: int) -> str:
    """The key item ``i`` of a batch sent with ``key`` is stored with.

    Each utterance keeps a key of its own, so the key index maps every one
    exactly (a batch-wide key on all of them would leave the index pointing
    at whichever moved last). The separator, U+001F, is refused in keys sent
    on the wire, so no single store's key can be one of these.
    """
    return f"{key}{KEY_SEPARATOR}{i}"


KEY_SEPARATOR = "\x1f"


def taken_by_other_kind(key: str, single: bool) -> str:
    """The refusal of ``key`` already used by the other kind of store (``single``: by a single one).

    A single store's key and a batch's item keys never meet in the index,
    so without this check one key could store the same text once as each
    kind (outside review of issue 31).
    """
    held, sent = (
        ("a single store", "data.utterances") if single else ("data.utterances", "a single store")
    )
    return (
        f"metadata.idempotency_key {quote(key, 40)} was already used by {held}; a key stands for one "
        f"kind of store, so it cannot be used again for {sent}: use a new key"
    )


def _replayed(state: ConversationState, items: Sequence[BatchItem], key: str) -> Batch | None:
    """The held batch stored with ``key`` when it is this batch; None when none of it is held.

    Its oldest utterances may have left already (folded into the summary),
    its newest go last: the held ones must end at this batch's last item,
    and a held item past it means the key was used for a longer batch.
    Anything else is refused. n dict lookups and bisections, no scan.
    """
    n = len(items)
    found = [(i, held) for i in range(n) if (held := state.keyed(item_key(key, i))) is not None]
    if not found:
        return None
    if found[-1][0] != n - 1 or state.keyed(item_key(key, n)) is not None:
        raise InvalidRequest(
            f"metadata.idempotency_key {quote(key, 40)} was already used by a batch of another "
            f"length (or one partly removed) than this batch of {n}; use a new key for a new batch"
        )
    for i, (utterance, _) in found:
        item = items[i]
        differs = utterance.differs_from(item.text, item.speaker, item.turn_number)
        if differs:
            raise InvalidRequest(
                f"metadata.idempotency_key {quote(key, 40)} was already used by a batch whose "
                f"utterance {utterance.seq} has a different {' and '.join(differs)} than "
                f"{ITEMS}[{i}]; use a new key for a new batch"
            )
    return Batch(
        utterances=[u for _, (u, _) in found],
        positions=[p for _, (_, p) in found],
        evicted_by=[[] for _ in found],
        evicted=[],
        pending=len(state.pending),
        replayed=True,
    )
