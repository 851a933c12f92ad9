"""Group commit: concurrent ``transact`` calls share one storage transaction.

A COMMIT is the dearest step of a durable write (the WAL write, and with
``--durability full`` an fsync), and it costs about the same for one change
as for twenty. So calls queue, and whichever thread holds the commit lock
runs every queued call in order in one transaction (calls on the same
conversation see each other's changes) and commits them together. No extra
thread: the callers take turns leading. Each call returns only after the
COMMIT that holds its change, with its own value or its own exception.

A call may carry a deadline (``time.monotonic``): it answers
DeadlineExceeded by then, whether it is still queued, waits for the leader,
or was in a batch whose storage wait (bounded by the batch's earliest
deadline) ran out. A batch that timed out puts back the calls with time
left, so the next batch does not start a fresh wait for calls whose time is
gone: with several calls queued behind another process's lock, the later
ones answered at about twice request_timeout (outside review of issue 28).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chd.backends.base import Change, ConversationState, T
from chd.core.errors import DeadlineExceeded, StorageError

__all__ = ["Request", "GroupCommit"]


@dataclass(slots=True, eq=False)
class Request:
    """One transact call waiting for its group's commit."""

    conversation_id: str
    decide: Callable[[ConversationState], tuple[Change, Any]]
    done: bool = False
    value: Any = None
    error: BaseException | None = None
    # When it was queued and when it must be answered (``time.monotonic``; None: no deadline).
    queued: float = 0.0
    deadline: float | None = None


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
        expired: The error for a call whose deadline passed before its
            change was written, given the seconds it waited. ``commit``
            raises DeadlineExceeded when its storage wait ran out.
    """

    def __init__(
        self,
        commit: Callable[[list[Request]], None],
        max_batch: int = 64,
        expired: Callable[[float], BaseException] | None = None,
    ) -> None:
        self._commit = commit
        self._expired = expired or _expired
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

    def run(
        self,
        conversation_id: str,
        decide: Callable[[ConversationState], tuple[Change, T]],
        deadline: float | None = None,
    ) -> T:
        now = time.monotonic()
        request = Request(conversation_id, decide, queued=now, deadline=deadline)
        with self._queue_lock:
            self._queue.append(request)
        if deadline is None or not self.lock.acquire(timeout=max(deadline - now, 0.0)):
            if deadline is not None:
                with self._queue_lock:
                    # Still queued: it never ran, so it can answer now. Taken
                    # into a batch: that batch's wait ends by this deadline.
                    if any(r is request for r in self._queue):
                        self._queue.remove(request)
                        raise self._expired(time.monotonic() - request.queued)
            self.lock.acquire()
        try:
            while not request.done:
                self._lead()
        finally:
            self.lock.release()
        if request.error is not None:
            raise request.error
        return request.value  # type: ignore[no-any-return]

    def _lead(self) -> None:
        """Commit the oldest queued calls; each ends done, with a value or an error."""
        with self._queue_lock:
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
        now = time.monotonic()
        for request in batch:
            if request.deadline is not None and request.deadline <= now:
                request.error = self._expired(now - request.queued)
                request.done = True
        batch = [r for r in batch if not r.done]
        if not batch:
            return
        try:
            try:
                self._commit(batch)
            except DeadlineExceeded:
                # The wait for the batch's earliest deadline ran out: those
                # whose time is up answer; the rest go back to the front.
                now = time.monotonic()
                left = [
                    r for r in batch if not r.done and r.deadline is not None and r.deadline > now
                ]
                for request in batch:
                    if not request.done and not any(r is request for r in left):
                        request.error = self._expired(now - request.queued)
                        request.done = True
                with self._queue_lock:
                    self._queue[:0] = left
                batch = []
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


def _expired(waited: float) -> DeadlineExceeded:
    return DeadlineExceeded(
        f"the call's deadline passed after {waited:.2f}s waiting to write; nothing was written"
    )
