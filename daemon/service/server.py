"""The gRPC adapter: the Daemon servicer over the core, and ``serve()``.

The servicer only converts messages and maps DaemonError subclasses to
status codes; all behaviour lives in ConversationHistory.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from chd.core.errors import (
    DaemonError,
    DeadlineExceeded,
    InvalidRequest,
    NotFound,
    StorageError,
    StorageFull,
    TooLarge,
)
from chd.core.history import ConversationHistory, QueryResult
from chd.service.admission import call_deadline, refuse_noted
from chd.service.decoding import refuse_undecodable, tolerant
from chd.service.fairness import FairExecutor
from chd.service.handlers import Behavior, Guard, daemon_handlers, in_own_pool
from chd.service.observe import note_operation
from chd.service.repeats import ALWAYS
from chd.service.wire import fill_struct, struct_to_dict
from chd.v1 import daemon_pb2, daemon_pb2_grpc

__all__ = [
    "DaemonServicer",
    "ListenError",
    "Server",
    "build_server",
    "check_port_free",
    "status_for",
    "SERVICE_NAME",
]

log = logging.getLogger(__name__)

SERVICE_NAME = daemon_pb2.DESCRIPTOR.services_by_name["Daemon"].full_name

# Most specific first: StorageFull is a StorageError.
_STATUS: tuple[tuple[type[DaemonError], grpc.StatusCode], ...] = (
    (InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (TooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
    (StorageFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (StorageError, grpc.StatusCode.UNAVAILABLE),
)


def status_for(error: DaemonError) -> grpc.StatusCode:
    for kind, code in _STATUS:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.INTERNAL


class DaemonServicer(daemon_pb2_grpc.DaemonServicer):
    """Serves the Daemon Interface from a ConversationHistory."""

    def __init__(self, history: ConversationHistory) -> None:
        self.history = history

    def Query(
        self, request: daemon_pb2.QueryRequest, context: grpc.ServicerContext
    ) -> daemon_pb2.QueryResponse:
        def run() -> daemon_pb2.QueryResponse:
            outcome: QueryResult = self.history.query(
                request.query,
                struct_to_dict(request.metadata),
                struct_to_dict(request.data),
                deadline=call_deadline(),
            )
            response = daemon_pb2.QueryResponse(operation=outcome.operation)
            fill_struct(response.result, outcome.result)
            fill_struct(response.metadata, outcome.metadata)
            return response

        return _answer(context, run)

    def GetPurpose(
        self, request: daemon_pb2.GetPurposeRequest, context: grpc.ServicerContext
    ) -> daemon_pb2.GetPurposeResponse:
        return daemon_pb2.GetPurposeResponse(purpose=self.history.get_purpose())

    def GetInstructions(
        self, request: daemon_pb2.GetInstructionsRequest, context: grpc.ServicerContext
    ) -> daemon_pb2.GetInstructionsResponse:
        return daemon_pb2.GetInstructionsResponse(instructions=self.history.get_instructions())


# gRPC sends the status message in a header, and the default header limit
# is 16 KiB: a longer message reaches the caller as the transport's
# RESOURCE_EXHAUSTED instead of the daemon's answer. Messages quote caller
# strings through chd.core.errors.quote; this cut is the backstop.
MAX_DETAILS = 2000  # characters: at most 8 kB of UTF-8


def _answer(context: grpc.ServicerContext, run: Callable[[], Any]) -> Any:
    try:
        return run()
    except DaemonError as error:
        if error.operation is not None:
            note_operation(error.operation)
        context.abort(status_for(error), bounded_details(str(error)))
    except Exception:
        # A bug, not the caller's fault: log the trace here, send no trace out.
        log.exception("internal error while answering a query")
        context.abort(grpc.StatusCode.INTERNAL, "internal error; see the daemon's log")


def bounded_details(message: str, limit: int = MAX_DETAILS) -> str:
    """``message`` cut to about ``limit`` characters in its middle, where a quoted caller string sits.

    The start (what is wrong) and the end (what is expected) both stay.
    """
    if len(message) <= limit:
        return message
    keep = (limit - 40) // 2
    return f"{message[:keep]}... ({len(message) - 2 * keep} characters cut) ...{message[-keep:]}"


class ListenError(OSError):
    """A port could not be listened on; says which (the gRPC or the metrics port) and why."""

    def __init__(self, what: str, address: str, reason: str) -> None:
        super().__init__(f"cannot listen on {address}{what}: {reason}")


# Read at start-up to prove the backend answers before health says SERVING.
_PROBE_CONVERSATION = "chd-health-probe"
_HEALTH_SERVICES = ("", SERVICE_NAME)
# Threads answering health checks only (see build_server).
HEALTH_WORKERS = 2
# Seconds the shutdown gives folding and the summarizer child once the calls
# are done: ``chd serve`` exits within shutdown_drain + shutdown_grace + 2 s.
CLOSE_TIMEOUT = 1.0


class _Running:
    """Counts the Daemon handlers running now: a guard, outermost, on every Daemon method.

    The shutdown warning counted live worker threads, and the pool keeps
    idle ones: after any call it warned of an abandoned thread with nothing
    in flight (issue 28).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def guard(self, _method: str, behavior: Behavior) -> Behavior:
        def counted(request: Any, context: grpc.ServicerContext) -> Any:
            with self._lock:
                self.count += 1
            try:
                return behavior(request, context)
            finally:
                with self._lock:
                    self.count -= 1

        return counted


