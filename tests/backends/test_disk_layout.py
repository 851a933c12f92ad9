"""The disk backend's record layout: what is on disk, not what the in-memory cache says.

The contract suite reads back through the same backend, whose cache of
states would hide a wrong layout; these tests open the directory afresh, and
check that every stored key is one the layout calls for (no stale block, no
orphaned utterance record).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import diskcache
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chd.backends.base import Change, ConversationState, apply_change
from chd.backends.disk import DiskBackend
from chd.backends.records import (
    BLOCK_SIZE,
    COUNTS_KEY,
    LONG_TEXT,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    block_key,
    block_of,
    has_own_record,
    meta_key,
    queued_key,
    summary_key,
    utterance_key,
)
from chd.core.errors import StorageError
from chd.core.utterance import Summary, SummarySegment
from tests.backends.backend_kinds import append_next, utterance

LONG = "a long text " * (LONG_TEXT // 10)


def stored_keys(directory: Path) -> set[str]:
    with sqlite3.connect(directory / "cache.db") as db:
        return {key for (key,) in db.execute("SELECT key FROM Cache")}


def expected_keys(state: ConversationState, own_below: int) -> set[str]:
    """The keys the layout calls for (backends/records.py) to hold ``state``, once written."""
    cid = state.conversation_id
    keys = {SCHEMA_KEY, COUNTS_KEY, meta_key(cid)}
    if state.pending:
        keys.add(queued_key(cid))
    if state.summary.segments or state.summary.through_seq:
        keys.add(summary_key(cid))
    open_block = block_of(state.next_seq)
    for u in (*state.utterances, *state.pending, *state.archive):
        if has_own_record(u, own_below):
            keys.add(utterance_key(cid, u.seq))
        elif block_of(u.seq) != open_block:
            keys.add(block_key(cid, block_of(u.seq)))
    return keys


def write_schema_1(directory: Path, seqs: range) -> ConversationState:
    """A data dir as chd with storage schema 1 left it: every utterance under its own key."""
    state = ConversationState(
        "c",
        next_seq=seqs.stop,
        last_turn=seqs.stop - 1,
        utterances=[utterance(s, LONG if s % 3 == 0 else None) for s in seqs],
    )
    with diskcache.Cache(
        str(directory), eviction_policy="none", cull_limit=0, disk_min_file_size=2**30
    ) as cache:
        cache.set(SCHEMA_KEY, json.dumps({"schema": 1, "created_by": "chd storage schema 1"}))
        for u in state.utterances:
            cache.set(utterance_key("c", u.seq), json.dumps({"schema": 1, **u.to_record()}))
        cache.set(
            meta_key("c"),
            json.dumps(
                {
                    "schema": 1,
                    "token": "old",
                    "next_seq": seqs.stop,
                    "last_turn": seqs.stop - 1,
                    "buffer": [[seqs.start, seqs.stop - 1]],
                    "pending": [],
                    "archive": [],
                    "settings": {},
                    "has_summary": False,
                }
            ),
        )
    return state


# --- any sequence of changes, checked on disk ----------------------------------

_operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3), st.booleans()),
        st.tuples(st.just("evict"), st.integers(1, 4), st.just(False)),
        st.tuples(st.just("remove"), st.integers(0, 40), st.just(False)),
        st.tuples(st.just("fold"), st.integers(0, 1), st.booleans()),
        st.tuples(st.just("mark"), st.integers(0, 40), st.just(False)),
        st.tuples(st.just("archive"), st.integers(1, 3), st.just(False)),
        st.tuples(st.just("unarchive"), st.integers(0, 40), st.just(False)),
        st.tuples(st.just("replace"), st.integers(0, 12), st.booleans()),
    ),
    max_size=30,
)


def _change_for(operation: tuple[str, int, bool], state: ConversationState) -> Change:
    kind, arg, flag = operation
    if kind == "append":
        new = [utterance(state.next_seq + i, LONG if flag else None) for i in range(arg)]
        return Change(append=new, next_seq=state.next_seq + len(new), last_turn=new[-1].turn_number)
    if kind == "evict":
        moved = state.utterances[:arg]
        return Change(remove={u.seq for u in moved}, pending_add=moved)
    if kind == "remove":
        return Change(remove={arg} & {u.seq for u in state.utterances}, pending_remove={arg})
    if kind == "fold":
        if not state.pending:
            return Change()
        top = state.pending[-1].seq
        segment = SummarySegment(
            text="s", tokens=1, seq_from=1, seq_to=top, turn_from=1, turn_to=top
        )
        folded = {u.seq for u in state.pending}
        archived = state.pending if flag else []
        return Change(
            summary=Summary((segment,), top, 1), pending_remove=folded, archive_add=archived
        )
    if kind == "mark":
        return Change(
            update=[u.with_important(not u.important) for u in state.utterances if u.seq == arg]
        )
    if kind == "archive":
        moved = state.pending[:arg]
        return Change(pending_remove={u.seq for u in moved}, archive_add=moved)
    if kind == "unarchive":
        return Change(archive_remove={arg})
    # What `chd import --replace` does: everything goes, seqs may start over lower.
    new = [utterance(s, LONG if flag and s % 2 else f"replaced {s}") for s in range(1, arg + 1)]
    return Change(
        remove={u.seq for u in state.utterances},
        pending_remove={u.seq for u in state.pending},
        archive_remove={u.seq for u in state.archive},
        append=new,
        summary=Summary(),
        next_seq=arg + 1,
        last_turn=arg,
    )


@pytest.mark.parametrize("start", ["empty", "schema 1"])
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=_operations)
def test_disk_holds_exactly_the_state_after_any_sequence(
    start: str, tmp_path_factory, operations
) -> None:
    """A fresh backend on the directory reads the model back, and no record is left over."""
    directory = tmp_path_factory.mktemp("layout")
    model = ConversationState("c")
    own_below, written = 1, False
    if start == "schema 1":
        model = write_schema_1(directory, range(1, 12))
        own_below, written = model.next_seq, True
    backend = DiskBackend(directory)
    try:
        for operation in operations:
            change = _change_for(operation, model)
            backend.transact("c", lambda s, change=change: (change, None))
            if not change.is_empty:
                model = apply_change(model, change)
                written = True
            if written:
                assert stored_keys(directory) == expected_keys(model, own_below), operation
            assert backend.count_conversations() == (0 if model.is_empty else 1), operation
            assert list(backend.queued_conversations()) == (["c"] if model.pending else []), (
                operation
            )
        fresh = DiskBackend(directory)
        assert fresh.read("c") == model
        assert fresh.conversations() == ([] if model.is_empty else ["c"])
        fresh.close()
    finally:
        backend.close()


# --- data dirs from schema 1 -----------------------------------------------------


class TestSchema1:
    """A data dir written by chd with storage schema 1 is read as it is and written on."""

    def test_schema_1_conversation_reads_back_and_takes_new_utterances(
        self, tmp_path: Path
    ) -> None:
        old = write_schema_1(tmp_path, range(1, 6))
        backend = DiskBackend(tmp_path)
        assert backend.read("c") == old
        for _ in range(2 * BLOCK_SIZE):
            backend.transact("c", append_next("new"))
        backend.close()
        reopened = DiskBackend(tmp_path)
        state = reopened.read("c")
        reopened.close()
        assert state.utterances[:5] == old.utterances
        assert [u.seq for u in state.utterances] == list(range(1, 5 + 2 * BLOCK_SIZE + 1))
        # The old records stay where schema 1 put them; new ones go into blocks.
        keys = stored_keys(tmp_path)
        assert {utterance_key("c", s) for s in range(1, 6)} <= keys
        assert not any(key.startswith("u:") and int(key.rpartition("#")[2]) > 5 for key in keys)
        assert block_key("c", 1) in keys

    def test_opening_marks_the_directory_with_the_current_schema(self, tmp_path: Path) -> None:
        """An older chd then refuses the directory at start instead of meeting new records."""
        write_schema_1(tmp_path, range(1, 3))
        DiskBackend(tmp_path).close()
        with diskcache.Cache(str(tmp_path)) as cache:
            assert json.loads(cache.get(SCHEMA_KEY))["schema"] == SCHEMA_VERSION


class TestDamage:
    """A record the meta record relies on is missing: an error naming it, never an empty state."""

    def test_missing_block_is_reported_with_its_key(self, tmp_path: Path) -> None:
        backend = DiskBackend(tmp_path)
        for _ in range(BLOCK_SIZE + 1):
            backend.transact("c", append_next())
        backend.close()
        with diskcache.Cache(str(tmp_path)) as cache:
            assert cache.delete(block_key("c", 0))
        damaged = DiskBackend(tmp_path)
        with pytest.raises(StorageError, match=r"b:c#0"):
            damaged.transact("c", append_next())
        damaged.close()

    def test_an_export_of_a_conversation_missing_a_block_fails_naming_the_damage(
        self, tmp_path: Path
    ) -> None:
        """read_encoded (chd export) reads the same one-statement snapshot: damage is an error, never a gap."""
        backend = DiskBackend(tmp_path)
        for _ in range(BLOCK_SIZE + 1):
            backend.transact("c", append_next())
        assert len(backend.read_encoded("c").buffer) == BLOCK_SIZE + 1
        backend.close()
        with diskcache.Cache(str(tmp_path)) as cache:
            assert cache.delete(block_key("c", 0))
        damaged = DiskBackend(tmp_path)
        with pytest.raises(StorageError, match=r"'c' is damaged .* its record .*c#1"):
            damaged.read_encoded("c")
        damaged.close()
