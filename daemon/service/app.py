"""Putting a configured daemon together: core, limits, security, trace, metrics.

``start(config)`` is what ``chd serve`` runs; tests call it too, so the
process and the in-process server are assembled the same way.
"""

from __future__ import annotations

import logging

import grpc

from chd.backends.base import Backend
from chd.backends.memory import MemoryBackend
from chd.core.history import ConversationHistory
from chd.core.language.classifier import classifier_from_environment
from chd.core.memory.embedder import Embedder, load_embedder
from chd.core.memory.index import index_bytes
from chd.core.summaries.extractive import ExtractiveSummarizer
from chd.core.summaries.summarizer import Summarizer
from chd.core.summaries.writer import SummaryWriter, build_writer
from chd.core.tokens import default_counter
from chd.service.admission import ArrivalInterceptor
from chd.service.auth import BearerAuthInterceptor
from chd.service.config import Config, ConfigError, to_settings
from chd.service.limits import LimitedBackend, Limits, deadline_guard
from chd.service.metrics import Metrics
from chd.service.observe import CallSink, observing
from chd.service.otel import OtelTracing, tracing_from_environment
from chd.service.server import ListenError, Server, build_server, check_port_free
from chd.service.tls import server_credentials
from chd.service.tracelog import TraceLog

__all__ = ["start", "limits_from", "embedder_from"]

log = logging.getLogger(__name__)


def limits_from(config: Config) -> Limits:
    return Limits(
        max_request_bytes=config.max_request_bytes,
        max_conversations=config.max_conversations,
        max_utterances_per_conversation=config.max_utterances_per_conversation,
        max_archived_utterances=config.max_archived_utterances,
        request_timeout=config.request_timeout,
        max_concurrent_rpcs=config.max_concurrent_rpcs,
    )


def summary_writer(config: Config, summarizer: Summarizer | None = None) -> SummaryWriter:
    """The writer the config asks for; ``summarizer`` (tests, embedders) replaces its primary."""
    counter = default_counter()
    if summarizer is not None:
        offline = (
            None if isinstance(summarizer, ExtractiveSummarizer) else ExtractiveSummarizer(counter)
        )
        return SummaryWriter(
            summarizer,
            counter,
            offline,
            attempts=config.summarizer_attempts,
            backoff=config.summarizer_backoff,
            late_after=config.summarizer_wait if offline is not None else None,
        )
    try:
        return build_writer(
            config.summarizer,
            counter,
            attempts=config.summarizer_attempts,
            backoff=config.summarizer_backoff,
            late_after=config.summarizer_wait,
            model=config.anthropic_model,
            max_tokens=config.anthropic_max_tokens,
            timeout=config.summarizer_timeout,
            max_retries=config.anthropic_max_retries,
            process=config.summarizer_process,
        )
    except ValueError as exc:
        raise ConfigError("summarizer", config.sources["summarizer"], str(exc)) from None


def embedder_from(config: Config) -> Embedder | None:
    """The embedder ``config.embedder`` names, built once (None: lexical search only)."""
    if config.embedder is None:
        return None
    try:
        return load_embedder(config.embedder)
    except ValueError as exc:
        raise ConfigError("embedder", config.sources["embedder"], str(exc)) from None


def start(
    config: Config,
    *,
    backend: Backend | None = None,
    summarizer: Summarizer | None = None,
    tracing: OtelTracing | None | bool = True,
    reuse_port: bool = False,
) -> Server:
    """A started server as ``config`` says, over ``backend`` (memory if None).

    ``tracing`` True traces as the OTEL_* variables say (off when they say
    nothing, or without ``chd[otel]``); False never; or the given tracing.
    ``reuse_port``: this is one serving process of a group (daemon/service/group.py).

    The backend and summarizer are wrapped (limits, sizes, failure counts)
    before the core is built over them, so every part of the core that holds
    a reference to them goes through the wrappers.
    """
    for note in config.ignored:
        log.warning("ignored environment variable %s", note)
    limits = limits_from(config)
    if backend is None:
        backend = MemoryBackend()
    if isinstance(backend, MemoryBackend) and backend.max_bytes is None:
        backend.max_bytes = config.max_memory_bytes
    store: Backend = LimitedBackend(backend, limits)
    sinks: list[CallSink] = []
    trace = TraceLog()
    # Decided once: the level does not change while serving, and a call
    # with no sink to hear it is not observed at all.
    if trace.log.isEnabledFor(logging.INFO):
        sinks.append(trace)
    metrics: Metrics | None = None
    if config.metrics_port is not None:
        metrics = Metrics()
        store = metrics.watch_backend(store)
        sinks.append(metrics)
    classifier = classifier_from_environment(config.query_classifier, config.classifier_model)
    writer = summary_writer(config, summarizer)
    if metrics is not None:
        writer.primary = metrics.watch_summarizer(writer.primary)
        if writer.late is not None:
            metrics.watch_late(writer.late)
    traces = tracing_from_environment() if tracing is True else tracing or None
    history = ConversationHistory(
        backend=store,
        settings=to_settings(config),
        classifier=classifier,
        writer=writer,
        tracer=traces,
        embedder=embedder_from(config),
    )
    history.indexes.max_bytes = index_bytes(config.max_memory_bytes)
    # Interceptors only note, per call, what the polling thread knows (arrival,
    # a bad token); the guards the Daemon handlers are built with act on it.
    interceptors: list[grpc.ServerInterceptor] = [ArrivalInterceptor()]
    if config.auth_token is not None:
        interceptors.append(BearerAuthInterceptor(config.auth_token))
    credentials = None
    if config.tls_cert is not None:
        credentials = server_credentials(config.tls_cert, config.tls_key, config.tls_client_ca)
    server = build_server(
        history,
        config.host,
        config.port,
        config.workers,
        interceptors=interceptors,
        observers=[*((traces.guard,) if traces is not None else ()), observing(sinks)],
        checks=[deadline_guard(limits.request_timeout)],
        credentials=credentials,
        options=[("grpc.max_receive_message_length", limits.max_request_bytes)],
        maximum_concurrent_rpcs=limits.max_concurrent_rpcs,
        reuse_port=reuse_port,
    )
    if traces is not None:
        server.on_stop.append(traces.shutdown)
    if metrics is not None:
        if server.admission is not None:
            metrics.watch_admission(server.admission)
        try:
            check_port_free(config.metrics_host, config.metrics_port)
            endpoint = metrics.serve(config.metrics_host, config.metrics_port)
        except OSError as exc:
            server.stop(grace=0)
            host = config.metrics_host
            where = (
                f"[{host}]:{config.metrics_port}"
                if ":" in host
                else f"{host}:{config.metrics_port}"
            )
            raise ListenError(" (metrics_port)", where, exc.strerror or str(exc)) from None
        server.on_stop.append(endpoint.close)
        server.metrics_port = endpoint.port
    return server
