"""What the polling thread notes about a call, for the Daemon handlers to act on.

grpcio runs a call's interceptors on its polling thread and the call's
behaviour on a worker, both inside the call's own ``contextvars.Context``
(grpc/grpc#34291). So an interceptor here only notes a fact in a ContextVar
and hands the handler back unchanged; the guards the handlers were built
with (``daemon.handlers``) read it on the worker. Two facts need the
polling thread: when the call arrived (a worker may take it much later)
and why it must be refused (auth reads the call's metadata there).
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any

import grpc

from chd.backends.base import CALL_DEADLINE
from chd.service.handlers import Behavior

__all__ = [
    "ArrivalInterceptor",
    "arrived",
    "call_deadline",
    "note_deadline",
    "note_refusal",
    "refuse_noted",
]

_ARRIVED: ContextVar[float] = ContextVar("chd_arrived")
_DEADLINE: ContextVar[float | None] = ContextVar("chd_deadline", default=None)
_REFUSED: ContextVar[tuple[grpc.StatusCode, str] | None] = ContextVar("chd_refused", default=None)


def arrived() -> float:
    """When the current call arrived, on the ``time.perf_counter`` clock.

    A behaviour run without the interceptor (a test calling a servicer
    directly) counts from now.
    """
    return _ARRIVED.get(time.perf_counter())


def note_deadline(deadline: float) -> None:
    """Note when the current call must have its answer, on the ``time.monotonic`` clock (storage waits see it too)."""
    _DEADLINE.set(deadline)
    CALL_DEADLINE.set(deadline)


def call_deadline() -> float | None:
    """The current call's deadline (``time.monotonic``), if a guard noted one."""
    return _DEADLINE.get()


def note_refusal(code: grpc.StatusCode, details: str) -> None:
    """Make the current call's guarded behaviour answer ``code`` without running."""
    _REFUSED.set((code, details))


class ArrivalInterceptor(grpc.ServerInterceptor):
    """Notes each call's arrival time; outermost, so it is the first thing a call meets."""

    def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        _ARRIVED.set(time.perf_counter())
        return continuation(handler_call_details)


def refuse_noted(_method: str, behavior: Behavior) -> Behavior:
    """A guard: answer with the refusal an interceptor noted, if any, before anything else runs."""

    def checked(request: Any, context: grpc.ServicerContext) -> Any:
        refused = _REFUSED.get()
        if refused is not None:
            context.abort(*refused)
        return behavior(request, context)

    return checked
