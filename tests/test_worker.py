"""Background folding: stores never wait for the summarizer, and queued work is never lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from chd.backends.memory import MemoryBackend
from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from chd.core.summaries.claude import ClaudeConfig, ClaudeSummarizer
from chd.core.summaries.extractive import ExtractiveSummarizer
from chd.core.summaries.worker import FoldWorker
from chd.core.summaries.writer import SummaryWriter
from chd.core.tokens import default_counter
from chd.v1 import daemon_pb2, daemon_pb2_grpc
from tests.conftest import DaemonProcess
from tests.fake_anthropic import FakeAnthropic

COUNTER = default_counter()
SLOW_MODEL_SECONDS = 0.3
REPLY = "The user listed facts one after another."


class _Recorder:
    """A fold function the test controls: it can block, fail, and counts its calls."""

    def __init__(self, results: list[bool] | None = None) -> None:
        self.calls: list[str] = []
        self.results = list(results or [])
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()
        self.finished = threading.Event()

    def __call__(self, conversation_id: str) -> bool:
        self.calls.append(conversation_id)
        self.started.set()
        self.release.wait(5)
        self.finished.set()
        return self.results.pop(0) if self.results else True


@pytest.fixture
def worker_factory() -> Iterator:
    made: list[FoldWorker] = []

    def make(fold, **options) -> FoldWorker:
        worker = FoldWorker(fold, **options)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.stop(timeout=2)


def _busy(worker_factory) -> tuple[FoldWorker, _Recorder]:
    """A worker in the middle of folding c1 (until ``fold.release`` is set)."""
    fold = _Recorder()
    fold.release.clear()
    worker = worker_factory(fold)
    worker.submit("c1")
    assert fold.started.wait(2)
    return worker, fold


class TestFoldWorker:
    """The worker runs folds in the background, once at a time per conversation, retrying failures."""

    def test_submit_returns_while_the_fold_runs_in_the_background(self, worker_factory):
        """submit() is back before the fold it asked for could end (the fold waits for the test)."""
        fold = _Recorder()
        fold.release.clear()
        worker = worker_factory(fold)
        worker.submit("c1")
        assert not fold.finished.is_set()
        assert fold.started.wait(2) and not worker.idle(0.05)
        fold.release.set()
        assert worker.idle(2) and fold.calls == ["c1"]

    def test_a_submit_during_a_fold_runs_one_more_fold_afterwards(self, worker_factory):
        worker, fold = _busy(worker_factory)
        worker.submit("c1")
        worker.submit("c1")
        fold.release.set()
        assert worker.idle(2)
        assert fold.calls == ["c1", "c1"]

    def test_a_failed_fold_is_retried_with_backoff_until_it_succeeds(self, worker_factory):
        fold = _Recorder(results=[False, False, True])
        worker = worker_factory(fold, retry_delay=0.02)
        worker.submit("c1")
        assert worker.idle(3)
        assert fold.calls == ["c1", "c1", "c1"]

    def test_a_fold_raising_is_retried_like_a_failure(self, worker_factory):
        attempts: list[int] = []

        def fold(conversation_id: str) -> bool:
            attempts.append(1)
            if len(attempts) == 1:
                raise RuntimeError("backend hiccup")
            return True

        worker = worker_factory(fold, retry_delay=0.02)
        worker.submit("c1")
        assert worker.idle(3) and len(attempts) == 2

    def test_a_slow_conversation_does_not_hold_up_another(self, worker_factory):
        slow_started, other_done = threading.Event(), threading.Event()

        def fold(conversation_id: str) -> bool:
            if conversation_id == "slow":
                slow_started.set()
                other_done.wait(3)
            else:
                other_done.set()
            return True

        worker = worker_factory(fold, threads=2)
        worker.submit("slow")
        assert slow_started.wait(2)
        worker.submit("fast")
        assert other_done.wait(2)
        assert worker.idle(2)

    def test_threads_end_when_idle_and_start_again_on_the_next_submit(self, worker_factory):
        fold = _Recorder()
        worker = worker_factory(fold, idle_exit=0.05)
        worker.submit("c1")
        assert worker.idle(2)
        deadline = time.monotonic() + 2
        while worker._threads and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not worker._threads
        worker.submit("c2")
        assert worker.idle(2) and fold.calls == ["c1", "c2"]

    def test_recover_submits_every_conversation_the_queue_index_names(self, worker_factory):
        """Recovery folds what the index lists, and reads nothing else."""
        fold = _Recorder()
        worker = worker_factory(fold)
        worker.recover(lambda: ["a", "c"])
        deadline = time.monotonic() + 2
        while len(fold.calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert worker.idle(2) and sorted(fold.calls) == ["a", "c"]

    def test_stop_waits_for_the_fold_in_progress_and_takes_no_new_work(self, worker_factory):
        """stop() returns only after the running fold has ended, and later submits are ignored."""
        worker, fold = _busy(worker_factory)
        fold_done_when_stop_returned: list[bool] = []

        def stop() -> None:
            worker.stop(timeout=10)
            fold_done_when_stop_returned.append(fold.finished.is_set())

        stopper = threading.Thread(target=stop)
        stopper.start()
        # Hold the fold a moment after stop() began: a stop that did not wait returns meanwhile.
        stopper.join(0.2)
        fold.release.set()
        stopper.join(10)
        worker.submit("c2")
        assert fold_done_when_stop_returned == [True]
        assert fold.calls == ["c1"]


class TestFoldDelay:
    """Evictions gather for ``delay`` seconds and fold in one call; reads never wait for it."""

    def test_submits_within_the_delay_fold_once(self, worker_factory):
        fold = _Recorder()
        worker = worker_factory(fold, delay=0.5)
        for _ in range(5):
            worker.submit("c1")
        worker.submit("c2")
        assert worker.idle(5)
        assert sorted(fold.calls) == ["c1", "c2"]

    def test_without_a_delay_every_submit_after_a_fold_folds_again(self, worker_factory):
        fold = _Recorder()
        worker = worker_factory(fold)
        for _ in range(3):
            worker.submit("c1")
            assert worker.idle(5)
        assert fold.calls == ["c1", "c1", "c1"]

    def test_a_submit_during_a_fold_waits_the_delay_and_folds_once_more(self, worker_factory):
        fold = _Recorder()
        fold.release.clear()
        worker = worker_factory(fold, delay=0.2)
        worker.submit("c1")
        assert fold.started.wait(5)
        for _ in range(4):
            worker.submit("c1")
        fold.release.set()
        assert worker.idle(5)
        assert fold.calls == ["c1", "c1"]

    def test_gathered_evictions_take_fewer_summarizer_calls_and_lose_nothing(self):
        """20 evictions folded as they come take 20 calls; gathered (a delay nothing outlasts), far fewer.

        The figures with a conversation's real pace are in bench/bench_summarizer.py (fold delay).
        """
        calls: dict[str, int] = {}
        for mode, settings, background in (
            ("each", Settings(buffer_size=4, eviction_batch=2), False),
            ("gathered", Settings(buffer_size=4, eviction_batch=2, fold_delay=3600), True),
        ):
            history = ConversationHistory(settings=settings, background=background)
            counted = _CountingSummarizer(history.offline)
            history.writer.primary = counted
            try:
                for i in range(44):
                    history.query(f"Add utterance: Fact {i}: item {i} costs {i * 3} euros.")
                history.query("Get summary")  # folds whatever is still gathering
                state = history.backend.read("default")
                assert state.pending == [] and state.summary.through_seq == 40
                calls[mode] = counted.calls
            finally:
                history.close()
        assert calls["each"] >= 20, (
            calls
        )  # one per eviction at least; merging segments may add some
        assert calls["gathered"] < calls["each"] / 2, calls

    def test_a_summary_read_does_not_wait_for_the_delay(self):
        history = ConversationHistory(
            settings=Settings(buffer_size=4, eviction_batch=2, fold_delay=3600)
        )
        try:
            for i in range(8):
                history.query(f"Add utterance: Fact {i}: the code word is zebra{i}.")
            assert len(history.backend.read("default").pending) == 4  # gathering for an hour
            answer = history.query("Get summary")
            assert answer.metadata["summary_pending"] == 0
            assert answer.metadata["summary_through_seq"] == 4
            assert "zebra" in answer.result["summary"]
        finally:
            history.close()

    def test_a_negative_or_infinite_delay_is_refused(self):
        for bad in (-1, float("inf"), True, "1"):
            with pytest.raises(ValueError, match="fold_delay"):
                Settings(fold_delay=bad)


class _CountingSummarizer:
    """The offline summarizer, counting its calls."""

    def __init__(self, inner: ExtractiveSummarizer) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls = 0

    def summarize(self, previous: str, utterances, token_limit: int) -> str:
        self.calls += 1
        return self.inner.summarize(previous, utterances, token_limit)


def _slow_claude_writer(base_url: str) -> SummaryWriter:
    config = ClaudeConfig(api_key="sk-test", base_url=base_url, timeout=10, max_retries=0)
    return SummaryWriter(ClaudeSummarizer(config, COUNTER), COUNTER, ExtractiveSummarizer(COUNTER))


class TestStoresDoNotWaitForTheSummarizer:
    """While the model holds a summary call, stores that evict keep returning."""

    def test_evicting_stores_return_while_the_model_is_still_answering(self):
        """The fake model answers only when the test lets it; every evicting store returns before that.

        How fast they return, against no summarizer at all, is measured by bench/bench_summarizer.py.
        """
        answering, let_go = threading.Semaphore(0), threading.Event()

        def reply(body) -> str:
            answering.release()
            let_go.wait(30)
            return REPLY

        with FakeAnthropic(reply=reply) as api:
            history = ConversationHistory(
                settings=Settings(buffer_size=4, eviction_batch=2, fold_delay=0),
                writer=_slow_claude_writer(api.base_url),
            )
            try:
                stored = [
                    history.query(f"Add utterance: Fact {i} is that item {i} costs {i * 3} euros.")
                    for i in range(5)
                ]
                assert stored[-1].result["evicted"]
                assert answering.acquire(timeout=10), "the evicted utterances went to the model"
                evicting = 0
                for i in range(5, 40):
                    answer = history.query(
                        f"Add utterance: Fact {i} is that item {i} costs {i * 3} euros."
                    )
                    if answer.result["evicted"]:
                        evicting += 1
                        state = history.backend.read("default")
                        # Back, with its evictions queued and nothing summarized yet: it did not wait.
                        assert state.summary.through_seq == 0 and len(state.pending) >= 2, i
                assert evicting >= 15
                let_go.set()
                summary = history.query("Get summary")
                assert set(summary.result["summary"].splitlines()) == {
                    REPLY
                }  # one line per segment
                assert summary.metadata["summary_pending"] == 0
                assert summary.metadata["summary_through_seq"] == 36
            finally:
                let_go.set()
                history.close()

    @pytest.fixture
    def queued(self) -> Iterator[ConversationHistory]:
        """Eight stores with the worker stopped: utterances 1-4 wait in the queue."""
        history = ConversationHistory(settings=Settings(buffer_size=4, eviction_batch=2))
        history.worker.stop()
        for i in range(8):
            history.query(f"Add utterance: Fact {i}: the code word is zebra{i}.")
        assert len(history.backend.read("default").pending) == 4
        yield history
        history.close()

    def test_get_summary_folds_what_is_queued_even_with_the_worker_stopped(self, queued):
        answer = queued.query("Get summary")
        assert answer.metadata["summary_pending"] == 0
        assert answer.metadata["summary_through_seq"] == 4
        assert "zebra" in answer.result["summary"]

    def test_summarize_folds_what_is_queued_first(self, queued):
        answer = queued.query("Summarize conversation")
        assert answer.metadata["summary_pending"] == 0
        assert queued.backend.read("default").summary.through_seq == 4


def _query(stub, text: str) -> daemon_pb2.QueryResponse:
    request = daemon_pb2.QueryRequest(query=text)
    request.metadata.update({"conversation_id": "crash"})
    return stub.Query(request, timeout=30)


class TestCrashWithQueuedBatches:
    """SIGKILL while batches wait for a hung model: after a restart the queue is there and is folded."""

    def test_the_queue_survives_sigkill_and_is_folded_after_restart(
        self, tmp_path: Path, monkeypatch
    ):
        data = str(tmp_path / "chd-data")
        common = (
            "--backend",
            "disk",
            "--data-dir",
            data,
            "--buffer-size",
            "4",
            "--eviction-batch",
            "2",
        )
        with FakeAnthropic(delay=60) as hung_model:
            monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
            monkeypatch.setenv("ANTHROPIC_BASE_URL", hung_model.base_url)
            first = DaemonProcess(*common, "--summarizer-timeout", "60")
            try:
                with grpc.insecure_channel(first.target) as channel:
                    stub = daemon_pb2_grpc.DaemonStub(channel)
                    answers = [
                        _query(stub, f"Add utterance: Fact {i}: locker {i} holds {i * 11} coins.")
                        for i in range(10)
                    ]
                assert answers[-1].metadata["summary_pending"] == 6
                deadline = time.monotonic() + 10
                while not hung_model.requests and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert hung_model.requests, "the worker was folding when the daemon died"
            finally:
                first.kill()  # SIGKILL: no shutdown, no flush beyond what was committed
        monkeypatch.delenv("ANTHROPIC_API_KEY")
        monkeypatch.delenv("ANTHROPIC_BASE_URL")
        second = DaemonProcess(*common, "--summarizer", "offline")
        try:
            with grpc.insecure_channel(second.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                summary = _query(stub, "Get summary")
                buffer = _query(stub, "Get all utterances")
            assert summary.metadata["summary_pending"] == 0
            assert summary.metadata["summary_through_seq"] == 6
            assert "coins" in summary.result["summary"]
            assert [u["seq"] for u in buffer.result["utterances"]] == [7, 8, 9, 10]
        finally:
            second.kill()


class _FullDisk:
    """A memory backend whose commits fail as a full disk does, until told otherwise."""

    def __init__(self) -> None:
        from chd.backends.memory import MemoryBackend

        self.inner = MemoryBackend()
        self.full = False

    def read(self, conversation_id):
        return self.inner.read(conversation_id)

    def transact(self, conversation_id, decide):
        from chd.core.errors import StorageFull

        if self.full:
            raise StorageFull("disk full")
        return self.inner.transact(conversation_id, decide)

    def conversations(self):
        return self.inner.conversations()

    def close(self):
        self.inner.close()


class TestStorageFailureWhileFolding:
    """A fold that cannot be saved leaves the batch queued and the read still answers."""

    def test_get_summary_answers_with_the_queue_intact_when_the_fold_cannot_be_saved(self):
        disk = _FullDisk()
        history = ConversationHistory(disk, Settings(buffer_size=4, eviction_batch=2))
        history.worker.stop()
        for i in range(6):
            history.query(f"Add utterance: Fact {i}: shelf {i} holds {i * 5} jars.")
        disk.full = True
        answer = history.query("Get summary")
        assert answer.metadata["summary_pending"] == 2
        assert "StorageFull: disk full" in answer.metadata["fold_error"]
        disk.full = False
        assert history.query("Get summary").metadata["summary_pending"] == 0
        history.close()


class _CountingReads(MemoryBackend):
    """A memory backend counting the reads made outside its own transactions."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self._inside = False

    def read(self, conversation_id: str):
        if not self._inside:
            self.reads += 1
        return super().read(conversation_id)

    def transact(self, conversation_id, decide):
        self._inside = True
        try:
            return super().transact(conversation_id, decide)
        finally:
            self._inside = False


