"""The storage contract (backends/base.py) that every backend, present and future, keeps."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chd.backends import Backend
from chd.backends.base import Change, ConversationState, apply_change
from chd.core.errors import NotFound
from chd.core.utterance import Summary, SummarySegment
from tests.backends.backend_kinds import (
    CONTRACT_KINDS,
    append_next,
    open_contract_backend,
    utterance,
)


@pytest.fixture(params=CONTRACT_KINDS)
def any_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each backend the contract applies to, fresh and empty."""
    opened = open_contract_backend(request.param, tmp_path)
    yield opened
    opened.close()


def summary_of(seq_to: int, text: str = "they talked") -> Summary:
    segment = SummarySegment(
        text=text, tokens=2, seq_from=1, seq_to=seq_to, turn_from=1, turn_to=seq_to
    )
    return Summary((segment,), seq_to, 2)


def store(backend: Backend, conversation_id: str, count: int) -> list[int]:
    return [backend.transact(conversation_id, append_next(f"text {i}")) for i in range(count)]


class TestProtocol:
    """Every backend is a complete Backend."""

    def test_backend_implements_the_whole_protocol(self, any_backend: Backend) -> None:
        """The registry's isinstance check and each method exist."""
        assert isinstance(any_backend, Backend)
        for method in ("read", "transact", "conversations", "close"):
            assert callable(getattr(any_backend, method))


class TestReading:
    """What a backend returns before and after writes."""

    def test_unknown_conversation_reads_as_an_empty_state(self, any_backend: Backend) -> None:
        """A conversation never written is empty, not an error."""
        state = any_backend.read("nobody")
        assert state == ConversationState("nobody")
        assert state.is_empty

    def test_no_conversations_at_first(self, any_backend: Backend) -> None:
        """A fresh backend lists nothing."""
        assert any_backend.conversations() == []

    def test_conversations_are_listed_sorted(self, any_backend: Backend) -> None:
        """Every conversation with stored state, in sorted order."""
        for conversation_id in ("zeta", "alpha", "mid"):
            store(any_backend, conversation_id, 1)
        any_backend.read("only-read")
        assert any_backend.conversations() == ["alpha", "mid", "zeta"]

    def test_snapshot_does_not_change_after_later_writes(self, any_backend: Backend) -> None:
        """A state read earlier keeps showing what it showed."""
        store(any_backend, "c", 2)
        before = any_backend.read("c")
        store(any_backend, "c", 3)
        assert [u.seq for u in before.utterances] == [1, 2]
        assert before.next_seq == 3


