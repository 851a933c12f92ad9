"""Late Claude replies (issue 13): a call that outlives its fold's patience replaces the offline text of its range.

The real anthropic SDK against tests/fake_anthropic.py, whose ``Held`` reply
waits until the test opens its gate, so a fold's patience runs out for
certain and no assertion depends on a clock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from chd.backends import open_backend
from chd.backends.base import Backend
from chd.core.history import ConversationHistory
from chd.core.language.intents import RemoveIntent, StoreIntent
from chd.core.settings import Settings
from chd.core.summaries.claude import ClaudeConfig, ClaudeSummarizer, render_tagged
from chd.core.summaries.extractive import ExtractiveSummarizer
from chd.core.summaries.folding import PENDING_HEADER
from chd.core.summaries.late import LateCalls
from chd.core.summaries.writer import SummaryWriter
from chd.core.tokens import default_counter
from tests.backends.backend_kinds import utterance
from tests.fake_anthropic import FakeAnthropic, Held, Reply
from tests.ops_support import ask, channel_to, config, running
from tests.redis_support import wait_for
from tests.test_ops_metrics import scrape

COUNTER = default_counter()
MODEL = "claude-late-model"
TAGGED = (
    '<fact turns="1-2">Claude kept parcel K000W for locker 3 and parcel K001W for locker 10.</fact>'
)
RENDERED = "\n".join(render_tagged(TAGGED))
CLAUDE = f"claude:{MODEL}"
# Seconds a fold waits for Claude in tests where a reply that is not held
# must come in time: the fake answers in milliseconds, but a shared 2-CPU
# machine can stall a thread for a few hundred.
PROMPT = 1.0


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(reply=lambda body: TAGGED) as fake:
        yield fake


def late_writer(api: FakeAnthropic, late_after: float) -> tuple[ClaudeSummarizer, SummaryWriter]:
    """Claude behind ``api``, waited for ``late_after`` s before the offline fallback writes the text."""
    claude = ClaudeSummarizer(
        ClaudeConfig(
            api_key="sk-test",
            model=MODEL,
            max_tokens=300,
            timeout=10,
            max_retries=0,
            base_url=api.base_url,
        ),
        COUNTER,
    )
    writer = SummaryWriter(
        claude,
        COUNTER,
        ExtractiveSummarizer(COUNTER),
        attempts=1,
        backoff=0.01,
        late_after=late_after,
    )
    return claude, writer


@contextmanager
def folding(
    backend: Backend, api: FakeAnthropic, limit: int = 400, late_after: float = 0.2
) -> Iterator[ConversationHistory]:
    """A history folding on each store (no worker), Claude waited for ``late_after`` s before the offline fallback.

    A test whose held call is the only one keeps the short wait (each held
    call costs it); one that also needs a prompt reply to come in time
    waits a second, so that a loaded machine cannot turn that reply late.
    """
    claude, writer = late_writer(api, late_after)
    history = ConversationHistory(
        backend=backend,
        settings=Settings(buffer_size=4, eviction_batch=2, summary_token_limit=limit),
        writer=writer,
        background=False,
    )
    try:
        yield history
    finally:
        history.folder.close()  # the backend fixture closes the backend
        claude.close()


def store(history: ConversationHistory, i: int) -> None:
    history.execute(StoreIntent(f"Parcel K{i:03d}W goes to locker {i * 7 + 3}.", "user"), "c")


def late_counts(history: ConversationHistory) -> dict[str, int]:
    return history.query("stats", {"conversation_id": "c"}).result["summary_late_results"]


class TestLateReply:
    """In the core, over every backend: the late reply lands through the backend's own transaction."""

    def test_a_late_reply_replaces_the_offline_segment_of_its_range(self, backend, api):
        """The offline fold keeps the originals and the mark until Claude's late text takes its place."""
        gate = threading.Event()
        api.script(Held(gate, Reply(TAGGED)))
        with folding(backend, api) as history:
            for i in range(5):
                store(history, i)  # the fifth evicts seqs 1-2, folded offline after 0.2 s
            offline = history.backend.read("c").summary
            (segment,) = offline.segments
            assert (
                segment.made_by == "extractive" and "did not answer within 0.2 s" in segment.error
            )
            assert [u.seq for u in offline.held] == [1, 2]
            assert late_counts(history) == {"applied": 0, "dropped": 0, "failed": 0, "in_flight": 1}
            gate.set()
            wait_for(lambda: late_counts(history)["applied"] == 1, "the late reply applied")
            after = history.backend.read("c").summary
            stats = history.query("stats", {"conversation_id": "c"}).result
        (segment,) = after.segments
        assert after.text == RENDERED and segment.made_by == CLAUDE and segment.error == ""
        assert (segment.seq_from, segment.seq_to) == (1, 2) and after.held == ()
        assert (
            stats["summary_awaiting_rewrite"] == 0 and stats["summary_offline_only_utterances"] == 0
        )
        assert len(api.requests) == 1  # the late reply was the rewrite: no second call

    def test_a_late_reply_is_dropped_when_the_conversation_was_cleared_first(self, backend, api):
        """A clear that came first wins: the late reply does not bring the summary back."""
        gate = threading.Event()
        api.script(Held(gate, Reply(TAGGED)))
        with folding(backend, api) as history:
            for i in range(5):
                store(history, i)
            assert history.backend.read("c").summary.held
            history.execute(RemoveIntent(all=True), "c")
            gate.set()
            wait_for(lambda: late_counts(history)["dropped"] == 1, "the late reply dropped")
            assert history.backend.read("c").summary.segments == ()
            assert late_counts(history)["applied"] == 0

    def test_a_fold_that_extended_the_range_first_wins_and_the_originals_are_rewritten(self, api):
        """A later fold changed the offline segment: the late reply is dropped, the originals rewritten instead."""
        from chd.backends.memory import MemoryBackend

        gate = threading.Event()
        extended = '<fact turns="1-4">Parcels K000W to K003W are booked.</fact>'
        rewritten = (
            '<fact turns="1-4">Parcels K000W, K001W, K002W and K003W go to lockers 3 to 24.</fact>'
        )
        api.script(Held(gate, Reply(TAGGED)), Reply(extended), Reply(rewritten))
        # 60 tokens: one segment, so the next batch extends the offline one.
        with folding(MemoryBackend(), api, limit=60, late_after=PROMPT) as history:
            for i in range(7):
                store(history, i)  # the seventh evicts seqs 3-4: Claude extends, then rewrites 1-2
            summary = history.backend.read("c").summary
            assert summary.text == "\n".join(render_tagged(rewritten))
            assert summary.held == () and summary.segments[0].error == ""
            gate.set()
            wait_for(lambda: late_counts(history)["dropped"] == 1, "the late reply dropped")
            assert history.backend.read("c").summary == summary
        assert len(api.requests) == 3

    def test_a_late_reply_is_fitted_to_the_room_the_segments_folded_since_leave(self, api):
        """The summary limit holds for a late reply: a segment folded meanwhile took room, the reply loses its last items."""
        from chd.backends.memory import MemoryBackend

        gate = threading.Event()
        late = "\n".join(
            f'<fact turns="{i}">Parcel K{i:03d}W goes to locker {i * 7 + 3} on pier {i}.</fact>'
            for i in range(9)
        )
        newer = '<fact turns="3-4">Parcels K002W and K003W go to lockers 17 and 24, on the north pier.</fact>'
        late_lines = render_tagged(late)
        assert 170 < COUNTER.count("\n".join(late_lines)) <= 200  # within what it was asked for
        api.script(Held(gate, Reply(late)), Reply(newer))
        with folding(MemoryBackend(), api, limit=200, late_after=PROMPT) as history:
            for i in range(7):
                store(
                    history, i
                )  # seqs 1-2 offline (late), then 3-4 by Claude in a segment of their own
            assert [s.made_by for s in history.backend.read("c").summary.segments] == [
                "extractive",
                CLAUDE,
            ]
            gate.set()
            wait_for(lambda: late_counts(history)["applied"] == 1, "the late reply applied")
            summary = history.backend.read("c").summary
        first, second = summary.segments
        assert first.made_by == CLAUDE and second.text == "\n".join(render_tagged(newer))
        assert summary.tokens <= 200 and COUNTER.count(summary.text) <= 200
        kept = first.text.splitlines()
        assert 0 < len(kept) < len(late_lines) and kept == late_lines[: len(kept)]


