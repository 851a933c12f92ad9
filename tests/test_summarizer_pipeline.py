"""The summarization pipeline seen from outside: queries, gRPC and the `chd` command."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest

from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from chd.core.summaries.extractive import ExtractiveSummarizer
from chd.core.summaries.writer import SummaryWriter
from chd.core.tokens import default_counter
from chd.service.server import build_server
from chd.v1 import daemon_pb2_grpc
from tests.conftest import DaemonProcess, query, run_chd
from tests.talk import fact

COUNTER = default_counter()
SCENARIO = [
    ("user", "What's the weather?"),
    ("assistant", "I'll check the weather. It is 18 degrees and cloudy in Berlin."),
    ("user", "How about tomorrow?"),
    ("assistant", "Tomorrow will be sunny with a high of 24 degrees."),
    ("user", "Great. Remind me to pack sunglasses for the Spree boat tour."),
]


def fill(
    history: ConversationHistory, count: int, conversation: str = "default", first: int = 0
) -> None:
    """Store ``count`` distinct utterances, user and assistant alternating."""
    for i in range(first, first + count):
        speaker = "user" if i % 2 == 0 else "assistant"
        history.query(f"Add {speaker} utterance: {fact(i)}", {"conversation_id": conversation})


@pytest.fixture
def small() -> Iterator[ConversationHistory]:
    """Buffer of 4, evicting 2 at a time, so a few stores exercise the summary."""
    history = ConversationHistory(settings=Settings(buffer_size=4, eviction_batch=2))
    yield history
    history.close()


@pytest.fixture
def folding_on_store() -> Iterator[ConversationHistory]:
    """Like ``small`` but folding on every store, so segment boundaries are deterministic."""
    history = ConversationHistory(
        settings=Settings(buffer_size=4, eviction_batch=2), background=False
    )
    yield history
    history.close()


@pytest.fixture
def archived() -> Iterator[ConversationHistory]:
    history = ConversationHistory(
        settings=Settings(buffer_size=4, eviction_batch=2, archive_evicted=True), background=False
    )
    yield history
    history.close()


class TestSpecScenario:
    """The spec's example: the 21st utterance evicts 1–5 and the summary covers them."""

    def test_the_21st_utterance_evicts_1_to_5_and_the_summary_covers_them(self, history):
        for i in range(20):
            speaker, text = (
                SCENARIO[i]
                if i < len(SCENARIO)
                else ("user" if i % 2 == 0 else "assistant", f"Filler message number {i}.")
            )
            history.query(f"Add {speaker} utterance: {text}")
        answer = history.query("Add user utterance: Tell me about Paris")
        assert answer.result["evicted"] == [1, 2, 3, 4, 5]
        summary = history.get_summary()
        assert summary["summary_through_seq"] == 5 and summary["summary_pending"] == 0
        assert "weather" in summary["summary"] and "24 degrees" in summary["summary"]
        assert [u["seq"] for u in history.get_last_n(5)] == [17, 18, 19, 20, 21]


class TestCoverage:
    """Every response carrying the summary says what it covers."""

    def test_store_says_how_many_evicted_utterances_are_queued(self, small):
        small.worker.stop()
        fill(small, 6)
        answer = small.query("Add utterance: one more")
        assert answer.result["evicted"] == [3, 4]
        assert answer.metadata["summary_pending"] == 4

    @pytest.mark.parametrize(
        "text, data",
        [
            ("Get summary", {}),
            ("Get the last 2 utterances with summary", {}),
            ("Summarize conversation", {}),
            ("Get context within 500 tokens", {}),
            ("", {"operation": "retrieve", "context": True, "token_limit": 300}),
        ],
    )
    def test_summary_responses_carry_through_seq_pending_and_summarizer(self, small, text, data):
        fill(small, 9)
        answer = small.query(text, {}, data)
        assert answer.metadata["summary_through_seq"] == 6
        assert answer.metadata["summary_pending"] == 0
        assert answer.metadata["summarizer"] == "extractive"

    def test_the_stored_summary_never_exceeds_the_token_limit(self):
        history = ConversationHistory(
            settings=Settings(buffer_size=3, eviction_batch=1, summary_token_limit=60),
            background=False,
        )
        for i in range(40):
            history.query(
                f"Add utterance: Point {i}: the {i}th supplier in {chr(65 + i % 26)}ville charges {i * 13} dollars."
            )
            summary = history.backend.read("default").summary
            assert summary.tokens <= 60 and COUNTER.count(summary.text) <= 60
        history.close()

    @pytest.mark.parametrize("limit", [1, 5, 17, 64, 300])
    def test_summarize_with_a_token_limit_never_exceeds_it(self, small, limit):
        fill(small, 15)
        answer = small.query("Summarize conversation", {}, {"token_limit": limit})
        assert answer.result["tokens"] <= limit and COUNTER.count(answer.result["summary"]) <= limit
        assert answer.result["token_limit"] == limit