class TestTransact:
    """transact applies a decided Change all at once."""

    def test_transact_returns_what_decide_returns(self, any_backend: Backend) -> None:
        """The value half of decide's answer comes back to the caller."""
        assert store(any_backend, "c", 3) == [1, 2, 3]

    def test_appended_utterances_read_back_whole_and_in_order(self, any_backend: Backend) -> None:
        """Every field of every utterance survives, in seq order."""
        store(any_backend, "c", 5)
        state = any_backend.read("c")
        assert [u.seq for u in state.utterances] == [1, 2, 3, 4, 5]
        assert state.utterances[2] == utterance(3, "text 2", turn=3)
        assert (state.next_seq, state.last_turn) == (6, 5)

    def test_remove_applies_before_append(self, any_backend: Backend) -> None:
        """A change that evicts and appends leaves the new one and not the old."""
        store(any_backend, "c", 3)
        change = Change(remove={1, 2}, append=[utterance(4)], next_seq=5)
        any_backend.transact("c", lambda s: (change, None))
        assert [u.seq for u in any_backend.read("c").utterances] == [3, 4]

    def test_update_replaces_an_utterance_in_place(self, any_backend: Backend) -> None:
        """Marking an utterance important keeps its position."""
        store(any_backend, "c", 3)
        marked = any_backend.read("c").utterances[1].with_important(True)
        any_backend.transact("c", lambda s: (Change(update=[marked]), None))
        state = any_backend.read("c")
        assert [u.important for u in state.utterances] == [False, True, False]

    def test_evicted_utterances_wait_in_the_queue_in_seq_order(self, any_backend: Backend) -> None:
        """Moving utterances from the buffer to the summary queue keeps both sides right."""
        store(any_backend, "c", 6)

        def evict(state: ConversationState) -> tuple[Change, None]:
            moved = [state.utterances[2], state.utterances[0]]
            return Change(remove={u.seq for u in moved}, pending_add=moved), None

        any_backend.transact("c", evict)
        state = any_backend.read("c")
        assert [u.seq for u in state.utterances] == [2, 4, 5, 6]
        assert [u.seq for u in state.pending] == [1, 3]
        assert state.pending[0].text == "text 0"

    def test_folding_replaces_the_summary_and_empties_the_queue(self, any_backend: Backend) -> None:
        """A fold commit stores the summary and drops the folded seqs together."""
        store(any_backend, "c", 4)
        any_backend.transact(
            "c", lambda s: (Change(remove={1, 2}, pending_add=s.utterances[:2]), None)
        )
        any_backend.transact(
            "c", lambda s: (Change(summary=summary_of(2), pending_remove={1, 2}), None)
        )
        state = any_backend.read("c")
        assert state.pending == []
        assert state.summary == summary_of(2)
        assert [u.seq for u in state.utterances] == [3, 4]

    def test_folded_utterances_can_be_archived_and_dropped(self, any_backend: Backend) -> None:
        """The archive keeps folded utterances cold, in seq order, until removed."""
        store(any_backend, "c", 5)
        any_backend.transact(
            "c", lambda s: (Change(remove={1, 2, 3}, pending_add=s.utterances[:3]), None)
        )
        any_backend.transact(
            "c",
            lambda s: (
                Change(
                    summary=summary_of(3),
                    pending_remove={1, 2, 3},
                    archive_add=[s.pending[2], s.pending[0]],
                ),
                None,
            ),
        )
        state = any_backend.read("c")
        assert (
            [u.seq for u in state.utterances],
            state.pending,
            [u.seq for u in state.archive],
        ) == ([4, 5], [], [1, 3])
        assert state.archive[1].text == "text 2"
        any_backend.transact("c", lambda s: (Change(archive_remove={1}), None))
        assert [u.seq for u in any_backend.read("c").archive] == [3]

    def test_summary_without_segments_keeps_its_coverage(self, any_backend: Backend) -> None:
        """Dropping every segment still remembers how far the summary reached."""
        store(any_backend, "c", 2)
        any_backend.transact("c", lambda s: (Change(summary=summary_of(1)), None))
        any_backend.transact("c", lambda s: (Change(summary=Summary((), 1, 0)), None))
        assert any_backend.read("c").summary == Summary((), 1, 0)

    def test_settings_are_kept(self, any_backend: Backend) -> None:
        """Per-conversation overrides come back as written."""
        any_backend.transact("c", lambda s: (Change(settings={"buffer_size": 50}), None))
        assert any_backend.read("c").settings == {"buffer_size": 50}
        assert any_backend.conversations() == ["c"]

    def test_clearing_everything_keeps_the_seq_counter(self, any_backend: Backend) -> None:
        """After a clear the next store continues the seqs, never reuses one."""
        store(any_backend, "c", 3)
        any_backend.transact("c", lambda s: (Change(remove={u.seq for u in s.utterances}), None))
        assert any_backend.read("c").utterances == []
        assert store(any_backend, "c", 1) == [4]
        assert any_backend.conversations() == ["c"]

    def test_failed_decide_writes_nothing(self, any_backend: Backend) -> None:
        """An exception from decide propagates and leaves the state as it was."""
        store(any_backend, "c", 2)

        def refuse(state: ConversationState) -> tuple[Change, None]:
            raise NotFound("no such utterance")

        with pytest.raises(NotFound):
            any_backend.transact("c", refuse)
        assert [u.seq for u in any_backend.read("c").utterances] == [1, 2]

    def test_empty_change_writes_nothing(self, any_backend: Backend) -> None:
        """A decide that changes nothing leaves no conversation behind."""
        assert any_backend.transact("ghost", lambda s: (Change(), "nothing")) == "nothing"
        assert any_backend.conversations() == []

    def test_conversations_are_independent(self, any_backend: Backend) -> None:
        """Writes to one conversation never show up in another."""
        store(any_backend, "a", 3)
        store(any_backend, "b", 1)
        assert [u.seq for u in any_backend.read("a").utterances] == [1, 2, 3]
        assert [u.conversation_id for u in any_backend.read("b").utterances] == ["b"]

    @pytest.mark.parametrize(
        "conversation_id",
        [
            "with:colon",
            "hash#1",
            "line\nbreak",
            "m:looks-like-a-key",
            "u:c#1",
            "日本語 🙂",
            "x" * 256,
        ],
    )
    def test_any_conversation_id_round_trips(
        self, any_backend: Backend, conversation_id: str
    ) -> None:
        """Ids that look like separators or keys stay distinct from every other id."""
        store(any_backend, conversation_id, 2)
        store(any_backend, "c", 1)
        state = any_backend.read(conversation_id)
        assert [u.seq for u in state.utterances] == [1, 2]
        assert conversation_id in any_backend.conversations()

    def test_longest_multibyte_utterance_round_trips(self, any_backend: Backend) -> None:
        """32,000 characters of four-byte text, well over diskcache's 32 KiB file threshold."""
        text = "é🙂" * 16_000
        any_backend.transact("c", append_next(text))
        assert any_backend.read("c").utterances[0].text == text


