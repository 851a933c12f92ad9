"""The storage protocol: what the core needs from a backend, and no more.

A conversation's whole state is one ``ConversationState``. The core never
writes fields directly: it hands ``transact`` a function that looks at the
current state and returns a ``Change`` (a delta), and the backend applies the
delta atomically. Atomicity lives in the backend operation, not in a lock of
the daemon, so a store shared by several daemon processes (diskcache's SQLite,
Redis with WATCH/MULTI) stays consistent: the backend may call ``decide``
again if another writer got in first, which is why ``decide`` must be a pure
function of the state it is given.

Contract every backend keeps (tests/backends/test_backend_contract.py checks
it; docs/backends.md shows how to write one):

* ``read`` of a conversation never written returns an empty state (not an
  error); ``utterances``, ``pending`` and ``archive`` are in ascending seq
  order, and a Change keeps them so (appended seqs are above every seq left in
  the buffer).
* ``transact`` either applies the whole change or none of it; once it returns,
  the change is as durable as the backend promises (memory: this process;
  disk: committed to SQLite before the reply). If ``decide`` raises, nothing
  is written and the exception reaches the caller.
* Returned states are snapshots: later writes do not change them, and callers
  must not mutate them.
* ``conversations`` lists, sorted, every conversation with any stored state
  (``not ConversationState.is_empty``).
* Storage failures are raised as ``daemon.errors.StorageError``, or
  ``StorageFull`` when out of space (reads should still work then).

Optional capabilities (issue 17). A backend that holds many conversations
may also offer any of these; the functions below use them when present and
fall back to the four methods otherwise, so a custom backend keeps working
without them (only slower at scale):

* ``iter_conversations(after="")`` (``Listing``): the ids ``conversations``
  would list, above ``after``, streamed in sorted order without holding
  them all.
* ``count_conversations()`` (``Counting``): ``len(conversations())`` in
  O(1), kept in the same transactions as the data. Called inside ``decide``
  it must count the changes committed before it in the same transaction.
* ``queued_conversations()`` (``QueueIndex``): streamed, sorted, the ids of
  the conversations whose ``pending`` is not empty, from an index the
  backend keeps, not by reading every conversation.
* ``iter_sizes()`` (``Sizing``): ``(id, len(utterances), len(pending))`` of
  every conversation with state, streamed, without loading the states (the
  metrics gauges start from it).
* ``transact_many(calls)`` (``Batching``): several ``transact`` calls in one
  storage transaction, each result (or exception) its own. Looked up on the
  backend's class, not through ``__getattr__``: a wrapper that checks
  ``transact`` (limits) must not hand its callers an unchecked path.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field
from math import isqrt
from typing import Any, Protocol, TypeVar, runtime_checkable

from chd.core.utterance import Summary, Utterance

# The current call's deadline on the ``time.monotonic`` clock, set by the
# service for the thread that runs the call (None: no call, or none known).
# A backend that waits (another process's lock) answers by then rather than
# after a wait of its own: queued disk writes answered at about twice
# request_timeout (outside review of issue 28).
CALL_DEADLINE: ContextVar[float | None] = ContextVar("chd_call_deadline", default=None)

__all__ = [
    "CALL_DEADLINE",
    "ConversationState",
    "Change",
    "Backend",
    "Listing",
    "Counting",
    "QueueIndex",
    "Batching",
    "Leases",
    "Sizing",
    "Decide",
    "Outcome",
    "apply_change",
    "sizes_after",
    "iter_conversations",
    "count_conversations",
    "queued_conversations",
    "iter_sizes",
    "transact_many",
    "T",
]

T = TypeVar("T")


@dataclass(slots=True)
class ConversationState:
    """Everything stored for one conversation.

    ``next_seq`` is the seq the next stored utterance gets; seqs are never
    reused, even after a remove or a clear. ``last_turn`` is the highest turn
    seen (0 before any). ``pending`` holds utterances evicted from the buffer
    whose content has not yet reached ``summary``. ``archive`` keeps folded
    utterances cold when the daemon runs with ``archive_evicted`` (issue 4),
    so a summary can be audited and rebuilt. ``settings`` are this
    conversation's overrides of the daemon's limits.
    """

    conversation_id: str
    next_seq: int = 1
    last_turn: int = 0
    utterances: list[Utterance] = field(default_factory=list)
    pending: list[Utterance] = field(default_factory=list)
    summary: Summary = field(default_factory=Summary)
    settings: dict[str, Any] = field(default_factory=dict)
    archive: list[Utterance] = field(default_factory=list)
    # The buffer's token total, summed once per snapshot and carried forward
    # by apply_change: every store checks it against max_tokens, and summing
    # a 10,000-utterance buffer each time made a store O(buffer).
    _buffer_tokens: int | None = field(default=None, repr=False, compare=False)
    # Idempotency key -> seq of the held utterances that have one (issue 29),
    # built on the first keyed lookup of a line of snapshots and carried
    # forward by apply_change as (base, recent): a store adds its key to the
    # small ``recent`` dict instead of copying one as large as the
    # conversation. Entries may be stale (an utterance removed since):
    # ``keyed`` checks the seq is still held with that key.
    _keys: tuple[dict[str, int], dict[str, int]] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def is_empty(self) -> bool:
        return self.next_seq == 1 and not self.settings

    def keyed(self, key: str) -> tuple[Utterance, int | None] | None:
        """The held utterance stored with idempotency ``key`` and its buffer position, if any.

        Held means in the buffer (the position is its index there), the
        summary queue or the archive (the position is None). A dict lookup
        and a bisection, not a scan, once the index is built.
        """
        if self._keys is None:
            self._keys = (_key_index(self), {})
        base, recent = self._keys
        seq = recent.get(key)
        if seq is None:
            seq = base.get(key)
            if seq is None:
                return None
        for items, buffered in (
            (self.utterances, True),
            (self.pending, False),
            (self.archive, False),
        ):
            i = bisect_left(items, seq, key=_seq)
            if i < len(items) and items[i].seq == seq:
                return (items[i], i if buffered else None) if items[i].key == key else None
        return None

    @property
    def buffer_tokens(self) -> int:
        """The sum of the buffer's utterance tokens."""
        if self._buffer_tokens is None:
            self._buffer_tokens = sum(u.tokens for u in self.utterances)
        return self._buffer_tokens


