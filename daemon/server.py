"""The gRPC adapter: the Daemon servicer over the core, and ``serve()``.

The servicer only converts messages and maps DaemonError subclasses to
status codes; all behaviour lives in ConversationHistory.
"""

from __future__ import annotations

import logging
import signal
import threading
from concurrent import futures
from typing import Any, Callable

import grpc
from google.protobuf import json_format, struct_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from daemon.core import ConversationHistory, QueryResult
from daemon.errors import (
    DaemonError,
    InvalidRequest,
    NotFound,
    StorageError,
    StorageFull,
    TooLarge,
)
from daemon.v1 import daemon_pb2, daemon_pb2_grpc

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


def _to_dict(message: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(message) if message.fields else {}


def _to_struct(values: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


class DaemonServicer(daemon_pb2_grpc.DaemonServicer):
    """Serves the Daemon Interface from a ConversationHistory."""

    def __init__(self, history: ConversationHistory) -> None:
        self.history = history

    def Query(self, request: daemon_pb2.QueryRequest, context: grpc.ServicerContext) -> daemon_pb2.QueryResponse:
        def run() -> daemon_pb2.QueryResponse:
            outcome: QueryResult = self.history.query(
                request.query,
                _to_dict(request.metadata),
                _to_dict(request.data),
            )
            return daemon_pb2.QueryResponse(
                operation=outcome.operation,
                result=_to_struct(outcome.result),
                metadata=_to_struct(outcome.metadata),
            )

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


class Server:
    """A running gRPC server with health and reflection, stoppable once."""

    def __init__(self, server: grpc.Server, port: int, health_servicer: health.HealthServicer, history: ConversationHistory) -> None:
        self.grpc_server = server
        self.port = port
        self.health = health_servicer
        self.history = history
        self._stopped = threading.Event()

    def stop(self, grace: float = 10.0) -> None:
        """Say NOT_SERVING, let in-flight calls finish within ``grace``, stop folding, close storage."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        self.grpc_server.stop(grace).wait()
        self.history.close()

    def wait(self) -> None:
        self.grpc_server.wait_for_termination()


def build_server(
    history: ConversationHistory,
    host: str = "127.0.0.1",
    port: int = 50051,
    max_workers: int = 16,
) -> Server:
    """Create and start the server; ``port=0`` picks a free port (see ``Server.port``)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers))
    daemon_pb2_grpc.add_DaemonServicer_to_server(DaemonServicer(history), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    bound = server.add_insecure_port(address)
    if bound == 0:
        raise OSError(f"cannot listen on {address}")
    server.start()
    for service in ("", SERVICE_NAME):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    return Server(server, bound, health_servicer, history)


def serve_forever(server: Server, grace: float = 10.0) -> None:
    """Block until SIGTERM or SIGINT, then stop gracefully."""
    done = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not done.wait(0.5):
        pass
    server.stop(grace)
