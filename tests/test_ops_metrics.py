"""Prometheus metrics on --metrics-port: calls, errors by code, latency, sizes, summarizer failures."""

from __future__ import annotations

import socket
import urllib.request

import grpc
import pytest
from conftest import DaemonProcess, run_chd
from ops_support import DownSummarizer, ask, channel_to, code_of, config, running
from prometheus_client.parser import text_string_to_metric_families


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample on /metrics, keyed by name and sorted labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


class TestRequestMetrics:
    """Calls are counted by method and code, errors by code, and timed."""

    def test_requests_errors_and_latency_are_counted(self):
        with running(metrics_port=0) as server, channel_to(server) as channel:
            for n in range(3):
                ask(channel, f"Add utterance: number {n}")
            assert code_of(ask, channel, "Remove utterance 99") == grpc.StatusCode.NOT_FOUND
            assert code_of(ask, channel, "Please ponder") == grpc.StatusCode.INVALID_ARGUMENT
            samples = scrape(server.metrics_port)
        assert samples[("chd_requests_total", (("code", "OK"), ("method", "Query")))] == 3
        assert samples[("chd_errors_total", (("code", "NOT_FOUND"), ("method", "Query")))] == 1
        assert (
            samples[("chd_errors_total", (("code", "INVALID_ARGUMENT"), ("method", "Query")))] == 1
        )
        assert ("chd_errors_total", (("code", "OK"), ("method", "Query"))) not in samples
        assert samples[("chd_request_latency_seconds_count", (("method", "Query"),))] == 5
        assert samples[("chd_operations_total", (("operation", "store"), ("outcome", "OK")))] == 3
        assert (
            samples[("chd_operations_total", (("operation", "remove"), ("outcome", "NOT_FOUND")))]
            == 1
        )
        assert samples[("chd_operation_latency_seconds_count", (("operation", "store"),))] == 3
        assert samples[("chd_requests_in_flight", ())] == 0

    def test_refusals_before_the_servicer_are_counted_too(self):
        """A call refused for its token or for bytes that do not decode is still counted and timed."""
        with running(metrics_port=0, auth_token="tok") as server, channel_to(server) as channel:
            ask(channel, "Add utterance: hello", token="tok")
            assert (
                code_of(ask, channel, "Add utterance: intruder", token="wrong")
                == grpc.StatusCode.UNAUTHENTICATED
            )
            garbage = channel.unary_unary("/daemon.v1.Daemon/Query")
            assert code_of(
                garbage, b"\xff\xff\xff", metadata=(("authorization", "Bearer tok"),)
            ) == (grpc.StatusCode.INVALID_ARGUMENT)
            samples = scrape(server.metrics_port)
        assert samples[("chd_requests_total", (("code", "OK"), ("method", "Query")))] == 1
        assert (
            samples[("chd_errors_total", (("code", "UNAUTHENTICATED"), ("method", "Query")))] == 1
        )
        assert (
            samples[("chd_errors_total", (("code", "INVALID_ARGUMENT"), ("method", "Query")))] == 1
        )
        assert samples[("chd_request_latency_seconds_count", (("method", "Query"),))] == 3