@dataclass(slots=True)
class Change:
    """A delta to one conversation's state, applied all or nothing.

    Removals apply before appends; ``update`` replaces buffer utterances that
    have the same seq (for flags such as ``important``).
    """

    append: list[Utterance] = field(default_factory=list)
    remove: set[int] = field(default_factory=set)
    update: list[Utterance] = field(default_factory=list)
    pending_add: list[Utterance] = field(default_factory=list)
    pending_remove: set[int] = field(default_factory=set)
    summary: Summary | None = None
    next_seq: int | None = None
    last_turn: int | None = None
    settings: dict[str, Any] | None = None
    archive_add: list[Utterance] = field(default_factory=list)
    archive_remove: set[int] = field(default_factory=set)

    @property
    def is_empty(self) -> bool:
        return not (
            self.append
            or self.remove
            or self.update
            or self.pending_add
            or self.pending_remove
            or self.summary is not None
            or self.next_seq is not None
            or self.last_turn is not None
            or self.settings is not None
            or self.archive_add
            or self.archive_remove
        )


@runtime_checkable
class Backend(Protocol):
    """Storage for conversations. See the module docstring for the contract."""

    def read(self, conversation_id: str) -> ConversationState:
        """A consistent snapshot of one conversation (empty if unknown)."""
        ...

    def transact(
        self,
        conversation_id: str,
        decide: Callable[[ConversationState], tuple[Change, T]],
    ) -> T:
        """Apply ``decide(state)[0]`` atomically and return ``decide(state)[1]``.

        If ``decide`` raises, nothing is written and the exception propagates.
        """
        ...

    def conversations(self) -> list[str]:
        """Ids of every conversation with stored state, sorted."""
        ...

    def close(self) -> None:
        """Release files and connections; the backend is unusable afterwards."""
        ...


@runtime_checkable
class Leases(Protocol):
    """An optional capability: a backend shared by several daemons leases folds.

    ``lease(conversation_id)`` is a context manager yielding True while this
    process holds the conversation's fold lease, False if another holds it.
    A lease expires by itself, so a daemon that dies holding one blocks the
    others for a bounded time; folds stay correct without it (their commit
    checks what they read), the lease only keeps replicas from summarizing
    the same queue twice. The folder looks it up once, with ``getattr``.
    """

    def lease(self, conversation_id: str) -> AbstractContextManager[bool]: ...


