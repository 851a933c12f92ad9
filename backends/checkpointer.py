"""WAL checkpoints from a thread of their own, off the path of a store.

In WAL mode a commit appends pages to ``cache.db-wal``; a *checkpoint*
copies them back into ``cache.db`` so the WAL can start over. By default
SQLite checkpoints automatically after the commit that takes the WAL past
1,000 pages, on the committing connection, before its COMMIT returns: that
store waits for the copy and two fsyncs (4-5 ms, 9 % of the disk store time
over gRPC in issue 3; p99.9 of 5 ms and 5-6 % of the time in-process with
schema 2, bench/bench_disk_store.py) while it holds the commit lock.

So a ``Checkpointer`` runs ``PRAGMA wal_checkpoint(PASSIVE)`` on its own
SQLite connection in its own thread, every ``interval`` seconds while there
are commits, or after ``WAKE_AFTER`` commits if that comes first. PASSIVE
never waits for and never blocks a writer or a reader, and the sqlite3
module releases the GIL while SQLite copies and syncs. In-process the store
p99.9 fell to ~1 ms and the time in stores over 1 ms to ~1 %; the mean, and
the gRPC throughput, did not change measurably (the copy and the syncs cost
the same, on another thread).

It also bounds what a power loss can take under ``synchronous=NORMAL``: a
checkpoint first syncs the WAL (src/wal.c, walCheckpoint), so a commit is
synced about ``interval`` seconds after it returned (plus the time a running
checkpoint takes). Without it SQLite syncs only at its checkpoint every
1,000 pages, ~330 stores, which at a few stores a minute is hours; until
then the newest commits are only as safe as the OS's own writeback
(docs/backends.md, "What survives what").

A PASSIVE checkpoint cannot reset the WAL while writes keep coming (it only
copies the frames that were there when it started), so under a steady load
the WAL would grow without bound (checkpoint starvation). The disk backend
therefore keeps SQLite's automatic checkpoint as a backstop at ``BACKSTOP``
pages: the commit that takes the WAL that far checkpoints the rest itself,
which is short because this thread has copied nearly all of it, and the
next write starts the WAL over.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

__all__ = ["Checkpointer", "BACKSTOP", "INTERVAL", "WAKE_AFTER", "WAL_KEPT_BYTES"]

log = logging.getLogger(__name__)

# Pages (4 KiB each) the WAL may reach before a committing connection
# checkpoints itself: ~32 MiB, ~2,700 stores of ~3 pages each.
BACKSTOP = 8000
# Bytes of WAL file kept once a checkpoint has copied it all and the next
# write starts it over (SQLite's journal_size_limit): without it the file
# stays at its largest, up to BACKSTOP pages, for good. Measured: 1,800
# stores of 1 kB left a 17.6 MB WAL beside a 2.5 MB database; with it, 4 MiB.
WAL_KEPT_BYTES = 4 << 20
# A WAL larger than this after a background checkpoint is restarted: writes
# that never pause keep a PASSIVE checkpoint from ever finishing, and the WAL
# grew by ~24 KiB a 1 kB store up to BACKSTOP (5.2 MB for 221 stores filled a
# 5 MiB disk; issue 28). RESTART waits up to RESTART_WAIT for the writer of
# the moment, copies the few frames PASSIVE left, and the next write starts
# the WAL over (cut back to WAL_KEPT_BYTES).
RESTART_ABOVE = 2 * WAL_KEPT_BYTES
RESTART_WAIT_MS = 200
# Seconds between background checkpoints while there are commits...
INTERVAL = 0.5
# ...or sooner, after this many commits (~3 WAL pages each): at 4,000 stores a
# second the WAL would otherwise reach BACKSTOP between two checkpoints.
WAKE_AFTER = 256
# Seconds between two log lines about failing checkpoints (a full disk fails
# every one of them, and the writes' own errors already say so).
_LOG_EVERY = 60.0


class Checkpointer:
    """Checkpoints one SQLite database in WAL mode from a background thread.

    The thread starts with the first ``note_commit`` (a process that only
    reads never checkpoints) and stops with ``close``.

    Args:
        database: The database file (diskcache's ``cache.db``).
        synchronous: The ``PRAGMA synchronous`` level the writers use; the
            checkpoint's own syncs follow it.
        interval: Seconds between checkpoints while commits come in.
    """

    def __init__(self, database: Path, synchronous: int, interval: float = INTERVAL) -> None:
        self._database = database
        self._synchronous = int(synchronous)
        self._interval = interval
        self._commits = 0
        self._checkpointed = 0  # the commit count the last checkpoint started at
        self._wake = threading.Event()
        self._stopping = False
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._last_logged = float("-inf")
        self.checkpoints = 0  # how many ran, for tests and curiosity
        self.restarts = 0  # how many of them also restarted a large WAL

    def note_commit(self, bulk: bool = False) -> None:
        """Tell the checkpointer a transaction committed (cheap: a counter).

        ``bulk``: a large one (an import's batch, megabytes): checkpoint now,
        so the copy runs beside the writer's next batch instead of all at
        the end, where the last connection's close copies what is left
        while the import waits (a fifth of a 1,000-conversation import).
        """
        self._commits += 1
        if bulk or self._commits - self._checkpointed >= WAKE_AFTER:
            self._wake.set()
        if self._thread is None:
            self._start()

    def close(self) -> None:
        """Stop the thread after its current checkpoint; committed data stays in the WAL."""
        self._stopping = True
        self._wake.set()
        with self._start_lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is not None or self._stopping:
                return
            self._thread = threading.Thread(
                target=self._run, name="chd-wal-checkpoint", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        try:
            connection = sqlite3.connect(
                self._database, isolation_level=None, check_same_thread=True
            )
        except sqlite3.Error as exc:
            self._report(exc)
            return
        try:
            connection.execute(f"PRAGMA synchronous = {self._synchronous}")
            connection.execute(f"PRAGMA busy_timeout = {RESTART_WAIT_MS}")
            wal = Path(f"{self._database}-wal")
            while True:
                self._wake.wait(self._interval)
                self._wake.clear()
                if self._stopping:
                    return
                commits = self._commits
                if commits == self._checkpointed:
                    continue
                self._checkpointed = commits
                try:
                    connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
                    if _size(wal) > RESTART_ABOVE:
                        connection.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
                        self.restarts += 1
                except sqlite3.Error as exc:
                    # A full disk, or a damaged database: the writes meet the
                    # same cause and report it; the WAL keeps every commit.
                    self._report(exc)
        finally:
            connection.close()

    def _report(self, exc: sqlite3.Error) -> None:
        now = time.monotonic()
        if now - self._last_logged >= _LOG_EVERY:
            self._last_logged = now
            log.warning("background WAL checkpoint of %s failed: %s", self._database, exc)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