class Server:
    """A running gRPC server with health and reflection, stoppable once."""

    def __init__(
        self,
        server: grpc.Server,
        port: int,
        health_servicer: health.HealthServicer,
        history: ConversationHistory,
        pools: Sequence[futures.Executor] = (),
        running: _Running | None = None,
    ) -> None:
        self.grpc_server = server
        self._running = running or _Running()
        self.pools = tuple(pools)
        # The Daemon calls' executor, which admits callers fairly (daemon.fairness).
        self.admission: FairExecutor | None = None
        self.port = port
        self.health = health_servicer
        self.history = history
        # Run after the server and the backend are closed (a metrics endpoint, say).
        self.on_stop: list[Callable[[], None]] = []
        self.metrics_port: int | None = None
        self._stopped = threading.Event()
        # Set once storage is about to close: the backend's health probe runs
        # until then, also while draining, since calls still in flight fail
        # fast on a backend the probe found not answering.
        self._closing = threading.Event()

    def stop(self, grace: float = 10.0, drain: float = 0.0) -> None:
        """Say NOT_SERVING, drain, let in-flight calls finish within ``grace``, stop folding, close storage.

        For ``drain`` seconds the server still answers while health says
        NOT_SERVING, so load balancers that poll health route elsewhere
        before the port stops accepting calls. Then the port closes and the
        calls in flight get ``grace`` seconds; grpc cancels those still
        running after it, and this does not wait for their handlers to
        return (a cancelled handler runs on until its next checkpoint or
        its end): the rest of the shutdown is bounded by ``CLOSE_TIMEOUT``.
        """
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        if drain > 0:
            time.sleep(drain)
        stopped = self.grpc_server.stop(grace)
        if not stopped.wait(grace + 0.1):
            log.warning(
                "calls were still running %gs after shutdown began (shutdown_grace); not waiting for them",
                grace,
            )
        for pool in self.pools:
            pool.shutdown(wait=False, cancel_futures=True)
        self._closing.set()
        self.history.close(timeout=CLOSE_TIMEOUT)
        for hook in self.on_stop:
            try:
                hook()
            except Exception:
                log.exception("error while stopping")

    def wait(self) -> None:
        self.grpc_server.wait_for_termination()

    def calls_running(self) -> int:
        """Daemon calls whose handlers have not returned (after ``stop``: those abandoned)."""
        return self._running.count


def build_server(
    history: ConversationHistory,
    host: str = "127.0.0.1",
    port: int = 50051,
    max_workers: int = 16,
    *,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
    observers: Sequence[Guard] = (),
    checks: Sequence[Guard] = (),
    credentials: grpc.ServerCredentials | None = None,
    options: Sequence[tuple[str, Any]] = (),
    maximum_concurrent_rpcs: int | None = None,
    reuse_port: bool = False,
    admission: FairExecutor | None = None,
) -> Server:
    """Create and start the server; ``port=0`` picks a free port (see ``Server.port``).

    ``reuse_port`` is for a serving process of ``chd serve --processes N``
    only (daemon/service/group.py): the group's parent holds the port and
    made sure no other process did; the children share it by SO_REUSEPORT.

    The Daemon service's behaviours are wrapped once, outermost first, in
    ``observers`` (they see every outcome, refusals included), the refusal
    an interceptor noted at admission (auth), the refusal of undecodable
    requests, and ``checks`` (a deadline, say) just before the servicer.

    Health answers NOT_SERVING until the backend has answered a read, then
    SERVING; ``Server.stop`` turns it back to NOT_SERVING for good.

    Calls run on ``admission`` (a ``FairExecutor`` of ``max_workers``
    threads by default), which takes callers in turn (daemon.fairness).
    """
    workers = admission if admission is not None else FairExecutor(max_workers, "chd-worker")
    server = grpc.server(
        workers,
        interceptors=tuple(interceptors),
        # grpcio sets SO_REUSEPORT by default: a second daemon on the same
        # port would start without complaint and the kernel would split the
        # calls between two independent stores. Only a group's own children
        # turn it on, on a port their parent reserved.
        options=(*options, ("grpc.so_reuseport", 1 if reuse_port else 0)),
        maximum_concurrent_rpcs=maximum_concurrent_rpcs,
    )
    running_calls = _Running()
    guards = (running_calls.guard, *observers, refuse_noted, refuse_undecodable, *checks)
    handlers = daemon_handlers(DaemonServicer(history), guards, tolerant)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
    health_servicer = health.HealthServicer()
    for service in _HEALTH_SERVICES:
        health_servicer.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
    # Health checks have threads of their own: with every worker busy (slow
    # calls, a queue of them) a probe still answers, and the orchestrator
    # does not restart a daemon that is merely loaded.
    health_pool = futures.ThreadPoolExecutor(
        max_workers=HEALTH_WORKERS, thread_name_prefix="chd-health"
    )
    health_handlers = in_own_pool(
        health_pb2_grpc.add_HealthServicer_to_server, health_servicer, ("Check",), health_pool
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(health.SERVICE_NAME, health_handlers),)
    )
    server.add_registered_method_handlers(health.SERVICE_NAME, health_handlers)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if not reuse_port:  # the group's parent checked, and holds it now
            check_port_free(host, port)
    except OSError as exc:
        for pool in (workers, health_pool):
            pool.shutdown(wait=False)
        raise ListenError("", address, str(exc)) from None
    try:
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
    except RuntimeError:
        bound = 0  # grpcio says "Failed to bind", without the reason
    if bound == 0:
        for pool in (workers, health_pool):
            pool.shutdown(wait=False)
        # The port was free a moment ago: with TLS, grpc refused the credentials
        # (config checks the files with OpenSSL first; this is the backstop).
        why = (
            "grpc refused the TLS certificate, key or client CA"
            if credentials is not None
            else "grpc could not bind it"
        )
        raise ListenError("", address, why)
    server.start()
    running = Server(server, bound, health_servicer, history, (workers, health_pool), running_calls)
    running.admission = workers
    try:
        history.backend.read(_PROBE_CONVERSATION)
    except Exception:
        running.stop(grace=0)
        raise
    for service in _HEALTH_SERVICES:
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    available = getattr(history.backend, "available", None)
    if callable(available):  # a networked backend (Redis) can go away while we serve
        threading.Thread(
            target=_follow_backend, args=(running, available), name="chd-health-follow", daemon=True
        ).start()
    return running


