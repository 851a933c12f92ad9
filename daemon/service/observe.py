"""Watching every Daemon call once, for the turn trace and the metrics.

One guard times each call from its arrival, captures its status code and
hands a ``CallRecord`` to every ``CallSink`` (``daemon.tracelog``,
``daemon.metrics``), so the two always agree on what happened.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import grpc

from chd.service.decoding import Undecodable
from chd.service.admission import arrived
from chd.service.handlers import Behavior, Guard
from chd.core.language.intents import OPERATIONS
from chd.core.language.parser import parse

__all__ = ["CallRecord", "CallSink", "observing", "operation_of"]

_OPERATIONS = {"GetPurpose": "get_purpose", "GetInstructions": "get_instructions"}


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One finished call: what was asked, what was answered, how long it took."""

    method: str
    code: grpc.StatusCode
    latency: float
    request: Any
    response: Any = None
    details: str = ""


def operation_of(call: CallRecord) -> str:
    """The operation a call performed, or tried to: ``store``, ``get_purpose``, ``unknown``..."""
    if call.method in _OPERATIONS:
        return _OPERATIONS[call.method]
    if call.response is not None and getattr(call.response, "operation", ""):
        return str(call.response.operation)
    # A failed query: say what it tried to do when that can be told.
    request = call.request
    if request is None or isinstance(request, Undecodable):
        return "unknown"
    data = request.data.fields
    if "operation" in data:
        named = data["operation"].string_value.strip().lower()
        # Bounded to known names: this becomes a metrics label.
        return named if named in OPERATIONS else "unknown"
    try:
        return parse(request.query).operation
    except Exception:
        return "unknown"


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
            for sink in sinks:
                sink.begin(method)
            response = None
            try:
                response = behavior(request, context)
                return response
            finally:
                # context.abort raises; the status it set is still on the context.
                code = context.code() or grpc.StatusCode.OK
                if response is None and code is grpc.StatusCode.OK:
                    code = grpc.StatusCode.UNKNOWN
                details = context.details() or ""
                call = CallRecord(
                    method,
                    code,
                    time.perf_counter() - arrived(),
                    request,
                    response,
                    details.decode("utf-8", "replace") if isinstance(details, bytes) else details,
                )
                for sink in sinks:
                    sink.record(call)

        return observed

    return guard
