"""Prometheus metrics: calls, errors by code, latency, buffer and queue sizes.

Each daemon has its own registry (so tests can run several in one process)
served on ``--metrics-port`` by prometheus-client's HTTP server. Sizes are
kept per conversation as transactions commit and summed when Prometheus
scrapes, so a scrape costs a sum, not a walk through storage.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from chd.backends.base import (
    Backend,
    Change,
    ConversationState,
    T,
    count_conversations,
    iter_sizes,
    sizes_after,
)
from chd.core.summaries.coverage import summary_coverage
from chd.core.utterance import Utterance
from chd.service.observe import CallRecord, operation_of
from chd.service.wrapped_backend import WrappedBackend

__all__ = ["Metrics", "MeteredBackend", "CountingSummarizer", "MetricsServer"]

log = logging.getLogger(__name__)

# From a memory-backend store (~1 ms) to a slow LLM summarizer call (10 s).
_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class Metrics:
    """The daemon's metrics, and a CallSink feeding them."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "chd_requests",
            "Daemon RPCs answered, by method and status code.",
            ["method", "code"],
            registry=r,
        )
        self.errors = Counter(
            "chd_errors",
            "Daemon RPCs answered with an error, by method and status code.",
            ["method", "code"],
            registry=r,
        )
        self.latency = Histogram(
            "chd_request_latency_seconds",
            "Time from a call's arrival to its answer, by method.",
            ["method"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.operations = Counter(
            "chd_operations",
            "Queries answered, by operation and outcome.",
            ["operation", "outcome"],
            registry=r,
        )
        self.operation_latency = Histogram(
            "chd_operation_latency_seconds",
            "Time to answer a successful query, by operation.",
            ["operation"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "chd_requests_in_flight", "Daemon RPCs being answered now.", registry=r
        )
        self.summarizer_failures = Counter(
            "chd_summarizer_failures",
            "Summarizer calls that raised; their utterances stay queued.",
            registry=r,
        )

    # --- CallSink ------------------------------------------------------------

    def begin(self, method: str) -> None:
        self.in_flight.inc()

    def record(self, call: CallRecord) -> None:
        self.in_flight.dec()
        code = call.code.name
        self.requests.labels(call.method, code).inc()
        if code != "OK":
            self.errors.labels(call.method, code).inc()
        self.latency.labels(call.method).observe(call.latency)
        operation = operation_of(call)
        self.operations.labels(operation, code).inc()
        if code == "OK":
            self.operation_latency.labels(operation).observe(call.latency)

    # --- sizes and summarizer --------------------------------------------------

    def watch_backend(self, backend: Backend) -> MeteredBackend:
        """``backend`` wrapped so its sizes show up as gauges."""
        metered = MeteredBackend(backend)
        r = self.registry
        Gauge("chd_conversations", "Conversations with stored state.", registry=r).set_function(
            metered.conversation_count
        )
        Gauge(
            "chd_buffer_utterances", "Utterances in all rolling buffers.", registry=r
        ).set_function(metered.buffered)
        Gauge(
            "chd_summary_queue_utterances",
            "Evicted utterances waiting to be folded into a summary, all conversations.",
            registry=r,
        ).set_function(metered.pending)
        Gauge(
            "chd_summary_queue_max_utterances",
            "The longest summary queue of any one conversation.",
            registry=r,
        ).set_function(metered.pending_max)
        # Per conversation (issue 13): what the summary holds of what left the buffer.
        coverage = Gauge(
            "chd_summary_coverage_ratio",
            "Share of evicted utterances with some content in the summary (a sample per conversation "
            "once it has a summary).",
            ["conversation_id"],
            registry=r,
        )
        offline_only = Gauge(
            "chd_summary_offline_only_utterances",
            "Evicted utterances in segments the offline fallback wrote instead of Claude (per "
            "conversation, once it has a summary).",
            ["conversation_id"],
            registry=r,
        )
        awaiting = Gauge(
            "chd_summary_awaiting_rewrite_utterances",
            "Originals kept for Claude to rewrite offline segments from (per conversation, once it "
            "has a summary).",
            ["conversation_id"],
            registry=r,
        )
        dropped = Gauge(
            "chd_summary_originals_dropped",
            "Originals dropped by the per-conversation bound before Claude could rewrite them (per "
            "conversation, once it has a summary).",
            ["conversation_id"],
            registry=r,
        )

        def on_summary(conversation_id: str, summary: Any) -> None:
            c = summary_coverage(summary)
            coverage.labels(conversation_id).set(c.share)
            offline_only.labels(conversation_id).set(c.offline_only)
            awaiting.labels(conversation_id).set(c.awaiting_rewrite)
            dropped.labels(conversation_id).set(c.originals_dropped)

        metered.on_summary = on_summary
        return metered

    def watch_late(self, calls: Any) -> None:
        """Count late Claude results (summaries/late.py ``LateCalls``) as Prometheus reads them."""
        self.registry.register(_LateCollector(calls))

    def watch_admission(self, admission: Any) -> None:
        """Export the fair executor's (service/fairness.py ``FairExecutor``) held and waiting calls."""
        self.registry.register(_AdmissionCollector(admission))

    def watch_summarizer(self, summarizer: Any) -> CountingSummarizer:
        return CountingSummarizer(summarizer, self.summarizer_failures.inc)

    def serve(self, host: str, port: int) -> MetricsServer:
        """Start the /metrics HTTP endpoint; ``port=0`` picks a free port."""
        httpd, thread = start_http_server(port, addr=host, registry=self.registry)
        return MetricsServer(httpd, thread)


@dataclass
class MetricsServer:
    """The running metrics endpoint."""

    httpd: Any
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.httpd.server_port)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class MeteredBackend(WrappedBackend):
    """A Backend that keeps each conversation's buffer and queue sizes as it commits.

    The sizes of conversations stored before the start are counted by a
    background thread (the backend's ``iter_sizes``), so the port opens
    without reading every conversation (issue 17: 27.8 s to SERVING at 10k);
    until it is done the size gauges cover what it has counted so far.
    """

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend)
        self._sizes: dict[str, tuple[int, int]] = {}
        # Called with each committed summary (set by Metrics.watch_backend).
        self.on_summary: Callable[[str, Any], None] | None = None
        self.counted = threading.Event()  # set once the stored sizes are all counted
        threading.Thread(target=self._count_stored, name="chd-metrics-count", daemon=True).start()

    def _count_stored(self) -> None:
        try:
            for cid, buffered, pending in iter_sizes(self.inner):
                # A commit since the start already put the newer sizes here.
                self._sizes.setdefault(cid, (buffered, pending))
        except Exception:  # a backend closed under the count is not news
            log.debug("could not count the stored conversations' sizes", exc_info=True)
        finally:
            self.counted.set()

    def transact(
        self, conversation_id: str, decide: Callable[[ConversationState], tuple[Change, T]]
    ) -> T:
        sizes: list[tuple[int, int]] = []
        summaries: list[Any] = []

        def measured(state: ConversationState) -> tuple[Change, T]:
            change, value = decide(state)
            if not change.is_empty:
                sizes.append(sizes_after(state, change))
            summaries.append(change.summary)
            return change, value

        value = self.inner.transact(conversation_id, measured)
        if sizes:  # the last decision is the one the backend applied
            self._sizes[conversation_id] = sizes[-1]
        if summaries and summaries[-1] is not None and self.on_summary is not None:
            self.on_summary(conversation_id, summaries[-1])
        return value

    def conversation_count(self) -> float:
        return count_conversations(self.inner)

    def buffered(self) -> float:
        return sum(b for b, _ in list(self._sizes.values()))

    def pending(self) -> float:
        return sum(p for _, p in list(self._sizes.values()))

    def pending_max(self) -> float:
        return max((p for _, p in list(self._sizes.values())), default=0)


class _LateCollector:
    """Late results, read from the counters LateCalls keeps (issue 13)."""

    def __init__(self, calls: Any) -> None:
        self.calls = calls

    def collect(self) -> Any:
        results = CounterMetricFamily(
            "chd_summary_late_results",
            "Claude replies that came after their fold had gone offline: applied in place of the offline "
            "segment, dropped (the range changed first) or failed. Served only with Claude configured.",
            labels=["outcome"],
        )
        for outcome in ("applied", "dropped", "failed"):
            results.add_metric([outcome], getattr(self.calls, outcome))
        yield results
        yield GaugeMetricFamily(
            "chd_summary_late_calls_in_flight",
            "Claude calls still running after their fold went offline. Served only with Claude configured.",
            value=self.calls.in_flight,
        )


class _AdmissionCollector:
    """Fair admission's holding and queue, read from the executor as Prometheus reads them (issue 28 review)."""

    def __init__(self, admission: Any) -> None:
        self.admission = admission

    def collect(self) -> Any:
        yield CounterMetricFamily(
            "chd_calls_held",
            "Daemon calls that waited for other callers' waiting calls because their caller "
            "(connection) was over its CPU share.",
            value=self.admission.held,
        )
        yield GaugeMetricFamily(
            "chd_calls_waiting",
            "Daemon calls queued for a worker now, not started (held ones among them).",
            value=self.admission.waiting(),
        )
        yield GaugeMetricFamily(
            "chd_calls_on_workers",
            "Daemon calls holding a worker now, including ones whose request message has not "
            "arrived (chd_requests_in_flight counts a call only once its handler runs).",
            value=self.admission.running(),
        )


class CountingSummarizer:
    """A Summarizer that counts the failures of the one it wraps (and re-raises them)."""

    def __init__(self, inner: Any, on_failure: Callable[[], None]) -> None:
        self.inner = inner
        self._on_failure = on_failure

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def summarize(
        self, previous: str, utterances: Sequence[Utterance], token_limit: int, **options: Any
    ) -> str:
        try:  # options: the context a summarizer with reads_context takes
            return self.inner.summarize(previous, utterances, token_limit, **options)
        except Exception:
            self._on_failure()
            raise


def metrics_table() -> str:
    """The Markdown table of every metric /metrics serves, as docs/operations.md carries it
    (a test keeps them equal): built from the definitions above, not written beside them."""
    from types import SimpleNamespace

    from chd.backends.memory import MemoryBackend

    metrics = Metrics()
    metrics.watch_backend(MemoryBackend())
    metrics.watch_late(SimpleNamespace(applied=0, dropped=0, failed=0, in_flight=0))
    metrics.watch_admission(SimpleNamespace(held=0, waiting=lambda: 0, running=lambda: 0))
    # A labelled metric with no child yet collects no samples, so nothing says
    # its labels: give each one child (the registry's collectors are the metrics).
    for collector in list(metrics.registry._collector_to_names):
        names = getattr(collector, "_labelnames", ())
        if names:
            collector.labels(*("-" for _ in names))
    rows = ["| metric | type | labels | what |", "|---|---|---|---|"]
    for family in metrics.registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = list(
            dict.fromkeys(k for sample in family.samples for k in sample.labels if k != "le")
        )
        rows.append(f"| `{name}` | {family.type} | {', '.join(labels)} | {family.documentation} |")
    return "\n".join(rows)