class TestForgetting:
    """A remove leaves nothing of the conversation's late answers in memory."""

    def test_a_remove_forgets_the_answers_kept_for_joining(self, backend, api):
        """After the late reply landed its answer is kept for joining, until a remove of the conversation."""
        gate = threading.Event()
        api.script(Held(gate, Reply(TAGGED)))
        with folding(backend, api) as history:
            for i in range(5):
                store(history, i)
            gate.set()
            wait_for(lambda: late_counts(history)["applied"] == 1, "the late reply applied")
            calls = history.writer.late
            assert calls is not None and calls.kept("c") == 1
            history.execute(RemoveIntent(all=True), "c")
            assert calls.kept("c") == 0


class TestLanding:
    """A late reply finds the segment it was asked for."""

    def test_a_late_reply_lands_on_the_segment_of_its_range_when_another_reads_the_same(
        self, backend, api
    ):
        """Two offline segments with the same text: the reply replaces the one that spans its seqs."""
        from concurrent.futures import Future

        from chd.backends.base import Change
        from chd.core.summaries.summarizer import Late, Summarized
        from chd.core.utterance import Summary, SummarySegment

        same = "Parcels went to lockers."
        tokens = COUNTER.count(same)
        segments = tuple(
            SummarySegment(
                same,
                tokens,
                first,
                last,
                first,
                last,
                made_by="extractive",
                error="claude was slow",
            )
            for first, last in ((1, 2), (3, 4))
        )
        summary = Summary(segments=segments, through_seq=4, tokens=2 * tokens)
        with folding(backend, api) as history:
            for i in range(6):
                store(history, i)
            backend.transact("c", lambda state: (Change(summary=summary), None))
            future: Future[str] = Future()
            future.set_running_or_notify_cancel()
            late = Late(future, frozenset({3, 4}), 200)
            history.folder._await_late(
                "c", summary, [Summarized(same, "extractive", "claude was slow", late)]
            )
            future.set_result(RENDERED)  # as the summarizer returns it
            wait_for(lambda: late_counts(history)["applied"] == 1, "the late reply applied")
            first, second = history.backend.read("c").summary.segments
        assert (first.seq_from, first.text, first.made_by) == (1, same, "extractive")
        assert (second.seq_from, second.made_by) == (3, CLAUDE) and second.text == RENDERED


