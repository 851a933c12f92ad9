"""The durable backend: conversations in a diskcache (SQLite) directory.

A thin layer over diskcache's public API. What it relies on, and why:

* ``Cache.transact()`` is ``BEGIN IMMEDIATE`` ... ``COMMIT`` on SQLite: one
  writer at a time across every thread and process using the directory, and
  a transaction is applied whole or not at all, also across a crash. Every
  ``transact`` here is one such transaction, committed before it returns,
  so the daemon never acknowledges a change that is not on disk.
* ``eviction_policy='none'`` and ``cull_limit=0``: a default Cache deletes
  entries once it passes its 1 GiB ``size_limit`` (least recently stored
  first), which here would silently delete conversations.
* ``disk_min_file_size=2**30``: by default values of 32 KiB or more go to
  separate files, which diskcache writes without fsync, so after a power
  loss a committed row could name a truncated file. Keeping every record in
  SQLite puts all of it under SQLite's journal.
* ``sqlite_synchronous``: 1 (NORMAL, diskcache's default) or 2 (FULL) with
  ``durability='full'``; see docs/backends.md for what each survives.

Each conversation has a small meta record that also carries its newest
utterances (the open block); older ones sit in blocks of 8 (see
backends/records.py). So a store reads and writes the meta record, a few
hundred bytes to a few KB whatever the buffer size, and one store in eight
also writes the block it closes. Reading a whole 10,000-utterance
buffer on every operation would cost more than the operation, so states are
cached in memory beside the meta record they were read with; every commit
writes a new token into that record, and a cached state is used only while
the stored record is unchanged: the usual store checks it in its own write
(an UPDATE of the record only where it is still the cached text), any
other change reads the record first. The cache is only a cache, and
several processes can share one directory.

Concurrent ``transact`` calls of one process are group-committed: the thread
holding the commit lock decides and writes every queued call in one SQLite
transaction, and each call returns after that COMMIT with its own result.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import operator
import os
import sqlite3
import threading
import time
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import diskcache
import diskcache.core

from chd.backends.base import (
    CALL_DEADLINE,
    Change,
    ConversationState,
    Decide,
    Outcome,
    T,
    apply_change,
)
from chd.backends.checkpointer import BACKSTOP, WAL_KEPT_BYTES, Checkpointer
from chd.backends.disk_errors import describe_open_error, is_full
from chd.backends.encoded import (
    EncodedConversation,
    EncodedUtterance,
    encode_record,
    replacing_change,
)
from chd.backends.group_commit import GroupCommit, Request
from chd.backends.lazy_list import LazyList, is_unloaded
from chd.backends.records import (
    BLOCK_SIZE,
    COUNTS_KEY,
    META_PREFIX,
    QUEUED_PREFIX,
    QUEUED_RECORD,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    Meta,
    block_key,
    block_of,
    decode_block,
    decode_counts,
    decode_meta,
    decode_schema,
    decode_summary,
    decode_utterance,
    encode_block,
    encode_counts,
    encode_in_block,
    encode_meta,
    encode_own,
    encode_schema,
    encode_summary,
    encode_utterance,
    has_own_record,
    meta_key,
    queued_key,
    split_block,
    summary_key,
    utterance_key,
)
from chd.backends.seq_runs import SeqRuns
from chd.core.errors import (
    DeadlineExceeded,
    EmptiedDatabase,
    InvalidRequest,
    StorageError,
    StorageFull,
)
from chd.core.utterance import Summary, Utterance

__all__ = ["DiskBackend", "DURABILITY", "InvalidChange", "MARKER"]

log = logging.getLogger(__name__)

# --durability -> SQLite's PRAGMA synchronous (diskcache's sqlite_synchronous).
DURABILITY = {"normal": 1, "full": 2}

# A batch's wait for another process's lock is shortened to what is left of
# its earliest call's time only when that is this much under the full wait:
# calls answer within this margin of their deadline, and a store with all its
# time left sends no PRAGMA.
_WAIT_SLACK_MS = 50

# What diskcache raises for a storage failure; _failed translates them.
_STORAGE_ERRORS = (diskcache.Timeout, sqlite3.Error, OSError)

# Keys per listing query: a page is one index seek, so the listing is linear
# whatever its length (diskcache's iterkeys re-scanned the index from its
# start on every page of 100: 5.9 s at 10k conversations, ~566 s at 100k).
_PAGE = 1000

# Written beside cache.db once the directory holds chd's store, so a database
# that later goes missing or is truncated to 0 bytes is noticed: SQLite reads
# either as a new empty database, and the daemon came up SERVING with every
# conversation gone (issue 28).
MARKER = "chd-data-dir"
_MARKER_TEXT = (
    "This directory holds a chd conversation store (cache.db). While this file is here, chd refuses\n"
    "to start if cache.db is missing or empty, unless started with --allow-empty-database.\n"
)

# A meta record with state: ConversationState.is_empty, read by SQLite's JSON
# functions so a listing decodes no record in Python.
_HAS_STATE = "(json_extract(value, '$.next_seq') > 1 OR json_extract(value, '$.settings') <> '{}')"


_SEQ, _LONG, _TEXT = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)

# How many seqs a meta record's SeqRuns field (such as [[1,20],[25,25]]) holds, in SQL.
_RUN_LENGTH = (
    "(SELECT COALESCE(SUM(json_extract(r.value, '$[1]') - json_extract(r.value, '$[0]') + 1), 0)"
    " FROM json_each(Cache.value, '$.%s') AS r)"
)

# _insert's statement: Cache.set's row for a text key and value, in one statement for many rows.
_UPSERT = (
    "INSERT INTO Cache(key, raw, store_time, expire_time, access_time, access_count, tag, size, mode,"
    f" filename, value) VALUES (?, 1, ?, NULL, ?, 0, NULL, 0, {diskcache.core.MODE_RAW}, NULL, ?)"
    " ON CONFLICT(key, raw) DO UPDATE SET store_time = excluded.store_time, expire_time = NULL,"
    f" access_time = excluded.access_time, access_count = 0, tag = NULL, size = 0, mode = {diskcache.core.MODE_RAW},"
    " filename = NULL, value = excluded.value"
)

# _meta_text's statement: a text value by key.
_GET = "SELECT value FROM Cache WHERE key = ? AND raw = 1"

# _append's statement when the state it decided on came from the cache
# unchecked: the meta record is replaced only if it is still the text cached
# (no other process or connection wrote it since), leaving the row as _UPSERT
# would. One statement instead of _GET and _UPSERT, and expire_time, always
# NULL in chd's rows, is left alone, so its index is not written on every store.
_REPLACE = (
    "UPDATE Cache SET store_time = ?, access_time = ?, access_count = 0, tag = NULL, size = 0,"
    f" mode = {diskcache.core.MODE_RAW}, filename = NULL, value = ?"
    " WHERE key = ? AND raw = 1 AND value = ? AND expire_time IS NULL"
)

# What one cached utterance costs in memory besides its text's characters:
# the Utterance object and its other strings (measured with tracemalloc on
# decoded blocks: 330-370 bytes).
_UTTERANCE_BYTES = 350


class InvalidChange(StorageError):
    """A change that would break the stored layout (duplicate or unordered seqs)."""


@dataclass(slots=True)
class _Cached:
    """A conversation's state and the meta record it belongs to (never changed once made).

    Equal meta text means the same commit (every commit writes a new token),
    so the state can be used without reading the utterances again.
    ``open_records`` are the meta's open-block utterances as encoded in it,
    by seq, for the next commit to reuse (None: not encoded yet).
    """

    text: str | None
    meta: Meta | None
    state: ConversationState
    open_records: dict[int, str] | None = None
    # The characters of the state's texts, counted when it was loaded and
    # added to by each commit's new utterances (never subtracted: an
    # estimate from above, made exact again by the next load).
    chars: int = 0
    # (size, bytes) when it entered the cache: what leaves with it, even if
    # its archive was decoded since.
    weight: tuple[int, int] = (0, 0)

    @property
    def size(self) -> int:
        """What the entry weighs in the cache: its decoded utterances, and one for the rest."""
        state = self.state
        archive = 0 if is_unloaded(state.archive) else len(state.archive)
        return 1 + len(state.utterances) + len(state.pending) + archive

    @property
    def bytes(self) -> int:
        """Roughly what the entry's utterances take in memory."""
        return self.size * _UTTERANCE_BYTES + self.chars


