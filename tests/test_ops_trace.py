"""The turn trace: one JSON line per operation, without conversation text unless debugging."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import DaemonProcess, run_chd
from ops_support import ask, channel_to, code_of, running

from chd.service.tracelog import TRACE_LOGGER, JsonFormatter

SECRET_TEXT = "my card number is 4111"
FIELDS = {"time", "conversation", "operation", "items", "tokens", "latency_ms", "outcome"}


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[dict[str, Any]] = []
        self.formatted: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.chd_trace)  # type: ignore[attr-defined]
        self.formatted.append(JsonFormatter().format(record))


@pytest.fixture
def trace(request) -> Iterator[_Lines]:  # type: ignore[no-untyped-def]
    """The trace lines written while the test runs, at the level the test's marker asks (INFO by default)."""
    logger = logging.getLogger(TRACE_LOGGER)
    handler = _Lines()
    level = getattr(request, "param", logging.INFO)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


class TestTraceLines:
    """Each Daemon call writes exactly one trace line with the agreed fields."""

    def test_a_store_writes_one_line_with_every_field(self, trace):
        with running() as server, channel_to(server) as channel:
            ask(channel, f"Add utterance: {SECRET_TEXT}", metadata={"conversation_id": "t1"})
        assert len(trace.lines) == 1
        line = trace.lines[0]
        assert set(line) == FIELDS
        assert (line["conversation"], line["operation"], line["items"], line["outcome"]) == (
            "t1",
            "store",
            1,
            "OK",
        )
        assert line["tokens"] > 0 and line["latency_ms"] > 0
        assert line["time"].endswith("Z")

    def test_the_trace_never_holds_the_utterance_text_at_info(self, trace):
        """Neither the stored text nor an error quoting the query reaches the trace."""
        with running() as server, channel_to(server) as channel:
            ask(channel, f"Add utterance: {SECRET_TEXT}")
            code_of(ask, channel, f"Please ponder {SECRET_TEXT}")
        assert len(trace.lines) == 2
        assert all(SECRET_TEXT not in text for text in trace.formatted)

    @pytest.mark.parametrize("trace", [logging.DEBUG], indirect=True)
    def test_debug_adds_the_query_text_and_error_details(self, trace):
        with running() as server, channel_to(server) as channel:
            code_of(ask, channel, f"Please ponder {SECRET_TEXT}")
        assert trace.lines[0]["query"] == f"Please ponder {SECRET_TEXT}"
        assert "could not tell" in trace.lines[0]["error"]

    def test_a_failed_query_is_traced_with_its_status_and_attempted_operation(self, trace):
        with running() as server, channel_to(server) as channel:
            assert (
                code_of(ask, channel, "Remove utterance 99", metadata={"conversation_id": "t2"})
                == grpc.StatusCode.NOT_FOUND
            )
        line = trace.lines[0]
        assert (line["conversation"], line["operation"], line["outcome"], line["items"]) == (
            "t2",
            "remove",
            "NOT_FOUND",
            0,
        )

    def test_purpose_and_instructions_are_traced_too(self, trace):
        from chd.v1 import daemon_pb2, daemon_pb2_grpc

        with running() as server, channel_to(server) as channel:
            daemon_pb2_grpc.DaemonStub(channel).GetPurpose(
                daemon_pb2.GetPurposeRequest(), timeout=5
            )
        assert trace.lines[0]["operation"] == "get_purpose"

    def test_the_json_format_puts_trace_fields_at_the_top_level(self, trace):
        with running() as server, channel_to(server) as channel:
            ask(channel, "Get the last 3 utterances")
        parsed = json.loads(trace.formatted[0])
        assert parsed["logger"] == TRACE_LOGGER and parsed["operation"] == "retrieve"
        assert FIELDS <= set(parsed)


class TestTraceFromTheProcess:
    """`chd serve` writes the trace to stderr, one JSON object per line."""

    @pytest.mark.parametrize("level", ["info", "debug"])
    def test_the_daemon_process_traces_each_query(self, level):
        """Two queries, two trace lines; the text shows only at debug."""
        process = DaemonProcess("--log-level", level, "--log-format", "json")
        try:
            assert (
                run_chd(
                    "query", f"Add utterance: {SECRET_TEXT}", "--target", process.target
                ).returncode
                == 0
            )
            assert (
                run_chd("query", "Get the last 2 utterances", "--target", process.target).returncode
                == 0
            )
            assert process.terminate() == 0
        finally:
            process.kill()
        stderr = "".join(process.stderr_lines)
        records = [json.loads(line) for line in stderr.splitlines() if line.strip()]
        traced = [r for r in records if r["logger"] == TRACE_LOGGER]
        assert [r["operation"] for r in traced] == ["store", "retrieve"]
        assert (SECRET_TEXT in stderr) == (level == "debug")


def test_an_ambiguous_remove_is_traced_as_a_remove_every_time() -> None:
    """'Remove utterances' is refused as a remove, first read and from the reading cache alike
    (it was traced as 'unknown'; issue 30 item 6)."""
    from chd.core.errors import DaemonError
    from chd.core.history import ConversationHistory

    history = ConversationHistory(background=False)
    try:
        for _ in range(2):
            try:
                history.query("Remove utterances")
            except DaemonError as refused:
                assert refused.operation == "remove"
            else:
                raise AssertionError("an ambiguous remove ran")
    finally:
        history.close()


def test_the_operations_doc_lists_every_operation_the_trace_writes() -> None:
    """docs/operations.md's `operation` field names exactly TRACE_OPERATIONS (newcomer 32 #7)."""
    from chd.service.observe import TRACE_OPERATIONS

    doc = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text(
        encoding="utf-8"
    )
    start = doc.index("- `operation`:")
    field = doc[start : doc.index("\n- `", start + 1)]
    named = list(dict.fromkeys(re.findall(r"`(\w+)`", field)))
    assert named == ["operation", *TRACE_OPERATIONS]
