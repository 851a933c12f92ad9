"""Many conversations (issue 17): listing, counts and the queue index stay exact and cheap.

No timing here (bench/bench_scale.py measures speed): these check that the
counters and indexes that replace start-up scans say exactly what a scan
would, through every kind of change, across processes and across a crash.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import diskcache
import pytest

from chd.backends.base import (
    Change,
    ConversationState,
    count_conversations,
    iter_conversations,
    iter_sizes,
    queued_conversations,
    transact_many,
)
from chd.backends.disk import DiskBackend
from chd.backends.records import COUNTS_KEY, QUEUED_PREFIX, SCHEMA_KEY
from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from chd.core.summaries.worker import FoldWorker
from tests.backends.backend_kinds import append_next, utterance
from tests.conftest import BACKEND_KINDS, ROOT, chd_env, open_test_backend


def _created(state: ConversationState) -> tuple[Change, None]:
    return Change(
        append=[utterance(1, conversation_id=state.conversation_id)], next_seq=2, last_turn=1
    ), None


def _settings_only(state: ConversationState) -> tuple[Change, None]:
    return Change(settings={"buffer_size": 5}), None


def _queued(state: ConversationState) -> tuple[Change, None]:
    """A store that evicted: one utterance in the buffer, one waiting for the summary."""
    cid, seq = state.conversation_id, state.next_seq
    return Change(
        append=[utterance(seq + 1, conversation_id=cid)],
        pending_add=[utterance(seq, conversation_id=cid)],
        next_seq=seq + 2,
        last_turn=seq + 1,
    ), None


def _scanned(backend) -> tuple[list[str], list[str]]:
    """What a full scan says: conversations with state, and those with a queue."""
    ids = backend.conversations()
    return ids, [cid for cid in ids if backend.read(cid).pending]


@pytest.fixture(params=BACKEND_KINDS)
def any_backend(request: pytest.FixtureRequest, tmp_path: Path):
    backend = open_test_backend(request.param, tmp_path)
    yield backend
    backend.close()


class TestListing:
    """Listing returns exactly the conversations with state, sorted, page after page."""

    def test_listing_across_several_pages_is_exactly_the_conversations_with_state(
        self, tmp_path: Path
    ) -> None:
        """2,500 conversations (three keyset pages), ids that sort awkwardly, and some without state."""
        backend = DiskBackend(tmp_path)
        ids = [f"c{i:05d}" for i in range(2500)] + [
            "a",
            "a#1",
            "a#10",
            "m",
            "z\u00e9",
            "q:x",
            "\u4e2d",
        ]
        transact_many(backend, [(cid, _created) for cid in ids[:2000]])
        transact_many(backend, [(cid, _settings_only) for cid in ids[2000:]])
        # A conversation whose only setting is taken back has no state again.
        backend.transact("c00007", lambda s: (Change(), None))
        backend.transact("gone", _settings_only)
        backend.transact("gone", lambda s: (Change(settings={}), None))
        expected = sorted(ids)
        assert backend.conversations() == expected
        assert list(backend.iter_conversations()) == expected
        assert list(backend.iter_conversations(after="c01000")) == [
            c for c in expected if c > "c01000"
        ]
        assert backend.count_conversations() == len(expected)
        backend.close()

    def test_a_listing_sees_what_another_process_wrote_to_the_same_dir(
        self, tmp_path: Path
    ) -> None:
        backend = DiskBackend(tmp_path)
        backend.transact("here", append_next())
        script = textwrap.dedent(
            """
            import sys
            from chd.backends.disk import DiskBackend
            from tests.backends.backend_kinds import append_next
            other = DiskBackend(sys.argv[1])
            for i in range(1200):
                other.transact(f"there{i:04d}", append_next())
            other.close()
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path)],
            env=chd_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        expected = ["here", *(f"there{i:04d}" for i in range(1200))]
        assert backend.conversations() == expected
        assert backend.count_conversations() == 1201
        backend.close()

    def test_every_backend_streams_its_listing_through_the_capability_functions(
        self, any_backend
    ) -> None:
        for cid in ("b", "a", "c"):
            any_backend.transact(cid, append_next())
        assert list(iter_conversations(any_backend)) == ["a", "b", "c"]
        assert list(iter_conversations(any_backend, after="a")) == ["b", "c"]
        assert count_conversations(any_backend) == 3
        assert sorted(iter_sizes(any_backend)) == [("a", 1, 0), ("b", 1, 0), ("c", 1, 0)]

    def test_the_disk_backend_sums_buffer_and_queue_runs_with_gaps_in_sql(
        self, tmp_path: Path
    ) -> None:
        """iter_sizes adds up the meta records' seq runs in SQLite: gaps, a queue, an empty buffer."""
        backend = DiskBackend(tmp_path)
        for _ in range(9):
            backend.transact("gaps", append_next())
        backend.transact("gaps", lambda s: (Change(remove={4, 7}), None))
        backend.transact(
            "gaps",
            lambda s: (
                Change(remove={1, 2}, pending_add=[u for u in s.utterances if u.seq in (1, 2)]),
                None,
            ),
        )
        backend.transact("queued", append_next())
        backend.transact(
            "queued", lambda s: (Change(remove={1}, pending_add=list(s.utterances)), None)
        )
        expected = {
            cid: (len(s.utterances), len(s.pending))
            for cid in ("gaps", "queued")
            for s in [backend.read(cid)]
        }
        assert expected == {"gaps": (5, 2), "queued": (0, 1)}
        assert sorted(backend.iter_sizes()) == [("gaps", 5, 2), ("queued", 0, 1)]
        backend.close()


