"""Health checking through a daemon's life: opening, serving, draining, gone."""

from __future__ import annotations

import signal
import socket
import threading
import time

import grpc
import pytest
from conftest import DaemonProcess
from grpc_health.v1 import health_pb2, health_pb2_grpc
from ops_support import GatedBackend, ask, channel_to, config, health_status, running

from chd.service.app import start
from chd.service.server import SERVICE_NAME


class TestHealthStates:
    """Health says SERVING only once storage answers and NOT_SERVING from the start of shutdown."""

    def test_health_is_not_serving_until_the_backend_answers(self):
        """While the backend's first read is held, health answers NOT_SERVING; then SERVING."""
        reservation = _reserved_port()
        port = reservation.getsockname()[1]
        cfg = config(port=port)
        backend = GatedBackend()
        backend.gate.clear()
        started: list = []
        opener = threading.Thread(target=lambda: started.append(start(cfg, backend=backend)))
        opener.start()
        try:
            assert backend.waiting.wait(10)
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                assert health_status(channel) == "NOT_SERVING"
                assert health_status(channel, SERVICE_NAME) == "NOT_SERVING"
                backend.gate.set()
                opener.join(10)
                assert health_status(channel) == "SERVING"
                assert health_status(channel, SERVICE_NAME) == "SERVING"
        finally:
            reservation.close()
            backend.gate.set()
            opener.join(10)
            for server in started:
                server.stop(grace=0.5)

    def test_health_turns_not_serving_while_draining_and_calls_still_succeed(self):
        """During the drain, health says NOT_SERVING and queries are still answered."""
        with running(shutdown_drain=1.0) as server, channel_to(server) as channel:
            assert health_status(channel) == "SERVING"
            stopper = threading.Thread(target=server.stop, kwargs={"grace": 1, "drain": 1.0})
            stopper.start()
            try:
                _wait_for(lambda: health_status(channel) == "NOT_SERVING")
                assert health_status(channel, SERVICE_NAME) == "NOT_SERVING"
                assert ask(channel, "Add utterance: still answered").operation == "store"
            finally:
                stopper.join(10)
            with pytest.raises(grpc.RpcError) as refused:
                health_status(channel)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

    def test_health_watchers_hear_not_serving_when_shutdown_begins(self):
        """A Watch stream gets SERVING, then NOT_SERVING as soon as stop is called."""
        with running() as server, channel_to(server) as channel:
            stream = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=""), timeout=10
            )
            assert next(stream).status == health_pb2.HealthCheckResponse.SERVING
            stopper = threading.Thread(target=server.stop, kwargs={"grace": 0.5})
            stopper.start()
            assert next(stream).status == health_pb2.HealthCheckResponse.NOT_SERVING
            stopper.join(10)

    def test_a_daemon_process_drains_on_sigterm_then_exits_cleanly(self):
        """`chd serve --shutdown-drain 1` answers NOT_SERVING after SIGTERM, then exits 0."""
        process = DaemonProcess("--shutdown-drain", "1", "--shutdown-grace", "1")
        try:
            with grpc.insecure_channel(process.target) as channel:
                assert health_status(channel) == "SERVING"
                process.proc.send_signal(signal.SIGTERM)
                _wait_for(lambda: health_status(channel) == "NOT_SERVING")
            assert process.terminate() == 0
        finally:
            process.kill()


def _reserved_port() -> socket.socket:
    """A port held (bound, not listening) until closed, which a SO_REUSEADDR listener such as gRPC may still take.

    The test must know the port before ``start`` returns, so it cannot ask
    for port 0; holding it, instead of binding and releasing it, leaves no
    moment for another process to take it. Linux lets SO_REUSEADDR sockets
    share a port while none of them listens, so the daemon (which refuses
    SO_REUSEPORT) can still bind it, and a second listener cannot.
    """
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    probe.bind(("127.0.0.1", 0))
    return probe


def _wait_for(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")
