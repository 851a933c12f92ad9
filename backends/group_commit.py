"""Group commit: concurrent ``transact`` calls share one storage transaction.

A COMMIT is the dearest step of a durable write (the WAL write, and with
``--durability full`` an fsync), and it costs about the same for one change
as for twenty. So calls queue, and whichever thread holds the commit lock
runs every queued call in order in one transaction (calls on the same
conversation see each other's changes) and commits them together. No extra
thread: the callers take turns leading. Each call returns only after the
COMMIT that holds its change, with its own value or its own exception.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from chd.backends.base import Change, ConversationState, T
from chd.core.errors import StorageError

__all__ = ["Request", "GroupCommit"]


@dataclass(slots=True, eq=False)
class Request:
    """One transact call waiting for its group's commit."""

    conversation_id: str
    decide: Callable[[ConversationState], tuple[Change, Any]]
    done: bool = False
    value: Any = None
    error: BaseException | None = None


class GroupCommit:
    """Runs queued calls in batches, one ``commit(batch)`` per storage transaction.

    Args:
        commit: Decides and writes a batch in one transaction. It sets each
            request's ``value``, or ``error`` for a decide that raised, and
            raises StorageError if the transaction as a whole failed. A
            commit that writes in several rounds (Redis) marks a request
            ``done`` once its outcome is final; a failure after that leaves
            the request's outcome as it is.
        max_batch: The most calls one transaction takes, which bounds how
            long the storage's write lock is held.
    """

    def __init__(self, commit: Callable[[list[Request]], None], max_batch: int = 64) -> None:
        self._commit = commit
        self._max_batch = max_batch
        # Held by the leading thread; other threads of the process queue here
        # rather than in the storage's own lock (SQLite's busy handler sleeps
        # in steps of milliseconds).
        self.lock = threading.Lock()
        self._queue: list[Request] = []
        self._queue_lock = threading.Lock()

    def __len__(self) -> int:
        """How many calls are queued and not yet taken into a batch."""
        return len(self._queue)

    def run(self, conversation_id: str, decide: Callable[[ConversationState], tuple[Change, T]]) -> T:
        request = Request(conversation_id, decide)
        with self._queue_lock:
            self._queue.append(request)
        with self.lock:
            while not request.done:
                self._lead()
        if request.error is not None:
            raise request.error
        return request.value  # type: ignore[no-any-return]

    def _lead(self) -> None:
        """Commit the oldest queued calls; each ends done, with a value or an error."""
        with self._queue_lock:
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
        try:
            try:
                self._commit(batch)
            except StorageError:
                if len(batch) == 1:
                    raise
                # One call's write may be the cause (a full disk fails them
                # all anyway): commit each alone so only the culprit fails.
                # A call the commit already answered (a backend committing in
                # rounds marks those done) is never run again: its write may
                # have landed.
                for request in batch:
                    if request.done:
                        continue
                    request.error = None
                    try:
                        self._commit([request])
                    except StorageError as exc:
                        request.error = exc
        except BaseException as exc:
            for request in batch:
                if not request.done:
                    request.error = request.error or exc
        finally:
            for request in batch:
                request.done = True