class TestContext:
    """'Get context within N tokens': the summary, then the newest utterances that fit, in order."""

    def test_context_is_the_summary_then_the_newest_utterances_in_order(self, small):
        fill(small, 10)
        answer = small.query("Get context within 2000 tokens")
        context = answer.result["context"]
        assert context.startswith(
            "Summary of the earlier conversation:\n" + answer.result["summary"]
        )
        assert [u["seq"] for u in answer.result["utterances"]] == [7, 8, 9, 10]
        assert context.index(fact(6)) < context.index(fact(9))
        assert answer.result["tokens"] == COUNTER.count(context) == answer.metadata["tokens_used"]

    def test_a_tight_budget_keeps_only_the_newest_utterances_that_fit(self, small):
        fill(small, 10)
        full = small.query("Get context within 2000 tokens").result
        budget = COUNTER.count(full["context"]) - 10
        answer = small.query(f"Get context within {budget} tokens").result
        assert answer["tokens"] <= budget
        seqs = [u["seq"] for u in answer["utterances"]]
        assert seqs and seqs == list(range(11 - len(seqs), 11)) and len(seqs) < 4

    def test_a_budget_smaller_than_the_summary_cuts_the_summary(self, small):
        fill(small, 12)
        answer = small.query("Get context within 20 tokens").result
        assert answer["tokens"] <= 20 and answer["utterances"] == []

    @pytest.mark.parametrize(
        "text",
        [
            "Get context within 300 tokens, please",
            "Could you get the context within 300 tokens? Thanks",
        ],
    )
    def test_polite_endings_do_not_hide_a_context_request(self, small, text):
        fill(small, 7)
        answer = small.query(text)
        assert "context" in answer.result and answer.result["token_limit"] == 300

    def test_context_of_an_empty_conversation_is_empty(self, small):
        answer = small.query("Get context").result
        assert answer["context"] == "" and answer["tokens"] == 0

    def test_a_token_limit_outside_a_context_retrieve_is_refused(self, small):
        from chd.core.errors import InvalidRequest

        with pytest.raises(InvalidRequest, match="token_limit applies to a context retrieve"):
            small.query("Get all utterances", {}, {"token_limit": 100})

    def test_context_with_a_filter_is_refused(self, small):
        from chd.core.errors import InvalidRequest

        with pytest.raises(InvalidRequest, match="context retrieve takes only token_limit"):
            small.query("Get context", {}, {"topic": "coins"})

    def test_context_over_grpc(self, small):
        fill(small, 7)
        server = build_server(small, "127.0.0.1", 0)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                answer = query(daemon_pb2_grpc.DaemonStub(channel), "Get context within 300 tokens")
            assert answer.operation == "retrieve"
            assert answer.result["tokens"] <= 300
            assert answer.metadata["summary_through_seq"] == 4
        finally:
            server.stop(grace=1)

    def test_a_bad_token_limit_is_invalid_argument_over_grpc(self, stub):
        with pytest.raises(grpc.RpcError) as error:
            query(stub, "Get all utterances", data={"token_limit": 10})
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


