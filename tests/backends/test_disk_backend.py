"""The disk backend's own promises: persistence, settings, layout, schema, sharing, a full disk."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import diskcache
import pytest

from chd.backends.base import Change, ConversationState
from chd.backends.checkpointer import BACKSTOP
from chd.backends.disk import MARKER, DiskBackend, InvalidChange
from chd.backends.records import (
    BLOCK_SIZE,
    COUNTS_KEY,
    LONG_TEXT,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    block_key,
    meta_key,
    utterance_key,
)
from chd.core.errors import DeadlineExceeded, StorageError, StorageFull
from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from tests.backends.backend_kinds import append_next, utterance


def sqlite_settings(directory: Path) -> dict[str, object]:
    with sqlite3.connect(directory / "cache.db") as db:
        return dict(db.execute("SELECT key, value FROM Settings").fetchall())


def stored_value(directory: Path, key: str) -> str:
    with sqlite3.connect(directory / "cache.db") as db:
        (value,) = db.execute("SELECT value FROM Cache WHERE key = ?", (key,)).fetchone()
    return value


def stored_keys(directory: Path) -> set[str]:
    with sqlite3.connect(directory / "cache.db") as db:
        return {key for (key,) in db.execute("SELECT key FROM Cache")}


def history_on(backend: DiskBackend, **settings: int) -> ConversationHistory:
    return ConversationHistory(backend=backend, settings=Settings(**settings), background=False)


class TestPersistence:
    """What one process writes, the next one reads."""

    def test_whole_state_survives_reopening(self, tmp_path: Path) -> None:
        """Buffer, queue, summary, counters and settings all come back."""
        first = DiskBackend(tmp_path)
        history = history_on(first, buffer_size=5, eviction_batch=2)
        for i in range(12):
            history.query(f"Add utterance: message number {i} about the harbour")
        first.transact(
            "default",
            lambda s: (
                Change(
                    remove={s.utterances[0].seq}, pending_add=[s.utterances[0]], settings={"k": 1}
                ),
                None,
            ),
        )
        before = first.read("default")
        first.close()

        again = DiskBackend(tmp_path)
        assert again.read("default") == before
        assert before.pending and before.summary.segments
        again.close()

    def test_two_backends_on_one_directory_see_each_others_writes(self, tmp_path: Path) -> None:
        """A state cached by one process is refreshed when another commits."""
        one, two = DiskBackend(tmp_path), DiskBackend(tmp_path)
        one.transact("c", append_next("from one"))
        assert [u.text for u in two.read("c").utterances] == ["from one"]
        two.transact("c", append_next("from two"))
        assert [u.text for u in one.read("c").utterances] == ["from one", "from two"]
        assert one.transact("c", append_next("again")) == 3
        one.close()
        two.close()

    def test_two_backends_writing_one_conversation_lose_nothing(self, tmp_path: Path) -> None:
        """Atomicity comes from SQLite's transaction, not from one process's lock."""
        backends = [DiskBackend(tmp_path), DiskBackend(tmp_path)]

        def writer(backend: DiskBackend) -> None:
            for _ in range(100):
                backend.transact("c", append_next())

        threads = [threading.Thread(target=writer, args=(b,)) for b in backends for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [u.seq for u in backends[0].read("c").utterances] == list(range(1, 401))
        for backend in backends:
            backend.close()


class TestLockedByAnotherProcess:
    """A write waiting for another process's lock stops at request_timeout (issue 28, item 4)."""

    @pytest.mark.parametrize("request_timeout", [0.3, None])
    def test_a_lock_held_past_request_timeout_is_a_deadline_not_an_outage(
        self, tmp_path: Path, request_timeout
    ) -> None:
        """With a daemon's request_timeout the wait ends there, as DeadlineExceeded; a tool's wait is a StorageError."""
        backend = DiskBackend(
            tmp_path, timeout=15.0 if request_timeout else 0.3, request_timeout=request_timeout
        )
        backend.transact("c", append_next("before"))
        other = sqlite3.connect(tmp_path / "cache.db", isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            expected = DeadlineExceeded if request_timeout else StorageError
            with pytest.raises(expected, match="stayed locked by another"):
                backend.transact("c", append_next("while locked"))
            other.execute("ROLLBACK")
            backend.transact("c", append_next("after"))
            assert [u.text for u in backend.read("c").utterances] == ["before", "after"]
        finally:
            other.close()
            backend.close()

    def test_calls_queued_behind_the_lock_each_answer_by_their_own_deadline(
        self, tmp_path: Path
    ) -> None:
        """Six writes queued behind another process's lock all answer DeadlineExceeded saying how long they waited.

        Each batch's wait is bounded by what is left of its calls' deadlines
        (the PRAGMA busy_timeout set per batch), not a fresh request_timeout:
        the later calls answered at about 2x request_timeout (outside review of issue 28).
        """
        backend = DiskBackend(tmp_path, request_timeout=0.5)
        backend.transact("c", append_next("before"))
        waits: list[tuple[float, float]] = []
        wait_for = backend._wait_for

        def recorded(batch):  # type: ignore[no-untyped-def]
            now = time.monotonic()
            bounded = wait_for(batch)
            if bounded:
                waits.append((backend._busy.ms / 1000, min(r.deadline for r in batch) - now))
            return bounded

        backend._wait_for = recorded  # type: ignore[method-assign]
        other = sqlite3.connect(tmp_path / "cache.db", isolation_level=None)
        errors: list[BaseException] = []

        def call(n: int) -> None:
            try:
                backend.transact("c", append_next(f"queued {n}"))
            except BaseException as error:  # noqa: BLE001 - what each caller saw
                errors.append(error)

        try:
            other.execute("BEGIN IMMEDIATE")
            callers = [threading.Thread(target=call, args=(n,)) for n in range(6)]
            for caller in callers:
                caller.start()
            for caller in callers:
                caller.join()
            other.execute("ROLLBACK")
            assert len(errors) == 6 and all(isinstance(e, DeadlineExceeded) for e in errors)
            assert all(
                "stayed locked by another process" in str(e) and "waited" in str(e) for e in errors
            )
            # No batch waited longer than what was left of its earliest call's time (and the slack).
            assert waits and all(wait <= max(left, 0.001) + 0.05 for wait, left in waits)
            assert [u.text for u in backend.read("c").utterances] == ["before"]
        finally:
            other.close()
            backend.close()


class TestGroupCommitDeadlines:
    """GroupCommit answers each call by its deadline (a fake clock; outside review of issue 28)."""

    def test_a_timed_out_batch_puts_back_the_calls_with_time_left(self, monkeypatch) -> None:
        """A batch whose wait ran out answers the calls whose time is up; the others wait only what they have left."""
        from chd.backends import group_commit
        from chd.backends.group_commit import GroupCommit, Request

        clock = [100.0]
        monkeypatch.setattr(group_commit.time, "monotonic", lambda: clock[0])
        batches: list[tuple[float, list[float]]] = []

        def commit(batch: list[Request]) -> None:
            deadlines = [r.deadline for r in batch if r.deadline is not None]
            assert all(d > clock[0] for d in deadlines), (
                "a batch began for a call whose time was up"
            )
            batches.append((clock[0], deadlines))
            clock[0] = min(
                deadlines
            )  # the lock is never released: the wait runs to the earliest deadline
            raise DeadlineExceeded("locked")

        group = GroupCommit(commit, max_batch=2)
        queued = [
            Request("c", append_next(), queued=100.0, deadline=100.0 + d)
            for d in (1.0, 1.5, 2.0, 3.0)
        ]
        group._queue.extend(queued)
        with pytest.raises(DeadlineExceeded, match="after 4.00s"):
            group.run("c", append_next(), deadline=104.0)
        assert all(r.done and isinstance(r.error, DeadlineExceeded) for r in queued)
        assert [str(r.error) for r in queued] == [
            f"the call's deadline passed after {d:.2f}s waiting to write; nothing was written"
            for d in (1.0, 1.5, 2.0, 3.0)
        ]
        assert clock[0] == 104.0


class TestDiskcacheSettings:
    """The settings that keep diskcache from losing or splitting data."""

    def test_cache_never_evicts_entries(self, tmp_path: Path) -> None:
        """eviction_policy none and cull_limit 0: the 1 GiB size_limit deletes nothing."""
        DiskBackend(tmp_path).close()
        stored = sqlite_settings(tmp_path)
        assert stored["eviction_policy"] == "none"
        assert stored["cull_limit"] == 0

    def test_every_record_stays_inside_sqlite(self, tmp_path: Path) -> None:
        """A 128 KB utterance is a row under SQLite's journal, not a side file."""
        backend = DiskBackend(tmp_path)
        backend.transact("c", append_next("🙂" * 32_000))
        backend.close()
        files = {p.name for p in tmp_path.rglob("*") if p.is_file()}
        assert files <= {"cache.db", "cache.db-wal", "cache.db-shm", MARKER}

    def test_durability_full_means_synchronous_full(self, tmp_path: Path) -> None:
        """--durability full is SQLite synchronous=FULL (2) for every connection."""
        DiskBackend(tmp_path, durability="full").close()
        assert sqlite_settings(tmp_path)["sqlite_synchronous"] == 2

    def test_default_durability_is_normal_and_tools_keep_the_daemons_choice(
        self, tmp_path: Path
    ) -> None:
        """A new dir gets NORMAL; opening without a durability keeps what is stored."""
        DiskBackend(tmp_path).close()
        assert sqlite_settings(tmp_path)["sqlite_synchronous"] == 1
        DiskBackend(tmp_path, durability="full").close()
        DiskBackend(tmp_path, durability=None).close()
        assert sqlite_settings(tmp_path)["sqlite_synchronous"] == 2

    def test_sqlite_checkpoints_only_as_a_backstop(self, tmp_path: Path) -> None:
        """The commit that takes the WAL to BACKSTOP pages checkpoints it; before that a
        background thread does (backends/checkpointer.py)."""
        DiskBackend(tmp_path).close()
        assert sqlite_settings(tmp_path)["sqlite_wal_autocheckpoint"] == BACKSTOP

    def test_unknown_durability_is_refused(self, tmp_path: Path) -> None:
        with pytest.raises(StorageError, match="unknown durability 'fast'"):
            DiskBackend(tmp_path, durability="fast")


class TestLayout:
    """A store writes what changed, not the whole buffer."""

    def test_meta_record_does_not_grow_with_the_buffer(self, tmp_path: Path) -> None:
        """A 2,000-utterance buffer is described by one seq run."""
        backend = DiskBackend(tmp_path)
        backend.transact("c", append_next())
        small = len(stored_value(tmp_path, meta_key("c")))
        for _ in range(1999):
            backend.transact("c", append_next())
        backend.close()
        # Only the counters' digits grew (2 -> 2001, [1,1] -> [1,2000]).
        assert len(stored_value(tmp_path, meta_key("c"))) <= small + 12
        assert '"buffer":[[1,2000]]' in stored_value(tmp_path, meta_key("c"))

    def test_records_are_json_with_a_schema_version(self, tmp_path: Path) -> None:
        """Readable without chd, and never unpickled."""
        backend = DiskBackend(tmp_path)
        for _ in range(BLOCK_SIZE):
            backend.transact("c", append_next("hello"))
        backend.transact("c", append_next("long " * LONG_TEXT))
        backend.close()
        schema = f'{{"schema":{SCHEMA_VERSION},'
        for key in (
            SCHEMA_KEY,
            meta_key("c"),
            block_key("c", 0),
            utterance_key("c", BLOCK_SIZE + 1),
        ):
            assert stored_value(tmp_path, key).startswith(schema)
        assert stored_value(tmp_path, block_key("c", 0)).count('"text":"hello"') == BLOCK_SIZE

    def test_a_short_store_writes_only_the_meta_record_until_its_block_closes(
        self, tmp_path: Path
    ) -> None:
        """The open block rides in the meta record; the store that fills it writes it out."""
        backend = DiskBackend(tmp_path)
        for _ in range(BLOCK_SIZE - 1):
            backend.transact("c", append_next("short"))
        assert stored_keys(tmp_path) == {SCHEMA_KEY, COUNTS_KEY, meta_key("c")}
        assert stored_value(tmp_path, meta_key("c")).count('"text":"short"') == BLOCK_SIZE - 1
        backend.transact("c", append_next("short"))
        assert stored_keys(tmp_path) == {SCHEMA_KEY, COUNTS_KEY, meta_key("c"), block_key("c", 0)}
        assert stored_value(tmp_path, meta_key("c")).endswith('"open":[]}')
        backend.close()

    def test_a_store_is_one_write_statement_in_its_transaction(self, tmp_path: Path) -> None:
        """The usual store decides on the cached state and replaces the meta record only if it is
        still the cached one, in one statement (Cache.get and Cache.set took five; a read and a
        write statement took two, issue 31)."""
        backend = DiskBackend(tmp_path)
        for _ in range(3):
            backend.transact("c", append_next("short"))
        assert _statements(backend, lambda: backend.transact("c", append_next("short"))) == [
            "BEGIN",
            "UPDATE",
            "COMMIT",
        ]
        backend.close()

    def test_a_store_after_another_process_wrote_is_decided_again(self, tmp_path: Path) -> None:
        """The conditional write finds the record changed, writes nothing, and the store is decided
        again on the record as read: its seq follows the other process's."""
        backend, other = DiskBackend(tmp_path), DiskBackend(tmp_path)
        for _ in range(3):
            backend.transact("c", append_next("short"))
        other.transact("c", append_next("from the other"))
        seen: list[int] = []

        def decide(state: ConversationState) -> tuple[Change, int]:
            seen.append(state.next_seq)
            return append_next("short")(state)

        # The conditional write, the meta record, the records it names, the usual write.
        assert _statements(backend, lambda: backend.transact("c", decide)) == [
            "BEGIN",
            "UPDATE",
            "SELECT",
            "SELECT",
            "INSERT",
            "COMMIT",
        ]
        assert seen == [4, 5]
        assert [u.text for u in other.read("c").utterances][-2:] == ["from the other", "short"]
        assert [u.seq for u in other.read("c").utterances] == [1, 2, 3, 4, 5]
        backend.close()
        other.close()


def _statements(backend: DiskBackend, call: Callable[[], object]) -> list[str]:
    """The first words of the SQL statements ``call`` runs on this thread's connection (white box)."""
    statements: list[str] = []
    connection = backend._cache._con  # this thread's, which the store commits on
    connection.set_trace_callback(statements.append)
    try:
        call()
    finally:
        connection.set_trace_callback(None)
    # SQLite traces a statement again for each trigger it fires (diskcache's counters): count it once.
    distinct = [s for i, s in enumerate(statements) if i == 0 or s != statements[i - 1]]
    return [s.split()[0] for s in distinct]


class TestSchemaVersion:
    """Data from a newer chd is refused, never misread."""

    def test_directory_from_a_newer_chd_is_refused_at_open(self, tmp_path: Path) -> None:
        with diskcache.Cache(str(tmp_path)) as cache:
            cache.set(SCHEMA_KEY, '{"schema": 99, "created_by": "chd 9"}')
        with pytest.raises(StorageError, match=r"newer chd \(storage schema 99\)"):
            DiskBackend(tmp_path)

    def test_record_from_a_newer_chd_is_refused_on_read(self, tmp_path: Path) -> None:
        """One newer record makes its conversation unreadable, not empty."""
        DiskBackend(tmp_path).close()
        with diskcache.Cache(str(tmp_path)) as cache:
            cache.set(meta_key("c"), f'{{"schema": {SCHEMA_VERSION + 1}, "token": "x"}}')
        backend = DiskBackend(tmp_path)
        with pytest.raises(StorageError, match="newer chd"):
            backend.read("c")
        with pytest.raises(StorageError, match="newer chd"):
            backend.transact("c", append_next())
        backend.close()

    def test_a_diskcache_chd_did_not_write_is_refused(self, tmp_path: Path) -> None:
        """Someone else's cache directory is not silently adopted."""
        with diskcache.Cache(str(tmp_path)) as cache:
            cache.set("their-key", "their value")
        with pytest.raises(StorageError, match="did not write"):
            DiskBackend(tmp_path)


class TestBadDirectory:
    """Opening refuses, naming the path and the cause."""

    def test_corrupted_database_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "cache.db").write_bytes(b"this is not SQLite at all" * 400)
        with pytest.raises(
            StorageError, match=f"cannot open data dir {tmp_path}: .*not a SQLite database"
        ):
            DiskBackend(tmp_path)

    def test_a_file_in_place_of_the_directory_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "data").write_text("x")
        with pytest.raises(StorageError, match="it is a file, not a directory"):
            DiskBackend(tmp_path / "data")

    def test_closed_backend_refuses_calls(self, tmp_path: Path) -> None:
        backend = DiskBackend(tmp_path)
        backend.close()
        backend.close()
        with pytest.raises(StorageError, match="closed"):
            backend.read("c")


