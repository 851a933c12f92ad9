"""The turn trace: one structured JSON log line per Daemon operation.

Each line says when, which conversation, which operation, how many items
and tokens it touched, how long it took and how it ended. The text of the
query (and so of any utterance in it) and error details (which may quote it)
appear only when the ``chd.trace`` logger is at DEBUG: a trace is shipped to
log stores with other retention and access rules than the conversations.

``configure_logging`` sets level and format for the whole process: ``json``
(every record one JSON object, for log pipelines), ``text`` (one short line a
record, for a person), or ``auto``: text on an interactive terminal, else json.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any, TextIO

from chd.core.history import DEFAULT_CONVERSATION, MAX_CONVERSATION_ID
from chd.service.observe import CallRecord, operation_of
from chd.service.repeats import RepeatFilter

__all__ = [
    "TraceLog",
    "JsonFormatter",
    "TextFormatter",
    "configure_logging",
    "clip",
    "TRACE_LOGGER",
    "MAX_LOG_FIELD",
]

TRACE_LOGGER = "chd.trace"

# Bytes of one field of a log line as written (a message, a trace's query or
# error, an exception's trace), counted after JSON escaping and UTF-8
# encoding. A RecursionError's trace was 162 kB a line and 311 hostile calls
# wrote 50 MB of log (issue 28); a debug trace quoted whole megabyte stores.
# Counted in characters, 4,000 control characters still wrote 24 kB (each
# \x01 is escaped as \u0001) in each of a trace's query and error (outside
# review of issue 28). Both ends stay: what went wrong and where it ended up.
# A line holds at most two such fields, so no line passes about 6.5 kB.
MAX_LOG_FIELD = 3000

_SHORT_ESCAPES = frozenset('"\\\n\r\t\b\f')


def _written_bytes(char: str) -> int:
    """Bytes ``char`` takes in a JSON string written as UTF-8 (json.dumps, ensure_ascii=False)."""
    code = ord(char)
    if code < 0x20 or char in _SHORT_ESCAPES:
        return 2 if char in _SHORT_ESCAPES else 6
    if code < 0x80:
        return 1
    if code < 0x800:
        return 2
    if 0xD800 <= code < 0xE000:  # a lone surrogate: written escaped, if at all
        return 6
    return 3 if code < 0x10000 else 4


def _fits(text: str, budget: int, from_end: bool = False) -> int:
    """How many characters from the start (or end) of ``text`` fit in ``budget`` written bytes."""
    used = 0
    count = 0
    for char in reversed(text) if from_end else text:
        used += _written_bytes(char)
        if used > budget:
            break
        count += 1
    return count


def clip(text: str, limit: int = MAX_LOG_FIELD) -> str:
    """``text`` cut in its middle to at most ``limit`` bytes as written in a JSON line, saying how many characters were cut."""
    if (
        6 * len(text) <= limit
        or len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2 <= limit
    ):
        return text
    head = _fits(text, limit // 4)
    tail = _fits(text[head:], limit - limit // 4 - 60, from_end=True)
    return f"{text[:head]} ...({len(text) - head - tail:,} characters cut)... {text[len(text) - tail :]}"


def _rfc3339(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TraceLog:
    """A CallSink writing the turn trace to the ``chd.trace`` logger."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.log = logger or logging.getLogger(TRACE_LOGGER)

    def begin(self, method: str) -> None:
        pass

    def record(self, call: CallRecord) -> None:
        if not self.log.isEnabledFor(logging.INFO):
            return
        try:
            fields = self.fields(call, debug=self.log.isEnabledFor(logging.DEBUG))
        except Exception:  # a trace must never fail the call it describes
            self.log.exception("could not build the trace line for a %s call", call.method)
            return
        self.log.info("%s", _AsJson(fields), extra={"chd_trace": fields})

    @staticmethod
    def fields(call: CallRecord, debug: bool = False) -> dict[str, Any]:
        """The trace line's fields for one call."""
        request, response = call.request, call.response
        meta = response.metadata if response is not None and hasattr(response, "metadata") else None
        fields: dict[str, Any] = {
            "time": _rfc3339(time.time()),
            "conversation": _conversation(request, meta),
            "operation": operation_of(call),
            "items": int(meta["items_affected"])
            if meta is not None and "items_affected" in meta
            else 0,
            "tokens": int(meta["tokens_used"]) if meta is not None and "tokens_used" in meta else 0,
            "latency_ms": round(call.latency * 1000, 3),
            "outcome": call.code.name,
        }
        if debug:
            query = getattr(request, "query", None)
            fields["query"] = clip(query) if isinstance(query, str) else query
            if call.details:
                fields["error"] = clip(call.details)
        return fields


class _AsJson:
    """The fields as JSON text, rendered only if a text formatter asks (JsonFormatter does not)."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields

    def __str__(self) -> str:
        return json.dumps(self.fields, ensure_ascii=False)


def _conversation(request: Any, meta: Any) -> str | None:
    if meta is not None and "conversation_id" in meta:
        return str(meta["conversation_id"])
    metadata = getattr(request, "metadata", None)
    if metadata is None:
        return None
    if "conversation_id" not in metadata.fields:
        return DEFAULT_CONVERSATION
    value = metadata.fields["conversation_id"]
    if value.WhichOneof("kind") == "string_value":
        return value.string_value[:MAX_CONVERSATION_ID]
    return None  # not a string: the call was refused for it


class JsonFormatter(logging.Formatter):
    """Every record as one JSON object; trace records carry their fields at top level."""

    def format(self, record: logging.LogRecord) -> str:
        trace = getattr(record, "chd_trace", None)
        if trace is not None:
            line = {"time": trace["time"], "level": record.levelname, "logger": record.name} | trace
            return json.dumps(line, ensure_ascii=False)
        line: dict[str, Any] = {
            "time": _rfc3339(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": clip(record.getMessage()),
        }
        if record.exc_info:
            line["exception"] = clip(self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """One short line a record; a trace line reads ``12:01:05 store · demo · 1 item · 7 tokens · 0.95 ms · OK``."""

    def format(self, record: logging.LogRecord) -> str:
        clock = time.strftime("%H:%M:%S", time.localtime(record.created))
        trace = getattr(record, "chd_trace", None)
        if trace is None:
            line = f"{clock} {record.levelname} {record.name}: {clip(record.getMessage())}"
            if record.exc_info:
                line += "\n" + clip(self.formatException(record.exc_info))
            return line
        parts = [
            trace["operation"],
            str(trace["conversation"]),
            _count(trace["items"], "item"),
            _count(trace["tokens"], "token"),
            f"{trace['latency_ms']:g} ms",
            trace["outcome"],
        ]
        parts.extend(
            json.dumps(trace[extra], ensure_ascii=False)
            for extra in ("query", "error")
            if extra in trace
        )
        return f"{clock} " + " · ".join(parts)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def configure_logging(level: str = "INFO", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Route every logger to ``stream`` (stderr) at ``level`` in format ``json``, ``text`` or ``auto``."""
    stream = stream or sys.stderr
    if fmt == "auto":
        # A person at a terminal reads lines; a service manager or pipe feeds a log store.
        fmt = "text" if stream.isatty() else "json"
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RepeatFilter())  # one line per kind of repeated error and 10 s
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # grpc's own loggers are chatty at DEBUG and never about our calls.
    logging.getLogger("grpc").setLevel(max(logging.INFO, root.level))
