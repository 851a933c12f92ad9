"""Rebuilding gRPC method handlers, the one thing every interceptor here does.

A server interceptor that wants to act inside a call (see the request, time
it, abort it) has to return a new ``RpcMethodHandler`` of the same kind with
a wrapped behaviour, keeping the (de)serializers. That plumbing lives here
once; each interceptor module keeps only its own idea.
"""

from __future__ import annotations

from typing import Any, Callable

import grpc

__all__ = ["Behavior", "DAEMON_PREFIX", "HEALTH_PREFIX", "is_daemon_method", "method_name", "refusing", "rewrap"]

Behavior = Callable[[Any, grpc.ServicerContext], Any]

DAEMON_PREFIX = "/daemon.v1.Daemon/"
HEALTH_PREFIX = "/grpc.health.v1.Health/"

_FACTORIES: dict[tuple[bool, bool], tuple[Callable[..., grpc.RpcMethodHandler], str]] = {
    (False, False): (grpc.unary_unary_rpc_method_handler, "unary_unary"),
    (False, True): (grpc.unary_stream_rpc_method_handler, "unary_stream"),
    (True, False): (grpc.stream_unary_rpc_method_handler, "stream_unary"),
    (True, True): (grpc.stream_stream_rpc_method_handler, "stream_stream"),
}


def is_daemon_method(method: str) -> bool:
    """True for the Daemon service's RPCs (not health, not reflection)."""
    return method.startswith(DAEMON_PREFIX)


def method_name(method: str) -> str:
    """``/daemon.v1.Daemon/Query`` -> ``Query``."""
    return method.rsplit("/", 1)[-1]


def rewrap(
    handler: grpc.RpcMethodHandler,
    wrap: Callable[[Behavior], Behavior],
    request_deserializer: Callable[[bytes], Any] | None = None,
) -> grpc.RpcMethodHandler:
    """``handler`` with its behaviour replaced by ``wrap(behaviour)``, same kind and serializers."""
    factory, attribute = _FACTORIES[(handler.request_streaming, handler.response_streaming)]
    return factory(
        wrap(getattr(handler, attribute)),
        request_deserializer=request_deserializer or handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def refusing(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, details: str) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s kind that answers every call with ``code``."""

    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(code, details)

    return rewrap(handler, lambda _behavior: refuse)
