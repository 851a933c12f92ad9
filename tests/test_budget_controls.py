"""The budget manager's and frontal cortex's controls: per-conversation limits, importance, stats."""

from __future__ import annotations

import grpc
import pytest

from chd.backends.memory import MemoryBackend
from chd.core.errors import InvalidRequest, NotFound, TooLarge
from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from chd.v1 import daemon_pb2_grpc
from tests.conftest import query
from tests.demo_conversation import seed_demo


def _seqs(history: ConversationHistory, cid: str = "default") -> list[int]:
    return [u.seq for u in history.backend.read(cid).utterances]


def _store(history: ConversationHistory, count: int, cid: str = "default", start: int = 1) -> None:
    for i in range(start, start + count):
        history.query(
            f"Add utterance: message number {i} about topic {i}", {"conversation_id": cid}
        )


class TestConfigure:
    """Limits are set per conversation, kept in the backend, and applied at once."""

    def test_setting_the_token_budget_changes_only_this_conversation(self) -> None:
        """'Set the token budget to 4000' in one conversation leaves the other on the defaults."""
        history = ConversationHistory(background=False)
        history.query("Set the token budget to 4000", {"conversation_id": "a"})
        a = history.query("Show the settings", {"conversation_id": "a"}).result["settings"]
        b = history.query("Show the settings", {"conversation_id": "b"}).result["settings"]
        assert a["max_tokens"] == 4000 and b["max_tokens"] == 8000

    def test_reading_the_settings_changes_nothing(self) -> None:
        """A configure with nothing to set writes nothing."""
        history = ConversationHistory(background=False)
        history.query("What is the buffer size?")
        assert history.backend.conversations() == []

    def test_lowering_the_buffer_size_evicts_into_the_summary_at_once(self) -> None:
        """The oldest utterances leave in the same query and reach the summary."""
        history = ConversationHistory(background=False)
        _store(history, 8)
        result = history.query("Set the buffer size to 3").result
        assert result["evicted"] == [1, 2, 3, 4, 5]
        state = history.backend.read("default")
        assert _seqs(history) == [6, 7, 8]
        assert state.summary.through_seq == 5 and state.pending == []
        assert "message number 1" in state.summary.text or state.summary.tokens > 0

    def test_lowering_max_tokens_evicts_until_the_buffer_fits(self) -> None:
        """The buffer's tokens end at or under the new budget."""
        history = ConversationHistory(background=False)
        _store(history, 6)
        history.query("Set max tokens to 25")
        assert sum(u.tokens for u in history.backend.read("default").utterances) <= 25

    def test_raising_a_limit_evicts_nothing(self) -> None:
        """A larger buffer keeps everything."""
        history = ConversationHistory(background=False)
        _store(history, 4)
        assert history.query("Set the buffer size to 100").result["evicted"] == []
        assert _seqs(history) == [1, 2, 3, 4]

    def test_stores_evict_by_the_conversations_buffer_size(self) -> None:
        """After 'buffer size 4', the fifth store evicts (the daemon default is 20)."""
        history = ConversationHistory(background=False, settings=Settings(eviction_batch=1))
        history.query("Set the buffer size to 4")
        _store(history, 5)
        assert _seqs(history) == [2, 3, 4, 5]

    def test_an_utterance_over_the_conversations_token_budget_is_refused(self) -> None:
        """RESOURCE_EXHAUSTED, and nothing is stored."""
        history = ConversationHistory(background=False)
        history.query("Set the token budget to 5")
        with pytest.raises(TooLarge):
            history.query("Add utterance: " + "many words " * 10)
        assert _seqs(history) == []

    def test_lowering_the_summary_limit_shortens_the_summary(self) -> None:
        """A summary over the new limit is re-summarized under it."""
        history = ConversationHistory(
            background=False, settings=Settings(buffer_size=2, eviction_batch=1)
        )
        for i in range(12):
            history.query(
                f"Add utterance: Fact {i}: the {i}th city we visit is number {i * 7} on the list."
            )
        assert history.backend.read("default").summary.tokens > 15
        result = history.query("Set the summary token limit to 15").result
        assert result["summary_shortened"] is True
        assert 0 < history.backend.read("default").summary.tokens <= 15

    def test_later_folds_respect_the_conversations_summary_limit(self) -> None:
        """The summary stays under the conversation's own limit as more is evicted."""
        history = ConversationHistory(
            background=False, settings=Settings(buffer_size=2, eviction_batch=1)
        )
        history.query("Set the summary token limit to 25")
        for i in range(10):
            history.query(f"Add utterance: Fact {i}: we decided to visit city {i} on day {i}.")
        assert 0 < history.backend.read("default").summary.tokens <= 25

    def test_reset_restores_the_daemon_defaults(self) -> None:
        """'Reset the settings' drops the conversation's overrides."""
        history = ConversationHistory(background=False)
        history.query("Set buffer size to 50 and the summary token limit to 300")
        result = history.query("Reset the settings").result
        assert result["overrides"] == {} and result["settings"]["buffer_size"] == 20

    def test_settings_live_in_the_backend_across_daemons(self) -> None:
        """A new daemon on the same backend applies the conversation's limits."""
        backend = MemoryBackend()
        ConversationHistory(backend).query("Set the buffer size to 7")
        assert (
            ConversationHistory(backend)
            .query("Show the settings")
            .result["settings"]["buffer_size"]
            == 7
        )

    def test_data_operation_configure_checks_each_value(self) -> None:
        """Bad values are refused naming the field, and nothing changes."""
        history = ConversationHistory(background=False)
        with pytest.raises(InvalidRequest, match="data.buffer_size"):
            history.query("", {}, {"operation": "configure", "buffer_size": 0})
        with pytest.raises(InvalidRequest, match="data.eviction_policy"):
            history.query("", {}, {"operation": "configure", "eviction_policy": "random"})
        assert history.backend.conversations() == []

    def test_a_lowered_limit_folds_like_a_waiting_read_not_like_the_patient_worker(self) -> None:
        """With the model down, the configure tries it once and falls back, no retries or backoff sleeps."""
        from chd.core.summaries.extractive import ExtractiveSummarizer
        from chd.core.summaries.writer import SummaryWriter
        from chd.core.tokens import default_counter
        from tests.ops_support import DownSummarizer

        down, slept = DownSummarizer(), []
        counter = default_counter()
        writer = SummaryWriter(
            down, counter, ExtractiveSummarizer(counter), attempts=3, sleep=slept.append
        )
        history = ConversationHistory(settings=Settings(buffer_size=10), writer=writer)
        _store(history, 6)
        answer = history.query("Set the buffer size to 2")
        assert answer.result["evicted"] == [1, 2, 3, 4]
        assert down.calls == 1 and slept == []
        # No offline fold is committed while the configured model is down
        # (issue 13): the batch stays queued for the worker, which keeps its
        # originals for a rewrite if it has to fall back.
        state = history.backend.read("default")
        assert [u.seq for u in state.pending] == [1, 2, 3, 4] and state.summary.through_seq == 0
        history.close()


