"""Fair admission (issue 28, item 10): callers are served in turn, one over its CPU share goes last, and none takes every worker.

The executor's decisions are tested, not their timing: which call starts
first, that a call never waits while a worker is free and no other caller's
call waits, and that one caller cannot hold every worker. The clock the
executor decides by is a test's own, frozen until the test moves it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from chd.backends.memory import MemoryBackend
from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from chd.service.fairness import FairExecutor, FairShare
from chd.service.metrics import Metrics
from chd.service.server import build_server
from chd.v1 import daemon_pb2, daemon_pb2_grpc


class Clock:
    """A clock that stands still until moved."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _first_argument(_fn: Any, args: tuple[Any, ...]) -> str:
    return args[0]


def _burn(seconds: float) -> None:
    """Use ``seconds`` of this thread's CPU time (the executor charges CPU time)."""
    began = time.thread_time()
    while time.thread_time() - began < seconds:
        pass


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def executor(clock: Clock) -> Iterator[FairExecutor]:
    # busy 0: the daemon counts as busy however little has run.
    rule = FairShare(window=1.0, busy=0.0, share=1.25, max_hold=1.0, recent=0.1)
    pool = FairExecutor(4, "test-fair", rule, caller_of=_first_argument, clock=clock)
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


def test_a_backlog_does_not_delay_another_callers_call() -> None:
    pool = FairExecutor(1, "test-fair", caller_of=_first_argument)
    try:
        gate = threading.Event()
        order: list[str] = []
        blocker = pool.submit(lambda _who: gate.wait(10), "a")
        futures = [pool.submit(lambda _who, n=n: order.append(f"a{n}"), "a") for n in range(5)]
        futures.append(pool.submit(lambda _who: order.append("b0"), "b"))
        gate.set()
        for future in (blocker, *futures):
            future.result(10)
        # b was served less lately than a (never): its call goes first. FIFO
        # would run it last, behind a's whole backlog.
        assert order == ["b0", "a0", "a1", "a2", "a3", "a4"]
    finally:
        pool.shutdown()


def test_a_caller_over_its_share_goes_after_another_callers_waiting_call(clock: Clock) -> None:
    rule = FairShare(window=1.0, busy=0.0, share=1.25, max_hold=1.0, recent=0.1)
    pool = FairExecutor(1, "test-fair", rule, caller_of=_first_argument, clock=clock)
    try:
        pool.submit(lambda _who: _burn(0.02), "heavy").result(10)
        clock.now += 0.001
        pool.submit(lambda _who: None, "light").result(10)  # served after heavy
        gate = threading.Event()
        order: list[str] = []
        blocker = pool.submit(lambda _who: gate.wait(10), "third")
        heavy = pool.submit(lambda _who: order.append("heavy"), "heavy")
        light = pool.submit(lambda _who: order.append("light"), "light")
        gate.set()
        for future in (blocker, heavy, light):
            future.result(10)
        # Taken in turn alone, heavy (served longest ago, and first in the
        # queue) would go first; over its share, it waits for light's call.
        assert order == ["light", "heavy"]
        assert pool.held == 1
        metrics = Metrics()
        metrics.watch_admission(pool)
        assert metrics.registry.get_sample_value("chd_calls_held_total") == 1
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def test_a_caller_over_its_share_is_not_held_beside_an_idle_caller(executor: FairExecutor) -> None:
    executor.submit(lambda _who: _burn(0.02), "heavy").result(10)
    executor.submit(lambda _who: None, "light").result(10)
    # light's call ended just now (the clock stands still) and it has
    # nothing queued or running: heavy's call starts at once. Holding it
    # while light was merely active left the CPU idle (issue 28 review).
    executor.submit(lambda _who: None, "heavy").result(10)
    assert executor.held == 0


