"""OpenTelemetry traces (issue 29): a span per RPC with the core's spans as children, off unless configured."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import grpc
import pytest
from conftest import ROOT, chd_env
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from ops_support import ask, channel_to, code_of, config

from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from chd.core.tracing import NO_TRACER
from chd.service.app import start
from chd.service.otel import OtelTracing, configured, tracing_from_environment


@pytest.fixture
def spans() -> Iterator[tuple[OtelTracing, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield OtelTracing(provider), exporter
    provider.shutdown()


def _by_name(exporter: InMemorySpanExporter) -> dict[str, list]:
    found: dict[str, list] = {}
    for span in exporter.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


class TestSpans:
    def test_a_store_is_one_rpc_span_with_parse_and_commit_children(self, spans) -> None:
        """The Query span names the operation, conversation and outcome; parse and commit are its children."""
        tracing, exporter = spans
        server = start(config(), tracing=tracing)
        try:
            with channel_to(server) as channel:
                ask(
                    channel,
                    "Add user utterance: 'Book the 9:15 train'",
                    {"conversation_id": "trip"},
                )
        finally:
            server.stop(grace=0.5)
        found = _by_name(exporter)
        (rpc,) = found["daemon.v1.Daemon/Query"]
        assert rpc.attributes["chd.operation"] == "store"
        assert rpc.attributes["chd.conversation_id"] == "trip"
        assert rpc.attributes["chd.outcome"] == "OK"
        assert rpc.attributes["rpc.method"] == "Query"
        for child in ("chd.parse", "chd.storage.commit"):
            (span,) = found[child]
            assert span.parent is not None and span.parent.span_id == rpc.context.span_id
            assert span.context.trace_id == rpc.context.trace_id
            assert span.attributes["chd.conversation_id"] == "trip"

    def test_a_summary_read_has_a_fold_child(self, spans) -> None:
        """Reading the summary folds the queue first: a chd.fold span under the RPC's."""
        tracing, exporter = spans
        server = start(config(buffer_size=2, eviction_batch=1), tracing=tracing)
        try:
            with channel_to(server) as channel:
                for n in range(4):
                    ask(
                        channel,
                        f"Add user utterance: 'note {n} about Lyon'",
                        {"conversation_id": "f"},
                    )
                exporter.clear()
                ask(channel, "Get the summary", {"conversation_id": "f"})
        finally:
            server.stop(grace=0.5)
        found = _by_name(exporter)
        (rpc,) = found["daemon.v1.Daemon/Query"]
        assert rpc.attributes["chd.operation"] == "retrieve"
        folds = [s for s in found["chd.fold"] if s.context.trace_id == rpc.context.trace_id]
        assert folds and folds[0].parent.span_id == rpc.context.span_id

    def test_a_refusal_is_an_error_span_with_its_status(self, spans) -> None:
        """A query that is not understood: outcome INVALID_ARGUMENT, span status ERROR."""
        tracing, exporter = spans
        server = start(config(), tracing=tracing)
        try:
            with channel_to(server) as channel:
                assert (
                    code_of(ask, channel, "Please frobnicate the buffer")
                    is grpc.StatusCode.INVALID_ARGUMENT
                )
        finally:
            server.stop(grace=0.5)
        (rpc,) = _by_name(exporter)["daemon.v1.Daemon/Query"]
        assert rpc.attributes["chd.outcome"] == "INVALID_ARGUMENT"
        assert rpc.attributes["chd.conversation_id"] == "default"
        assert not rpc.status.is_ok

    def test_the_callers_trace_is_continued(self, spans) -> None:
        """A traceparent sent as gRPC metadata makes the RPC span a child of the caller's."""
        tracing, exporter = spans
        trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
        server = start(config(), tracing=tracing)
        try:
            with channel_to(server) as channel:
                from chd.v1 import daemon_pb2, daemon_pb2_grpc

                daemon_pb2_grpc.DaemonStub(channel).GetPurpose(
                    daemon_pb2.GetPurposeRequest(),
                    timeout=10,
                    metadata=(("traceparent", f"00-{trace_id}-00f067aa0ba902b7-01"),),
                )
        finally:
            server.stop(grace=0.5)
        (rpc,) = _by_name(exporter)["daemon.v1.Daemon/GetPurpose"]
        assert f"{rpc.context.trace_id:032x}" == trace_id
        assert rpc.attributes["chd.operation"] == "get_purpose"


class TestOffUnlessConfigured:
    def test_no_otel_variable_means_no_tracing(self) -> None:
        """Nothing set, OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true: off."""
        assert tracing_from_environment({}) is None
        assert not configured({"OTEL_TRACES_EXPORTER": "none"})
        assert not configured(
            {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}
        )
        assert configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
        assert configured({"OTEL_TRACES_EXPORTER": "console"})

    def test_the_core_traces_nothing_by_default(self) -> None:
        """A history built without a tracer uses the no-op one."""
        assert ConversationHistory(settings=Settings(), background=False).tracer is NO_TRACER

    def test_the_daemon_runs_as_before_without_the_packages(self) -> None:
        """With OTEL_* set but opentelemetry not importable, chd warns once and serves untraced."""
        code = (
            "import sys; sys.modules['opentelemetry'] = None\n"
            "from chd.service.otel import tracing_from_environment\n"
            "print(tracing_from_environment({'OTEL_TRACES_EXPORTER': 'console'}))\n"
            "from chd.service.app import start\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=chd_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "None"
        assert "pip install 'chd[otel]'" in done.stderr
