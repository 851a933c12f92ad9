"""WAL checkpoints off the store path (backends/checkpointer.py)."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

from chd.backends.checkpointer import BACKSTOP, WAKE_AFTER, WAL_KEPT_BYTES, Checkpointer
from chd.backends.disk import DiskBackend
from tests.backends.backend_kinds import append_next

# Generous: how long the checkpoint thread may take to get to a checkpoint
# on a loaded machine. A liveness bound, not a speed expectation.
PATIENCE = 30.0


def checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "chd-wal-checkpoint"]


def wal_pages(directory: Path) -> int:
    with sqlite3.connect(directory / "cache.db") as db:
        (page_size,) = db.execute("PRAGMA page_size").fetchone()
    return (directory / "cache.db-wal").stat().st_size // (page_size + 24)


class TestCheckpointer:
    """The thread starts with the first commit, checkpoints, and stops with the backend."""

    def test_a_backend_that_only_reads_starts_no_thread(self, tmp_path: Path) -> None:
        DiskBackend(tmp_path).close()
        backend = DiskBackend(tmp_path)
        backend.read("c")
        assert backend._checkpointer._thread is None  # white box
        backend.close()

    def test_commits_are_checkpointed_in_the_background_and_close_stops_the_thread(
        self, tmp_path: Path
    ) -> None:
        before = set(checkpoint_threads())
        backend = DiskBackend(tmp_path)
        for _ in range(WAKE_AFTER):
            backend.transact("c", append_next())
        deadline = time.monotonic() + PATIENCE
        while backend._checkpointer.checkpoints == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert backend._checkpointer.checkpoints > 0
        backend.close()
        assert set(checkpoint_threads()) <= before

    def test_an_import_batch_is_checkpointed_at_once_not_after_the_interval(
        self, tmp_path: Path
    ) -> None:
        """A bulk commit wakes the thread: its copy runs beside the next batch, not at close."""
        DiskBackend(tmp_path).close()  # the database and its tables
        checkpointer = Checkpointer(tmp_path / "cache.db", synchronous=1, interval=3600)
        try:
            checkpointer.note_commit()  # an ordinary commit waits for the interval (or WAKE_AFTER)
            time.sleep(0.2)
            assert checkpointer.checkpoints == 0
            checkpointer.note_commit(bulk=True)
            deadline = time.monotonic() + PATIENCE
            while checkpointer.checkpoints == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert checkpointer.checkpoints == 1
        finally:
            checkpointer.close()

    def test_the_wal_stays_bounded_under_writes_that_never_pause(self, tmp_path: Path) -> None:
        """Background checkpoints alone cannot reset a WAL that keeps growing;
        SQLite's automatic checkpoint at BACKSTOP pages does."""
        backend = DiskBackend(tmp_path)
        stores = 3 * BACKSTOP // 2  # ~3 pages each: 4.5 times the backstop in all
        for i in range(stores):
            backend.transact(f"c{i % 8}", append_next("a few words of a store"))
        pages = wal_pages(tmp_path)  # before close: the last connection to close removes the WAL
        backend.close()
        assert pages < 2 * BACKSTOP

    def test_a_failing_checkpoint_is_logged_and_the_writes_go_on(
        self, tmp_path: Path, caplog
    ) -> None:
        checkpointer = Checkpointer(tmp_path / "missing" / "cache.db", synchronous=1, interval=0.01)
        with caplog.at_level(logging.WARNING, logger="backends.checkpointer"):
            checkpointer.note_commit()
            checkpointer.close()  # joins the thread, which has logged by then
        assert "background WAL checkpoint" in caplog.text
        assert "missing" in caplog.text


class TestWalSize:
    """The WAL file is cut back after a checkpoint, not kept at its largest (issue 28, item 6)."""

    def test_after_a_checkpoint_the_next_write_cuts_the_wal_back_to_its_kept_size(
        self, tmp_path: Path
    ) -> None:
        backend = DiskBackend(tmp_path)
        try:
            for n in range(400):  # ~6 pages a store: a WAL of ~9.6 MB
                backend.transact(f"c{n % 5}", append_next(f"{n:04d} " * 200))
            wal = tmp_path / "cache.db-wal"
            # What the background checkpointer does, on this thread alone, to be sure it ran.
            backend._checkpointer.close()
            busy, frames, copied = backend._cache._sql("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            assert busy == 0 and frames == copied
            backend.transact("c0", append_next("the write that starts the WAL over"))
            assert wal.stat().st_size <= WAL_KEPT_BYTES
            assert backend.read("c0").utterances[-1].text == "the write that starts the WAL over"
        finally:
            backend.close()