def test_a_caller_over_its_share_waits_only_for_a_call_that_wants_the_cpu(
    executor: FairExecutor, clock: Clock
) -> None:
    executor.submit(lambda _who: _burn(0.02), "heavy").result(10)
    release = threading.Event()
    running = threading.Event()
    light = executor.submit(lambda _who: (running.set(), release.wait(10)), "light")
    assert running.wait(10)
    # light's call started within ``recent``: it wants the interpreter, so
    # heavy's waits although a worker is free...
    started = threading.Event()
    heavy = executor.submit(lambda _who: started.set(), "heavy")
    executor.submit(lambda _who: None, "light").result(10)  # ...and light's next goes first
    assert not started.is_set() and executor.waiting() == 1
    # ...until light's call has run past ``recent`` (it waits on something
    # else): heavy's starts while it still runs.
    clock.now += 0.2
    with executor._lock:
        executor._wake.notify_all()  # the clock moved without the executor's knowing
    assert started.wait(10)
    release.set()
    light.result(10)
    heavy.result(10)
    assert executor.held == 1


def test_one_caller_cannot_run_on_every_worker() -> None:
    pool = FairExecutor(4, "test-fair", caller_of=_first_argument)
    assert pool.cap == 3
    try:
        gate = threading.Event()
        started: list[int] = []
        calls = [
            pool.submit(lambda _who, n=n: (started.append(n), gate.wait(10)), "greedy")
            for n in range(4)
        ]
        while len(started) < 3:
            time.sleep(0.001)
        # greedy runs 3 (its cap), its fourth waits; the fourth worker is
        # another caller's.
        pool.submit(lambda _who: None, "other").result(10)
        assert len(started) == 3 and pool.waiting() == 1
        gate.set()
        for call in calls:
            call.result(10)
        assert sorted(started) == [0, 1, 2, 3]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def test_a_caller_alone_is_never_held(executor: FairExecutor) -> None:
    executor.submit(lambda _who: _burn(0.02), "heavy").result(10)
    executor.submit(lambda _who: _burn(0.02), "heavy").result(10)
    executor.submit(lambda _who: None, "heavy").result(10)
    assert executor.held == 0


def _call(stub: daemon_pb2_grpc.DaemonStub, text: str, conversation: str) -> Any:
    request = daemon_pb2.QueryRequest(query=text)
    request.metadata.update({"conversation_id": conversation})
    return stub.Query.future(request, timeout=30)


def _until(gate: threading.Event) -> Iterator[daemon_pb2.QueryRequest]:
    """A request stream that sends nothing until ``gate`` is set (the call stays half open)."""
    gate.wait()
    return
    yield daemon_pb2.QueryRequest()


def test_one_connection_of_half_open_calls_cannot_take_every_worker_through_grpc() -> None:
    admission = FairExecutor(16, "chd-worker")
    history = ConversationHistory(backend=MemoryBackend(), settings=Settings())
    server = build_server(history, "127.0.0.1", 0, admission=admission)
    # One connection each: grpc shares one between like channels unless told not to.
    options = [("grpc.use_local_subchannel_pool", 1)]
    channels = [
        grpc.insecure_channel(f"127.0.0.1:{server.port}", options=options) for _ in range(2)
    ]
    stalled: list[Any] = []
    gate = threading.Event()
    try:
        # grpcio gives a unary call a worker before its message comes, and
        # waits for the message there with no bound.
        query = channels[0].stream_unary(
            "/daemon.v1.Daemon/Query",
            request_serializer=daemon_pb2.QueryRequest.SerializeToString,
            response_deserializer=daemon_pb2.QueryResponse.FromString,
        )
        stalled = [query.future(_until(gate)) for _ in range(16)]
        deadline = time.monotonic() + 20
        while (admission.running(), admission.waiting()) != (
            admission.cap,
            16 - admission.cap,
        ) and time.monotonic() < deadline:
            time.sleep(0.01)
        other = daemon_pb2_grpc.DaemonStub(channels[1])
        assert other.GetPurpose(daemon_pb2.GetPurposeRequest(), timeout=20).purpose
        assert _call(other, "Get the last 5 utterances", "c").result().operation
        # The stalled calls still wait, 4 of them for a worker, as /metrics says.
        metrics = Metrics()
        metrics.watch_admission(admission)
        assert metrics.registry.get_sample_value("chd_calls_waiting") == 4
        assert metrics.registry.get_sample_value("chd_calls_on_workers") >= admission.cap
        charges = admission.charges()
        assert len(charges) == 2 and all(key.startswith("ipv4:127.0.0.1:") for key in charges)
    finally:
        for call in stalled:
            call.cancel()
        gate.set()
        for channel in channels:
            channel.close()
        server.stop(grace=1)
