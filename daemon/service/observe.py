"""Watching every Daemon call once, for the turn trace and the metrics.

One guard times each call from its arrival, captures its status code and
hands a ``CallRecord`` to every ``CallSink`` (``daemon.tracelog``,
``daemon.metrics``), so the two always agree on what happened.

A failed query's operation comes from the core, which read the query once
and noted what it tried (``note_operation``); the record is taken after all
the work, so its latency is what the caller waited.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from chd.core.language.intents import OPERATIONS
from chd.service.admission import arrived
from chd.service.handlers import Behavior, Guard

__all__ = [
    "RPC_OPERATIONS",
    "TRACE_OPERATIONS",
    "CallRecord",
    "CallSink",
    "answered_code",
    "attempted_operation",
    "clear_operation",
    "note_operation",
    "observing",
    "operation_of",
]

RPC_OPERATIONS = {"GetPurpose": "get_purpose", "GetInstructions": "get_instructions"}
# Every value operation_of can give: a query's operation, the two RPCs that
# are not queries, and unknown. docs/operations.md lists them (a test keeps
# the list equal), and metrics and OTel spans use the same names.
TRACE_OPERATIONS: tuple[str, ...] = (*OPERATIONS, *RPC_OPERATIONS.values(), "unknown")
# What the current call tried to do, noted by whoever decided it (the
# servicer, from the core's error); read by the guard in the same context.
_ATTEMPTED: ContextVar[str | None] = ContextVar("chd_attempted_operation", default=None)


def note_operation(operation: str) -> None:
    """Note the operation the current call performed or tried (a bounded name)."""
    _ATTEMPTED.set(operation)


def attempted_operation() -> str | None:
    """The operation ``note_operation`` noted in this call so far (None: none)."""
    return _ATTEMPTED.get()


def clear_operation() -> None:
    """Forget what an earlier call on this worker thread noted (a call's guards start with it)."""
    _ATTEMPTED.set(None)


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One finished call: what was asked, what was answered, how long it took."""

    method: str
    code: grpc.StatusCode
    latency: float
    request: Any
    response: Any = None
    details: str = ""
    attempted: str | None = None


def operation_of(call: CallRecord) -> str:
    """The operation a call performed, or tried to: ``store``, ``get_purpose``, ``unknown``..."""
    if call.method in RPC_OPERATIONS:
        return RPC_OPERATIONS[call.method]
    if call.response is not None and getattr(call.response, "operation", ""):
        return str(call.response.operation)
    # A failed query: what the core noted it tried (a refused call never reached it).
    return call.attempted or "unknown"


class CallSink(Protocol):
    """Something that wants to hear about calls."""

    def begin(self, method: str) -> None:
        """A call has started running."""
        ...

    def record(self, call: CallRecord) -> None:
        """A call has finished; must not raise."""
        ...


def observing(sinks: Sequence[CallSink]) -> Guard:
    """A guard reporting every call to ``sinks``; outermost, so it sees every refusal too."""
    sinks = tuple(sinks)

    def guard(method: str, behavior: Behavior) -> Behavior:
        if not sinks:
            return behavior

        def observed(request: Any, context: grpc.ServicerContext) -> Any:
            _ATTEMPTED.set(None)
            for sink in sinks:
                sink.begin(method)
            response = None
            try:
                response = behavior(request, context)
                return response
            finally:
                code = answered_code(context, response)
                details = context.details() or ""
                call = CallRecord(
                    method,
                    code,
                    time.perf_counter() - arrived(),
                    request,
                    response,
                    details.decode("utf-8", "replace") if isinstance(details, bytes) else details,
                    _ATTEMPTED.get(),
                )
                for sink in sinks:
                    sink.record(call)

        return observed

    return guard


def answered_code(context: grpc.ServicerContext, response: Any) -> grpc.StatusCode:
    """The status a call was answered with: context.abort raises, and the status it set stays on
    the context; a handler that raised without one is UNKNOWN to the caller."""
    code = context.code() or grpc.StatusCode.OK
    if response is None and code is grpc.StatusCode.OK:
        return grpc.StatusCode.UNKNOWN
    return code  # type: ignore[no-any-return]