_NO_META = Meta(token="")


@dataclass(slots=True)
class _Records:
    """A conversation's records as stored, not decoded yet: blocks and own utterances by number."""

    blocks: dict[int, str]
    own: dict[int, str]
    meta: str | None = None
    summary: str | None = None


# _fetch's statement: a conversation's meta and summary records, and its
# block and own-utterance records by key range (each part an index seek).
_FETCH = " UNION ALL ".join(
    ["SELECT key, value FROM Cache WHERE key = ? AND raw = 1"] * 2
    + ["SELECT key, value FROM Cache WHERE key >= ? AND key < ? AND raw = 1"] * 2
)


class _Tokens:
    """Tokens for meta records: a new one for every commit of every process.

    A random 64-bit prefix per backend and a counter: a token repeats only if
    two backends draw the same prefix. A uuid4 per commit was a getrandom
    call and a UUID object, 4 us of a 150 us store.
    """

    def __init__(self) -> None:
        self._prefix = os.urandom(8).hex() + "."
        self._count = itertools.count(1)

    def next(self) -> str:
        return self._prefix + str(next(self._count))


class _Changed(Exception):
    """A record named by the meta record is missing.

    Outside a transaction a writer got in between the reads: read again.
    Inside one it means a damaged directory.
    """


class DiskBackend:
    """Conversations stored durably in a diskcache directory.

    Args:
        data_dir: Directory for the SQLite database; created if missing.
        durability: ``"normal"`` or ``"full"`` (see ``DURABILITY``); ``None``
            keeps whatever the directory was last opened with (tools such as
            ``chd export`` use this so they do not change a daemon's setting).
        timeout: Seconds to wait for another process's write transaction.
        cached_utterances: How many utterances the in-memory cache of states
            may hold (least recently used conversations leave first); the
            conversation last used always stays.
        cached_bytes: Roughly how many bytes those utterances may take
            (``_UTTERANCE_BYTES`` each plus their text), whichever limit is
            reached first: a cache of long texts stays bounded too.
        request_timeout: A daemon's request_timeout: a write waits at most
            this long (and ``timeout``) for another process's lock, and then
            answers DeadlineExceeded, since its call's time is up; without
            it, waiting ``timeout`` out is a StorageError.
        allow_empty_database: Open a directory that held a store (its
            ``MARKER`` or a write-ahead log) although its database is missing
            or empty, starting with no conversations; refused otherwise.

    Raises:
        StorageError: The directory cannot be created, opened or written, holds
            a corrupted database, or was written by a newer chd.
    """

    name = "disk"

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        durability: str | None = None,
        timeout: float = 15.0,
        cached_utterances: int = 200_000,
        cached_bytes: int = 128 * 2**20,
        allow_empty_database: bool = False,
        request_timeout: float | None = None,
    ) -> None:
        self.path = Path(data_dir).expanduser()
        _check_database_kept(self.path, allow_empty_database)
        settings: dict[str, object] = {
            "eviction_policy": "none",
            "cull_limit": 0,
            "disk_min_file_size": 2**30,
            # The commit that fills the WAL to this many pages checkpoints it;
            # the Checkpointer has usually copied it all by then.
            "sqlite_wal_autocheckpoint": BACKSTOP,
            # The WAL file keeps its largest size unless told: a burst left
            # 33 MB beside a 1 MB database for good (issue 28).
            "sqlite_journal_size_limit": WAL_KEPT_BYTES,
        }
        if durability is not None:
            if durability not in DURABILITY:
                raise StorageError(
                    f"unknown durability {durability!r}; use one of {', '.join(DURABILITY)}"
                )
            settings["sqlite_synchronous"] = DURABILITY[durability]
        self._states: OrderedDict[str, _Cached] = OrderedDict()
        self._states_lock = threading.Lock()
        self._capacity = cached_utterances
        self._capacity_bytes = cached_bytes
        self._cached_count = 0
        self._cached_bytes = 0
        # Orders this process's writers; SQLite's own write lock is what keeps
        # writers from different processes apart.
        self._group = GroupCommit(self._commit, expired=self._expired)
        # Per thread: its connection and the busy timeout set on it (_wait_for).
        self._busy = threading.local()
        self._tokens = _Tokens()
        self._closed = False
        # A store waited out diskcache's 15 s for a lock another process held,
        # past a 2 s request_timeout, then answered UNAVAILABLE (issue 28).
        self._lock_wait_is_deadline = request_timeout is not None and request_timeout < timeout
        if request_timeout is not None:
            timeout = min(timeout, request_timeout)
        self._lock_wait = timeout
        try:
            self._cache = diskcache.Cache(str(self.path), timeout=timeout, **settings)
        except (OSError, sqlite3.Error, diskcache.Timeout) as exc:
            raise StorageError(
                f"cannot open data dir {self.path}: {describe_open_error(exc, self.path)}"
            ) from exc
        self._checkpointer = Checkpointer(
            Path(self._cache.directory) / diskcache.core.DBNAME, self._cache.sqlite_synchronous
        )
        try:
            self._check_schema()
        except StorageError as exc:
            self._cache.close()
            raise StorageError(f"cannot use data dir {self.path}: {exc}") from exc
        except (OSError, sqlite3.Error, diskcache.Timeout) as exc:
            self._cache.close()
            raise StorageError(
                f"cannot open data dir {self.path}: {describe_open_error(exc, self.path)}"
            ) from exc
        _mark(self.path)

    # --- the Backend protocol --------------------------------------------------

    def read(self, conversation_id: str) -> ConversationState:
        with self._storage("read"):
            if conversation_id in self._states:
                hit = self._cached(conversation_id, self._meta_text(conversation_id))
                if hit is not None:
                    return hit.state
            # A miss: every record of the conversation in one statement, which
            # SQLite reads from one version (the meta record may be newer than
            # the one just compared; it is the one the records go with). A
            # conversation not cached at all skips the meta record's own
            # statement: _fetch reads it too (a miss was two statements; issue 17).
            entry = self._loaded(conversation_id, self._fetch(conversation_id))
            if entry.text is not None:
                self._remember(conversation_id, entry)
            return entry.state

    def transact(
        self,
        conversation_id: str,
        decide: Callable[[ConversationState], tuple[Change, T]],
    ) -> T:
        if self._closed:
            raise StorageError("the disk backend is closed")
        if conversation_id not in self._states:
            # Read (and decode) a state not cached yet before taking the write
            # lock, so the commit finds it cached: decoding inside the commit
            # held up every writer queued behind it (issue 17: a store to a
            # conversation not touched since start-up cost 3 ms against 1.4).
            # A failure here is the commit's to report.
            try:
                self.read(conversation_id)
            except StorageError:
                pass
        # The call's own deadline, or request_timeout from now: queued
        # writes each answer by theirs, not after a fresh wait per batch.
        deadline = CALL_DEADLINE.get()
        if deadline is None and self._lock_wait_is_deadline:
            deadline = time.monotonic() + self._lock_wait
        return self._group.run(conversation_id, decide, deadline)

    def conversations(self) -> list[str]:
        return list(self.iter_conversations())

    # --- optional capabilities (backends/base.py) -------------------------------

    def iter_conversations(self, after: str = "") -> Iterator[str]:
        """Every conversation with state above ``after``, sorted, a page at a time.

        Each page is its own read, so a listing that runs while others write
        sees every conversation that had state throughout, in order.
        """
        return self._keys(META_PREFIX, after, _HAS_STATE)

    def count_conversations(self) -> int:
        with self._storage("read"):
            return decode_counts(self._cache.get(COUNTS_KEY))

    def iter_sizes(self) -> Iterator[tuple[str, int, int]]:
        """Buffer and queue lengths from the meta records' seq runs; no utterance is read.

        SQLite sums the runs (``_RUN_LENGTH``), without the GIL: the metrics
        count this in a thread while the daemon starts, and decoding the runs
        in Python (1-2 s of CPU at 100,000 conversations) held back the rest
        of start-up, SERVING included.
        """
        start = len(META_PREFIX)
        columns = f"key, {_RUN_LENGTH % 'buffer'}, {_RUN_LENGTH % 'pending'}"
        for key, buffered, pending in self._rows(META_PREFIX, "", columns, _HAS_STATE):
            yield key[start:], buffered, pending

    def queued_conversations(self) -> Iterator[str]:
        return self._keys(QUEUED_PREFIX, "")

    def transact_many(self, calls: list[tuple[str, Decide]]) -> list[Outcome]:
        """The calls in one SQLite transaction (an import's batch); each outcome its own."""
        if self._closed:
            raise StorageError("the disk backend is closed")
        requests = [Request(cid, decide) for cid, decide in calls]
        with self._group.lock:
            self._commit(requests)
        return [Outcome(request.value, request.error) for request in requests]

    # --- bulk transfer (backends/encoded.py) ---------------------------------------

    def read_encoded(self, conversation_id: str) -> EncodedConversation:
        """The conversation as one snapshot, its utterances as the JSON texts its records hold.

        For ``chd export``: no ``Utterance`` is built and nothing is cached.
        The records come from one statement, one version, as a cache miss reads them.
        """
        with self._storage("read"):
            records = self._fetch(conversation_id)
            if records.meta is None:
                return EncodedConversation(conversation_id)
            try:
                return self._encoded(
                    conversation_id, decode_meta(records.meta, conversation_id), records
                )
            except _Changed as missing:
                raise self._damaged(conversation_id, missing) from None

    def write_encoded(self, batch: Sequence[EncodedConversation], replace: bool) -> None:
        """Write ``batch`` in one transaction (``chd import``), each conversation whole.

        A conversation with no record yet (the usual import) has its rows
        built straight from the texts and inserted in one statement; one
        that has records goes through the general write path.

        Raises:
            InvalidRequest: a conversation holds data and ``replace`` is
                False; the transaction is rolled back, so nothing of the
                batch is written.
            InvalidChange: a conversation's seqs are not ascending and distinct.
        """
        if self._closed:
            raise StorageError("the disk backend is closed")
        try:
            with self._group.lock, self._cache.transact():
                added = 0
                # The new conversations' rows, inserted in one statement
                # before anything reads or writes one of them (in order, so
                # the rows are the ones a statement per conversation makes).
                rows: list[tuple[str, str]] = []
                # Every meta record of the batch in one statement; one met
                # again in the batch is asked for again, once what came
                # before it is written.
                known = self._meta_texts(list(dict.fromkeys(c.conversation_id for c in batch)))
                met: set[str] = set()
                for conversation in batch:
                    cid = conversation.conversation_id
                    if cid in met:
                        if rows:
                            self._insert(rows)
                            rows = []
                        text = self._meta_text(cid)
                    else:
                        text = known.get(cid)
                        met.add(cid)
                    if text is None:
                        if not conversation.is_empty:
                            rows += self._encoded_rows(conversation)[0]
                            if conversation.pending:
                                rows.append((queued_key(cid), QUEUED_RECORD))
                            added += 1
                        continue
                    if rows:
                        self._insert(rows)
                        rows = []
                    current = self._current(cid, text)
                    if not current.state.is_empty and not replace:
                        raise InvalidRequest(
                            f"conversation {cid!r} already holds data; use --replace to overwrite it"
                        )
                    imported = conversation.to_state()
                    change = replacing_change(current.state, imported)
                    new_state = apply_change(current.state, change)
                    self._write(cid, current, change, new_state)
                    self._index(cid, current.state, new_state)
                if rows:
                    self._insert(rows)
                if added:
                    self._cache.set(
                        COUNTS_KEY,
                        encode_counts(decode_counts(self._cache.get(COUNTS_KEY)) + added),
                    )
        except _STORAGE_ERRORS as exc:
            self._failed(exc, "write")
        self._checkpointer.note_commit(bulk=True)

    def _encoded(self, conversation_id: str, meta: Meta, records: _Records) -> EncodedConversation:
        """read_encoded's snapshot of the records ``meta`` names (raises _Changed if one is gone)."""
        found: dict[int, EncodedUtterance] = {}
        for number, text in records.blocks.items():
            found.update(split_block(text, conversation_id, number))
        found.update((u.seq, encode_record(u)) for u in meta.open)
        own = records.own

        def encoded(seqs: SeqRuns) -> list[EncodedUtterance]:
            try:
                return [found[seq] for seq in seqs]
            except KeyError:
                pass
            out = []
            for seq in seqs:
                item = found.get(seq) if seq >= meta.own_below else None
                if item is None:  # a long text, or stored by schema 1
                    text = own.get(seq)
                    if text is None:
                        raise _Changed(f"{utterance_key(conversation_id, seq)!r} (or its block)")
                    item = encode_record(decode_utterance(text, conversation_id, seq))
                out.append(item)
            return out

        return EncodedConversation(
            conversation_id=conversation_id,
            next_seq=meta.next_seq,
            last_turn=meta.last_turn,
            settings=dict(meta.settings),
            summary=self._summary_of(conversation_id, meta, records),
            buffer=encoded(meta.buffer),
            pending=encoded(meta.pending),
            archive=encoded(meta.archive),
        )

    def _encoded_rows(
        self, conversation: EncodedConversation
    ) -> tuple[list[tuple[str, str]], Meta, list[str]]:
        """The records of a conversation that has none yet, as (key, value) rows, its meta, and its open block.

        The meta record's row comes last; the open block's records are the
        texts it holds (its ``Meta.open`` is left empty). The summary-queue
        index and the count are the caller's.
        """
        cid = conversation.conversation_id
        lists = (conversation.buffer, conversation.pending, conversation.archive)
        try:
            runs = [SeqRuns.of(list(map(_SEQ, items))) for items in lists]
        except ValueError as exc:
            raise InvalidChange(f"refusing a change to conversation {cid!r}: {exc}") from None
        # Each list is ascending (SeqRuns.of checked it); lists that do not
        # overlap, put in order of their first seqs, are all of it in order,
        # without a sort comparing tuples (an import's usual case).
        spans = sorted((items[0][0], items[-1][0], i) for i, items in enumerate(lists) if items)
        apart = all(high < low for (_, high, _), (low, _, _) in zip(spans, spans[1:]))
        if apart:
            ordered = list(itertools.chain.from_iterable(lists[i] for _, _, i in spans))
        else:
            ordered = sorted(itertools.chain(*lists))
        seqs = list(map(_SEQ, ordered))
        if not apart and not all(map(operator.lt, seqs, seqs[1:])):
            raise InvalidChange(
                f"refusing a change to conversation {cid!r} that would leave its seqs duplicated"
            )
        rows: list[tuple[str, str]] = []
        if any(map(_LONG, ordered)):
            rows.extend(
                (utterance_key(cid, seq), encode_own(record))
                for seq, long, record in ordered
                if long
            )
            ordered = [item for item in ordered if not item[1]]
            seqs = list(map(_SEQ, ordered))
        texts = list(map(_TEXT, ordered))
        # Each block's records are a slice of the seq-ordered texts: a step per block, not per utterance.
        open_block = block_of(conversation.next_seq)
        opened: list[str] = []
        start = 0
        while start < len(seqs):
            number = block_of(seqs[start])
            end = bisect_left(seqs, (number + 1) * BLOCK_SIZE + 1, start)
            if number == open_block:
                opened = texts[start:end]
            else:
                rows.append((block_key(cid, number), encode_block(texts[start:end])))
            start = end
        summary = conversation.summary
        has_summary = bool(summary.segments) or summary.through_seq > 0
        if has_summary:
            rows.append((summary_key(cid), encode_summary(summary)))
        meta = Meta(
            token=self._tokens.next(),
            next_seq=conversation.next_seq,
            last_turn=conversation.last_turn,
            buffer=runs[0],
            pending=runs[1],
            archive=runs[2],
            settings=dict(conversation.settings),
            has_summary=has_summary,
        )
        rows.append((meta_key(cid), encode_meta(meta, opened)))
        return rows, meta, opened

    def _insert(self, rows: list[tuple[str, str]]) -> None:
        """Rows as ``Cache.set`` would store each text value, in one statement.

        The columns are diskcache's for a text key and a text value kept in
        the database (raw key, ``MODE_RAW``, no file, size 0); a key that
        already exists is updated in place, which fires the same triggers
        as set's UPDATE.
        """
        now = time.time()
        self._cache._con.executemany(  # diskcache's connection of this thread
            _UPSERT, [(key, now, now, value) for key, value in rows]
        )

    def _set(self, key: str, value: str) -> None:
        """``Cache.set(key, value)`` for a text value, inside the caller's transaction, as one statement.

        Cache.set looks the row up, then updates or inserts it, and checks
        for culling: three times the cost of the one UPSERT (a store writes
        the meta record, a fold a block, the summary and the meta record).
        """
        now = time.time()
        self._cache._con.execute(
            _UPSERT, (key, now, now, value)
        )  # diskcache's connection of this thread

    def _keys(self, prefix: str, after: str, where: str = "") -> Iterator[str]:
        """The ids after ``prefix`` of the keys above ``prefix + after``."""
        start = len(prefix)
        return (key[start:] for (key,) in self._rows(prefix, after, "key", where))

    def _rows(
        self, prefix: str, after: str, columns: str, where: str = ""
    ) -> Iterator[tuple[Any, ...]]:
        """``columns`` of the rows whose keys start with ``prefix`` and sort above ``prefix + after``.

        Keyset pages in key order: each page is one seek in the key index.
        """
        # Every prefix is letters then ":"; the next character bounds the range.
        high = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        low, above = prefix + after, ">" if after else ">="
        while True:
            with self._storage("read"):
                rows = self._cache._sql(  # diskcache's connection of this thread
                    f"SELECT {columns} FROM Cache WHERE key {above} ? AND key < ? AND raw = 1"
                    f"{' AND ' + where if where else ''} ORDER BY key LIMIT {_PAGE}",
                    (low, high),
                ).fetchall()
            yield from rows
            if len(rows) < _PAGE:
                return
            low, above = rows[-1][0], ">"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._states_lock:
            self._states.clear()
            self._cached_count = 0
            self._cached_bytes = 0
        self._checkpointer.close()
        # Closes this thread's connection; those of other threads close as
        # their threads end.
        self._cache.close()

    # --- reading ---------------------------------------------------------------

    def _meta_texts(self, conversation_ids: list[str]) -> dict[str, str]:
        """``_meta_text`` of each conversation that has a meta record, a statement per 500."""
        found: dict[str, str] = {}
        for start in range(0, len(conversation_ids), 500):
            keys = {meta_key(cid): cid for cid in conversation_ids[start : start + 500]}
            marks = ",".join("?" * len(keys))
            for key, value in self._cache._sql(
                f"SELECT key, value FROM Cache WHERE key IN ({marks}) AND raw = 1", tuple(keys)
            ):
                found[keys[key]] = value
        return found

    def _meta_text(self, conversation_id: str) -> str | None:
        # What Cache.get returns for the text values chd stores (MODE_RAW, no
        # expiry), in one statement of a third of its cost: every read and
        # every commit asks.
        row = self._cache._sql(
            _GET, (meta_key(conversation_id),)
        ).fetchone()  # this thread's connection
        return None if row is None else row[0]

    def _cached(self, conversation_id: str, text: str | None) -> _Cached | None:
        """The cached state if ``text`` is still its meta record (no commit since)."""
        if text is None:
            return _Cached(None, None, ConversationState(conversation_id))
        with self._states_lock:
            entry = self._states.get(conversation_id)
            if entry is None or entry.text != text:
                return None
            self._states.move_to_end(conversation_id)
            return entry

    def _current(self, conversation_id: str, text: str | None) -> _Cached:
        """The state inside a transaction, where nothing can change under us."""
        hit = self._cached(conversation_id, text)
        if hit is not None:
            return hit
        entry = self._loaded(conversation_id, self._fetch(conversation_id))
        self._remember(conversation_id, entry)
        return entry

    def _fetch(self, conversation_id: str) -> _Records:
        """The conversation's meta, summary, block and own records, not decoded, in one statement.

        One statement, not a query per kind of record: each SQLite call lets
        go of the GIL, and getting it back while a fold runs in another
        thread can wait a switch interval (5 ms); a miss made five of them.
        """
        blocks, own = block_key(conversation_id, 0)[:-1], utterance_key(conversation_id, 0)[:-1]
        rows = self._cache._sql(
            _FETCH,
            (
                meta_key(conversation_id),
                summary_key(conversation_id),
                blocks + "0",
                blocks + ":",
                own + "0",
                own + ":",
            ),
        ).fetchall()
        records = _Records({}, {})
        for key, value in rows:
            kind = key[0]
            if kind == "b" or kind == "u":
                number = key[len(blocks) :]
                # Another conversation's id can continue this one's after the "#".
                if number.isdigit():
                    (records.blocks if kind == "b" else records.own)[int(number)] = value
            elif kind == "m":
                records.meta = value
            else:
                records.summary = value
        return records

    def _loaded(self, conversation_id: str, records: _Records) -> _Cached:
        """The cache entry for ``records`` (from _fetch): the meta record's state, decoded.

        Raises:
            StorageError: a record the meta record names is not among them.
        """
        text = records.meta
        if text is None:
            return _Cached(None, None, ConversationState(conversation_id))
        meta = decode_meta(text, conversation_id)
        try:
            state = self._load(conversation_id, meta, records)
        except _Changed as missing:
            raise self._damaged(conversation_id, missing) from None
        return _Cached(text, meta, state, chars=_chars(state))

    def _damaged(self, conversation_id: str, missing: _Changed) -> StorageError:
        return StorageError(
            f"conversation {conversation_id!r} is damaged in {self.path}: its record {missing.args[0]} is missing"
        )

    def _load(self, conversation_id: str, meta: Meta, records: _Records) -> ConversationState:
        blocks: dict[int, dict[int, Utterance]] = {
            block_of(meta.next_seq): {u.seq: u for u in meta.open}
        }
        summary = self._summary_of(conversation_id, meta, records)
        return ConversationState(
            conversation_id=conversation_id,
            next_seq=meta.next_seq,
            last_turn=meta.last_turn,
            utterances=self._utterances(conversation_id, meta, meta.buffer, blocks, records),
            pending=self._utterances(conversation_id, meta, meta.pending, blocks, records),
            summary=summary,
            settings=dict(meta.settings),
            archive=self._archive(conversation_id, meta, blocks, records),
        )

    def _archive(
        self,
        conversation_id: str,
        meta: Meta,
        blocks: dict[int, dict[int, Utterance]],
        records: _Records,
    ) -> list[Utterance]:
        """The archive's records, read now with the rest of the state, decoded on first use.

        Reading them now keeps the snapshot one version of the records (a
        later read could meet a newer one); decoding waits, because most
        requests never look at the archive (issue 17: a miss decoded an
        archive four times the buffer's size).
        """
        if not meta.archive:
            return []
        texts: dict[int, str | None] = {}
        for first, last in meta.archive.to_record():
            first = max(first, meta.own_below)
            for number in range(block_of(first), block_of(last) + 1) if first <= last else ():
                if number not in blocks and number not in texts:
                    texts[number] = records.blocks.get(number)
        own = records.own
        for number, text in texts.items():
            if text is None:  # all of its archived seqs must have their own records then
                low, high = max(number * BLOCK_SIZE + 1, meta.own_below), (number + 1) * BLOCK_SIZE
                missing = [
                    seq for seq in range(low, high + 1) if seq in meta.archive and seq not in own
                ]
                if missing:
                    own_key = utterance_key(conversation_id, missing[0])
                    raise _Changed(f"{block_key(conversation_id, number)!r} (or {own_key!r})")
        decoded = dict(blocks)

        def decode() -> list[Utterance]:
            out = []
            for seq in meta.archive:
                found = None
                if seq >= meta.own_below:
                    number = block_of(seq)
                    block = decoded.get(number)
                    if block is None:
                        text = texts.get(number)
                        block = decoded[number] = (
                            {} if text is None else decode_block(text, conversation_id, number)
                        )
                    found = block.get(seq)
                if found is None:
                    text = own.get(seq)
                    if text is None:
                        raise StorageError(
                            f"conversation {conversation_id!r} is damaged in {self.path}: "
                            f"archived utterance {seq} is in no record"
                        )
                    found = decode_utterance(text, conversation_id, seq)
                out.append(found)
            return out

        return LazyList(decode)

    def _utterances(
        self,
        conversation_id: str,
        meta: Meta,
        seqs: SeqRuns,
        blocks: dict[int, dict[int, Utterance]],
        records: _Records,
    ) -> list[Utterance]:
        """The utterances ``seqs``, from their blocks (decoded once each) or their own records."""
        out = []
        for seq in seqs:
            found = None
            if seq >= meta.own_below:
                number = block_of(seq)
                block = blocks.get(number)
                if block is None:
                    text = records.blocks.get(number)
                    block = blocks[number] = (
                        {} if text is None else decode_block(text, conversation_id, number)
                    )
                found = block.get(seq)
            if found is None:  # a long text, or stored by schema 1
                key = utterance_key(conversation_id, seq)
                text = records.own.get(seq)
                if text is None:
                    where = repr(key)
                    if seq >= meta.own_below:
                        where = f"{block_key(conversation_id, block_of(seq))!r} (or {key!r})"
                    raise _Changed(where)
                found = decode_utterance(text, conversation_id, seq)
            out.append(found)
        return out

    @staticmethod
    def _summary_of(conversation_id: str, meta: Meta, records: _Records) -> Summary:
        if not meta.has_summary:
            return Summary()
        if records.summary is None:
            raise _Changed(repr(summary_key(conversation_id)))
        return decode_summary(records.summary, conversation_id)

    def _remember(self, conversation_id: str, entry: _Cached) -> None:
        with self._states_lock:
            previous = self._states.pop(conversation_id, None)
            if previous is not None:
                self._cached_count -= previous.weight[0]
                self._cached_bytes -= previous.weight[1]
            entry.weight = (entry.size, entry.bytes)
            self._states[conversation_id] = entry
            self._cached_count += entry.weight[0]
            self._cached_bytes += entry.weight[1]
            while (
                self._cached_count > self._capacity or self._cached_bytes > self._capacity_bytes
            ) and len(self._states) > 1:
                _, oldest = self._states.popitem(last=False)
                self._cached_count -= oldest.weight[0]
                self._cached_bytes -= oldest.weight[1]

    # --- writing ---------------------------------------------------------------

    def _commit(self, batch: list[Request]) -> None:
        """Decide and write ``batch`` in one transaction; errors of one decide stay its own."""
        staged: dict[str, _Cached] = {}
        # _storage's checks, spelled out: every store passes here, and a
        # generator-based context manager would add its own cost to each.
        if self._closed:
            raise StorageError("the disk backend is closed")
        bounded = False
        try:
            bounded = self._wait_for(batch)
            with self._cache.transact():
                for request in batch:
                    cid = request.conversation_id
                    current = staged.get(cid)
                    guess: tuple[_Cached, _Decided] | None = None
                    if current is None:
                        guess = self._guess(cid, request)
                        if guess is not None and self._append_guessed(cid, request, guess, staged):
                            continue
                        current = self._current(cid, self._meta_text(cid))
                    if guess is not None and guess[0] is current:
                        # The cached state was current after all: its decision stands.
                        decided = guess[1]
                    else:
                        decided = _decide(request, current.state)
                    change = decided.change
                    if change is None:  # decide raised: the caller's to see; the others go on
                        request.error = decided.error
                        continue
                    request.value = decided.value
                    if change.is_empty:
                        continue
                    new_state = apply_change(current.state, change)
                    try:
                        entry = self._write(cid, current, change, new_state)
                    except InvalidChange as exc:  # raised before anything is written
                        request.error = exc
                        continue
                    added = change.append
                    if current.meta is None:  # a new conversation: everything it holds is new
                        added = [*change.append, *change.pending_add, *change.archive_add]
                    entry.chars = current.chars + sum(len(u.text) for u in added)
                    staged[cid] = entry
                    self._index(cid, current.state, new_state)
        except _STORAGE_ERRORS as exc:
            if bounded and isinstance(exc, diskcache.Timeout):
                raise DeadlineExceeded(
                    f"data dir {self.path} stayed locked by another process"
                ) from None
            self._failed(exc, "write")
        self._checkpointer.note_commit()
        for cid, entry in staged.items():
            self._remember(cid, entry)

    def _guess(self, conversation_id: str, request: Request) -> tuple[_Cached, _Decided] | None:
        """``request`` decided on the cached state, before the meta record is read to check it.

        None when nothing is cached. ``_commit`` writes the usual store
        straight away (``_append_guessed``); any other decision stands once
        the record read shows the cache was current, and only a state changed
        under the cache (by another process) is decided again, as a decide
        may be (backends/base.py).
        """
        with self._states_lock:
            cached = self._states.get(conversation_id)
        if cached is None or cached.text is None or cached.meta is None:
            return None
        return cached, _decide(request, cached.state)

    def _append_guessed(
        self,
        conversation_id: str,
        request: Request,
        guess: tuple[_Cached, _Decided],
        staged: dict[str, _Cached],
    ) -> bool:
        """Write a guessed decision that is the usual store (``_plain_append``) with ``_REPLACE``.

        True when the meta record was still the cached one, and the store
        is written; False, with nothing written, for anything else.
        """
        cached, decided = guess
        change = decided.change
        if change is None or cached.meta is None or change.is_empty:
            return False
        new_state = apply_change(cached.state, change)
        if not _plain_append(change, cached.state, new_state, cached.meta):
            return False
        entry = self._append(
            conversation_id, cached, cached.meta, change.append[0], new_state, cached.text
        )
        if entry is None:
            return False
        request.value = decided.value
        entry.chars = cached.chars + len(change.append[0].text)
        staged[conversation_id] = entry
        # A record with no state yet (a remove of nothing wrote one) becomes a conversation.
        self._index(conversation_id, cached.state, new_state)
        return True

    def _wait_for(self, batch: list[Request]) -> bool:
        """Wait for another process's lock only until the batch's earliest deadline; True if one bounds it.

        SQLite's busy timeout is per connection: this thread's is shortened
        (a PRAGMA, microseconds) for a batch with less time left than
        ``timeout`` (less ``_WAIT_SLACK``), so a later batch waits what is
        left of its calls' time, not a fresh ``timeout``, and set back after.
        An uncontended store sends no PRAGMA.
        """
        deadlines = [r.deadline for r in batch if r.deadline is not None]
        full = int(self._lock_wait * 1000)
        wanted = full
        if deadlines:
            left = int((min(deadlines) - time.monotonic()) * 1000)
            if left < full - _WAIT_SLACK_MS:
                wanted = max(left, 1)
        con = self._cache._con  # diskcache's connection of this thread
        busy = self._busy
        if getattr(busy, "con", None) is not con:
            busy.con, busy.ms = con, full  # what diskcache connected with
        if busy.ms != wanted:
            con.execute(f"PRAGMA busy_timeout = {wanted}")
            busy.ms = wanted
        return bool(deadlines)

    def _expired(self, waited: float) -> DeadlineExceeded:
        """The error of a write whose call's deadline passed while it waited for the lock."""
        return DeadlineExceeded(
            f"data dir {self.path} stayed locked by another process (or by writes queued ahead); "
            f"this call waited {waited:.2f}s, until its deadline; nothing was written"
        )

    def _append(
        self,
        conversation_id: str,
        current: _Cached,
        old: Meta,
        utterance: Utterance,
        new_state: ConversationState,
        replacing: str | None = None,
    ) -> _Cached | None:
        """_write for the usual store (see _plain_append): one short utterance into the open block.

        With ``replacing``, the meta record is written only if it is still
        that text (``_REPLACE``); None if it was not, and nothing is written.
        """
        seq = utterance.seq
        open_records = {**_open_records(current, old), seq: encode_in_block(utterance)}
        new_meta = Meta(
            token=self._tokens.next(),
            next_seq=new_state.next_seq,
            last_turn=new_state.last_turn,
            buffer=old.buffer.with_added((seq,)),
            pending=old.pending,
            archive=old.archive,
            settings=old.settings,
            has_summary=old.has_summary,
            own_below=old.own_below,
            open=(*old.open, utterance),
        )
        text = encode_meta(new_meta, open_records.values())
        if replacing is None:
            self._set(meta_key(conversation_id), text)
        else:
            now = time.time()
            replaced = self._cache._con.execute(  # diskcache's connection of this thread
                _REPLACE, (now, now, text, meta_key(conversation_id), replacing)
            )
            if replaced.rowcount != 1:
                return None
        return _Cached(text, new_meta, new_state, open_records)

    def _write_new(self, conversation_id: str, new_state: ConversationState) -> _Cached:
        """_write for a conversation with no stored record yet: the rows an import writes.

        The general path places and encodes utterance by utterance, which
        was half the cost of an import (issue 17); the records are the same.
        """
        rows, meta, opened = self._encoded_rows(EncodedConversation.from_state(new_state))
        self._insert(rows)
        open_block = block_of(meta.next_seq)
        opening = sorted(
            (
                u
                for items in (new_state.utterances, new_state.pending, new_state.archive)
                for u in items
                if block_of(u.seq) == open_block and not has_own_record(u, 1)
            ),
            key=_seq,
        )
        meta = dataclasses.replace(meta, open=tuple(opening))
        text = rows[-1][1]  # the meta record's row comes last
        return _Cached(text, meta, new_state, dict(zip((u.seq for u in opening), opened)))

    def _write(
        self, conversation_id: str, current: _Cached, change: Change, new_state: ConversationState
    ) -> _Cached:
        """Write what ``change`` touched, inside the caller's transaction.

        Where each utterance lives (the meta's open block, a block record, or
        its own record) is the rule of backends/records.py; every block the
        change touched is written again from ``new_state``.

        Raises:
            InvalidChange: before writing anything, if the change would leave
                seqs duplicated or the buffer out of seq order.
        """
        old = current.meta or _NO_META
        state = current.state
        if current.meta is None and not state.next_seq > 1:
            return self._write_new(conversation_id, new_state)
        if _plain_append(change, state, new_state, old):
            written = self._append(conversation_id, current, old, change.append[0], new_state)
            assert written is not None  # only a conditional write (``replacing``) may not happen
            return written
        kept = old.buffer.without(change.remove)
        appended = [u.seq for u in change.append]
        if appended and (
            (len(appended) > 1 and appended != sorted(set(appended)))
            or (kept and appended[0] <= kept.last)
        ):
            raise InvalidChange(
                f"refusing a change to conversation {conversation_id!r} that appends "
                f"seqs {appended} after seq {kept.last if kept else 0}: the buffer must stay in seq order"
            )
        buffer = kept.with_added(appended)
        pending, archive = old.pending, old.archive
        if change.pending_remove or change.pending_add:
            pending = pending.without(change.pending_remove).with_added(
                u.seq for u in change.pending_add
            )
        if change.archive_remove or change.archive_add:
            archive = archive.without(change.archive_remove).with_added(
                u.seq for u in change.archive_add
            )
        # An archive not decoded yet is one this change left alone: its runs stand.
        archived = len(archive) if is_unloaded(new_state.archive) else len(new_state.archive)
        if (len(buffer), len(pending), len(archive)) != (
            len(new_state.utterances),
            len(new_state.pending),
            archived,
        ):
            raise InvalidChange(
                f"refusing a change to conversation {conversation_id!r} that would leave "
                "its seqs duplicated"
            )
        cache = self._cache
        own_below = old.own_below
        old_open = block_of(state.next_seq)
        previous = _open_records(current, old)
        encoded: dict[int, str] = {}  # block records encoded for this change, by seq
        blocks: set[int] = set()  # blocks to write again from new_state
        opening: list[Utterance] = []  # new short utterances joining the open block

        def put(utterance: Utterance) -> None:
            seq = utterance.seq
            own = has_own_record(utterance, own_below)
            if seq < state.next_seq:  # it may replace a version stored elsewhere
                before = _stored(state, seq)
                if before is not None and not has_own_record(before, own_below):
                    blocks.add(block_of(seq))
                elif before is not None and not own:
                    cache.delete(utterance_key(conversation_id, seq))
            if own:
                self._set(utterance_key(conversation_id, seq), encode_utterance(utterance))
                return
            encoded[seq] = encode_in_block(utterance)
            if seq >= state.next_seq and block_of(seq) == old_open:
                opening.append(utterance)  # the usual store
            else:
                blocks.add(block_of(seq))

        for utterance in change.append:
            put(utterance)
        for utterance in (*change.pending_add, *change.archive_add):
            # An utterance keeps its place on its way from the buffer to the
            # summary queue to the archive: only the meta record changes,
            # unless the utterance did.
            if _stored(state, utterance.seq) != utterance:
                put(utterance)
        for utterance in change.update:
            if utterance.seq in buffer:
                put(utterance)
        if change.remove or change.pending_remove or change.archive_remove:
            for seq in change.remove | change.pending_remove | change.archive_remove:
                if seq in buffer or seq in pending or seq in archive:
                    continue
                before = _stored(state, seq)
                if before is None or has_own_record(before, own_below):
                    cache.delete(utterance_key(conversation_id, seq))
                if before is None or not has_own_record(before, own_below):
                    blocks.add(block_of(seq))

        def record(utterance: Utterance) -> str:
            seq = utterance.seq
            return encoded.get(seq) or previous.get(seq) or encode_in_block(utterance)

        open_block = block_of(new_state.next_seq)
        if open_block == old_open and old_open not in blocks:
            # Nothing in the open block changed but what this change appends.
            opened = (*old.open, *opening)
            open_records = previous
            if opening:
                open_records = {**previous, **{u.seq: encoded[u.seq] for u in opening}}
        else:
            if open_block != old_open:
                # The seqs moved on: the block they leave becomes a record. (A
                # block they move back to, after an import, can only be stale.)
                blocks.add(old_open)
                if open_block < old_open:
                    cache.delete(block_key(conversation_id, open_block))
            opened = tuple(_block_content(new_state, open_block, own_below, archive))
            open_records = {u.seq: record(u) for u in opened}
        for number in blocks:
            if number != open_block:
                content = _block_content(new_state, number, own_below, archive)
                if content:
                    self._set(
                        block_key(conversation_id, number), encode_block(map(record, content))
                    )
                else:
                    cache.delete(block_key(conversation_id, number))
        has_summary = old.has_summary
        if change.summary is not None:
            has_summary = bool(new_state.summary.segments) or new_state.summary.through_seq > 0
            if has_summary:
                self._set(summary_key(conversation_id), encode_summary(new_state.summary))
            else:
                cache.delete(summary_key(conversation_id))
        new_meta = Meta(
            token=self._tokens.next(),
            next_seq=new_state.next_seq,
            last_turn=new_state.last_turn,
            buffer=buffer,
            pending=pending,
            archive=archive,
            settings=new_state.settings if change.settings is None else dict(new_state.settings),
            has_summary=has_summary,
            own_below=own_below,
            open=opened,
        )
        text = encode_meta(new_meta, open_records.values())
        self._set(meta_key(conversation_id), text)
        return _Cached(text, new_meta, new_state, open_records)

    def _index(self, conversation_id: str, old: ConversationState, new: ConversationState) -> None:
        """Keep chd:counts and the q: index in the transaction that changed the state.

        Only a conversation's first store (or an import) and the first
        eviction into an empty queue (or the fold that empties it) touch
        them; the usual store writes nothing here.
        """
        cache = self._cache
        if old.is_empty != new.is_empty:
            count = decode_counts(cache.get(COUNTS_KEY)) + (1 if old.is_empty else -1)
            self._set(COUNTS_KEY, encode_counts(count))
        if bool(old.pending) != bool(new.pending):
            if new.pending:
                self._set(queued_key(conversation_id), QUEUED_RECORD)
            else:
                cache.delete(queued_key(conversation_id))

    # --- start-up and errors ---------------------------------------------------

    def _check_schema(self) -> None:
        """Refuse a directory from a newer chd, or one holding someone else's data.

        A directory from an older schema is marked with this one, because this
        chd writes records an older one cannot read (it would refuse them one
        conversation at a time); its old records stay as they are, and the
        counts and queue index schema 3 added are built from them once.
        """
        found = self._cache.get(SCHEMA_KEY)
        if found is not None and decode_schema(found) == SCHEMA_VERSION:
            return
        with self._cache.transact():
            found = self._cache.get(SCHEMA_KEY)
            if found is not None:
                old = decode_schema(found)
                if old < SCHEMA_VERSION:
                    self._build_index(old)
                    self._cache.set(
                        SCHEMA_KEY,
                        encode_schema(f"chd storage schema {SCHEMA_VERSION}, upgraded from {old}"),
                    )
                return  # current, or another process created it first
            if len(self._cache) > 0:
                raise StorageError(
                    "it holds a diskcache that chd did not write (no chd:schema record); "
                    "use an empty or new directory"
                )
            self._cache.set(SCHEMA_KEY, encode_schema(f"chd storage schema {SCHEMA_VERSION}"))
            self._cache.set(COUNTS_KEY, encode_counts(0))

    def _build_index(self, old: int) -> None:
        """chd:counts and the q: index of a schema 1 or 2 dir, inside the upgrade's transaction."""
        log.info(
            "data dir %s has storage schema %d: counting its conversations and indexing their "
            "summary queues once, for schema %d",
            self.path,
            old,
            SCHEMA_VERSION,
        )
        count, queued = 0, []
        rows = self._cache._sql(
            "SELECT key, value FROM Cache WHERE key >= ? AND key < ? AND raw = 1",
            (META_PREFIX, "m;"),
        )
        for key, text in rows:
            conversation_id = key[len(META_PREFIX) :]
            meta = decode_meta(text, conversation_id)
            count += meta.next_seq > 1 or bool(meta.settings)
            if meta.pending:
                queued.append(conversation_id)
        for conversation_id in queued:
            self._cache.set(queued_key(conversation_id), QUEUED_RECORD)
        self._cache.set(COUNTS_KEY, encode_counts(count))
        log.info(
            "data dir %s: %d conversations, %d with queued utterances",
            self.path,
            count,
            len(queued),
        )

    @contextmanager
    def _storage(self, doing: str) -> Iterator[None]:
        """Translate diskcache and SQLite errors into StorageError / StorageFull."""
        if self._closed:
            raise StorageError("the disk backend is closed")
        try:
            yield
        except _STORAGE_ERRORS as exc:
            self._failed(exc, doing)

    def _failed(self, exc: BaseException, doing: str) -> NoReturn:
        """Raise ``exc`` (being handled) as StorageError or StorageFull."""
        if isinstance(exc, diskcache.Timeout):
            if self._lock_wait_is_deadline:
                raise DeadlineExceeded(
                    f"data dir {self.path} stayed locked by another process for {self._lock_wait:g}s "
                    "(request_timeout); nothing was written"
                ) from None
            raise StorageError(
                f"data dir {self.path} stayed locked by another writer; try again"
            ) from None
        if doing == "write":
            # A failed COMMIT can leave the transaction open on this
            # thread's connection (diskcache issue #112); closing the
            # connection rolls it back, and the next call opens a new one.
            self._cache.close()
            if _rolled_back(exc):
                # SQLite ended the transaction itself on the error (an UPSERT
                # meeting a full disk does), so diskcache's ROLLBACK failed:
                # the error to report is the one it was handling.
                exc = exc.__context__  # type: ignore[assignment]
        if is_full(exc):
            log.error("data dir %s is full: %s", self.path, exc)
            raise StorageFull(
                f"the disk holding {self.path} is full; nothing was written, reads still work"
            ) from exc
        log.error("storage error on %s in %s: %s", doing, self.path, exc)
        raise StorageError(f"storage error in {self.path}: {exc}") from exc


