"""Fair admission (issue 28, item 10): callers are served in turn, and one over its CPU share waits.

The executor's decisions are tested, not their timing: which call starts
first, and whether a call was held while a worker was free. The clock the
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
from chd.service.server import build_server
from chd.v1 import daemon_pb2, daemon_pb2_grpc
from tests.parser_shapes import build


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
    pool = FairExecutor(2, "test-fair", rule, caller_of=_first_argument, clock=clock)
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


def test_a_caller_over_its_share_waits_while_another_competes(
    executor: FairExecutor, clock: Clock
) -> None:
    executor.submit(lambda _who: _burn(0.02), "heavy").result(10)
    release = threading.Event()
    running = threading.Event()
    light = executor.submit(lambda _who: (running.set(), release.wait(10)), "light")
    assert running.wait(10)
    started = threading.Event()
    held = executor.submit(lambda _who: started.set(), "heavy")
    # The second worker is free: the light caller's next call runs on it,
    # while the heavy one's (sent first) still waits.
    executor.submit(lambda _who: None, "light").result(10)
    assert not started.is_set() and executor.waiting() == 1
    clock.now += 2.0  # past max_hold
    release.set()
    light.result(10)
    held.result(10)
    assert executor.held == 1


def test_a_caller_alone_is_never_held(executor: FairExecutor) -> None:
    executor.submit(lambda _who: _burn(0.02), "heavy").result(10)
    executor.submit(lambda _who: _burn(0.02), "heavy").result(10)
    executor.submit(lambda _who: None, "heavy").result(10)
    assert executor.held == 0


def _call(stub: daemon_pb2_grpc.DaemonStub, text: str, conversation: str) -> Any:
    request = daemon_pb2.QueryRequest(query=text)
    request.metadata.update({"conversation_id": conversation})
    return stub.Query.future(request, timeout=30)


def test_callers_are_connections_and_the_costly_one_is_held_through_grpc(clock: Clock) -> None:
    rule = FairShare(window=1.0, busy=0.0, share=1.25, max_hold=1.0, recent=0.1)
    admission = FairExecutor(4, "chd-worker", rule, clock=clock)
    history = ConversationHistory(backend=MemoryBackend(), settings=Settings())
    server = build_server(history, "127.0.0.1", 0, admission=admission)
    # One connection each: grpc shares one between like channels unless told not to.
    options = [("grpc.use_local_subchannel_pool", 1)]
    channels = [
        grpc.insecure_channel(f"127.0.0.1:{server.port}", options=options) for _ in range(2)
    ]
    try:
        heavy, light = (daemon_pb2_grpc.DaemonStub(channel) for channel in channels)
        # A 2 kB hostile query costs ~100x a valid one (its refusal is fine).
        for size in (2000, 1999):
            try:
                _call(heavy, build("number_words", size), "h").result()
            except grpc.RpcError as error:
                assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
        _call(light, "Get the last 5 utterances", "l").result()
        charges = admission.charges()
        assert len(charges) == 2 and all(key.startswith("ipv4:127.0.0.1:") for key in charges)
        held = _call(heavy, "Get the last 5 utterances", "h")
        deadline = time.monotonic() + 20
        while admission.waiting() != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert admission.waiting() == 1 and not held.done()
        _call(light, "Get the last 5 utterances", "l").result()  # not behind the held call
        assert not held.done()
        clock.now += 2.0  # past max_hold: the next look lets it run
        held.result()
        assert admission.held == 1
    finally:
        for channel in channels:
            channel.close()
        server.stop(grace=1)
