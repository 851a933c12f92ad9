"""Undecodable requests answer INVALID_ARGUMENT, not grpc's INTERNAL.

grpcio turns a request its deserializer cannot parse (random bytes, invalid
UTF-8 in a string, a Struct nested past protobuf's recursion limit) into
``INTERNAL: Exception deserializing request!``: a server fault, by its
status, for what is the caller's malformed message. This interceptor lets
the deserializer hand back an ``Undecodable`` marker instead, and the
wrapped behaviour refuses it with INVALID_ARGUMENT saying why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import grpc

from daemon.handlers import Behavior, is_daemon_method, rewrap

__all__ = ["Undecodable", "DecodingInterceptor"]


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A request message that did not parse, and why."""

    reason: str


def _tolerant(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as exc:  # protobuf raises DecodeError, RecursionError, ...
            return Undecodable(str(exc) or type(exc).__name__)

    return parse


def _refuse_undecodable(behavior: Behavior) -> Behavior:
    def checked(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the request message could not be decoded ({request.reason}); "
                "send a valid daemon.v1 message (Struct values nested at most ~30 deep)",
            )
        return behavior(request, context)

    return checked


class DecodingInterceptor(grpc.ServerInterceptor):
    """Applies to the Daemon service's unary RPCs; others pass untouched."""

    def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        handler = continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        if not is_daemon_method(handler_call_details.method):
            return handler
        return rewrap(handler, _refuse_undecodable, _tolerant(handler.request_deserializer))
