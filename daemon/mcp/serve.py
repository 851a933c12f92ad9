"""Running the MCP server: over stdio or Streamable HTTP, answered by a local core or a remote chd.

``open_local`` assembles the core as ``chd.service.app.start`` does for gRPC
(the same limits, summary writer, classifier and settings from the same
``Config``), without a gRPC server; ``open_remote`` fronts a running daemon
through ``chd.client``.
"""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

from chd.backends.base import Backend
from chd.backends.memory import MemoryBackend
from chd.client import TLS, Client
from chd.core.history import ConversationHistory
from chd.core.language.classifier import classifier_from_environment
from chd.core.memory.index import index_bytes
from chd.mcp.answerer import LocalAnswerer, RemoteAnswerer
from chd.mcp.http_auth import BearerTokenApp
from chd.service.app import embedder_from, limits_from, summary_writer
from chd.service.config import Config, to_settings
from chd.service.limits import LimitedBackend

__all__ = ["open_local", "open_remote", "run_stdio", "run_http", "MCP_PATH"]

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"


def open_local(config: Config, backend: Backend) -> LocalAnswerer:
    """The core over ``backend`` as ``config`` says, wrapped in the same limits as the gRPC daemon's."""
    limits = limits_from(config)
    if isinstance(backend, MemoryBackend) and backend.max_bytes is None:
        backend.max_bytes = config.max_memory_bytes
    history = ConversationHistory(
        backend=LimitedBackend(backend, limits),
        settings=to_settings(config),
        classifier=classifier_from_environment(config.query_classifier, config.classifier_model),
        writer=summary_writer(config),
        embedder=embedder_from(config),
    )
    history.indexes.max_bytes = index_bytes(config.max_memory_bytes)
    return LocalAnswerer(history, limits.request_timeout)


def open_remote(target: str, token: str | None, tls: TLS | None, timeout: float) -> RemoteAnswerer:
    """A running chd at ``target``; ``token`` is sent as its bearer token."""
    return RemoteAnswerer(Client(target, token=token, tls=tls, timeout=timeout))


def run_stdio(server: MCPServer) -> None:
    """Serve one MCP session on stdin/stdout until the host closes stdin (or SIGTERM)."""
    _exit_on_sigterm()
    try:
        anyio.run(server.run_stdio_async)
    except KeyboardInterrupt:
        pass


def run_http(
    server: MCPServer,
    host: str,
    port: int,
    token: str | None,
    listening: Callable[[int], None] = lambda port: None,
    *,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    tls_client_ca: str | None = None,
) -> None:
    """Serve Streamable HTTP at ``http://host:port/mcp`` until SIGTERM or SIGINT.

    The socket is bound before ``listening(port)`` is called, so port 0 picks
    a free port and the caller can print it before any request arrives. With
    ``tls_cert``/``tls_key`` it serves HTTPS, and with ``tls_client_ca`` asks
    every client for a certificate that CA signed: the gRPC daemon's keys,
    meaning the same.
    """
    import ssl

    import uvicorn

    app: Any = server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, json_response=True
    )
    if token is not None:
        app = BearerTokenApp(app, token)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Inherited by every accepted connection (Linux): uvicorn writes a
    # response's head and body separately, and with Nagle the body waited
    # for the client's delayed ACK: 44 ms a request, even a 401 (measured).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(128)
    sock.set_inheritable(True)
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        access_log=False,
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
        ssl_ca_certs=tls_client_ca,
        ssl_cert_reqs=ssl.CERT_REQUIRED if tls_client_ca else ssl.CERT_NONE,
    )
    listening(sock.getsockname()[1])
    # uvicorn ends serve() on SIGTERM/SIGINT, then raises the signal again
    # for the handler it found: ours, so the caller still closes storage.
    _exit_on_sigterm()
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()


def _exit_on_sigterm() -> None:
    def stop(signum: int, _frame: Any) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