def _check_database_kept(path: Path, allow_empty: bool) -> None:
    """Refuse a data dir that held a store whose database is now missing or empty."""
    database, wal = path / diskcache.core.DBNAME, path / (diskcache.core.DBNAME + "-wal")
    try:
        size = database.stat().st_size if database.exists() else None
        held = (path / MARKER).exists() or (wal.exists() and wal.stat().st_size > 0)
    except OSError:
        return  # unreadable: opening it reports why
    if not held or (size is not None and size > 0):
        return
    state = "missing" if size is None else "empty (0 bytes)"
    evidence = MARKER if (path / MARKER).exists() else wal.name
    if allow_empty:
        log.warning(
            "%s is %s in a data dir that held data (%s); starting with no conversations "
            "(allow_empty_database)",
            database,
            state,
            evidence,
        )
        return
    raise EmptiedDatabase(
        f"{database} is {state}, but {path} has held chd's data ({evidence} is there); restore cache.db "
        "from a backup, or start chd serve once with --allow-empty-database to begin with no conversations",
        f"{database} is {state}, but {path} has held chd's data ({evidence} is there)",
    )


def _mark(path: Path) -> None:
    """Leave ``MARKER`` in a data dir now holding a store (a read-only dir is left unmarked)."""
    marker = path / MARKER
    if marker.exists():
        return
    try:
        marker.write_text(_MARKER_TEXT)
    except OSError as exc:
        log.info("could not write %s (%s); a lost cache.db there would not be noticed", marker, exc)


