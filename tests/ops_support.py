"""Helpers for the operations tests (tests/test_ops_*.py): configured servers and test parts.

The parts are real implementations of the core's interfaces with one
behaviour a test needs (a backend whose reads can be held, a summarizer
that is down), not mocks.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from chd.backends.memory import MemoryBackend
from chd.core.utterance import Utterance
from chd.service.app import start
from chd.service.auth import bearer_metadata
from chd.service.config import Config, load
from chd.service.server import Server
from chd.v1 import daemon_pb2, daemon_pb2_grpc


def config(**values: Any) -> Config:
    """A configuration for an in-process test server: loopback, free port, plus ``values``."""
    flags = {"host": "127.0.0.1", "port": 0, "log_level": "info"} | values
    return load(flags, env={})


@contextmanager
def running(
    cfg: Config | None = None, backend: Any = None, summarizer: Any = None, **values: Any
) -> Iterator[Server]:
    """A started, fully assembled server (``daemon.app.start``), stopped afterwards."""
    cfg = cfg or config(**values)
    server = start(cfg, backend=backend, summarizer=summarizer)
    try:
        yield server
    finally:
        server.stop(grace=0.5)


@contextmanager
def channel_to(server: Server) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield channel


def request(
    text: str, metadata: dict | None = None, data: dict | None = None
) -> daemon_pb2.QueryRequest:
    message = daemon_pb2.QueryRequest(query=text)
    message.metadata.update(metadata or {})
    message.data.update(data or {})
    return message


def ask(
    channel: grpc.Channel,
    text: str,
    metadata: dict | None = None,
    data: dict | None = None,
    token: str | None = None,
    timeout: float = 10,
) -> daemon_pb2.QueryResponse:
    stub = daemon_pb2_grpc.DaemonStub(channel)
    return stub.Query(
        request(text, metadata, data),
        timeout=timeout,
        metadata=bearer_metadata(token) if token else None,
    )


def code_of(call: Any, *args: Any, **kwargs: Any) -> grpc.StatusCode:
    """The status code ``call(*args)`` ends with (OK when it returns)."""
    try:
        call(*args, **kwargs)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def health_status(channel: grpc.Channel, service: str = "") -> str:
    stub = health_pb2_grpc.HealthStub(channel)
    answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)


class GatedBackend(MemoryBackend):
    """The memory backend, whose reads wait while the gate is closed."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()

    def read(self, conversation_id: str):  # type: ignore[no-untyped-def]
        if not self.gate.is_set():
            self.waiting.set()
            self.gate.wait(timeout=30)
        return super().read(conversation_id)


class DownSummarizer:
    """A summarizer whose service is down: every call raises."""

    def __init__(self) -> None:
        self.calls = 0

    def summarize(self, previous: str, utterances: Sequence[Utterance], token_limit: int) -> str:
        self.calls += 1
        raise RuntimeError("summarizer service unavailable")