class TestFullDisk:
    """No room: the write fails cleanly, reads go on."""

    @staticmethod
    def fill(tmp_path: Path) -> DiskBackend:
        """A backend whose database cannot grow: SQLite's max_page_count, set
        through diskcache's own sqlite_* settings, gives the same SQLITE_FULL
        a full disk does."""
        backend = DiskBackend(tmp_path)
        for _ in range(20):
            backend.transact("c", append_next("some words " * 20))
        backend.close()
        with sqlite3.connect(tmp_path / "cache.db") as db:
            (pages,) = db.execute("PRAGMA page_count").fetchone()
        with diskcache.Cache(str(tmp_path), sqlite_max_page_count=pages) as cache:
            assert cache.sqlite_max_page_count == pages
        return DiskBackend(tmp_path)

    def test_write_to_a_full_disk_is_storage_full_and_reads_still_work(
        self, tmp_path: Path
    ) -> None:
        backend = self.fill(tmp_path)
        before = backend.read("c")
        with pytest.raises(StorageFull, match="full"):
            for _ in range(500):
                backend.transact("c", append_next("x" * 3000))
        after = backend.read("c")
        assert after.utterances[: len(before.utterances)] == before.utterances
        # Nothing half-written: every listed utterance reads back, counters agree.
        assert after.next_seq == after.utterances[-1].seq + 1
        backend.close()
        reopened = DiskBackend(tmp_path)
        assert reopened.read("c") == after
        reopened.close()

    def test_writes_work_again_once_there_is_room(self, tmp_path: Path) -> None:
        backend = self.fill(tmp_path)
        with pytest.raises(StorageFull):
            for _ in range(500):
                backend.transact("c", append_next("x" * 3000))
        backend.close()
        with diskcache.Cache(str(tmp_path), sqlite_max_page_count=1_000_000):
            pass
        backend = DiskBackend(tmp_path)
        seq = backend.transact("c", append_next("room again"))
        assert backend.read("c").utterances[-1].seq == seq
        backend.close()