class TestCounters:
    """The count and the queue index agree with a full scan after every kind of change."""

    def test_counts_follow_stores_evictions_folds_removes_clears_and_imports(
        self, any_backend
    ) -> None:
        from chd.core.transfer import import_states

        history = ConversationHistory(
            any_backend, Settings(buffer_size=3, eviction_batch=2), background=False
        )
        steps = [
            ("one", "Add utterance: first"),
            ("two", "Add utterance: second"),
            ("four", "queue"),
            ("one", "queue"),
            ("one", "Get summary"),  # folds: the queue empties
            ("two", "Remove the last utterance"),
            ("two", "Get summary"),
            ("three", "Add utterance: third"),
            ("three", "Clear the conversation"),
        ]
        for cid, text in steps:
            if text == "queue":
                any_backend.transact(cid, _queued)
            else:
                history.query(text, {"conversation_id": cid})
            ids, queued = _scanned(any_backend)
            assert count_conversations(any_backend) == len(ids), text
            assert list(queued_conversations(any_backend)) == queued, text
        queued_state = ConversationState(
            "imported",
            next_seq=4,
            last_turn=3,
            utterances=[utterance(3, conversation_id="imported")],
            pending=[
                utterance(1, conversation_id="imported"),
                utterance(2, conversation_id="imported"),
            ],
        )
        import_states(any_backend, [queued_state])
        ids, queued = _scanned(any_backend)
        assert "imported" in ids and "imported" in queued
        assert count_conversations(any_backend) == len(ids)
        assert list(queued_conversations(any_backend)) == queued
        # An import that replaces it with nothing at all leaves no state.
        import_states(any_backend, [ConversationState("imported")], replace=True)
        assert "imported" not in any_backend.conversations()
        assert count_conversations(any_backend) == len(any_backend.conversations())
        assert "imported" not in list(queued_conversations(any_backend))

    def test_concurrent_processes_creating_conversations_keep_the_count_exact(
        self, tmp_path: Path
    ) -> None:
        DiskBackend(tmp_path).close()
        script = textwrap.dedent(
            """
            import sys
            from chd.backends.disk import DiskBackend
            from tests.backends.backend_kinds import append_next
            backend = DiskBackend(sys.argv[1])
            for i in range(60):
                # Each process creates its own and also writes to shared ones.
                backend.transact(f"{sys.argv[2]}-{i}", append_next())
                backend.transact(f"shared-{i % 7}", append_next())
            backend.close()
            """
        )
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(tmp_path), name],
                env=chd_env(),
                cwd=ROOT,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name in ("p1", "p2", "p3")
        ]
        for worker in workers:
            assert worker.wait(timeout=120) == 0, worker.stderr.read() if worker.stderr else ""
        backend = DiskBackend(tmp_path)
        assert backend.count_conversations() == len(backend.conversations()) == 3 * 60 + 7
        backend.close()

    def test_opening_an_older_dir_builds_the_count_and_the_queue_index_once(
        self, tmp_path: Path, caplog
    ) -> None:
        """A schema 2 dir (no counts, no index) is counted and indexed on first open, and says so."""
        backend = DiskBackend(tmp_path)
        for cid in ("a", "b", "c"):
            backend.transact(cid, append_next() if cid == "b" else _queued)
        backend.close()
        with diskcache.Cache(str(tmp_path)) as cache:
            cache.set(SCHEMA_KEY, json.dumps({"schema": 2, "created_by": "chd storage schema 2"}))
            cache.delete(COUNTS_KEY)
            for key in list(cache.iterkeys()):
                if key.startswith(QUEUED_PREFIX):
                    cache.delete(key)
        with caplog.at_level(logging.INFO, logger="chd.backends.disk"):
            reopened = DiskBackend(tmp_path)
        assert (
            "has storage schema 2" in caplog.text
            and "3 conversations, 2 with queued" in caplog.text
        )
        assert reopened.count_conversations() == 3
        assert list(reopened.queued_conversations()) == ["a", "c"]
        reopened.close()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="chd.backends.disk"):
            DiskBackend(tmp_path).close()
        assert "has storage schema" not in caplog.text


