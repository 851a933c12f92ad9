"""The background folding worker: summarization off the request path.

A store that evicts only queues the evicted utterances in the backend (in
its own transaction) and calls ``FoldWorker.submit``; the worker's threads
fold the conversation's queue while the store has long returned. A
conversation is folded by one thread at a time; a submit that arrives during
a fold runs another fold right after it, so nothing queued is left behind.
A first submit waits ``delay`` seconds before its fold, so the evictions of
a busy conversation gather into one summarizer call: folding 20 utterances
at once costs the offline summarizer half as much per utterance as four
folds of 5 (it re-reads the running summary each time), and a model
summarizer is called a quarter as often. A read that needs the summary
current folds at once itself (``Folder.fold``), so nobody waits on it.

A failed fold is retried with exponential backoff; the queue stays in the
backend meanwhile, so a crash or an outage loses nothing, and ``recover``
finds queues left by a previous run.

Threads start on demand and end after ``idle_exit`` seconds without work,
so an idle daemon (or a test that never closes its core) holds no threads.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable

__all__ = ["FoldWorker"]

log = logging.getLogger(__name__)


class FoldWorker:
    """Runs ``fold(conversation_id) -> done`` in background threads.

    Args:
        fold: folds one conversation's queue; True when the queue is empty
            afterwards. An exception counts as False.
        threads: conversations folded in parallel (a slow model call for one
            conversation does not hold up the others).
        retry_delay: seconds before retrying a conversation whose fold did
            not finish, doubled after each failure up to ``max_retry_delay``.
        idle_exit: seconds a thread waits for work before it ends.
        delay: seconds a conversation's first submit waits, gathering later
            submits into the same fold.
    """

    def __init__(
        self,
        fold: Callable[[str], bool],
        *,
        threads: int = 2,
        retry_delay: float = 1.0,
        max_retry_delay: float = 60.0,
        idle_exit: float = 10.0,
        delay: float = 0.0,
    ) -> None:
        self._fold = fold
        self._delay = delay
        self._max_threads = max(1, threads)
        self._retry_delay = retry_delay
        self._max_retry_delay = max_retry_delay
        self._idle_exit = idle_exit
        self._cond = threading.Condition()
        self._due: dict[str, float] = {}  # conversation -> monotonic time it may run
        # The same times as a heap, so a pick costs O(log n), not a walk
        # through every due conversation (6 s of picking for 10k queued,
        # issue 17). Entries whose time _due no longer holds are stale and
        # dropped when they reach the top. _due never names a running one.
        self._heap: list[tuple[float, int, str]] = []
        self._order = itertools.count()
        self._running: set[str] = set()
        self._again: set[str] = set()  # submitted while its fold was running
        self._failures: dict[str, int] = {}
        self._threads: set[threading.Thread] = set()
        self._stopping = False

    def submit(self, conversation_id: str) -> None:
        """Fold this conversation's queue soon; returns at once."""
        with self._cond:
            if self._stopping:
                return
            if conversation_id in self._running:
                self._again.add(conversation_id)
            else:
                # A conversation already due keeps its time: later evictions
                # join its fold, and do not make a failing summarizer retry sooner.
                if conversation_id not in self._due:
                    self._schedule(conversation_id, time.monotonic() + self._delay)
            self._start_thread()
            self._cond.notify()

    def recover(self, queued: Callable[[], Iterable[str]]) -> None:
        """Submit, in the background, every conversation ``queued()`` names.

        ``queued`` is the backend's index of non-empty queues where it keeps
        one (``backends.base.queued_conversations``): reading every
        conversation to find them took 22 s at 10k conversations (issue 17).
        """

        def scan() -> None:
            try:
                for conversation_id in queued():
                    if self._stopping:
                        return
                    self.submit(conversation_id)
            except Exception:
                if not self._stopping:  # a backend closed under the scan is not news
                    log.exception("could not scan the backend for queued summaries")

        threading.Thread(target=scan, name="chd-fold-recover", daemon=True).start()

    def idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or running; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._due or self._running:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop taking work and wait up to ``timeout`` for folds in progress.

        Whatever is still queued stays in the backend for the next start.
        """
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            threads = list(self._threads)
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # --- threads ---------------------------------------------------------------

    def _start_thread(self) -> None:
        # Called with the lock held.
        busy = len(self._running) + len(self._due)
        if len(self._threads) < min(self._max_threads, busy):
            thread = threading.Thread(target=self._loop, name="chd-fold", daemon=True)
            self._threads.add(thread)
            thread.start()

    def _loop(self) -> None:
        me = threading.current_thread()
        while True:
            conversation_id = self._next(me)
            if conversation_id is None:
                return
            try:
                done = self._fold(conversation_id)
            except Exception:
                if self._stopping:
                    log.debug(
                        "fold of conversation %s cut short by shutdown",
                        conversation_id,
                        exc_info=True,
                    )
                else:
                    log.exception("background fold of conversation %s failed", conversation_id)
                done = False
            self._finished(conversation_id, done)

    def _next(self, me: threading.Thread) -> str | None:
        with self._cond:
            idle_since = time.monotonic()
            while True:
                if self._stopping:
                    self._threads.discard(me)
                    self._cond.notify_all()
                    return None
                now = time.monotonic()
                heap = self._heap
                while heap and self._due.get(heap[0][2]) != heap[0][0]:
                    heapq.heappop(heap)  # stale: rescheduled or taken since
                if heap and heap[0][0] <= now:
                    _, _, conversation_id = heapq.heappop(heap)
                    del self._due[conversation_id]
                    self._running.add(conversation_id)
                    return conversation_id
                if not heap and now - idle_since >= self._idle_exit:
                    self._threads.discard(me)
                    return None
                wake = heap[0][0] - now if heap else self._idle_exit - (now - idle_since)
                self._cond.wait(max(wake, 0.001))

    def _schedule(self, conversation_id: str, due: float) -> None:
        # Called with the lock held.
        self._due[conversation_id] = due
        heapq.heappush(self._heap, (due, next(self._order), conversation_id))

    def _finished(self, conversation_id: str, done: bool) -> None:
        with self._cond:
            self._running.discard(conversation_id)
            now = time.monotonic()
            if done:
                self._failures.pop(conversation_id, None)
                if conversation_id in self._again and conversation_id not in self._due:
                    self._schedule(conversation_id, now + self._delay)
            else:
                failures = self._failures.get(conversation_id, 0) + 1
                self._failures[conversation_id] = failures
                delay = min(self._retry_delay * 2 ** (failures - 1), self._max_retry_delay)
                log.warning(
                    "conversation %s is not fully summarized yet (queued utterances, or originals awaiting "
                    "a rewrite by the configured summarizer); retrying its fold in %.1f s",
                    conversation_id,
                    delay,
                )
                self._schedule(conversation_id, now + delay)
            self._again.discard(conversation_id)
            self._cond.notify_all()
