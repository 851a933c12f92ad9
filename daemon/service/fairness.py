"""Fair admission: the handler pool serves callers in turn, lets one that took more than its share go last, and keeps workers for others.

grpcio hands every call to the server's executor (``submit``) on its
polling thread. A plain ``ThreadPoolExecutor`` runs calls first come first
served, so one caller's stream of costly requests takes CPU (the GIL: one
handler runs at a time) in proportion to its cost, and a caller with many
calls in flight can take every worker while others queue behind them
(issue 28, item 10). ``FairExecutor`` replaces it:

- A caller is a connection (grpc's peer address, ``ipv4:10.0.0.7:53211``):
  the only identity every call has, since one bearer token is shared by all.
- Queued calls are taken caller by caller, the one served longest ago
  first, so a caller's backlog does not delay another caller's call.
- Each call's CPU time in its handler thread is charged to its caller, and
  decays with a time constant of ``window`` seconds. While the daemon is
  busy (the charges add up to more than ``busy`` of a core), a caller whose
  charge is above ``share`` times the average of the other callers that
  want the interpreter is held: it waits, in the queue, while another
  caller has a call waiting for a worker or a call that started less than
  ``recent`` seconds ago (on a worker, so running or waiting for the GIL),
  and at most ``max_hold`` seconds per call. It is released as soon as no
  other caller does: a caller that is merely connected, or whose call waits
  on something else (a summary, a lock), holds nobody back, so holding never
  leaves the CPU idle (issue 28 review: holding for any caller active in the
  last 100 ms cut a bulk importer's rate by 60 to 74% beside a pinger).
- One caller runs at most ``max_workers`` minus ``reserve`` calls at once
  (``cap``); its further calls wait in the queue. grpcio takes a worker
  for a unary call before its request message has arrived and waits for it
  there with no bound, so without the cap one connection that opens calls
  and never sends them would hold every worker, at no CPU cost.

So a caller alone, or on an idle daemon, is never held (only capped).
Calls held are counted (``held``); a held call still answers
DEADLINE_EXCEEDED if it waited past its deadline, like any call that
waited for a worker. The rule keys on connections: a client that opens
many of them is many callers, and this does not stop it.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FairExecutor", "FairShare", "grpc_caller"]


@dataclass(frozen=True, slots=True)
class FairShare:
    """The rule's constants; see the module docstring."""

    window: float = 1.0  # seconds: the time constant charges decay with
    busy: float = 0.2  # share of one core the charges must add up to before anyone is held
    share: float = 1.25  # times the others' average charge a caller may have
    max_hold: float = 2.0  # seconds one call may be held
    # Seconds a call on a worker counts as wanting the interpreter: a valid
    # call's handler takes a few ms; one running longer waits on something else.
    recent: float = 0.1
    # Workers kept from any one caller: a quarter of them, at least one
    # (none when there is only one worker).
    reserve: float = 0.25

    def cap(self, max_workers: int) -> int:
        """The calls one caller may run at once with ``max_workers`` workers."""
        kept = max(1, int(max_workers * self.reserve)) if self.reserve > 0 else 0
        return max(1, max_workers - kept)


def grpc_caller(fn: Callable[..., Any], args: tuple[Any, ...]) -> str:
    """The peer of the call grpcio submits as ``submit(context.run, behaviour_in_pool, rpc_event, ...)``.

    grpcio's own calling convention (``grpc._server._handle_unary_unary``);
    anything else (or a grpcio that changed it) is one anonymous caller, and
    the executor serves it first come first served, as a thread pool would.
    """
    call = getattr(args[1], "call", None) if len(args) > 1 else None
    peer = getattr(call, "peer", None)
    if callable(peer):
        try:
            who = peer()
        except Exception:  # a call already torn down
            return ""
        return who.decode("utf-8", "replace") if isinstance(who, bytes) else str(who)
    return ""


@dataclass(slots=True)
class _Work:
    future: Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    queued: float
    held: bool = False


@dataclass(slots=True)
class _Caller:
    queue: deque[_Work] = field(default_factory=deque)
    running: int = 0
    charge: float = 0.0  # CPU seconds, decayed, as of ``stamp``
    stamp: float = 0.0
    served: float = 0.0  # when a call of this caller last started; 0 never
    active: float = 0.0  # when a call of this caller last arrived or ended; for forgetting