class TestForgettingReallyForgets:
    """A remove of summarized content drops or rebuilds the summary segments holding it."""

    def test_remove_before_turn_drops_the_segments_of_those_turns(self, folding_on_store):
        fill(folding_on_store, 30)
        folding_on_store.query("Get summary")
        segments = folding_on_store.backend.read("default").summary.segments
        assert len(segments) >= 2
        cut = segments[1].turn_from
        answer = folding_on_store.query(f"Remove before turn {cut}")
        assert answer.result["summary_segments_dropped"] >= 1
        after = folding_on_store.backend.read("default").summary
        assert all(s.turn_from >= cut for s in after.segments)
        assert fact(0) not in after.text

    def test_without_an_archive_a_segment_mixing_kept_turns_is_dropped_too(self, folding_on_store):
        fill(folding_on_store, 30)
        folding_on_store.query("Get summary")
        first = folding_on_store.backend.read("default").summary.segments[0]
        middle = (first.turn_from + first.turn_to) // 2 + 1
        answer = folding_on_store.query(f"Remove before turn {middle}")
        assert answer.result["summary_segments_dropped"] >= 1
        assert answer.result["summary_segments_rebuilt"] == 0
        assert all(
            s.seq_from > first.seq_to
            for s in folding_on_store.backend.read("default").summary.segments
        )

    def test_remove_the_last_turns_with_an_empty_buffer_removes_nothing(self, archived):
        fill(archived, 8)
        archived.query("Remove the newest 4 utterances")  # the buffer is now empty
        before = archived.backend.read("default")
        assert not before.utterances and before.archive and before.summary.segments
        answer = archived.query("Remove the last 2 turns")
        assert answer.result["removed"] == [] and answer.result["summary_segments_dropped"] == 0
        after = archived.backend.read("default")
        assert after.archive == before.archive and after.summary == before.summary

    def test_a_singular_remove_counts_archived_matches_and_refuses_many(self, archived):
        from chd.core.errors import InvalidRequest

        fill(archived, 10)  # assistant: seqs 2, 4, 6 archived, 8 and 10 in the buffer
        archived.query("Remove utterance 10")
        before = archived.backend.read("default")
        with pytest.raises(InvalidRequest, match="matches 4 utterances"):
            archived.query("Remove the assistant's message")
        assert archived.backend.read("default") == before

    def test_a_singular_remove_forgets_only_the_utterance_it_chose(self, folding_on_store):
        fill(folding_on_store, 10)  # seqs 1-6 summarized, no archive
        folding_on_store.query("Remove utterance 10")
        before = folding_on_store.backend.read("default").summary
        answer = folding_on_store.query("Remove the assistant's message")
        assert answer.result["removed"] == [8] and answer.result["summary_segments_dropped"] == 0
        assert folding_on_store.backend.read("default").summary == before

    def test_with_an_archive_a_mixed_segment_is_rebuilt_from_what_remains(self, archived):
        fill(archived, 30)
        archived.query("Get summary")
        first = archived.backend.read("default").summary.segments[0]
        assert first.turn_from < first.turn_to
        middle = first.turn_from + 1
        answer = archived.query(f"Remove before turn {middle}")
        assert answer.result["summary_segments_rebuilt"] == 1
        state = archived.backend.read("default")
        rebuilt = state.summary.segments[0]
        assert rebuilt.turn_from >= middle
        assert all(u.turn_number >= middle for u in state.archive)
        removed = [fact(i) for i in range(30) if i // 2 + 1 < middle]  # fill: 2 utterances a turn
        assert removed and not any(text in state.summary.text for text in removed)

    def test_removing_a_summarized_utterance_drops_its_segment(self, folding_on_store):
        fill(folding_on_store, 12)
        folding_on_store.query("Get summary")
        answer = folding_on_store.query("Remove utterance 1")
        assert answer.result["removed"] == []
        assert answer.result["summary_segments_dropped"] == 1
        assert all(
            s.seq_from > 1 for s in folding_on_store.backend.read("default").summary.segments
        )

    def test_removing_an_utterance_that_never_existed_is_not_found(self, folding_on_store):
        from chd.core.errors import NotFound

        fill(folding_on_store, 3)
        with pytest.raises(NotFound):
            folding_on_store.query("Remove utterance 99")

    def test_clear_forgets_the_summary_the_queue_and_the_archive(self, archived):
        fill(archived, 12)
        archived.query("Get summary")
        answer = archived.query("Clear the conversation")
        assert answer.result["summary_segments_dropped"] >= 1
        state = archived.backend.read("default")
        assert (
            not state.summary.segments
            and not state.pending
            and not state.archive
            and not state.utterances
        )

    def test_a_remove_racing_a_fold_is_not_undone_by_its_summary(self, gated):
        """The summarizer is busy with utterances 1-2 while they are removed: they must not come back."""
        history, gate = gated
        history.query("Remove before turn 2")
        gate.release.set()
        assert history.worker.idle(5)
        summary = history.query("Get summary")
        assert "GATE" not in summary.result["summary"]
        assert fact(0) not in summary.result["summary"]
        assert summary.metadata["summary_pending"] == 0


class _Gate:
    """A summarizer that holds every call until released, and marks its text."""

    name = "gate"

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def summarize(self, previous, utterances, token_limit):
        self.entered.set()
        self.release.wait(5)
        return "GATE " + " ".join(u.text for u in utterances)


@pytest.fixture
def gated() -> Iterator[tuple[ConversationHistory, _Gate]]:
    """Five stores; the worker is inside the summarizer with utterances 1-2."""
    gate = _Gate()
    history = ConversationHistory(
        settings=Settings(buffer_size=4, eviction_batch=2),
        writer=SummaryWriter(gate, COUNTER, ExtractiveSummarizer(COUNTER)),
    )
    fill(history, 5)
    assert gate.entered.wait(5)
    yield history, gate
    gate.release.set()
    history.close()


class TestStatsCoverage:
    """Stats say how much of what left the buffer the summary still holds."""

    def test_stats_report_the_share_of_evicted_utterances_the_summary_covers(self):
        """A roomy budget covers every evicted utterance; a tight one fewer, and says so."""
        shares = []
        for limit in (2048, 24):
            history = ConversationHistory(
                settings=Settings(buffer_size=4, eviction_batch=2, summary_token_limit=limit),
                background=False,
            )
            try:
                fill(history, 40)
                stats = history.query("stats").result
            finally:
                history.close()
            assert (
                stats["summary_offline_only_utterances"] == 0
                and stats["summary_awaiting_rewrite"] == 0
            )
            shares.append(stats["summary_coverage"])
        assert shares[0] == 1.0 and 0 < shares[1] < 0.9


class TestReadsDoNotWaitForASlowModel:
    """A read that must fold waits for a busy model only so long, then folds offline."""

    def test_get_summary_gives_the_queue_verbatim_when_the_worker_is_stuck_on_the_model(
        self, gated, monkeypatch
    ):
        """A read that cannot wait commits no offline fold: the model's result lands later."""
        import chd.core.history

        monkeypatch.setattr(chd.core.history, "READ_WAIT", 0.2)
        history, gate = gated
        answer = history.query("Get summary")
        assert answer.metadata["summary_pending"] == 2
        assert answer.metadata["summary_pending_verbatim"] == 2
        assert "still busy with this conversation" in answer.metadata["fold_error"]
        assert fact(0) in answer.result["summary"] and fact(1) in answer.result["summary"]
        gate.release.set()
        assert history.worker.idle(5)
        after = history.query("Get summary")
        assert "GATE" in after.result["summary"]  # the model's fold committed
        assert after.metadata["summary_through_seq"] == 2
        assert "summary_pending_verbatim" not in after.metadata


class TestArchive:
    """archive_evicted keeps folded utterances cold, searchable and exportable."""

    def test_archived_utterances_are_listed_in_order(self, archived):
        fill(archived, 10)
        archived.query("Get summary")
        answer = archived.query("Get archived utterances")
        assert [u["seq"] for u in answer.result["utterances"]] == [1, 2, 3, 4, 5, 6]
        assert answer.metadata["archive_evicted"] is True
        assert "utterance_index" not in answer.result["utterances"][0]

    def test_the_archive_is_searchable(self, archived):
        fill(archived, 10)
        archived.query("Get summary")
        answer = archived.query("Find archived utterances about Oslo")
        assert [u["seq"] for u in answer.result["utterances"]] == [4]

    @pytest.mark.parametrize(
        ("text", "seqs"),
        [
            ("Get archived utterances in turns 1 to 2", [1, 2, 3, 4]),
            ("Get the last 2 archived utterances", [5, 6]),
            ("Find archived utterances from the assistant", [2, 4, 6]),
            ("Search the archive for Oslo", [4]),
        ],
    )
    def test_archive_phrasings_with_other_filters_read_the_archive_not_the_buffer(
        self, archived, text, seqs
    ):
        fill(archived, 10)  # seqs 1-6 (turns 1-3) archived, 7-10 in the buffer
        archived.query("Get summary")
        answer = archived.query(text)
        assert [u["seq"] for u in answer.result["utterances"]] == seqs
        assert all(u["archived"] for u in answer.result["utterances"])

    def test_without_archive_evicted_the_archive_is_empty_and_says_why(self, small):
        fill(small, 10)
        small.query("Get summary")
        answer = small.query("Get archived utterances")
        assert answer.result["utterances"] == [] and answer.metadata["archive_evicted"] is False

    def test_with_summarization_off_evicted_utterances_go_straight_to_the_archive(self):
        history = ConversationHistory(
            settings=Settings(
                buffer_size=4, eviction_batch=2, archive_evicted=True, summarization_enabled=False
            )
        )
        fill(history, 6)
        state = history.backend.read("default")
        assert [u.seq for u in state.archive] == [1, 2] and not state.pending
        history.close()

    def test_with_summarization_off_a_lowered_buffer_size_archives_what_it_evicts(self):
        history = ConversationHistory(
            settings=Settings(
                buffer_size=4, eviction_batch=2, archive_evicted=True, summarization_enabled=False
            )
        )
        fill(history, 6)
        configured = history.query("Set the buffer size to 1")
        assert configured.result["evicted"] == [3, 4, 5]
        answer = history.query("Get archived utterances")
        assert [u["seq"] for u in answer.result["utterances"]] == [1, 2, 3, 4, 5]
        history.close()


class TestServeFlags:
    """`chd serve` flags and CHD_* variables of the pipeline."""

    def test_archive_and_summary_limit_flags_reach_the_daemon(self, monkeypatch):
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        monkeypatch.setenv("CHD_ARCHIVE_EVICTED", "true")
        daemon = DaemonProcess(
            "--buffer-size", "4", "--eviction-batch", "2", "--summary-token-limit", "40"
        )
        try:
            for i in range(12):
                assert (
                    run_chd(
                        "query",
                        "--target",
                        daemon.target,
                        f"Add utterance: Fact {i}: hall {i} has {i} doors.",
                    ).returncode
                    == 0
                )
            summary = run_chd("query", "--json", "--target", daemon.target, "Get summary")
            archive = run_chd(
                "query", "--json", "--target", daemon.target, "Get archived utterances"
            )
        finally:
            daemon.kill()
        import json

        summary_answer, archive_answer = json.loads(summary.stdout), json.loads(archive.stdout)
        assert summary_answer["result"]["summary_tokens"] <= 40
        assert summary_answer["metadata"]["summarizer"] == "extractive"
        assert [u["seq"] for u in archive_answer["result"]["utterances"]] == list(range(1, 9))

    def test_the_claude_summarizer_without_a_key_is_refused_at_start(self, monkeypatch):
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        result = run_chd("serve", "--port", "0", "--summarizer", "claude")
        assert result.returncode == 2
        assert "ANTHROPIC_API_KEY" in result.stderr

    def test_a_bad_summarizer_variable_is_refused_at_start(self, monkeypatch):
        monkeypatch.setenv("CHD_SUMMARIZER", "gpt")
        result = run_chd("serve", "--port", "0")
        assert result.returncode == 2 and "auto, claude, offline" in result.stderr

    def test_a_bad_timeout_is_a_usage_error(self):
        result = run_chd("serve", "--port", "0", "--summarizer-timeout", "soon")
        assert result.returncode == 2 and "number of seconds" in result.stderr

    def test_chd_query_prints_the_context_as_it_would_be_pasted(self, monkeypatch):
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        daemon = DaemonProcess("--buffer-size", "4", "--eviction-batch", "2")
        try:
            for i in range(6):
                run_chd("query", "--target", daemon.target, f"Add utterance: {fact(i)}")
            shown = run_chd("query", "--target", daemon.target, "Get context within 200 tokens")
        finally:
            daemon.kill()
        assert shown.returncode == 0
        lines = shown.stdout.splitlines()
        assert lines[1].startswith("context (") and lines[1].endswith(" of 200 tokens):")
        assert lines[2] == "  Summary of the earlier conversation:"
        assert f"  [turn 6] user: {fact(5)}" in lines


class TestPersistedMarks:
    """Kept originals, fallback marks and coverage keys survive the disk backend and export/import."""

    @staticmethod
    def _state_with_marks():  # type: ignore[no-untyped-def]
        from chd.core.utterance import Summary, SummarySegment, Utterance

        held = tuple(
            Utterance("c", seq, "user", fact(seq), seq, "2026-01-01T00:00:00.000000Z", 12)
            for seq in (3, 4)
        )
        summary = Summary(
            segments=(
                SummarySegment(
                    "Turns 1–2: Ada; 42 euros", 9, 1, 2, 1, 2, "claude:m", "", ("Ada", "42 euros")
                ),
                SummarySegment(
                    "Turns 3–4: Bruno",
                    5,
                    3,
                    4,
                    3,
                    4,
                    "extractive",
                    "claude:m failed: HTTP 500",
                    ("Bruno", ""),
                ),
            ),
            through_seq=4,
            tokens=15,
            held=held,
            held_dropped=2,
            held_dropped_through=1,
        )
        return held, summary

    def test_the_disk_backend_keeps_originals_marks_and_keys(self, tmp_path):
        """A summary written to disk reads back field for field after a restart."""
        from chd.backends.base import Change
        from chd.backends.disk import DiskBackend

        _, summary = self._state_with_marks()
        backend = DiskBackend(tmp_path)
        backend.transact(
            "c", lambda state: (Change(summary=summary, next_seq=5, last_turn=4), None)
        )
        backend.close()
        reopened = DiskBackend(tmp_path)
        try:
            assert reopened.read("c").summary == summary
        finally:
            reopened.close()

    def test_export_and_import_keep_originals_marks_and_keys(self):
        """The JSONL export carries them and an import restores them; an old export still loads."""
        import json

        from chd.backends.base import Change
        from chd.backends.memory import MemoryBackend
        from chd.core.transfer import export_lines, import_states, parse_lines

        _, summary = self._state_with_marks()
        source = MemoryBackend()
        source.transact("c", lambda state: (Change(summary=summary, next_seq=5, last_turn=4), None))
        lines = list(export_lines(source, ["c"]))
        target = MemoryBackend()
        import_states(target, parse_lines(lines))
        assert target.read("c").summary == summary
        header = json.loads(lines[0])
        for key in ("held", "held_dropped", "held_dropped_through"):
            del header["summary"][key]
        for segment in header["summary"]["segments"]:
            segment.pop("keys", None)
        (old,) = parse_lines([json.dumps(header), *lines[1:]])
        assert old.summary.held == () and old.summary.segments[1].error == summary.segments[1].error


class TestBufferContext:
    """A summarizer sees the newest buffered utterances as context, bounded in tokens, never the whole buffer."""

    def _utterances(self, count: int, tokens: int) -> list:
        from chd.core.utterance import Utterance

        return [
            Utterance("c", seq, "user", f"line {seq}", seq, "2026-01-01T00:00:00Z", tokens)
            for seq in range(1, count + 1)
        ]

    def test_the_context_is_the_newest_utterances_within_the_bound(self) -> None:
        """10,000 buffered utterances of 10 tokens give the newest 200 (2,000 tokens), in order."""
        from chd.core.summaries.folding import CONTEXT_BUFFER_TOKENS, newest_context

        buffered = self._utterances(10_000, 10)
        context = newest_context(buffered)
        assert [u.seq for u in context] == list(
            range(10_000 - CONTEXT_BUFFER_TOKENS // 10 + 1, 10_001)
        )

    def test_a_small_buffer_is_given_whole_and_one_huge_utterance_still_counts(self) -> None:
        """Under the bound everything is context; a single utterance over it is still given."""
        from chd.core.summaries.folding import newest_context

        assert [u.seq for u in newest_context(self._utterances(5, 10))] == [1, 2, 3, 4, 5]
        assert [u.seq for u in newest_context(self._utterances(3, 5_000))] == [3]
        assert newest_context([]) == ()

    def test_a_fold_with_a_large_buffer_passes_the_bounded_context(self) -> None:
        """Through the real fold path: the summarizer is handed at most the bound of buffered tokens."""
        from chd.core.summaries.folding import CONTEXT_BUFFER_TOKENS

        seen: list[int] = []

        class Recording(ExtractiveSummarizer):
            def summarize(self, previous, utterances, token_limit, context=None):  # type: ignore[no-untyped-def]
                if context is not None:
                    seen.append(sum(u.tokens for u in context.buffered))
                return super().summarize(previous, utterances, token_limit, context)

        history = ConversationHistory(
            settings=Settings(buffer_size=100_000, max_tokens=30_000), background=False
        )
        history.writer.primary = Recording(default_counter())
        try:
            for i in range(4_000):
                history.query(f"Add utterance: Item {i} of the long list costs {i} euros.")
        finally:
            history.close()
        assert seen, "no fold ran"
        assert max(seen) <= CONTEXT_BUFFER_TOKENS