class TestSizeMetrics:
    """Buffer and summary-queue sizes, and summarizer failures, are exposed as they change."""

    def test_buffer_queue_and_summarizer_failures_follow_the_conversations(self):
        cfg = config(metrics_port=0, buffer_size=2, eviction_batch=1)
        with running(cfg, summarizer=DownSummarizer()) as server, channel_to(server) as channel:
            for n in range(4):
                ask(channel, f"Add utterance: number {n}", metadata={"conversation_id": "a"})
            ask(channel, "Add utterance: alone", metadata={"conversation_id": "b"})
            # The down summarizer fails (counted); a's two evicted utterances are
            # either still queued (the read gives them verbatim) or folded offline
            # with their originals kept for a rewrite (issue 13): never lost.
            summary = ask(channel, "Get summary", metadata={"conversation_id": "a"})
            samples = scrape(server.metrics_port)
        assert "number 0" in summary.result["summary"] and "number 1" in summary.result["summary"]
        assert samples[("chd_conversations", ())] == 2
        assert samples[("chd_buffer_utterances", ())] == 3  # 2 in a, 1 in b
        queued = samples[("chd_summary_queue_utterances", ())]
        assert samples[("chd_summary_queue_max_utterances", ())] == queued
        awaiting = samples.get(
            ("chd_summary_awaiting_rewrite_utterances", (("conversation_id", "a"),)), 0
        )
        assert queued + awaiting == 2
        assert samples[("chd_summarizer_failures_total", ())] >= 1

    def test_no_metrics_endpoint_unless_a_port_is_configured(self):
        with running() as server:
            assert server.metrics_port is None


class TestMetricsFromTheProcess:
    """`chd serve --metrics-port 0` prints where its metrics are and serves them."""

    def test_the_daemon_process_serves_metrics(self):
        process = DaemonProcess("--metrics-port", "0")
        try:
            line = process.proc.stdout.readline()
            assert line.startswith("chd metrics on http://127.0.0.1:")
            port = int(line.rsplit(":", 1)[1].split("/")[0])
            assert run_chd("query", "Add utterance: hi", "--target", process.target).returncode == 0
            assert scrape(port)[("chd_requests_total", (("code", "OK"), ("method", "Query")))] == 1
            served = (
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
                .read()
                .decode()
            )
        finally:
            process.kill()
        # Every family the daemon serves is in the documented table (the late-reply ones only with Claude).
        from chd.service.metrics import metrics_table

        documented = {
            row.split("`")[1].removesuffix("_total") for row in metrics_table().splitlines()[2:]
        }
        families = {
            f.name
            for f in text_string_to_metric_families(served)
            if f.name.startswith("chd_") and not f.name.endswith("_created")
        }
        assert families and families <= documented, families - documented
        assert documented - families == {
            "chd_summary_late_results",
            "chd_summary_late_calls_in_flight",
        }
        # ... and the table says so of exactly those rows (issue 30, newcomer 32 #8).
        conditional = {
            row.split("`")[1].removesuffix("_total")
            for row in metrics_table().splitlines()[2:]
            if "only with Claude configured" in row
        }
        assert conditional == documented - families


def test_operations_doc_carries_the_metrics_table_built_from_the_definitions() -> None:
    """docs/operations.md holds metrics_table() verbatim: a new metric cannot go undocumented."""
    from pathlib import Path

    from chd.service.metrics import metrics_table

    doc = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    assert metrics_table() in doc


class TestBusyMetricsPort:
    """A metrics port in use is named as the metrics port, not as the gRPC one (issue 28, item 8)."""

    @pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6")
    def test_an_ipv6_metrics_address_is_printed_in_brackets(self):
        """``http://::1:P/metrics`` is no URL (issue 28 review)."""
        try:
            with socket.socket(socket.AF_INET6) as probe:
                probe.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback")
        process = DaemonProcess("--metrics-host", "::1", "--metrics-port", "0")
        try:
            line = process.proc.stdout.readline().strip()
            assert line.startswith("chd metrics on http://[::1]:")
            assert urllib.request.urlopen(line.rsplit(" ", 1)[1], timeout=10).status == 200
        finally:
            process.kill()

    def test_chd_serve_names_the_busy_metrics_port_in_one_line(self):
        import socket

        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen(1)
            busy = holder.getsockname()[1]
            done = run_chd("serve", "--port", "0", "--metrics-port", str(busy))
        assert done.returncode == 1 and "listening" not in done.stdout
        assert done.stderr.strip().splitlines()[-1] == (
            f"chd: cannot listen on 127.0.0.1:{busy} (metrics_port): port {busy} is in use or cannot be bound "
            "(Address already in use)"
        )