class TestLateCalls:
    """The bounds on calls running late, and joining a call already made."""

    def test_calls_are_capped_per_conversation_and_per_daemon_and_repeats_join(self):
        """Past either cap no call starts; the same request asked again joins the one in flight."""
        release = threading.Event()

        def slow() -> str:
            release.wait(10)
            return "done"

        calls = LateCalls(per_key=2, total=3)
        first = calls.start("a", "r1", slow)
        assert first is not None and calls.start("a", "r1", slow) is first
        assert calls.start("a", "r2", slow) is not None
        assert calls.start("a", "r3", slow) is None  # two for conversation a already
        assert calls.start("b", "r4", slow) is not None
        assert calls.start("c", "r5", slow) is None  # three in the daemon already
        assert calls.in_flight == 3
        release.set()
        assert first.result(timeout=10) == "done"
        wait_for(lambda: calls.in_flight == 0, "every call ended")
        assert calls.start("a", "r1", slow) is first  # just answered: the answer is reused
        calls.stop()
        assert calls.start("a", "r6", slow) is None

    def test_a_forgotten_conversation_keeps_no_answer_for_joining_now_or_when_its_call_ends(self):
        """forget drops the answers kept for a key, and a call in flight then is not kept when it answers."""
        release = threading.Event()

        def slow() -> str:
            release.wait(10)
            return "the text of a removed utterance"

        calls = LateCalls()
        answered = calls.start("a", "r1", lambda: "answered")
        assert answered is not None and answered.result(timeout=10) == "answered"
        wait_for(lambda: calls.kept("a") == 1, "the answer kept for joining")
        flying = calls.start("a", "r2", slow)
        other = calls.start("b", "r3", lambda: "another conversation")
        assert flying is not None and other is not None and other.result(timeout=10)
        calls.forget("a")
        assert calls.kept("a") == 0
        release.set()
        assert flying.result(timeout=10)
        wait_for(lambda: calls.in_flight == 0, "every call ended")
        assert calls.kept("a") == 0 and calls.kept("b") == 1
        again = calls.start("a", "r1", lambda: "asked again")
        assert (
            again is not answered
            and again is not None
            and again.result(timeout=10) == "asked again"
        )
        calls.stop()

    def test_a_call_refused_by_the_caps_is_not_a_failure_and_the_next_reader_asks_claude(self, api):
        """Busy is not failed: no cooldown, so once the late call ends an impatient reader reaches Claude again."""
        claude, writer = late_writer(api, 0.2)
        writer.late = LateCalls(per_key=1, total=1)
        gate = threading.Event()
        api.script(Held(gate, Reply(TAGGED)))
        batches = [
            [utterance(seq, f"Parcel K{seq:03d}W goes to locker {seq}.") for seq in (n, n + 1)]
            for n in (1, 3, 5)
        ]
        try:
            first = writer.write("", batches[0], 200, patient=False, late_key="c")
            assert first.made_by == "extractive" and first.late is not None
            refused = writer.write("", batches[1], 200, patient=False, late_key="c")
            assert refused.made_by == "extractive" and refused.late is None
            assert "still running late" in refused.error and "failed" not in refused.error
            assert len(api.requests) == 1  # the caps started no second call
            gate.set()
            assert first.late.future.result(timeout=10)
            wait_for(lambda: writer.late.in_flight == 0, "the late call to end")
            after = writer.write("", batches[2], 200, patient=False, late_key="c")
            assert after.made_by == CLAUDE and not after.error
        finally:
            writer.late.stop()
            claude.close()


