"""The gRPC adapter: the Daemon servicer over the core, and ``serve()``.

The servicer only converts messages and maps DaemonError subclasses to
status codes; all behaviour lives in ConversationHistory.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from concurrent import futures
from typing import Any, Callable, Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from chd.service.admission import refuse_noted
from chd.core.history import ConversationHistory, QueryResult
from chd.service.decoding import refuse_undecodable, tolerant
from chd.core.errors import (
    DaemonError,
    InvalidRequest,
    NotFound,
    StorageError,
    StorageFull,
    TooLarge,
)
from chd.service.handlers import Guard, daemon_handlers
from chd.v1 import daemon_pb2, daemon_pb2_grpc
from chd.service.wire import fill_struct, struct_to_dict

__all__ = ["DaemonServicer", "Server", "build_server", "status_for", "SERVICE_NAME"]

log = logging.getLogger(__name__)

SERVICE_NAME = daemon_pb2.DESCRIPTOR.services_by_name["Daemon"].full_name

# Most specific first: StorageFull is a StorageError.
_STATUS: tuple[tuple[type[DaemonError], grpc.StatusCode], ...] = (
    (InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (TooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
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

    def Query(self, request: daemon_pb2.QueryRequest, context: grpc.ServicerContext) -> daemon_pb2.QueryResponse:
        def run() -> daemon_pb2.QueryResponse:
            outcome: QueryResult = self.history.query(
                request.query,
                struct_to_dict(request.metadata),
                struct_to_dict(request.data),
            )
            response = daemon_pb2.QueryResponse(operation=outcome.operation)
            fill_struct(response.result, outcome.result)
            fill_struct(response.metadata, outcome.metadata)
            return response

        return _answer(context, run)

    def GetPurpose(self, request: daemon_pb2.GetPurposeRequest, context: grpc.ServicerContext) -> daemon_pb2.GetPurposeResponse:
        return daemon_pb2.GetPurposeResponse(purpose=self.history.get_purpose())

    def GetInstructions(
        self, request: daemon_pb2.GetInstructionsRequest, context: grpc.ServicerContext
    ) -> daemon_pb2.GetInstructionsResponse:
        return daemon_pb2.GetInstructionsResponse(instructions=self.history.get_instructions())


def _answer(context: grpc.ServicerContext, run: Callable[[], Any]) -> Any:
    try:
        return run()
    except DaemonError as error:
        context.abort(status_for(error), str(error))
    except Exception:
        # A bug, not the caller's fault: log the trace here, send no trace out.
        log.exception("internal error while answering a query")
        context.abort(grpc.StatusCode.INTERNAL, "internal error; see the daemon's log")


# Read at start-up to prove the backend answers before health says SERVING.
_PROBE_CONVERSATION = "chd-health-probe"
_HEALTH_SERVICES = ("", SERVICE_NAME)


class Server:
    """A running gRPC server with health and reflection, stoppable once."""

    def __init__(self, server: grpc.Server, port: int, health_servicer: health.HealthServicer, history: ConversationHistory) -> None:
        self.grpc_server = server
        self.port = port
        self.health = health_servicer
        self.history = history
        # Run after the server and the backend are closed (a metrics endpoint, say).
        self.on_stop: list[Callable[[], None]] = []
        self.metrics_port: int | None = None
        self._stopped = threading.Event()

    def stop(self, grace: float = 10.0, drain: float = 0.0) -> None:
        """Say NOT_SERVING, drain, let in-flight calls finish within ``grace``, stop folding, close storage.

        For ``drain`` seconds the server still answers while health says
        NOT_SERVING, so load balancers that poll health route elsewhere
        before the port stops accepting calls.
        """
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        if drain > 0:
            time.sleep(drain)
        self.grpc_server.stop(grace).wait()
        self.history.close()
        for hook in self.on_stop:
            try:
                hook()
            except Exception:
                log.exception("error while stopping")

    def wait(self) -> None:
        self.grpc_server.wait_for_termination()


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
) -> Server:
    """Create and start the server; ``port=0`` picks a free port (see ``Server.port``).

    The Daemon service's behaviours are wrapped once, outermost first, in
    ``observers`` (they see every outcome, refusals included), the refusal
    an interceptor noted at admission (auth), the refusal of undecodable
    requests, and ``checks`` (a deadline, say) just before the servicer.

    Health answers NOT_SERVING until the backend has answered a read, then
    SERVING; ``Server.stop`` turns it back to NOT_SERVING for good.
    """
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers),
        interceptors=tuple(interceptors),
        options=tuple(options),
        maximum_concurrent_rpcs=maximum_concurrent_rpcs,
    )
    guards = (*observers, refuse_noted, refuse_undecodable, *checks)
    handlers = daemon_handlers(DaemonServicer(history), guards, tolerant)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
    health_servicer = health.HealthServicer()
    for service in _HEALTH_SERVICES:
        health_servicer.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if credentials is None:
        bound = server.add_insecure_port(address)
    else:
        bound = server.add_secure_port(address, credentials)
    if bound == 0:
        raise OSError(f"cannot listen on {address}")
    server.start()
    running = Server(server, bound, health_servicer, history)
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
    while not running._stopped.wait(_FOLLOW_INTERVAL):
        now = available()
        if now != serving and not running._stopped.is_set():
            status = health_pb2.HealthCheckResponse.SERVING if now else health_pb2.HealthCheckResponse.NOT_SERVING
            for service in _HEALTH_SERVICES:
                running.health.set(service, status)
            log.warning("storage %s; health is now %s", "is back" if now else "does not answer",
                        "SERVING" if now else "NOT_SERVING")
            serving = now


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
    """Block until SIGTERM or SIGINT (``done``, from ``stop_signals``), then stop gracefully."""
    if done is None:
        done = stop_signals()
    while not done.wait(0.5):
        pass
    server.stop(grace, drain)
