"""apply_change's shortcuts and sizes_after give what the plain definitions give."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from chd.backends.base import Change, ConversationState, apply_change, sizes_after
from tests.backends.backend_kinds import utterance

# Seq-ordered lists (the contract) and removals that hit the front, the back,
# the middle, or seqs that are not there at all.
_seqs = st.lists(st.integers(1, 40), unique=True, max_size=25).map(sorted)
_removed = st.sets(st.integers(0, 45), max_size=12)


def _state(buffer: list[int], pending: list[int]) -> ConversationState:
    return ConversationState(
        "c",
        next_seq=100,
        utterances=[utterance(s) for s in buffer],
        pending=[utterance(s) for s in pending],
    )


class TestApplyChangeRemovals:
    """Removing seqs keeps exactly the others, in order, wherever they sit."""

    @given(_seqs, _removed)
    def test_removing_any_seqs_keeps_the_others_in_order(
        self, buffer: list[int], removed: set[int]
    ) -> None:
        after = apply_change(_state(buffer, []), Change(remove=removed))
        assert [u.seq for u in after.utterances] == [s for s in buffer if s not in removed]

    @given(_seqs, st.integers(1, 25))
    def test_evicting_the_oldest_keeps_the_rest(self, buffer: list[int], count: int) -> None:
        removed = set(buffer[:count])
        after = apply_change(_state(buffer, buffer), Change(remove=removed, pending_remove=removed))
        assert [u.seq for u in after.utterances] == buffer[count:]
        assert [u.seq for u in after.pending] == buffer[count:]

    @given(_seqs)
    def test_the_new_buffer_is_not_the_old_list(self, buffer: list[int]) -> None:
        state = _state(buffer, [])
        after = apply_change(state, Change(remove=set(buffer[:1])))
        assert after.utterances is not state.utterances
        assert [u.seq for u in state.utterances] == buffer


class TestSizesAfter:
    """sizes_after counts what apply_change would build."""

    @given(_seqs, _seqs, _removed, _removed, st.integers(0, 3), st.integers(0, 3))
    def test_sizes_after_equals_the_lengths_apply_change_gives(
        self,
        buffer: list[int],
        pending: list[int],
        remove: set[int],
        pending_remove: set[int],
        appended: int,
        queued: int,
    ) -> None:
        state = _state(buffer, pending)
        change = Change(
            append=[utterance(50 + i) for i in range(appended)],
            remove=remove,
            pending_add=[utterance(60 + i) for i in range(queued)],
            pending_remove=pending_remove,
        )
        after = apply_change(state, change)
        assert sizes_after(state, change) == (len(after.utterances), len(after.pending))


class TestBufferTokens:
    """The token total carried from state to state is the sum of the buffer's tokens."""

    @given(_seqs, st.lists(st.tuples(_removed, st.integers(0, 3), st.booleans()), max_size=6))
    def test_the_carried_total_equals_a_fresh_sum_after_any_changes(
        self, buffer: list[int], steps: list[tuple[set[int], int, bool]]
    ) -> None:
        state = _state(buffer, [])
        _ = state.buffer_tokens  # computed once, then carried by every apply_change
        next_seq = 50
        for remove, appended, flag in steps:
            kept = [u for u in state.utterances if u.seq not in remove]
            update = [replace(kept[0], tokens=kept[0].tokens + 7)] if flag and kept else []
            change = Change(
                append=[
                    replace(utterance(next_seq + i), tokens=next_seq + i) for i in range(appended)
                ],
                remove=remove,
                update=update,
            )
            next_seq += appended
            state = apply_change(state, change)
            assert state.buffer_tokens == sum(u.tokens for u in state.utterances)


class TestSnapshotsStayPut:
    """apply_change never alters the state it was given, whatever it shares with the new one."""

    @given(_seqs, _seqs, _removed, _removed, st.integers(0, 3), st.integers(0, 3))
    def test_the_old_state_is_unchanged_after_any_change(
        self,
        buffer: list[int],
        pending: list[int],
        remove: set[int],
        pending_remove: set[int],
        appended: int,
        queued: int,
    ) -> None:
        state = _state(buffer, pending)
        state.archive = [utterance(s) for s in pending]
        before = (list(state.utterances), list(state.pending), list(state.archive))
        apply_change(
            state,
            Change(
                append=[utterance(50 + i) for i in range(appended)],
                remove=remove,
                pending_add=[utterance(60 + i) for i in range(queued)],
                pending_remove=pending_remove,
                archive_add=[utterance(70 + i) for i in range(queued)],
                archive_remove=pending_remove,
            ),
        )
        assert (state.utterances, state.pending, state.archive) == before