def _rolled_back(exc: BaseException) -> bool:
    """True for diskcache's ROLLBACK failing because SQLite had already rolled back on an earlier error."""
    return (
        isinstance(exc, sqlite3.OperationalError)
        and "no transaction is active" in str(exc)
        and isinstance(exc.__context__, _STORAGE_ERRORS)
    )


@dataclass(slots=True)
class _Decided:
    """What a request's decide returned, or the error it raised."""

    change: Change | None = None  # None: decide raised ``error``
    value: Any = None
    error: Exception | None = None


def _decide(request: Request, state: ConversationState) -> _Decided:
    try:
        change, value = request.decide(state)
    except Exception as exc:  # the caller's to see; the others go on
        return _Decided(error=exc)
    return _Decided(change, value)


def _plain_append(
    change: Change, state: ConversationState, new_state: ConversationState, old: Meta
) -> bool:
    """True for the usual store: one new short utterance, after every stored
    seq, into the open block, which it does not close; nothing else changes
    but the counters. _write's general path gives the same records."""
    if len(change.append) != 1 or change.summary is not None or change.settings is not None:
        return False
    if (
        change.remove
        or change.update
        or change.pending_add
        or change.pending_remove
        or change.archive_add
        or change.archive_remove
    ):
        return False
    utterance = change.append[0]
    seq = utterance.seq
    return (
        seq >= state.next_seq
        and (not old.buffer or seq > old.buffer.last)
        and block_of(seq) == block_of(state.next_seq) == block_of(new_state.next_seq)
        and not has_own_record(utterance, old.own_below)
    )


