"""The Daemon service's method handlers, built once with their guards.

Each guard wraps a behaviour (refuse what cannot be decoded, refuse calls
past their deadline, observe the outcome). They used to be interceptors,
and an interceptor that acts inside a call has to build a new handler for
every call, on grpc's polling thread, which every call goes through: three
of them cost about 20 us a call there. Built once at start-up, the guards
cost a function call each; what only the polling thread can know (when a
call arrived, whether its token was right) is noted per call by the
interceptors in ``daemon.admission``.

``rewrap`` remains for the one interceptor that still replaces handlers:
auth, refusing reflection calls without a token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc

from chd.v1 import daemon_pb2_grpc

__all__ = [
    "Behavior",
    "Guard",
    "DAEMON_PREFIX",
    "HEALTH_PREFIX",
    "daemon_handlers",
    "is_daemon_method",
    "in_own_pool",
    "refusing",
    "rewrap",
]

Behavior = Callable[[Any, grpc.ServicerContext], Any]
# (method name such as "Query", behaviour) -> the guarded behaviour.
Guard = Callable[[str, Behavior], Behavior]

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


def refusing(
    handler: grpc.RpcMethodHandler, code: grpc.StatusCode, details: str
) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s kind that answers every call with ``code``."""

    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(code, details)

    return rewrap(handler, lambda _behavior: refuse)


class _Recorder:
    """Stands in for a server to catch the handlers the generated code registers."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, _handlers: Any) -> None:
        pass

    def add_registered_method_handlers(
        self, _service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.handlers = dict(handlers)


def in_own_pool(
    add_servicer: Callable[[Any, Any], None], servicer: Any, methods: Sequence[str], pool: Any
) -> dict[str, grpc.RpcMethodHandler]:
    """The handlers ``add_servicer`` registers, with ``methods`` run on ``pool`` instead of the server's.

    grpcio runs a behaviour carrying an ``experimental_thread_pool``
    attribute on that pool (``grpc._server._select_thread_pool_for_behavior``):
    a health check answers even while every worker is busy with slow calls.
    """
    recorder = _Recorder()
    add_servicer(servicer, recorder)
    out = dict(recorder.handlers)
    for name in methods:
        handler = out[name]

        def own(behavior: Behavior) -> Behavior:
            def pooled(request: Any, context: grpc.ServicerContext) -> Any:
                return behavior(request, context)

            pooled.experimental_thread_pool = pool  # type: ignore[attr-defined]
            return pooled

        out[name] = rewrap(handler, own)
    return out


def daemon_handlers(
    servicer: daemon_pb2_grpc.DaemonServicer,
    guards: Sequence[Guard],
    request_deserializer: Callable[[Callable[[bytes], Any]], Callable[[bytes], Any]] | None = None,
) -> dict[str, grpc.RpcMethodHandler]:
    """The Daemon service's handlers, by method name, each behaviour wrapped in ``guards``.

    The first guard is the outermost. ``request_deserializer`` wraps each
    method's generated deserializer. The handlers come from the generated
    ``add_DaemonServicer_to_server``, so they follow the proto.
    """
    recorder = _Recorder()
    daemon_pb2_grpc.add_DaemonServicer_to_server(servicer, recorder)
    out = {}
    for name, handler in recorder.handlers.items():
        behavior = handler.unary_unary
        for guard in reversed(guards):
            behavior = guard(name, behavior)
        deserializer = handler.request_deserializer
        if request_deserializer is not None:
            deserializer = request_deserializer(deserializer)
        out[name] = grpc.unary_unary_rpc_method_handler(
            behavior,
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )
    return out
