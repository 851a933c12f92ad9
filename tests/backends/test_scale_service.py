"""A daemon on a data dir of many conversations (issue 17), through gRPC."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from chd.backends.base import transact_many
from chd.backends.disk import DiskBackend
from chd.v1 import daemon_pb2_grpc
from tests.backends.backend_kinds import append_next
from tests.conftest import DaemonProcess, query


class TestFullDaemon:
    """At max_conversations the daemon refuses a new conversation and serves the others."""

    def test_a_full_disk_daemon_refuses_new_conversations_and_accepts_stores_to_existing_ones(
        self, tmp_path: Path
    ) -> None:
        backend = DiskBackend(tmp_path)
        transact_many(backend, [(f"c{i}", append_next()) for i in range(5)])
        backend.close()
        daemon = DaemonProcess(
            "--backend",
            "disk",
            "--data-dir",
            str(tmp_path),
            "--max-conversations",
            "5",
            "--metrics-port",
            "0",
        )
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                for attempt in range(3):  # refused every time, not only once
                    with pytest.raises(grpc.RpcError) as refused:
                        query(stub, "Add utterance: hello", {"conversation_id": f"new{attempt}"})
                    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    assert "5 conversations" in (refused.value.details() or "")
                stored = query(stub, "Add utterance: still here", {"conversation_id": "c3"})
                assert int(stored.result["utterance"]["seq"]) == 2
                got = query(stub, "Get all utterances", {"conversation_id": "new0"})
                assert list(got.result["utterances"]) == []
        finally:
            assert daemon.terminate() == 0
        backend = DiskBackend(tmp_path)
        assert backend.conversations() == [f"c{i}" for i in range(5)]
        assert backend.count_conversations() == 5
        backend.close()


class TestArchiveBound:
    """max_archived_utterances keeps an archive bounded: the oldest go, and are counted."""

    @pytest.mark.parametrize("kind", ["memory", "disk"])
    def test_folds_past_the_bound_drop_the_oldest_archived_utterances(
        self, kind: str, tmp_path: Path
    ) -> None:
        from chd.core.history import ConversationHistory
        from chd.core.settings import Settings
        from chd.service.limits import LimitedBackend, Limits
        from tests.conftest import open_test_backend

        backend = LimitedBackend(
            open_test_backend(kind, tmp_path), Limits(max_archived_utterances=6)
        )
        history = ConversationHistory(
            backend,
            Settings(buffer_size=3, eviction_batch=2, archive_evicted=True),
            background=False,
        )
        for i in range(20):
            history.query(f"Add utterance: fact number {i}")
            history.query("Get summary")  # folds what was evicted, into the archive
        state = backend.read("default")
        archived = [u.seq for u in state.archive]
        assert len(archived) == 6
        folded = state.summary.through_seq
        assert archived == list(range(folded - 5, folded + 1))  # the newest six folded ones
        assert backend.archive_dropped == folded - 6
        backend.close()