Decide = Callable[[ConversationState], tuple[Change, Any]]


@dataclass(slots=True)
class Outcome:
    """One call of a ``transact_many`` batch: its value, or the exception its decide raised."""

    value: Any = None
    error: BaseException | None = None


@runtime_checkable
class Listing(Protocol):
    def iter_conversations(self, after: str = "") -> Iterator[str]:
        """Ids of every conversation with stored state above ``after``, sorted, streamed."""
        ...


@runtime_checkable
class Counting(Protocol):
    def count_conversations(self) -> int:
        """How many conversations have stored state, in O(1)."""
        ...


@runtime_checkable
class QueueIndex(Protocol):
    def queued_conversations(self) -> Iterator[str]:
        """Ids of the conversations with a non-empty summary queue, sorted, from an index."""
        ...


@runtime_checkable
class Sizing(Protocol):
    def iter_sizes(self) -> Iterator[tuple[str, int, int]]:
        """``(id, buffer length, queue length)`` of every conversation with state, streamed."""
        ...


@runtime_checkable
class Batching(Protocol):
    def transact_many(self, calls: Sequence[tuple[str, Decide]]) -> list[Outcome]:
        """``transact`` for each call, all in one storage transaction."""
        ...


def iter_conversations(backend: Backend, after: str = "") -> Iterator[str]:
    """The backend's conversations above ``after``, streamed when it can (else listed once)."""
    stream = getattr(backend, "iter_conversations", None)
    if callable(stream):
        return iter(stream(after))
    return iter([cid for cid in backend.conversations() if cid > after])


def count_conversations(backend: Backend) -> int:
    """How many conversations the backend holds: its counter if it keeps one."""
    count = getattr(backend, "count_conversations", None)
    if callable(count):
        return int(count())
    return len(backend.conversations())


def queued_conversations(backend: Backend) -> Iterator[str]:
    """Conversations with queued utterances: the backend's index, else a read of each."""
    indexed = getattr(backend, "queued_conversations", None)
    if callable(indexed):
        return iter(indexed())
    return (cid for cid in iter_conversations(backend) if backend.read(cid).pending)


def iter_sizes(backend: Backend) -> Iterator[tuple[str, int, int]]:
    """Each conversation's buffer and queue lengths: the backend's own if it can, else read."""
    sizes = getattr(backend, "iter_sizes", None)
    if callable(sizes):
        return iter(sizes())
    return (
        (cid, len(state.utterances), len(state.pending))
        for cid in iter_conversations(backend)
        for state in (backend.read(cid),)
    )


def transact_many(backend: Backend, calls: Sequence[tuple[str, Decide]]) -> list[Outcome]:
    """Each call's outcome; one storage transaction when the backend's class offers it."""
    batched = getattr(type(backend), "transact_many", None)
    if batched is not None:
        return batched(backend, calls)  # type: ignore[no-any-return]
    outcomes = []
    for conversation_id, decide in calls:
        try:
            outcomes.append(Outcome(value=backend.transact(conversation_id, decide)))
        except Exception as exc:  # the caller's to see, like transact's own
            outcomes.append(Outcome(error=exc))
    return outcomes


def _without(items: list[Utterance], seqs: set[int]) -> list[Utterance]:
    if not seqs:
        return list(items)
    # Seqs are unique and ascending, so when the first (or last) len(seqs)
    # items are exactly the removed ones, the rest is a slice. Evictions take
    # the oldest, and scanning the whole buffer for them cost 15 us at 250
    # utterances and 425 us at 10,000 (against 5 us and 40 us for a slice).
    count = len(seqs)
    if count <= len(items):
        if all(u.seq in seqs for u in items[:count]):
            return items[count:]
        if all(u.seq in seqs for u in items[-count:]):
            return items[:-count]
    return [u for u in items if u.seq not in seqs]


def _present(items: list[Utterance], seqs: set[int]) -> int:
    """How many of ``seqs`` are in ``items`` (seq-ordered), by bisection."""
    found = 0
    for seq in seqs:
        i = bisect_left(items, seq, key=_seq)
        found += i < len(items) and items[i].seq == seq
    return found


def _seq(u: Utterance) -> int:
    return u.seq


