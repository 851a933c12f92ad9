"""Calls of the configured summarizer that may outlive the fold that made them (issue 13).

A fold waits for Claude only so long (``SummaryWriter.late_after``; a reader
no longer than it can wait). Past that the batch is folded offline so the
summary stays current, and the call goes on here in the background, bounded
by the SDK's own timeout and retries. When it answers, its text replaces the
offline text of exactly the range it was asked for, if nothing rewrote that
range meanwhile (``Folder`` in folding.py does the compare-and-set).

Bounded: at most ``per_key`` calls in flight per conversation and ``total``
per daemon; beyond that a patient caller waits for its call in its own
thread, as before, and a reader does not call at all. A request asked again
while in flight, or just after it answered (a fold retried after a lost
commit, or the worker folding the batch a reader gave up on), joins that
call instead of paying for a second one.

A conversation that loses utterances (a remove or a clear) is forgotten
here (``forget``): the answers kept for joining hold its texts, and those
must not outlive the utterances in this process's memory.

At shutdown (``stop``) calls in flight are abandoned: their results are not
committed, and the originals their ranges keep are rewritten by the normal
path after the next start.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future

__all__ = ["LateCalls"]


class LateCalls:
    """Background calls with per-conversation and per-daemon caps, and what became of their results.

    ``applied``, ``dropped`` and ``failed`` count late results: committed in
    place of an offline segment, arrived too late to apply (the range was
    folded again, rewritten, removed or cleared meanwhile), or failed.
    """

    def __init__(self, per_key: int = 2, total: int = 8, recent: int = 8) -> None:
        self.per_key = per_key
        self.total = total
        self._recent_max = recent
        self._lock = threading.Lock()
        self._flights: dict[Hashable, tuple[str, Future[str]]] = {}
        self._keys: Counter[str] = Counter()
        # The last few answers, for a request repeated right after its call
        # ended (the worker folding what a reader's call has just answered).
        self._recent: OrderedDict[Hashable, tuple[str, Future[str]]] = OrderedDict()
        self._unwanted: set[Hashable] = (
            set()
        )  # flights of forgotten conversations: not kept when they end
        self.stopped = False
        self.applied = 0
        self.dropped = 0
        self.failed = 0

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._flights)

    def start(self, key: str, request: Hashable, call: Callable[[], str]) -> Future[str] | None:
        """The future of ``call`` for ``request``, started in a thread or joined; None past a cap."""
        with self._lock:
            if self.stopped:
                return None
            joined = self._flights.get(request) or self._recent.get(request)
            if joined is not None:
                return joined[1]
            if len(self._flights) >= self.total or self._keys[key] >= self.per_key:
                return None
            future: Future[str] = Future()
            future.set_running_or_notify_cancel()
            self._flights[request] = (key, future)
            self._keys[key] += 1
        threading.Thread(
            target=self._run, args=(key, request, future, call), name="chd-late-call", daemon=True
        ).start()
        return future

    def count(self, outcome: str) -> None:
        """Count a late result as ``applied``, ``dropped`` or ``failed``."""
        with self._lock:
            setattr(self, outcome, getattr(self, outcome) + 1)

    def forget(self, key: str) -> None:
        """Keep nothing of ``key``'s calls for joining: its answers now, its calls in flight when they end."""
        with self._lock:
            for request in [
                request for request, (owner, _) in self._recent.items() if owner == key
            ]:
                del self._recent[request]
            self._unwanted.update(
                request for request, (owner, _) in self._flights.items() if owner == key
            )

    def kept(self, key: str) -> int:
        """How many answers of ``key``'s calls are kept for joining."""
        with self._lock:
            return sum(1 for owner, _ in self._recent.values() if owner == key)

    def stop(self) -> None:
        """Abandon the calls in flight: nothing they answer is committed."""
        with self._lock:
            self.stopped = True
            self._recent.clear()

    def _run(
        self, key: str, request: Hashable, future: Future[str], call: Callable[[], str]
    ) -> None:
        try:
            text = call()
        except BaseException as exc:  # the caller that joins sees it, as if it had called
            error: BaseException | None = exc
        else:
            error = None
        with self._lock:
            del self._flights[request]
            self._keys[key] -= 1
            if not self._keys[key]:
                del self._keys[key]
            wanted = request not in self._unwanted
            self._unwanted.discard(request)
            if error is None and not self.stopped and wanted:
                self._recent[request] = (key, future)
                while len(self._recent) > self._recent_max:
                    self._recent.popitem(last=False)
        # Outside the lock: the callbacks commit to the backend.
        if error is None:
            future.set_result(text)
        else:
            future.set_exception(error)