class TestFifoDefault:
    """FIFO stays the default, with the spec's batch eviction."""

    def test_the_21st_utterance_evicts_1_to_5(self) -> None:
        """The spec's example scenario, step 8."""
        history = ConversationHistory(background=False)
        _store(history, 21)
        assert _seqs(history) == list(range(6, 22))
        assert history.backend.read("default").summary.through_seq == 5


class TestImportancePolicy:
    """Important utterances are evicted last under 'importance'; FIFO ignores the flag."""

    def _history(self, policy: str) -> ConversationHistory:
        history = ConversationHistory(
            background=False,
            settings=Settings(buffer_size=4, eviction_batch=1, eviction_policy=policy),
        )
        _store(history, 4)
        history.query("Mark utterance 1 as important")
        return history

    def test_fifo_evicts_the_oldest_even_if_important(self) -> None:
        """The default policy is FIFO: utterance 1 leaves first."""
        history = self._history("fifo")
        _store(history, 1, start=5)
        assert _seqs(history) == [2, 3, 4, 5]

    def test_importance_evicts_unimportant_utterances_first(self) -> None:
        """Utterance 1 stays; the oldest unimportant ones leave."""
        history = self._history("importance")
        _store(history, 2, start=5)
        assert _seqs(history) == [1, 4, 5, 6]

    @staticmethod
    def _marked(buffer_size: int, batch: int, marked: tuple[int, ...]) -> ConversationHistory:
        """A full buffer of ``buffer_size`` under importance, with ``marked`` important; one more stored."""
        history = ConversationHistory(
            settings=Settings(
                buffer_size=buffer_size, eviction_batch=batch, eviction_policy="importance"
            )
        )
        _store(history, buffer_size)
        for seq in marked:
            history.query(f"Mark utterance {seq} as important")
        _store(history, 1, start=buffer_size + 1)
        return history

    def test_importance_evicts_important_ones_when_nothing_else_is_left(self) -> None:
        """With every utterance important, the oldest important one leaves."""
        assert _seqs(self._marked(2, 1, (1, 2))) == [2, 3]

    def test_eviction_batch_is_not_topped_up_with_important_utterances(self) -> None:
        """A batch of 3 takes only what must go plus unimportant ones."""
        assert _seqs(self._marked(3, 3, (2, 3))) == [2, 3, 4]

    def test_a_conversation_can_switch_to_importance(self) -> None:
        """'Use the importance eviction policy' applies to this conversation's next evictions."""
        history = ConversationHistory(
            background=False, settings=Settings(buffer_size=3, eviction_batch=1)
        )
        _store(history, 3)
        history.query("Mark utterance 1 as important")
        history.query("Use the importance eviction policy")
        _store(history, 1, start=4)
        assert _seqs(history) == [1, 3, 4]

    def test_lowering_the_buffer_keeps_important_utterances_under_importance(self) -> None:
        """Configure evicts by the policy too."""
        history = self._history("importance")
        history.query("Set the buffer size to 2")
        assert _seqs(history) == [1, 4]


