"""Fair admission: the handler pool serves callers in turn, and holds back one that took more than its share.

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
  busy (the charges add up to more than ``busy`` of a core) a caller whose
  charge is above ``share`` times the average of the others waits, in the
  queue without holding a thread, while another caller has a call running
  or queued, for at most ``max_hold`` seconds per call.

So a caller alone, or on an idle daemon, is never held: the rule only
decides who goes first when callers compete. Calls held are counted
(``held``); a held call still answers DEADLINE_EXCEEDED if it waited past
its deadline, like any call that waited for a worker.
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
    # Seconds after its last call arrived or ended that a caller still
    # competes: a closed-loop client's next call comes within a few ms.
    recent: float = 0.1


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
    active: float = 0.0  # when a call of this caller last arrived or ended


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

    def _competing(self, now: float) -> tuple[int, float]:
        """How many callers compete for the daemon now, and their charges' sum.

        A caller competes while it has a call queued, or one arrived or ended
        within ``recent`` seconds: one with a call in flight for longer is
        waiting on something else (a summary, a lock), not on the CPU.
        """
        count, charges = 0, 0.0
        for caller in self._callers.values():
            if caller.queue or now - caller.active <= self.rule.recent:
                count += 1
                charges += self._decayed(caller, now)
        return count, charges

    def _held(self, caller: _Caller, now: float, competing: tuple[int, float]) -> bool:
        if now - caller.queue[0].queued >= self.rule.max_hold:
            return False
        others = competing[0] - 1  # this caller competes: it has a call queued
        if others < 1:
            return False
        mine = self._decayed(caller, now)
        return mine > self.rule.share * (competing[1] - mine) / others

    def _busy(self, now: float) -> bool:
        total = self._total * self._decay(now - self._total_stamp)
        return total >= self.rule.busy * self.rule.window

    def _next(self, now: float) -> tuple[str, _Caller, _Work] | float | None:
        """The call to start now; else when a held one may start; None if nothing is queued."""
        best: tuple[float, str, _Caller] | None = None
        release: float | None = None
        competing = self._competing(now) if self._busy(now) else (0, 0.0)
        for key, caller in self._callers.items():
            if not caller.queue:
                continue
            if self._held(caller, now, competing):
                caller.queue[0].held = True
                until = caller.queue[0].queued + self.rule.max_hold
                release = until if release is None else min(release, until)
                continue
            if best is None or caller.served < best[0]:
                best = (caller.served, key, caller)
        if best is None:
            # A held caller's charge also falls below its share as it decays:
            # look again within a tenth of the window.
            return None if release is None else min(release, now + self.rule.window / 10)
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