class TestConcurrency:
    """Writers to one conversation never lose or duplicate a write."""

    def test_eight_threads_of_a_hundred_writes_give_seqs_one_to_800(
        self, any_backend: Backend
    ) -> None:
        """Each transact sees the one before it: seqs unique and gap-free."""
        errors: list[BaseException] = []

        def writer() -> None:
            try:
                store(any_backend, "shared", 100)
            except BaseException as exc:  # surfaced by the assert below
                errors.append(exc)

        threads = [threading.Thread(target=writer) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        state = any_backend.read("shared")
        assert [u.seq for u in state.utterances] == list(range(1, 801))
        assert [u.turn_number for u in state.utterances] == list(range(1, 801))
        assert state.next_seq == 801


# --- the contract against a model ----------------------------------------------

_operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("evict"), st.integers(1, 4)),
        st.tuples(st.just("remove"), st.integers(0, 30)),
        st.tuples(st.just("fold"), st.booleans()),
        st.tuples(st.just("mark"), st.integers(0, 30)),
        st.tuples(st.just("settings"), st.integers(1, 100)),
        st.tuples(st.just("archive"), st.integers(1, 3)),
        st.tuples(st.just("unarchive"), st.integers(0, 30)),
    ),
    max_size=25,
)


def _change_for(operation: tuple[str, object], state: ConversationState) -> Change:
    kind, arg = operation
    if kind == "append":
        new = [
            utterance(state.next_seq + i, conversation_id=state.conversation_id)
            for i in range(int(arg))
        ]
        return Change(append=new, next_seq=state.next_seq + len(new), last_turn=new[-1].turn_number)
    if kind == "evict":
        moved = state.utterances[: int(arg)]
        return Change(remove={u.seq for u in moved}, pending_add=moved)
    if kind == "remove":
        return Change(
            remove={int(arg)} & {u.seq for u in state.utterances}, pending_remove={int(arg)}
        )
    if kind == "fold":
        if not state.pending:
            return Change(summary=Summary() if arg else None)
        top = state.pending[-1].seq
        return Change(
            summary=summary_of(top, f"through {top}"), pending_remove={u.seq for u in state.pending}
        )
    if kind == "archive":
        moved = state.pending[: int(arg)]
        return Change(pending_remove={u.seq for u in moved}, archive_add=moved)
    if kind == "unarchive":
        return Change(archive_remove={int(arg)})
    if kind == "mark":
        return Change(
            update=[u.with_important(not u.important) for u in state.utterances if u.seq == arg]
        )
    return Change(settings={"buffer_size": int(arg)})


@pytest.mark.parametrize("kind", CONTRACT_KINDS)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=_operations)
def test_backend_agrees_with_apply_change_on_any_sequence(
    kind: str, tmp_path_factory, operations
) -> None:
    """Whatever sequence of changes, the backend reads back exactly what apply_change computes."""
    backend = open_contract_backend(kind, tmp_path_factory.mktemp(kind))
    model = ConversationState("c")
    try:
        for operation in operations:
            change = _change_for(operation, model)
            backend.transact("c", lambda s, change=change: (change, None))
            if not change.is_empty:
                model = apply_change(model, change)
            assert backend.read("c") == model
    finally:
        backend.close()
