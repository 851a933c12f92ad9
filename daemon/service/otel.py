"""OpenTelemetry traces (issue 29): a span per RPC, and the core's spans as its children.

Optional twice over: the packages come with the ``chd[otel]`` extra, and
even installed nothing is traced unless the standard OTEL_* variables ask
for it (``tracing_from_environment``). Without either, ``start`` gets None
and the daemon runs exactly as before: no guard, the core's no-op tracer.

The RPC span is opened by a guard, outermost of the observers, so it
covers the metrics and trace line too and sees every outcome, refusals
included; its attributes are the operation, the conversation and the
outcome (the status code's name). The core opens ``chd.parse``,
``chd.storage.commit`` and ``chd.fold`` through the ``Tracer`` protocol of
chd.core.tracing, which ``OtelTracing`` fills in: in the calling thread they
nest under the RPC span; a background fold is a trace of its own.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import grpc

from chd.service.handlers import Behavior
from chd.service.observe import (
    RPC_OPERATIONS,
    answered_code,
    attempted_operation,
    clear_operation,
)

__all__ = ["OtelTracing", "tracing_from_environment", "configured", "SERVICE"]

log = logging.getLogger(__name__)

SERVICE = "daemon.v1.Daemon"
# Exporters the SDK itself ships (OTLP needs an exporter package of its own).
_EXPORTER_NAMES = ("otlp", "console")


def configured(environ: Mapping[str, str]) -> bool:
    """Whether the standard OTEL_* variables ask for traces.

    OTEL_TRACES_EXPORTER other than ``none``, or an OTLP endpoint, turns
    tracing on; OTEL_SDK_DISABLED=true turns it off whatever else is set.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def tracing_from_environment(environ: Mapping[str, str] | None = None) -> OtelTracing | None:
    """Traces as the OTEL_* variables configure them, or None (not configured, or no ``chd[otel]``)."""
    environ = os.environ if environ is None else environ
    if not configured(environ):
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        log.warning(
            "OTEL_* variables ask for traces but OpenTelemetry is not installed "
            "(pip install 'chd[otel]'); not tracing"
        )
        return None
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        # Already set up (opentelemetry-instrument, or the host program): add to it.
        return OtelTracing(current)
    provider = TracerProvider(
        resource=Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", "chd")})
    )
    names = [
        n.strip().lower()
        for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")
        if n.strip()
    ]
    for name in names:
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError:
                log.warning(
                    "OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http "
                    "installed beside chd[otel]; not exporting to OTLP"
                )
                continue
            provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter())
            )  # reads OTEL_EXPORTER_OTLP_*
        else:
            log.warning(
                "OTEL_TRACES_EXPORTER %r is not one of %s; ignored",
                name,
                ", ".join(_EXPORTER_NAMES),
            )
    trace.set_tracer_provider(provider)
    return OtelTracing(provider, owned=True)


class OtelTracing:
    """Spans from one OpenTelemetry ``TracerProvider``: the RPC guard and the core's ``Tracer``."""

    def __init__(self, provider: Any, *, owned: bool = False) -> None:
        """``owned``: chd made ``provider`` and shuts it down when the daemon stops."""
        from opentelemetry import propagate, trace

        self.provider = provider
        self.owned = owned
        self._tracer = provider.get_tracer("chd")
        self._trace = trace
        self._propagate = propagate

    def span(self, name: str, conversation_id: str) -> AbstractContextManager[Any]:
        """The core's ``Tracer``: a child of the current span (the RPC's, in a call)."""
        return self._tracer.start_as_current_span(
            name, attributes={"chd.conversation_id": conversation_id}
        )

    def shutdown(self) -> None:
        """Export what is buffered and stop, when chd made the provider (the daemon is stopping)."""
        shutdown = getattr(self.provider, "shutdown", None)
        if self.owned and callable(shutdown):
            shutdown()

    def guard(self, method: str, behavior: Behavior) -> Behavior:
        """A span per call of ``method``, continuing the caller's trace when it sent ``traceparent``."""
        trace, tracer, propagate = self._trace, self._tracer, self._propagate
        name = f"{SERVICE}/{method}"
        fixed = {"rpc.system": "grpc", "rpc.service": SERVICE, "rpc.method": method}

        def traced(request: Any, context: grpc.ServicerContext) -> Any:
            clear_operation()
            parent = propagate.extract(dict(context.invocation_metadata() or ()))
            with tracer.start_as_current_span(
                name,
                context=parent,
                kind=trace.SpanKind.SERVER,
                attributes=fixed,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                response = None
                try:
                    response = behavior(request, context)
                    return response
                finally:
                    code = answered_code(context, response)
                    span.set_attribute("chd.operation", _operation(method, response))
                    if method == "Query":
                        span.set_attribute("chd.conversation_id", _conversation(request))
                    span.set_attribute("chd.outcome", code.name)
                    span.set_attribute("rpc.grpc.status_code", code.value[0])
                    if code is not grpc.StatusCode.OK:
                        span.set_status(trace.Status(trace.StatusCode.ERROR, code.name))

        return traced


def _operation(method: str, response: Any) -> str:
    if method in RPC_OPERATIONS:
        return RPC_OPERATIONS[method]
    if response is not None and getattr(response, "operation", ""):
        return str(response.operation)
    return attempted_operation() or "unknown"


def _conversation(request: Any) -> str:
    """The Query's ``metadata.conversation_id`` as sent (bounded), ``default`` when absent."""
    field = request.metadata.fields.get("conversation_id")
    if field is None or field.WhichOneof("kind") != "string_value":
        return "default"
    return field.string_value[:256]