# Seconds between the health checks of a networked backend.
_FOLLOW_INTERVAL = 0.5


def _follow_backend(running: Server, available: Callable[[], bool]) -> None:
    """Health says NOT_SERVING while the backend does not answer, SERVING again once it does."""
    serving = True
    while not running._closing.wait(_FOLLOW_INTERVAL):
        now = available()
        if now != serving and not running._stopped.is_set():
            status = (
                health_pb2.HealthCheckResponse.SERVING
                if now
                else health_pb2.HealthCheckResponse.NOT_SERVING
            )
            for service in _HEALTH_SERVICES:
                running.health.set(service, status)
            # Never rate-limited: the last such line must say the health now.
            log.warning(
                "storage %s; health is now %s",
                "is back" if now else "does not answer",
                "SERVING" if now else "NOT_SERVING",
                extra=ALWAYS,
            )
            serving = now


def check_port_free(host: str, port: int) -> None:
    """Raise OSError (saying why, in one line) when ``port`` on ``host`` cannot be listened on.

    grpcio only says "Failed to bind" (and logs the reason itself); asking
    the kernel first gives the caller the reason: another daemon holds the
    port, or the address is not this machine's.
    """
    try:
        family, kind, proto, _, where = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM
        )[0]
    except socket.gaierror as exc:
        # Also for port 0: grpc would log its own lookup error and then
        # fail with "could not bind", blaming the port.
        raise OSError(f"cannot resolve {host!r}: {exc.strerror}") from None
    if port == 0:
        return  # any free port: nothing to probe
    with socket.socket(family, kind, proto) as probe:
        # As grpc does: a port whose old connections linger in TIME_WAIT is
        # free; one with a listener is not (no SO_REUSEPORT, see build_server).
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(where)
            probe.listen(1)
        except OSError as exc:
            raise OSError(f"port {port} is in use or cannot be bound ({exc.strerror})") from None


def stop_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT, from now on.

    Installed before the daemon says it is listening: a signal that arrives
    between that line and ``serve_forever`` must stop it cleanly, not kill it
    with Python's default KeyboardInterrupt (exit 1 and a trace).
    """
    done = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return done


def serve_forever(
    server: Server, grace: float = 10.0, drain: float = 0.0, done: threading.Event | None = None
) -> None:
    """Block until SIGTERM or SIGINT (``done``, from ``stop_signals``), then stop within bounds.

    ``Server.stop`` does not wait for handlers that outlived ``grace``, but
    Python joins every worker thread of a ``ThreadPoolExecutor`` at exit,
    however long that takes. So when such threads remain this ends the
    process itself, once the logs are flushed: the storage is already closed
    and nothing acknowledged is lost.
    """
    if done is None:
        done = stop_signals()
    while not done.wait(0.5):
        pass
    server.stop(grace, drain)
    abandoned = server.calls_running()
    if abandoned:
        log.warning(
            "exiting with %d call(s) still running, abandoned after shutdown_grace", abandoned
        )
    if abandoned or any(
        t.name.startswith("chd-worker") and t.is_alive() for t in threading.enumerate()
    ):
        _exit_now()


def _exit_now(code: int = 0) -> None:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
