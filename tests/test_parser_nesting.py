"""Nested brackets are refused, never INTERNAL, and no log line carries more than a few kB of a caller's text (issue 28, item 1).

The probe's shapes: ``get_utterances(`` + 990 ``[`` + 990 ``]`` + ``)``
(1,996 characters, under the instruction cap) and a store of brackets nested
at any depth (a store's text is exempt from the cap). Both reached Python's
recursion limit in the call scanner, answered INTERNAL and logged a 162 kB
trace line each.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from ops_support import ask, channel_to, running

from chd.core.history import ConversationHistory
from chd.core.language.grammar.calls import MAX_LIST_DEPTH
from chd.service.tracelog import TRACE_LOGGER, JsonFormatter, TextFormatter

# A log line may quote a caller, but only a few kB of what it sent: two
# fields of MAX_LOG_FIELD written bytes and the rest of the line.
MOST_LOG_BYTES = 7_000

PROBES = {
    "990 brackets in a call": "get_utterances(" + "[" * 990 + "]" * 990 + ")",
    "100k brackets in a store": "add_utterance(" + "[" * 100_000 + "]" * 100_000 + ")",
    "unclosed brackets in a store": "add_utterance(" + "[" * 50_000 + ")",
    "nesting after a string": 'add_utterance("hi", ' + "[" * 5_000 + "]" * 5_000 + ")",
}


class _Formatted(logging.Handler):
    """Every record, as both of the daemon's formatters would write it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(JsonFormatter().format(record))
        self.lines.append(TextFormatter().format(record))


@pytest.fixture
def logged() -> Iterator[_Formatted]:
    """What every logger writes during the test, the turn trace at DEBUG (it quotes queries)."""
    root, trace = logging.getLogger(), logging.getLogger(TRACE_LOGGER)
    handler, levels = _Formatted(), (root.level, trace.level)
    root.addHandler(handler)
    trace.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(levels[0])
        trace.setLevel(levels[1])


def _answer(channel: grpc.Channel, text: str) -> tuple[grpc.StatusCode, str]:
    try:
        ask(channel, text)
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


class TestNestedBrackets:
    """Lists nest at most MAX_LIST_DEPTH deep; deeper is the caller's mistake."""

    @pytest.mark.parametrize("shape", PROBES)
    def test_deeply_nested_brackets_are_refused_naming_the_limit(self, shape):
        """Every probe shape is INVALID_ARGUMENT, and a too-deep one says how deep lists may go."""
        with running() as server, channel_to(server) as channel:
            code, details = _answer(channel, PROBES[shape])
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
        if "unclosed" not in shape:
            assert f"more than {MAX_LIST_DEPTH} deep" in details

    def test_lists_within_the_limit_are_still_read(self):
        """remove_utterances([3, 4]) and a list of lists at the limit are understood as before."""
        nested = "[" * MAX_LIST_DEPTH + "1" + "]" * MAX_LIST_DEPTH
        with running() as server, channel_to(server) as channel:
            for n in range(5):
                ask(channel, f"Add utterance: line {n}")
            assert ask(channel, "remove_utterances([3, 4])").metadata["items_affected"] == 2
            code, details = _answer(channel, f"get_utterances({nested})")
        assert "deep" not in details and code != grpc.StatusCode.INTERNAL


class TestLogLinesAreBounded:
    """No log line carries more than a few kB of what a caller sent."""

    def test_the_probe_shapes_log_short_lines(self, logged):
        with running() as server, channel_to(server) as channel:
            for text in PROBES.values():
                _answer(channel, text)
        assert logged.lines
        assert max(len(line.encode()) for line in logged.lines) <= MOST_LOG_BYTES

    def test_an_internal_error_quoting_a_megabyte_logs_a_short_line(self, logged, monkeypatch):
        """A bug whose exception quotes the whole query still answers INTERNAL and logs a few kB."""

        def broken(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            raise ValueError(f"cannot handle {query}")

        monkeypatch.setattr(ConversationHistory, "query", broken)
        with running() as server, channel_to(server) as channel:
            code, details = _answer(channel, "Add utterance: " + "x" * 1_000_000)
        assert code == grpc.StatusCode.INTERNAL and "x" * 100 not in details
        errors = [line for line in logged.lines if "internal error" in line]
        assert errors and "characters cut" in errors[0]
        assert max(len(line.encode()) for line in logged.lines) <= MOST_LOG_BYTES

    def test_a_debug_trace_of_a_megabyte_store_quotes_its_start_and_end(self, logged):
        """A refused megabyte store and an accepted 30 kB one are both quoted a few kB deep."""
        with running() as server, channel_to(server) as channel:
            _answer(channel, "Add utterance: start " + "y" * 1_000_000 + " end")
            ask(channel, "Add utterance: start " + "y" * 30_000 + " end")
        traced = [line for line in logged.lines if "start yyy" in line]
        assert len(traced) == 4 and all(
            "characters cut" in line and 'y end"' in line for line in traced
        )
        assert max(len(line.encode()) for line in logged.lines) <= MOST_LOG_BYTES


class TestLogLinesAreBoundedInBytes:
    """The cap counts bytes as written, after JSON escaping and UTF-8 (outside review of issue 28)."""

    @pytest.mark.parametrize(
        "char", ["\x01", "\U0001f600", '"', "é"], ids=["control", "emoji", "quote", "accent"]
    )
    def test_a_debug_trace_of_characters_written_long_stays_a_few_kb(self, logged, char):
        """4,000 characters that JSON writes as 2 to 6 bytes each, in the query and the error, keep every line under 7 kB."""
        with running() as server, channel_to(server) as channel:
            _answer(channel, "get_utterances(" + char * 4000)
            _answer(channel, "Add utterance: " + char * 50_000 + " end")
            _answer(channel, "Add utterance: " + char * 4000 + " end")
        assert any("characters cut" in line for line in logged.lines)
        assert (
            max(len(line.encode("utf-8", "surrogatepass")) for line in logged.lines)
            <= MOST_LOG_BYTES
        )