def _open_records(current: _Cached, old: Meta) -> dict[int, str]:
    """The open block's utterances as encoded in the meta record, by seq: the cached ones if any."""
    if current.open_records is not None:
        return current.open_records
    return {u.seq: encode_in_block(u) for u in old.open}


def _block_content(
    state: ConversationState, block: int, own_below: int, archive: SeqRuns
) -> list[Utterance]:
    """The utterances of ``state`` that block ``block`` holds, in seq order.

    ``archive`` is the state's archive seqs: an archive not decoded yet is
    left so when none of its seqs is in the block (the usual block a store
    closes holds buffer seqs only).
    """
    first = max(block * BLOCK_SIZE + 1, own_below)
    last = (block + 1) * BLOCK_SIZE
    found: list[Utterance] = []
    sources = 0
    sleeping = is_unloaded(state.archive) and not any(
        seq in archive for seq in range(first, last + 1)
    )
    for utterances in (state.utterances, state.pending, [] if sleeping else state.archive):
        if not utterances or utterances[-1].seq < first:
            continue
        i = bisect_left(utterances, first, key=_seq)
        added = len(found)
        while i < len(utterances) and utterances[i].seq <= last:
            if not has_own_record(utterances[i], own_below):
                found.append(utterances[i])
            i += 1
        sources += len(found) > added
    if sources > 1:
        found.sort(key=_seq)
    return found


def _stored(state: ConversationState, seq: int) -> Utterance | None:
    """Utterance ``seq`` of the buffer, queue or archive, by bisection (each is in seq order)."""
    for utterances in (state.utterances, state.pending, state.archive):
        i = bisect_left(utterances, seq, key=_seq)
        if i < len(utterances) and utterances[i].seq == seq:
            return utterances[i]
    return None


def _chars(state: ConversationState) -> int:
    """The characters of the state's decoded texts (an archive not decoded yet counts none)."""
    lists = [state.utterances, state.pending]
    if not is_unloaded(state.archive):
        lists.append(state.archive)
    return sum(len(u.text) for items in lists for u in items)


def _seq(utterance: Utterance) -> int:
    return utterance.seq
