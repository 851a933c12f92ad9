"""Concurrent clients over gRPC, on every backend: no lost, duplicated or misnumbered store."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest

from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from chd.service.server import build_server
from chd.v1 import daemon_pb2_grpc
from tests.backends.backend_kinds import CONTRACT_KINDS, open_contract_backend
from tests.conftest import query

CLIENTS, STORES = 8, 100


@pytest.mark.parametrize("kind", CONTRACT_KINDS)
class TestConcurrentClients:
    """8 client threads x 100 stores into one conversation."""

    def test_eight_clients_storing_a_hundred_each_give_seqs_one_to_800(
        self, kind: str, tmp_path: Path
    ) -> None:
        history = ConversationHistory(
            open_contract_backend(kind, tmp_path),
            Settings(buffer_size=1000, max_tokens=100_000),
            background=False,
        )
        server = build_server(history, "127.0.0.1", 0)
        acknowledged: list[list[int]] = [[] for _ in range(CLIENTS)]
        errors: list[BaseException] = []

        def client(number: int) -> None:
            try:
                with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                    stub = daemon_pb2_grpc.DaemonStub(channel)
                    for i in range(STORES):
                        answer = query(
                            stub,
                            f"Add utterance: client {number} store {i}",
                            {"conversation_id": "busy"},
                        )
                        acknowledged[number].append(int(answer.result["utterance"]["seq"]))
            except BaseException as exc:  # surfaced by the assert below
                errors.append(exc)

        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert errors == []
            state = history.backend.read("busy")
        finally:
            server.stop(grace=1)

        assert [u.seq for u in state.utterances] == list(range(1, CLIENTS * STORES + 1))
        assert sorted(seq for seqs in acknowledged for seq in seqs) == list(
            range(1, CLIENTS * STORES + 1)
        )
        # Each user utterance opens the next turn, in the order the stores committed.
        assert [u.turn_number for u in state.utterances] == list(range(1, CLIENTS * STORES + 1))
        for number, seqs in enumerate(acknowledged):
            assert seqs == sorted(seqs), (
                "one client's stores are numbered in the order it sent them"
            )
            texts = [u.text for u in state.utterances if u.text.startswith(f"client {number} ")]
            assert texts == [f"client {number} store {i}" for i in range(STORES)]
