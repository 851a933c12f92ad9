"""Crash safety: a killed daemon comes back with everything it acknowledged."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import grpc
import pytest

from chd.backends.disk import DiskBackend
from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from chd.v1 import daemon_pb2_grpc
from tests.conftest import ROOT, DaemonProcess, chd_env, query

CONVERSATIONS = ("alpha", "beta")


def _stream(
    target: str, conversation_id: str, acked: dict[int, str], stop: threading.Event
) -> None:
    """Store until the daemon dies, recording each utterance the daemon acknowledged."""
    with grpc.insecure_channel(target) as channel:
        stub = daemon_pb2_grpc.DaemonStub(channel)
        i = 0
        while not stop.is_set():
            text = f"{conversation_id} says message {i} about topic {i % 7}"
            try:
                response = query(
                    stub, f"Add utterance: {text}", {"conversation_id": conversation_id}
                )
            except grpc.RpcError:
                return
            acked[int(response.result["utterance"]["seq"])] = text
            i += 1


class TestKilledDaemon:
    """SIGKILL in the middle of a stream of stores, then a restart on the same dir."""

    def test_sigkill_mid_stream_loses_no_acknowledged_utterance(self, tmp_path: Path) -> None:
        data = tmp_path / "data"
        # Folds start at once, so summaries are being committed when the kill comes.
        flags = (
            "--backend",
            "disk",
            "--data-dir",
            str(data),
            "--buffer-size",
            "10",
            "--eviction-batch",
            "3",
            "--fold-delay",
            "0",
        )
        daemon = DaemonProcess(*flags)
        acked: dict[str, dict[int, str]] = {cid: {} for cid in CONVERSATIONS}
        stop = threading.Event()
        streams = [
            threading.Thread(target=_stream, args=(daemon.target, cid, acked[cid], stop))
            for cid in CONVERSATIONS
        ]
        try:
            for thread in streams:
                thread.start()
            deadline = time.monotonic() + 60
            while sum(map(len, acked.values())) < 120 and time.monotonic() < deadline:
                time.sleep(0.01)
            daemon.kill()  # SIGKILL while both streams are mid-request
        finally:
            stop.set()
            for thread in streams:
                thread.join(timeout=30)
            daemon.kill()
        assert all(len(a) >= 30 for a in acked.values()), "the streams did not get going"

        backend = DiskBackend(data)
        for cid in CONVERSATIONS:
            state = backend.read(cid)
            buffer = {u.seq: u.text for u in state.utterances}
            pending = {u.seq: u.text for u in state.pending}
            assert not buffer.keys() & pending.keys()
            assert state.summary.segments, "evicted utterances were folded into a summary"
            for seq, text in acked[cid].items():
                if seq in buffer:
                    assert buffer[seq] == text
                elif seq in pending:
                    assert pending[seq] == text
                else:
                    assert seq <= state.summary.through_seq, (
                        f"acknowledged utterance {seq} of {cid} is lost"
                    )
            assert state.next_seq > max(acked[cid])
        backend.close()

        restarted = DaemonProcess(*flags)
        try:
            with grpc.insecure_channel(restarted.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                for cid in CONVERSATIONS:
                    newest = max(acked[cid])
                    got = query(stub, "Get the last 1 utterances", {"conversation_id": cid}).result
                    assert int(got["utterances"][0]["seq"]) >= newest
                    stored = query(stub, "Add utterance: after the crash", {"conversation_id": cid})
                    assert int(stored.result["utterance"]["seq"]) > newest
        finally:
            assert restarted.terminate() == 0


_KILL_DURING_STORE = textwrap.dedent(
    """
    import os, signal, sys
    from chd.backends.disk import DiskBackend
    from chd.core.history import ConversationHistory
    from chd.core.settings import Settings

    backend = DiskBackend(sys.argv[1])
    real_set, calls = backend._set, [0]

    def dying_set(*args, **kwargs):
        calls[0] += 1
        if calls[0] == int(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGKILL)
        return real_set(*args, **kwargs)

    backend._set = dying_set
    history = ConversationHistory(backend, Settings(buffer_size=4, eviction_batch=2), background=False)
    history.query("Add utterance: the one under test")
    print("finished", calls[0])
    """
)


class TestKilledMidTransaction:
    """A crash between the steps of one store leaves the old state or the new one.

    With a buffer of 4 and batches of 2, the 8th store closes block 0 (seqs
    1-8) and so writes two records, the block and the meta; the 9th store
    writes the meta and evicts seqs 5 and 6 into the empty queue (so it also
    writes the queue index), and its fold then writes block 0 without them,
    the summary and the meta (and deletes the index entry).
    """

    @staticmethod
    def _prepare(data: Path, stores: int) -> None:
        backend = DiskBackend(data)
        history = ConversationHistory(
            backend, Settings(buffer_size=4, eviction_batch=2), background=False
        )
        for i in range(stores):
            history.query(f"Add utterance: message {i}")
        backend.close()

    @staticmethod
    def _run(data: Path, kill_at_set: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _KILL_DURING_STORE, str(data), str(kill_at_set)],
            capture_output=True,
            text=True,
            env=chd_env(),
            cwd=ROOT,
            timeout=60,
        )

    def test_a_store_that_closes_a_block_writes_two_records(self, tmp_path: Path) -> None:
        self._prepare(tmp_path, 7)
        done = self._run(tmp_path, 0)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["finished", "2"]

    @pytest.mark.parametrize("kill_at_set", [1, 2])
    def test_kill_inside_the_store_transaction_leaves_the_old_state(
        self, tmp_path: Path, kill_at_set: int
    ) -> None:
        self._prepare(tmp_path, 7)
        before = DiskBackend(tmp_path)
        old = before.read("default")
        before.close()
        assert self._run(tmp_path, kill_at_set).returncode == -9
        after = DiskBackend(tmp_path)
        assert after.read("default") == old
        after.close()

    def test_a_store_that_evicts_writes_two_records_and_its_fold_three(
        self, tmp_path: Path
    ) -> None:
        self._prepare(tmp_path, 8)
        done = self._run(tmp_path, 0)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["finished", "5"]

    def test_kill_between_the_evicting_store_and_its_queue_index_leaves_neither(
        self, tmp_path: Path
    ) -> None:
        """The meta record and the queue index entry commit together or not at all."""
        self._prepare(tmp_path, 8)
        assert self._run(tmp_path, 2).returncode == -9
        after = DiskBackend(tmp_path)
        assert after.read("default").pending == []
        assert list(after.queued_conversations()) == []
        after.close()

    @pytest.mark.parametrize("kill_at_set", [3, 4, 5])
    def test_kill_inside_the_fold_keeps_the_store_and_its_queue(
        self, tmp_path: Path, kill_at_set: int
    ) -> None:
        """The store committed; the fold did not: the evicted two wait in the queue."""
        self._prepare(tmp_path, 8)
        assert self._run(tmp_path, kill_at_set).returncode == -9
        after = DiskBackend(tmp_path)
        state = after.read("default")
        assert [u.seq for u in state.utterances] == [7, 8, 9]
        assert [u.seq for u in state.pending] == [5, 6]
        assert state.summary.through_seq == 4
        assert list(after.queued_conversations()) == ["default"]
        # The next read that wants the summary folds the queue.
        assert (
            ConversationHistory(after, background=False).get_summary()["summary_through_seq"] == 6
        )
        after.close()