def _tokens_of(items: list[Utterance], seqs: set[int]) -> int:
    """The tokens of those of ``seqs`` that are in ``items`` (seq-ordered), by bisection."""
    total = 0
    for seq in seqs:
        i = bisect_left(items, seq, key=_seq)
        if i < len(items) and items[i].seq == seq:
            total += items[i].tokens
    return total


def _key_index(state: ConversationState) -> dict[str, int]:
    return {
        u.key: u.seq
        for items in (state.utterances, state.pending, state.archive)
        for u in items
        if u.key
    }


# ``recent`` is folded into ``base`` once it outgrows this or the square root
# of ``base``: a keyed store copies ``recent`` (O(sqrt n)) and the merge, a
# copy of ``base``, comes once per sqrt(n) keyed stores, O(sqrt n) each
# amortized; about 2 us a store at 10,000 held (bench/bench_idempotent.py).
# An eighth of ``base`` instead made the copy itself O(n).
_RECENT_KEYS = 32


def _keys_after(
    state: ConversationState, change: Change
) -> tuple[dict[str, int], dict[str, int]] | None:
    """``state``'s key index after ``change`` (None: build it again when asked)."""
    keys = state._keys
    if keys is None:
        return None
    base, recent = keys
    added = {u.key: u.seq for u in change.append if u.key}
    # An utterance moved to the queue or the archive keeps its seq; an
    # imported one (import --replace) may bring a key the index maps elsewhere.
    for u in (*change.pending_add, *change.archive_add):
        if u.key and recent.get(u.key, base.get(u.key)) != u.seq:
            added[u.key] = u.seq
    if not added:
        return keys
    recent = recent | added
    if len(recent) <= max(_RECENT_KEYS, isqrt(len(base))):
        return base, recent
    merged = base | recent
    held = len(state.utterances) + len(state.pending) + len(state.archive)
    if len(merged) > 2 * held + _RECENT_KEYS:
        return None  # mostly keys of utterances long gone: rebuilt from what is held
    return merged, {}


def sizes_after(state: ConversationState, change: Change) -> tuple[int, int]:
    """``len`` of the buffer and of the queue after ``change``, without building that state.

    The same counts as ``apply_change`` gives, in O(change log n) instead of
    a copy of the buffer: the limits and metrics wrappers ask on every store.
    """
    buffer = len(state.utterances) - _present(state.utterances, change.remove) + len(change.append)
    pending = (
        len(state.pending)
        - _present(state.pending, change.pending_remove)
        + len(change.pending_add)
    )
    return buffer, pending


def apply_change(state: ConversationState, change: Change) -> ConversationState:
    """The state after ``change``, as a new object (``state`` is left untouched)."""
    utterances = _without(state.utterances, change.remove)
    tokens = state._buffer_tokens
    if change.update:
        replaced = {u.seq: u for u in change.update}
        utterances = [replaced.get(u.seq, u) for u in utterances]
        tokens = None
    elif tokens is not None:
        tokens += sum(u.tokens for u in change.append) - _tokens_of(state.utterances, change.remove)
    utterances.extend(change.append)
    # A list no change touches is shared with the old snapshot (neither is
    # ever mutated): copying the queue and the archive on every store cost
    # O(their size) for nothing.
    pending = state.pending
    if change.pending_remove or change.pending_add:
        pending = _without(pending, change.pending_remove)
    if change.pending_add:
        # Evictions arrive in seq order after what is queued; sorting the
        # whole queue on every store cost O(queue) while the worker lagged.
        added = change.pending_add
        in_order = all(a.seq < b.seq for a, b in zip(added, added[1:]))
        behind = bool(pending) and added[0].seq < pending[-1].seq
        pending.extend(added)
        if behind or not in_order:
            pending.sort(key=lambda u: u.seq)
    archive = state.archive
    if change.archive_remove or change.archive_add:
        archive = _without(archive, change.archive_remove)
    if change.archive_add:
        archive.extend(change.archive_add)
        archive.sort(key=lambda u: u.seq)
    return ConversationState(
        conversation_id=state.conversation_id,
        next_seq=state.next_seq if change.next_seq is None else change.next_seq,
        last_turn=state.last_turn if change.last_turn is None else change.last_turn,
        utterances=utterances,
        pending=pending,
        summary=state.summary if change.summary is None else change.summary,
        settings=state.settings if change.settings is None else dict(change.settings),
        archive=archive,
        _buffer_tokens=tokens,
        _keys=_keys_after(state, change),
    )