class TestRecovery:
    """Start-up recovery folds every queued conversation and only those."""

    def test_recovery_submits_exactly_the_indexed_queues(self, tmp_path: Path) -> None:
        backend = DiskBackend(tmp_path)
        for i in range(40):
            # Every fourth has an utterance waiting for its summary.
            backend.transact(f"c{i:02d}", _queued if i % 4 == 0 else append_next())
        backend.close()

        reopened = DiskBackend(tmp_path)
        folded: list[str] = []
        worker = FoldWorker(lambda cid: folded.append(cid) or True, idle_exit=0.2)
        worker.recover(lambda: queued_conversations(reopened))
        expected = [f"c{i:02d}" for i in range(0, 40, 4)]
        deadline = time.monotonic() + 60  # a bound on waiting, not a timed assertion
        while len(folded) < len(expected) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert worker.idle(30)
        assert sorted(folded) == expected
        worker.stop()
        reopened.close()

    def test_the_folder_keeps_no_lock_for_a_conversation_it_is_done_with(self, any_backend) -> None:
        history = ConversationHistory(
            any_backend, Settings(buffer_size=2, eviction_batch=1), background=False
        )
        for i in range(30):
            for n in range(3):
                history.query(f"Add utterance: {n}", {"conversation_id": f"c{i}"})
            history.query("Get summary", {"conversation_id": f"c{i}"})
        assert list(queued_conversations(any_backend)) == []
        assert history.folder._locks == {}


class TestArchiveDecodedWhenAsked:
    """A cache miss decodes the buffer and the meta; the archive waits until something reads it."""

    @staticmethod
    def _archived(tmp_path: Path) -> ConversationState:
        from chd.core.transfer import import_states

        long = "a long archived text " * 40
        state = ConversationState(
            "c",
            next_seq=41,
            last_turn=40,
            utterances=[utterance(s) for s in range(31, 41)],
            archive=[utterance(s, long if s == 7 else None) for s in range(1, 31)],
        )
        backend = DiskBackend(tmp_path)
        import_states(backend, [state])
        backend.close()
        return state

    def test_a_read_leaves_the_archive_undecoded_and_a_store_keeps_it_so(
        self, tmp_path: Path
    ) -> None:
        from chd.backends.lazy_list import is_unloaded

        expected = self._archived(tmp_path)
        backend = DiskBackend(tmp_path)
        state = backend.read("c")
        assert state.utterances == expected.utterances and is_unloaded(state.archive)
        for _ in range(9):  # closes a block of buffer seqs on the way
            backend.transact("c", append_next())
        after = backend.read("c")
        assert is_unloaded(after.archive)
        assert after.archive == expected.archive  # decoded now, long text and all
        assert state.archive == expected.archive
        backend.close()

    def test_an_old_snapshot_keeps_its_archive_after_the_conversation_is_replaced(
        self, tmp_path: Path
    ) -> None:
        """The archive's records are read with the snapshot, so a later rewrite does not leak into it."""
        from chd.core.transfer import import_states

        expected = self._archived(tmp_path)
        backend = DiskBackend(tmp_path)
        old = backend.read("c")
        other = DiskBackend(tmp_path)
        replacement = ConversationState(
            "c",
            next_seq=21,
            last_turn=20,
            utterances=[utterance(s, f"new {s}") for s in range(11, 21)],
            archive=[utterance(s, f"new {s}") for s in range(1, 11)],
        )
        import_states(other, [replacement], replace=True)
        other.close()
        assert old.archive == expected.archive
        assert backend.read("c").archive == replacement.archive
        backend.close()


class TestMissOutsideTheLock:
    """A store to a conversation not cached yet reads it in one statement, before the write transaction."""

    @staticmethod
    def _statements(backend: DiskBackend) -> list[str]:
        seen: list[str] = []
        backend._cache._con.set_trace_callback(
            seen.append
        )  # this thread's connection, as the backend uses it
        return seen

    def test_a_cache_miss_reads_the_conversation_in_one_statement(self, tmp_path: Path) -> None:
        """Each SQLite call lets go of the GIL; a miss made five (meta, blocks, own records, summary, meta)."""
        TestArchiveDecodedWhenAsked._archived(tmp_path)
        backend = DiskBackend(tmp_path)
        seen = self._statements(backend)
        state = backend.read("c")
        assert [u.seq for u in state.utterances] == list(range(31, 41)) and len(state.archive) == 30
        # Not cached at all: no meta get first, the one statement reads the meta record too.
        assert len([s for s in seen if s.lstrip().upper().startswith("SELECT")]) == 1
        seen.clear()
        backend.read("c")  # cached: the meta's get only
        assert len(seen) == 1
        backend.close()

    def test_a_store_decodes_an_uncached_conversation_before_its_write_transaction(
        self, tmp_path: Path
    ) -> None:
        """Decoding inside BEGIN IMMEDIATE held every other writer (and the folds) behind it."""
        TestArchiveDecodedWhenAsked._archived(tmp_path)
        backend = DiskBackend(tmp_path)
        seen = self._statements(backend)
        backend.transact("c", append_next())
        begin = next(i for i, s in enumerate(seen) if s.startswith("BEGIN"))
        fetches = [i for i, s in enumerate(seen) if "UNION ALL" in s]
        assert fetches and all(i < begin for i in fetches)
        assert [u.seq for u in backend.read("c").utterances][-1] == 41
        backend.close()
