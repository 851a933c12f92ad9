"""Where the core marks spans of work, without knowing who traces them.

The core must not depend on OpenTelemetry (docs/architecture.md): it calls
``tracer.span(name)`` around the parse, a storage commit and a fold, and the
service hands in a ``Tracer`` that opens real spans (chd.service.otel) when
tracing is configured. Otherwise every span is one shared ``nullcontext``:
a store pays an attribute lookup and two no-op calls, nothing measurable.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

__all__ = ["Tracer", "NO_TRACER", "PARSE", "COMMIT", "FOLD"]

# The span names the core opens.
PARSE = "chd.parse"
COMMIT = "chd.storage.commit"
FOLD = "chd.fold"


class Tracer(Protocol):
    """Opens a span around a piece of the core's work."""

    def span(self, name: str, conversation_id: str) -> AbstractContextManager[Any]:
        """A context manager timing ``name`` for ``conversation_id``, a child of the current span if any."""
        ...


_NULL: AbstractContextManager[Any] = nullcontext()


class _NoTracer:
    """No tracing: every span is the same no-op context manager."""

    def span(self, name: str, conversation_id: str) -> AbstractContextManager[Any]:
        return _NULL


NO_TRACER: Tracer = _NoTracer()