def claude_server(
    api: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
    backend: Backend | None = None,
    wait: float = 0.3,
    **values: object,
):
    """The assembled daemon (chd.service.app.start) with Claude behind ``api``, waited for ``wait`` s per fold.

    The short default suits tests whose only slow call is held; one that
    needs a prompt reply in time passes PROMPT.
    """
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-daemon")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
    return running(
        config(
            summarizer="claude",
            summarizer_process=False,
            anthropic_model=MODEL,
            summarizer_wait=wait,
            summarizer_attempts=1,
            anthropic_max_retries=0,
            summarizer_timeout=10,
            buffer_size=4,
            eviction_batch=2,
            **values,
        ),
        backend=backend,
    )


def stats_of(channel) -> dict:
    return dict(ask(channel, "Get stats", {"conversation_id": "c"}).result)


def store_five(channel) -> None:
    for i in range(5):
        ask(
            channel,
            f"Add utterance: Parcel K{i:03d}W goes to locker {i * 7 + 3}.",
            {"conversation_id": "c"},
        )


class TestThroughGrpc:
    """`chd serve` with Claude configured: late replies, waiting readers and restarts, seen from outside."""

    def test_a_late_reply_replaces_the_offline_segment_and_stats_and_metrics_count_it(
        self, api, monkeypatch
    ):
        """The worker folds offline after 0.3 s; Claude's late reply then takes the segment's place."""
        gate = threading.Event()
        api.script(Held(gate, Reply(TAGGED)))
        with (
            claude_server(api, monkeypatch, fold_delay=0, metrics_port=0) as server,
            channel_to(server) as channel,
        ):
            store_five(channel)
            wait_for(lambda: stats_of(channel)["summary_awaiting_rewrite"] == 2, "the offline fold")
            answer = ask(channel, "Get summary", {"conversation_id": "c"})
            assert answer.metadata["summary_fallback_segments"] == 1
            assert "did not answer within 0.3 s" in answer.metadata["summarizer_error"]
            assert "K000W" in answer.result["summary"]
            gate.set()
            wait_for(
                lambda: stats_of(channel)["summary_late_results"]["applied"] == 1, "the late reply"
            )
            answer = ask(channel, "Get summary", {"conversation_id": "c"})
            stats = stats_of(channel)
            samples = scrape(server.metrics_port)
        assert (
            answer.result["summary"] == RENDERED
            and "summary_fallback_segments" not in answer.metadata
        )
        assert stats["summary_awaiting_rewrite"] == 0 and stats["summary_rewrite_ranges"] == []
        assert stats["summary_late_results"] == {
            "applied": 1,
            "dropped": 0,
            "failed": 0,
            "in_flight": 0,
        }
        assert samples[("chd_summary_late_results_total", (("outcome", "applied"),))] == 1
        assert samples[("chd_summary_late_results_total", (("outcome", "dropped"),))] == 0
        assert samples[("chd_summary_late_calls_in_flight", ())] == 0
        assert (
            samples[("chd_summary_awaiting_rewrite_utterances", (("conversation_id", "c"),))] == 0
        )
        assert len(api.requests) == 1

    def test_a_read_that_cannot_wait_answers_verbatim_and_the_same_call_lands_later(
        self, api, monkeypatch
    ):
        """The reader answers with the summary plus the queue verbatim and commits nothing; a later read takes the same call's reply."""
        gate = threading.Event()
        later = '<fact turns="3-4">Parcels K002W and K003W go to lockers 17 and 24.</fact>'
        api.script(Reply(TAGGED), Held(gate, Reply(later)))
        # A long fold delay: the reader, not the worker, folds here.
        with (
            claude_server(api, monkeypatch, wait=PROMPT, fold_delay=60) as server,
            channel_to(server) as channel,
        ):
            store_five(channel)
            assert (
                ask(channel, "Get summary", {"conversation_id": "c"}).result["summary"] == RENDERED
            )
            for i in (5, 6):
                ask(
                    channel,
                    f"Add utterance: Parcel K{i:03d}W goes to locker {i * 7 + 3}.",
                    {"conversation_id": "c"},
                )
            answer = ask(channel, "Get summary", {"conversation_id": "c"})
            assert answer.result["summary"] == "\n".join(
                [
                    RENDERED,
                    PENDING_HEADER,
                    "[turn 3] user: Parcel K002W goes to locker 17.",
                    "[turn 4] user: Parcel K003W goes to locker 24.",
                ]
            )
            assert (
                answer.metadata["summary_pending_verbatim"] == 2
                and answer.metadata["summary_pending"] == 2
            )
            assert f"did not answer within {PROMPT:g} s" in answer.metadata["fold_error"]
            assert stats_of(channel)["summary_segments"] == 1  # nothing offline was committed
            gate.set()
            expected = RENDERED + "\n" + "\n".join(render_tagged(later))
            wait_for(
                lambda: (
                    ask(channel, "Get summary", {"conversation_id": "c"}).result["summary"]
                    == expected
                ),
                "the reply of the reader's call",
            )
            stats = stats_of(channel)
        assert stats["queue_length"] == 0 and stats["summary_awaiting_rewrite"] == 0
        assert len(api.requests) == 2  # the later read joined the call, it did not pay for another

    def test_a_late_call_in_flight_at_shutdown_is_abandoned_and_the_originals_rewritten_after_restart(
        self, api, monkeypatch, tmp_path
    ):
        """Shutdown does not wait for the late call; the kept originals are rewritten by the next start."""
        gate = threading.Event()
        api.script(Held(gate, Reply("<fact>This reply comes after shutdown.</fact>")))

        def disk() -> Backend:
            return open_backend("disk", data_dir=tmp_path / "data")

        with (
            claude_server(api, monkeypatch, disk(), fold_delay=0) as server,
            channel_to(server) as channel,
        ):
            store_five(channel)
            wait_for(lambda: stats_of(channel)["summary_awaiting_rewrite"] == 2, "the offline fold")
        try:
            with (
                claude_server(api, monkeypatch, disk(), fold_delay=0) as server,
                channel_to(server) as channel,
            ):
                kept = stats_of(channel)  # stats do not fold: the summary as it was at shutdown
                assert (
                    kept["summary_awaiting_rewrite"] == 2
                    and kept["summary_offline_only_utterances"] == 2
                )
                # Only queues are looked for at startup: the first read hands the originals to the worker.
                ask(channel, "Get summary", {"conversation_id": "c"})
                wait_for(lambda: stats_of(channel)["summary_awaiting_rewrite"] == 0, "the rewrite")
                answer = ask(channel, "Get summary", {"conversation_id": "c"})
                stats = stats_of(channel)
        finally:
            gate.set()
        assert (
            answer.result["summary"] == RENDERED
            and "summary_fallback_segments" not in answer.metadata
        )
        assert stats["summary_late_results"] == {
            "applied": 0,
            "dropped": 0,
            "failed": 0,
            "in_flight": 0,
        }