class TestMarking:
    """Mark and unmark set the flag on the stored utterance."""

    def test_mark_then_unmark_round_trips(self) -> None:
        """The flag is visible in retrieves and can be cleared again."""
        history = ConversationHistory(background=False)
        seed_demo(history)
        history.query("Mark utterance 3 as important")
        assert history.query("Get utterance 3").result["utterances"][0]["important"] is True
        history.query("Unmark utterance 3")
        assert history.query("Get utterance 3").result["utterances"][0]["important"] is False

    def test_marking_twice_reports_no_change(self) -> None:
        """The second mark changes nothing and says so."""
        history = ConversationHistory(background=False)
        seed_demo(history)
        history.query("Mark utterance 3 as important")
        outcome = history.query("Mark utterance 3 as important")
        assert outcome.result["changed"] is False and outcome.metadata["items_affected"] == 0

    def test_marking_an_evicted_utterance_is_not_found(self) -> None:
        """Only buffered utterances can be marked; the message says where it went."""
        history = ConversationHistory(
            background=False, settings=Settings(buffer_size=2, eviction_batch=1)
        )
        _store(history, 3)
        with pytest.raises(NotFound, match="evicted"):
            history.query("Mark utterance 1 as important")


class TestStats:
    """Stats report what the conversation holds."""

    def test_stats_count_buffer_summary_and_queue(self) -> None:
        """After evictions the summary and the counts agree with the state."""
        history = ConversationHistory(
            background=False, settings=Settings(buffer_size=4, eviction_batch=2)
        )
        _store(history, 6)
        history.query("Mark utterance 6 as important")
        stats = history.query("stats").result
        state = history.backend.read("default")
        assert stats["utterance_count"] == 4 == len(state.utterances)
        assert stats["important_count"] == 1
        assert stats["tokens"] == sum(u.tokens for u in state.utterances)
        assert stats["summary_tokens"] == state.summary.tokens > 0
        assert stats["queue_length"] == 0 and stats["next_seq"] == 7
        assert stats["oldest_seq"] == 3 and stats["newest_seq"] == 6
        assert stats["buffer_fill"] == 1.0


class TestThroughGrpc:
    """The new operations over the real server."""

    def test_configure_mark_and_stats_over_grpc(self, stub: daemon_pb2_grpc.DaemonStub) -> None:
        """Each answers with its operation name and a Struct result."""
        for i in range(3):
            query(stub, f"Add utterance: hello {i}")
        configured = query(stub, "", data={"operation": "configure", "max_tokens": 3000})
        assert (
            configured.operation == "configure"
            and configured.result["settings"]["max_tokens"] == 3000
        )
        marked = query(stub, "Mark utterance 2 as important")
        assert marked.operation == "mark" and marked.result["utterance"]["important"] is True
        stats = query(stub, "How many utterances are stored?")
        assert stats.operation == "stats" and stats.result["utterance_count"] == 3
        assert stats.metadata["confidence"] == 1.0

    def test_refusals_over_grpc_are_invalid_argument_with_closest_forms(
        self, stub: daemon_pb2_grpc.DaemonStub
    ) -> None:
        """A query the parser is unsure of comes back INVALID_ARGUMENT listing forms."""
        with pytest.raises(grpc.RpcError) as error:
            query(stub, "Remove the old stuff")
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (
            "Closest supported forms" in error.value.details()
            or "say which" in error.value.details()
        )


def test_a_small_buffer_never_evicts_more_than_half_of_itself() -> None:
    """buffer_size 5 with the default batch of 5: an overflow evicts 2, not 5, and the buffer keeps 4."""
    history = ConversationHistory(background=False)
    history.query("Set the buffer size to 5")
    for i in range(5):
        history.query(f"Add utterance: note {i}")
    evicted = history.query("Add utterance: note 5").result["evicted"]
    assert evicted == [1, 2]
    assert [u["seq"] for u in history.query("Get all utterances").result["utterances"]] == [
        3,
        4,
        5,
        6,
    ]