class TestFoldReads:
    """A fold learns from its own commit that the queue is empty (issue 17)."""

    def test_a_fold_that_empties_the_queue_reads_the_conversation_once(self):
        backend = _CountingReads()
        history = ConversationHistory(
            backend=backend, settings=Settings(buffer_size=4, eviction_batch=2, fold_delay=3600)
        )
        try:
            for i in range(6):
                history.query(f"Add utterance: Fact {i}: the code word is zebra{i}.")
            assert len(backend.read("default").pending) == 2  # gathering for an hour
            backend.reads = 0
            report = history.folder.fold("default")
            assert report.done and report.folded == 2 and not report.awaiting_rewrite
            assert backend.reads == 1
            assert backend.read("default").pending == []
        finally:
            history.close()

    def test_a_fold_goes_on_when_its_commit_leaves_more_queued(self):
        """A second batch (over FOLD_BATCH_TOKENS) is folded in the same call, as before."""
        from chd.core.summaries.folding import FOLD_BATCH_TOKENS

        backend = _CountingReads()
        history = ConversationHistory(
            backend=backend, settings=Settings(buffer_size=4, eviction_batch=2, fold_delay=3600)
        )
        try:
            long = "word " * (FOLD_BATCH_TOKENS // 2)
            for i in range(6):
                history.query(f"Add utterance: {i} {long}")
            queued = len(backend.read("default").pending)
            assert queued >= 2  # each one a batch of its own
            report = history.folder.fold("default")
            assert report.done and report.folded == queued and len(report.written) >= queued
            assert backend.read("default").pending == []
        finally:
            history.close()
