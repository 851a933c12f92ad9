"""Undecodable requests answer INVALID_ARGUMENT, not grpc's INTERNAL.

grpcio turns a request its deserializer cannot parse (random bytes, invalid
UTF-8 in a string, a Struct nested past protobuf's recursion limit) into
``INTERNAL: Exception deserializing request!``: a server fault, by its
status, for what is the caller's malformed message. The Daemon handlers are
built with a deserializer that hands back an ``Undecodable`` marker instead,
and a guard that refuses it with INVALID_ARGUMENT saying why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from chd.service.handlers import Behavior

__all__ = ["Undecodable", "tolerant", "refuse_undecodable"]


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A request message that did not parse, and why."""

    reason: str


def tolerant(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``deserialize``, answering an ``Undecodable`` where it would raise."""

    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as exc:  # protobuf raises DecodeError, RecursionError, ...
            return Undecodable(str(exc) or type(exc).__name__)

    return parse


def refuse_undecodable(_method: str, behavior: Behavior) -> Behavior:
    """A guard: an ``Undecodable`` request is refused with INVALID_ARGUMENT saying why."""

    def checked(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the request message could not be decoded ({request.reason}); "
                "send a valid daemon.v1 message (Struct values nested at most ~30 deep)",
            )
        return behavior(request, context)

    return checked
