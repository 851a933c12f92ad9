"""The offline summarizer in a child process: same summaries, failures replaced, no orphans."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace

import grpc
import pytest
from conftest import DaemonProcess

from chd.core.summaries.extractive import ExtractiveSummarizer
from chd.core.summaries.process import NICE, ProcessSummarizer
from chd.core.summaries.summarizer import SummarizerError, SummaryContext
from chd.core.summaries.writer import build_writer
from chd.core.tokens import default_counter
from chd.core.utterance import Utterance
from chd.v1 import daemon_pb2, daemon_pb2_grpc


def _batch(start: int, count: int = 5) -> list[Utterance]:
    texts = [
        "Can we move the Lyon meeting to Thursday?",
        "The budget for the Paris trip is 1200 euros.",
        "I decided to take the 9:15 train instead.",
        "Thanks, that works.",
        "Remember that Alice is vegetarian.",
    ]
    return [
        Utterance(
            conversation_id="c",
            seq=seq,
            speaker="user" if seq % 2 else "assistant",
            text=texts[seq % len(texts)],
            turn_number=(seq + 1) // 2,
            timestamp="2026-11-21T10:00:00.000000Z",
            tokens=10,
        )
        for seq in range(start, start + count)
    ]


def failing_summarizer() -> ExtractiveSummarizer:
    """A factory for the child whose summarizer always raises."""

    class Failing(ExtractiveSummarizer):
        def summarize(self, previous, utterances, token_limit, context=None):  # type: ignore[no-untyped-def]
            raise ValueError("no summary today")

    return Failing(default_counter())


class _Echo:
    """Writes back everything it was given, context included."""

    name = "extractive"
    reads_context = True

    def summarize(self, previous, utterances, token_limit, context=None):  # type: ignore[no-untyped-def]
        return repr((previous, tuple(utterances), token_limit, context))


def echoing_summarizer() -> _Echo:
    """A factory for a child that answers with what reached it."""
    return _Echo()


def slow_summarizer() -> ExtractiveSummarizer:
    """A factory for a child that takes a while to get ready."""
    time.sleep(1.5)
    return ExtractiveSummarizer(default_counter())


class _Counting:
    """The in-daemon summarizer, counting the summaries it writes."""

    name = "extractive"

    def __init__(self) -> None:
        self.calls = 0
        self.inner = ExtractiveSummarizer(default_counter())

    def summarize(self, previous: str, utterances: list[Utterance], token_limit: int) -> str:
        self.calls += 1
        return self.inner.summarize(previous, utterances, token_limit)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by a parent that is gone) is not running.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as children:
            found += [int(c) for c in children.read().split()]
    return found


@pytest.fixture
def child() -> Iterator[ProcessSummarizer]:
    summarizer = ProcessSummarizer()
    yield summarizer
    summarizer.close()


class TestProcessSummarizer:
    """The child writes what the summarizer would write in the daemon."""

    def test_summaries_are_the_ones_the_same_summarizer_writes_in_process(self, child):
        local = ExtractiveSummarizer(default_counter())
        previous = ""
        for start in (1, 6, 11):
            batch = _batch(start)
            theirs = child.summarize(previous, batch, 60)
            assert theirs == local.summarize(previous, batch, 60)
            previous = theirs
        assert "Lyon" in previous or "budget" in previous

    def test_the_daemon_counter_learns_the_childs_counts_of_its_text(self):
        """The daemon checks the child's text against the budget without encoding it again (issue 17)."""
        from chd.core.tokens import TiktokenCounter

        counter = TiktokenCounter()
        child = ProcessSummarizer(counter=counter)
        try:
            batch = [*_batch(1), *_batch(6), *_batch(11)]
            text = child.summarize("", batch, 300)
            while not child._ready:  # the first calls may be written locally while the child starts
                time.sleep(0.05)
                text = child.summarize("", batch, 300)
        finally:
            child.close()
        assert len(text) > 200
        encoded: list[str] = []
        ids = counter._ids
        counter._ids = lambda t: (encoded.append(t), ids(t))[1]  # type: ignore[method-assign]
        assert counter.count(text) == len(counter._encoding.encode_ordinary(text))
        assert encoded == []

    def test_the_child_gets_the_utterances_and_context_the_daemon_sent(self):
        """Utterances cross as tuples of their fields; the child sees the very same ones."""
        child = ProcessSummarizer(make=echoing_summarizer)
        try:
            context = SummaryContext(
                summary="earlier: Lyon", buffered=tuple(_batch(20, 3)), parts=((1, 2, "a"),)
            )
            batch = _batch(1) + [replace(_batch(6, 1)[0], important=True, text="naïve “quotes”\n")]
            assert child.summarize("before", batch, 60, context) == _Echo().summarize(
                "before", tuple(batch), 60, context
            )
            assert child.summarize("", batch, 9) == _Echo().summarize("", tuple(batch), 9)
        finally:
            child.close()

    def test_the_child_runs_at_a_lower_cpu_priority_than_the_daemon(self, child):
        """Folds are background work: the child yields a busy core to the threads answering requests."""
        child.summarize("", _batch(1), 60)
        with open(f"/proc/{child.pid}/stat") as stat:
            niceness = int(stat.read().rsplit(")", 1)[1].split()[16])
        assert niceness == min(19, os.nice(0) + NICE)

    def test_no_child_until_the_first_summary(self, child):
        assert child.pid is None
        child.summarize("", _batch(1), 60)
        assert child.pid is not None and _alive(child.pid)

    def test_a_killed_child_fails_one_call_and_the_next_call_starts_another(self, child):
        child.summarize("", _batch(1), 60)
        first = child.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        assert _gone(first)
        with pytest.raises(SummarizerError, match="summarizer process failed"):
            child.summarize("", _batch(1), 60)
        assert child.summarize("", _batch(1), 60)
        assert child.pid not in (None, first)

    def test_a_summarizer_error_in_the_child_is_raised_and_the_child_goes_on(self):
        failing = ProcessSummarizer(failing_summarizer)
        try:
            for _ in range(2):
                with pytest.raises(SummarizerError, match="ValueError: no summary today"):
                    failing.summarize("", _batch(1), 60)
            assert failing.pid is not None and _alive(failing.pid)
        finally:
            failing.close()

    def test_while_the_child_starts_the_daemon_writes_the_summaries_itself(self):
        local = _Counting()
        child = ProcessSummarizer(slow_summarizer, local=local)
        try:
            expected = local.inner.summarize("", _batch(1), 60)
            assert child.summarize("", _batch(1), 60) == expected
            assert local.calls == 1 and child.pid is not None
            deadline = time.monotonic() + 30
            while True:  # until the child is ready and answers itself
                before = local.calls
                assert child.summarize("", _batch(1), 60) == expected
                if local.calls == before or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert local.calls == before, "the child never took over"
        finally:
            child.close()

    def test_close_ends_the_child_and_refuses_later_calls(self, child):
        child.summarize("", _batch(1), 60)
        pid = child.pid
        assert pid is not None
        child.close()
        assert _gone(pid)
        with pytest.raises(SummarizerError, match="closed"):
            child.summarize("", _batch(1), 60)


