"""End to end over real gRPC: the Daemon Interface, status codes, health, reflection, shutdown."""

from __future__ import annotations

import math
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from chd.core.history import ConversationHistory
from chd.core.language.instructions import PURPOSE
from chd.core.settings import Settings
from chd.service.server import build_server
from chd.v1 import daemon_pb2
from tests.conftest import query


def code_of(
    stub, text: str, metadata: dict | None = None, data: dict | None = None
) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        query(stub, text, metadata, data)
    return caught.value.code(), caught.value.details()


class TestDaemonInterface:
    """Query, GetPurpose and GetInstructions over the wire."""

    def test_purpose_is_the_spec_sentence(self, stub) -> None:
        """GetPurpose returns the spec's purpose sentence."""
        assert stub.GetPurpose(daemon_pb2.GetPurposeRequest()).purpose == PURPOSE
        assert PURPOSE.startswith("Maintain rolling buffer of recent conversation utterances")

    def test_instructions_cover_every_operation(self, stub) -> None:
        """GetInstructions names each operation with a form and an example."""
        text = stub.GetInstructions(daemon_pb2.GetInstructionsRequest()).instructions
        for needle in (
            "STORE",
            "RETRIEVE",
            "REMOVE",
            "SUMMARIZE",
            "Add utterance:",
            "Remove before turn",
            "Summarize conversation",
            "data.operation",
            "conversation_id",
            "Example",
        ):
            assert needle in text

    def test_spec_scenario_over_grpc(self, stub) -> None:
        """21 utterances: 1-5 evicted, summary mentions weather, last 5 are 17-21."""
        script = [
            ("user", "What's the weather?"),
            ("assistant", "I'll check the weather... it is sunny today."),
            ("user", "How about tomorrow?"),
            ("assistant", "Tomorrow will be cloudy with light rain."),
            ("user", "Thanks, I will pack a raincoat."),
        ] + [
            ("assistant" if i % 2 == 0 else "user", f"Point {i} about the museum schedule.")
            for i in range(6, 21)
        ]
        for speaker, text in script:
            r = query(stub, f"Add {speaker} utterance: '{text}'", {"conversation_id": "spec"})
            assert list(r.result["evicted"]) == []
        r = query(stub, "Add user utterance: 'Tell me about Paris'", {"conversation_id": "spec"})
        assert r.operation == "store"
        assert [int(s) for s in r.result["evicted"]] == [1, 2, 3, 4, 5]
        assert int(r.result["utterance"]["seq"]) == 21
        summary = query(stub, "Get summary", {"conversation_id": "spec"})
        assert "weather" in summary.result["summary"].lower()
        assert summary.metadata["summary_through_seq"] == 5
        last = query(stub, "Get the last 5 utterances", {"conversation_id": "spec"})
        assert [int(u["seq"]) for u in last.result["utterances"]] == [17, 18, 19, 20, 21]
        assert last.metadata["items_affected"] == 5
        assert last.metadata["tokens_used"] == sum(u["tokens"] for u in last.result["utterances"])

    def test_every_operation_returns_items_and_tokens(self, stub) -> None:
        """store, retrieve, remove and summarize all fill the two metadata counts."""
        for text in (
            "Add utterance: one",
            "Get all utterances",
            "Remove oldest utterance",
            "Summarize conversation",
        ):
            r = query(stub, text)
            assert "items_affected" in r.metadata and "tokens_used" in r.metadata, text
        assert (
            query(stub, "Summarize conversation", data={"token_limit": 10}).result["tokens"] <= 10
        )

    def test_unicode_round_trips(self, stub) -> None:
        """Any unicode text comes back exactly."""
        text = "Zürich → 東京 🚄 «quoted» \u200b end"
        query(stub, "", data={"operation": "store", "text": text})
        assert query(stub, "Get utterance 1").result["utterances"][0]["text"] == text