class FairExecutor(Executor):
    """An executor for grpc.server that serves callers fairly (module docstring)."""

    def __init__(
        self,
        max_workers: int,
        thread_name_prefix: str = "chd-worker",
        rule: FairShare = FairShare(),
        caller_of: Callable[[Callable[..., Any], tuple[Any, ...]], str] = grpc_caller,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.rule = rule
        self.held = 0  # calls that waited because their caller was over its share
        self.cap = rule.cap(max_workers)
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._caller_of = caller_of
        self._clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._callers: dict[str, _Caller] = {}
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._queued = 0
        self._running = 0
        self._total = 0.0  # the sum of the charges, decayed alike, as of ``_total_stamp``
        self._total_stamp = clock()
        self._swept = self._total_stamp
        self._shutdown = False

    # Executor

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        key = self._caller_of(fn, args)
        future: Future[Any] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new calls after shutdown")
            caller = self._callers.get(key)
            if caller is None:
                caller = self._callers[key] = _Caller(stamp=self._clock())
            caller.active = self._clock()
            caller.queue.append(_Work(future, fn, args, kwargs, caller.active))
            self._queued += 1
            if self._idle == 0 and len(self._threads) < self._max_workers:
                thread = threading.Thread(
                    target=self._work,
                    name=f"{self._prefix}_{len(self._threads)}",
                    daemon=True,
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._wake.notify()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                for caller in self._callers.values():
                    while caller.queue:
                        caller.queue.popleft().future.cancel()
                        self._queued -= 1
            self._wake.notify_all()
        if wait:
            for thread in list(self._threads):
                thread.join()

    # What the daemon reports

    def charges(self) -> dict[str, float]:
        """Each known caller's decayed CPU charge, seconds."""
        with self._lock:
            now = self._clock()
            return {key: self._decayed(c, now) for key, c in self._callers.items()}

    def waiting(self) -> int:
        """Calls queued, not yet started (held ones among them)."""
        with self._lock:
            return self._queued

    def running(self) -> int:
        """Calls on a worker, including any whose request message has not come yet."""
        with self._lock:
            return self._running

    # The rule

    def _decay(self, age: float) -> float:
        return math.exp(-max(0.0, age) / self.rule.window)

    def _decayed(self, caller: _Caller, now: float) -> float:
        return caller.charge * self._decay(now - caller.stamp)

    def _charge(self, caller: _Caller, seconds: float, now: float) -> None:
        caller.charge = self._decayed(caller, now) + seconds
        caller.stamp = now
        self._total = self._total * self._decay(now - self._total_stamp) + seconds
        self._total_stamp = now
        if now - self._swept > self.rule.window:
            # Forget callers idle for ten windows (their charge is e**-10 of
            # what it was): every connection leaves an entry otherwise.
            self._swept = now
            for key in [
                key
                for key, c in self._callers.items()
                if not c.queue and not c.running and now - c.active > 10 * self.rule.window
            ]:
                del self._callers[key]

    def _wants(self, caller: _Caller, now: float) -> bool:
        """Whether ``caller`` wants the interpreter now.

        It does with a call waiting for a worker (one it may start), or with
        a call that started less than ``recent`` seconds ago: on a worker,
        running or waiting for the GIL. One running longer is taken to wait on
        something else (a summary, a lock), and holds nobody back.
        """
        if caller.queue and caller.running < self.cap:
            return True
        return caller.running > 0 and now - caller.served < self.rule.recent

    def _held(self, caller: _Caller, now: float, others: int, charges: float) -> bool:
        """Whether ``caller``'s first queued call waits for the ``others`` callers' (charges summed)."""
        if others < 1 or now - caller.queue[0].queued >= self.rule.max_hold:
            return False
        return self._decayed(caller, now) > self.rule.share * charges / others

    def _busy(self, now: float) -> bool:
        total = self._total * self._decay(now - self._total_stamp)
        return total >= self.rule.busy * self.rule.window

    def _next(self, now: float) -> tuple[str, _Caller, _Work] | float | None:
        """The call to start now; else when to look again; None to wait for a call to come or end.

        A caller over its share is held only while another caller wants the
        interpreter (``_wants``): never while the others are idle or waiting
        on something else, so it never leaves the CPU idle for them. A
        caller at its cap neither starts a call nor holds others back.
        """
        ready = [
            (key, caller)
            for key, caller in self._callers.items()
            if caller.queue and caller.running < self.cap
        ]
        if not ready:
            return None
        wanting: dict[str, float] = {}
        if self._busy(now):
            wanting = {
                key: self._decayed(caller, now)
                for key, caller in self._callers.items()
                if self._wants(caller, now)
            }
        total = sum(wanting.values())
        best: tuple[float, str, _Caller] | None = None
        passed: list[_Caller] = []
        for key, caller in ready:
            if self._held(caller, now, len(wanting) - 1, total - wanting.get(key, 0.0)):
                passed.append(caller)
            elif best is None or caller.served < best[0]:
                best = (caller.served, key, caller)
        for caller in passed:
            caller.queue[0].held = True
        if best is None:
            # Every caller with a call to start is held, for others' calls
            # running: a call ending wakes us; else look again when the
            # newest of them turns ``recent`` or a held call its ``max_hold``.
            times = [c.queue[0].queued + self.rule.max_hold for c in passed]
            times += [
                c.served + self.rule.recent
                for key, c in self._callers.items()
                if key in wanting and c.running
            ]
            return min(times)
        _, key, caller = best
        work = caller.queue.popleft()
        self.held += work.held
        return key, caller, work

    def _work(self) -> None:
        while True:
            with self._lock:
                while True:
                    now = self._clock()
                    picked = self._next(now)
                    if isinstance(picked, tuple):
                        break
                    if self._shutdown and self._queued == 0:
                        return
                    # Nothing may start now: a call queued or ending wakes us.
                    self._idle += 1
                    self._wake.wait(None if picked is None else max(1e-3, picked - now))
                    self._idle -= 1
                key, caller, work = picked
                self._queued -= 1
                self._running += 1
                caller.running += 1
                caller.served = now
                if self._queued and self._idle:
                    self._wake.notify()
            spent = 0.0
            if work.future.set_running_or_notify_cancel():
                began = time.thread_time()
                try:
                    work.future.set_result(work.fn(*work.args, **work.kwargs))
                # The future carries any error, as ThreadPoolExecutor's does.
                except BaseException as error:
                    work.future.set_exception(error)
                spent = time.thread_time() - began
            del work
            with self._lock:
                self._running -= 1
                caller.running -= 1
                caller.active = self._clock()
                self._charge(caller, spent, caller.active)
                if self._queued:
                    self._wake.notify()