class TestWriterWithAChild:
    """The daemon's writer folds in the daemon when its child fails."""

    def test_a_dead_child_falls_back_to_the_same_summarizer_in_the_daemon(self):
        writer = build_writer("offline", default_counter(), process=True)
        child = writer.primary
        assert isinstance(child, ProcessSummarizer)
        try:
            normal = writer.write("", _batch(1), 60)
            assert normal.error == "" and normal.made_by == "extractive"
            assert child.pid is not None
            os.kill(child.pid, signal.SIGKILL)
            assert _gone(child.pid)
            fallen_back = writer.write("", _batch(1), 60)
            assert fallen_back.text == normal.text
            assert "summarizer process failed" in fallen_back.error
        finally:
            child.close()

    def test_without_the_option_the_summarizer_runs_in_the_daemon(self):
        writer = build_writer("offline", default_counter())
        assert isinstance(writer.primary, ExtractiveSummarizer)


def _store_many(target: str, count: int) -> daemon_pb2.QueryResponse:
    with grpc.insecure_channel(target) as channel:
        stub = daemon_pb2_grpc.DaemonStub(channel)
        for n in range(count):
            request = daemon_pb2.QueryRequest(
                query=f"Add utterance: the Lyon train number {n} leaves at nine."
            )
            request.metadata.update({"conversation_id": "proc"})
            stub.Query(request, timeout=10)
        deadline = time.monotonic() + 20
        while True:
            request = daemon_pb2.QueryRequest(query="Get the summary")
            request.metadata.update({"conversation_id": "proc"})
            answer = stub.Query(request, timeout=10)
            if answer.metadata["summary_pending"] == 0 or time.monotonic() > deadline:
                return answer


class TestTheDaemonsChild:
    """`chd serve` folds in its child and leaves no process behind."""

    def test_folds_happen_in_a_child_that_stops_with_the_daemon(self):
        daemon = DaemonProcess("--buffer-size", "10")
        try:
            answer = _store_many(daemon.target, 30)
            assert answer.metadata["summary_pending"] == 0
            assert answer.result["summary_through_seq"] >= 20
            assert answer.result["summary"]
            children = _children(daemon.proc.pid)
            assert len(children) == 1
        finally:
            assert daemon.terminate() == 0
        assert _gone(children[0])

    def test_a_killed_daemon_leaves_no_child_behind(self):
        daemon = DaemonProcess("--buffer-size", "10")
        try:
            _store_many(daemon.target, 30)
            children = _children(daemon.proc.pid)
            assert len(children) == 1
        finally:
            daemon.kill()
        assert _gone(children[0])

    def test_summarizer_process_false_folds_without_a_child(self):
        daemon = DaemonProcess("--buffer-size", "10", "--no-summarizer-process")
        try:
            answer = _store_many(daemon.target, 30)
            assert answer.metadata["summary_pending"] == 0 and answer.result["summary"]
            assert _children(daemon.proc.pid) == []
        finally:
            daemon.kill()