class TestStatusCodes:
    """Bad input gets the right status and a message; the server keeps serving."""

    @pytest.mark.parametrize(
        ("text", "metadata", "data", "code", "fragment"),
        [
            ("frobnicate the widgets", {}, {}, grpc.StatusCode.INVALID_ARGUMENT, "supported forms"),
            (
                "Add utterance: x",
                {"turn_number": "abc"},
                {},
                grpc.StatusCode.INVALID_ARGUMENT,
                "metadata.turn_number",
            ),
            (
                "Add utterance: x",
                {"turn_number": -3},
                {},
                grpc.StatusCode.INVALID_ARGUMENT,
                "at least 0",
            ),
            (
                "Add utterance: x",
                {"turn_number": math.nan},
                {},
                grpc.StatusCode.INVALID_ARGUMENT,
                "metadata.turn_number",
            ),
            (
                "Add utterance: x",
                {"turn_number": math.inf},
                {},
                grpc.StatusCode.INVALID_ARGUMENT,
                "metadata.turn_number",
            ),
            (
                "Add utterance: x",
                {"turn_number": [1, 2]},
                {},
                grpc.StatusCode.INVALID_ARGUMENT,
                "metadata.turn_number",
            ),
            (
                "Add utterance: x",
                {"speaker": {"name": "user"}},
                {},
                grpc.StatusCode.INVALID_ARGUMENT,
                "metadata.speaker",
            ),
            (
                "Add utterance: x",
                {"speaker": "narrator"},
                {},
                grpc.StatusCode.INVALID_ARGUMENT,
                "metadata.speaker",
            ),
            (
                "",
                {},
                {"operation": "store", "text": "   "},
                grpc.StatusCode.INVALID_ARGUMENT,
                "data.text",
            ),
            ("", {}, {"operation": ["store"]}, grpc.StatusCode.INVALID_ARGUMENT, "data.operation"),
            (
                "Get the last 3 utterances",
                {},
                {"last_n": 1e300},
                grpc.StatusCode.INVALID_ARGUMENT,
                "last_n",
            ),
            (
                "Summarize conversation",
                {},
                {"token_limit": 0},
                grpc.StatusCode.INVALID_ARGUMENT,
                "token_limit",
            ),
            ("Remove utterance 40", {}, {}, grpc.StatusCode.NOT_FOUND, "utterance 40"),
            (
                "Add utterance: " + "x" * 40_000,
                {},
                {},
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "characters",
            ),
        ],
    )
    def test_bad_input(self, stub, text, metadata, data, code, fragment) -> None:
        """Each case gets its status code and a message naming the problem."""
        got, details = code_of(stub, text, metadata, data)
        assert got == code
        assert fragment in details
        assert "Traceback" not in details
        # Still serving, and nothing was stored by the failed call.
        assert query(stub, "Get all utterances").result["utterances"] == []

    def test_internal_errors_are_internal_not_unknown(self) -> None:
        """A bug in the core becomes INTERNAL with no trace on the wire."""

        class Broken(ConversationHistory):
            def query(self, *args, **kwargs):
                raise RuntimeError("secret internals")

        server = build_server(Broken(settings=Settings()), "127.0.0.1", 0)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                from chd.v1 import daemon_pb2_grpc

                got, details = code_of(daemon_pb2_grpc.DaemonStub(channel), "Get summary")
            assert got == grpc.StatusCode.INTERNAL
            assert "secret" not in details
        finally:
            server.stop(grace=1)


class TestHealthAndReflection:
    """Standard tools can probe the daemon."""

    def test_health_is_serving(self, server) -> None:
        """The overall and the Daemon service health are SERVING."""
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for service in ("", "daemon.v1.Daemon"):
                reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING

    def test_reflection_lists_the_daemon_service(self, server) -> None:
        """Server reflection lists daemon.v1.Daemon, as grpcurl list would."""
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            replies = list(stub.ServerReflectionInfo(iter([request]), timeout=5))
        names = {s.name for s in replies[0].list_services_response.service}
        assert {"daemon.v1.Daemon", "grpc.health.v1.Health"} <= names


class TestShutdown:
    """Stopping lets in-flight calls finish."""

    def test_in_flight_call_finishes_during_graceful_stop(self) -> None:
        """A slow query started before stop() still gets its answer."""
        started = threading.Event()

        class Slow(ConversationHistory):
            def query(self, *args, **kwargs):
                started.set()
                time.sleep(0.5)
                return super().query(*args, **kwargs)

        server = build_server(Slow(settings=Settings()), "127.0.0.1", 0)
        answers: list = []
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            from chd.v1 import daemon_pb2_grpc

            stub = daemon_pb2_grpc.DaemonStub(channel)
            worker = threading.Thread(
                target=lambda: answers.append(query(stub, "Add utterance: in flight"))
            )
            worker.start()
            assert started.wait(5)
            server.stop(grace=5)
            worker.join(10)
        assert answers and answers[0].operation == "store"