class TestGroupCommit:
    """Concurrent transacts share one SQLite transaction but keep their own outcomes."""

    @staticmethod
    def run_together(backend: DiskBackend, calls: list) -> list[object]:
        """Queue every call while the commit lock is held, so one leader commits them as a group."""
        outcomes: list[object] = [None] * len(calls)

        def call(i: int) -> None:
            try:
                outcomes[i] = backend.transact(*calls[i])
            except Exception as exc:  # compared below
                outcomes[i] = exc

        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
        with backend._group.lock:  # white box: hold the commit lock until all are queued
            for thread in threads:
                thread.start()
            while len(backend._group) < len(calls):
                threading.Event().wait(0.001)
        for thread in threads:
            thread.join()
        return outcomes

    def test_one_failing_decide_fails_only_its_own_call(self, tmp_path: Path) -> None:
        backend = DiskBackend(tmp_path)

        def refuse(state):
            raise ValueError("not this one")

        outcomes = self.run_together(
            backend, [("a", append_next("one")), ("a", refuse), ("b", append_next("two"))]
        )
        assert isinstance(outcomes[1], ValueError)
        assert sorted(o for o in outcomes if isinstance(o, int)) == [1, 1]
        assert [u.text for u in backend.read("a").utterances] == ["one"]
        assert [u.text for u in backend.read("b").utterances] == ["two"]
        backend.close()

    def test_calls_on_one_conversation_in_a_group_see_each_other(self, tmp_path: Path) -> None:
        backend = DiskBackend(tmp_path)
        outcomes = self.run_together(backend, [("c", append_next(str(i))) for i in range(10)])
        assert sorted(outcomes) == list(range(1, 11))
        backend.close()
        reopened = DiskBackend(tmp_path)
        assert [u.seq for u in reopened.read("c").utterances] == list(range(1, 11))
        reopened.close()

    def test_a_change_that_breaks_seq_order_is_refused_alone(self, tmp_path: Path) -> None:
        """InvalidChange is raised before writing, and the rest of the group commits."""
        backend = DiskBackend(tmp_path)
        backend.transact("c", append_next())
        backend.transact("c", append_next())
        backwards = Change(append=[utterance(1, "again")])
        outcomes = self.run_together(
            backend, [("c", lambda s: (backwards, None)), ("d", append_next())]
        )
        assert isinstance(outcomes[0], InvalidChange)
        assert "buffer must stay in seq order" in str(outcomes[0])
        assert outcomes[1] == 1
        assert [u.text for u in backend.read("c").utterances] == ["x", "x"]
        backend.close()


class TestStateCache:
    """The in-memory cache of states is bounded and only ever a cache."""

    def test_cache_is_bounded_by_utterances_and_evicted_states_reload(self, tmp_path: Path) -> None:
        backend = DiskBackend(tmp_path, cached_utterances=25)
        for cid in ("a", "b", "c"):
            for _ in range(10):
                backend.transact(cid, append_next(cid))
        assert list(backend._states) == ["b", "c"]  # white box: "a" left first
        assert [u.text for u in backend.read("a").utterances] == ["a"] * 10
        assert list(backend._states) == ["c", "a"]
        backend.close()

    def test_cache_is_bounded_by_bytes_when_texts_are_long(self, tmp_path: Path) -> None:
        """Few utterances, long texts: the byte bound evicts first, and evicted states reload."""
        backend = DiskBackend(tmp_path, cached_utterances=10_000, cached_bytes=60_000)
        for cid in ("a", "b", "c", "d"):
            for _ in range(4):
                backend.transact(cid, append_next(cid * 5_000))
        assert list(backend._states) == ["c", "d"]  # white box: 4 x 5,000 characters each
        assert [u.text for u in backend.read("a").utterances] == ["a" * 5_000] * 4
        assert list(backend._states) == ["d", "a"]
        backend.close()
