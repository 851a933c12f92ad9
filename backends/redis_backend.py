"""The shared backend: conversations in Redis (or Redis Cluster), for several chd replicas.

Keys of one conversation (``<tag>`` is its id percent-encoded, so ``{``,
``}``, ``:``, spaces and any unicode become plain ASCII and every key of the
conversation carries the same hash tag, hence one cluster slot):

    chd:{<tag>}:m      hash: ``c`` the last commit's id, ``v`` a commit
                       counter, ``m`` the meta record (JSON: id, counters,
                       settings, which seqs are in the buffer, the summary
                       queue and the archive as runs), ``s`` the summary
    chd:{<tag>}:u      hash: seq -> the utterance record (JSON, as the disk
                       backend writes them); an utterance keeps its record
                       while it moves from the buffer to the queue to the
                       archive, only the meta's runs change
    chd:{<tag>}:r      sorted set: the ids of its recent commits (score: when,
                       in ms), so a commit re-sent after its reply was lost
                       is answered as applied, not made twice; it expires
                       once redis-py can no longer send one again
    chd:{<tag>}:lease  the fold lease (a token with an expiry)

beside the conversation index of its slot (backends/redis_index.py) and,
on a cluster, the quota that keeps it within max_conversations
(backends/redis_quota.py).

Atomicity is Redis's: every commit is one Lua script (backends/redis_scripts.py)
that applies the change, and keeps the index, only if the conversation's
last commit id is still the one the decision was made on (compare-and-set),
so nothing is half-written and two replicas never both commit on the same
state. A lost race returns the
current meta record in the same reply; the replica fetches the utterances
it lacks, decides again and retries. Concurrent writes of one process are
group-committed (backends/group_commit.py): the leading thread decides every
queued call and sends their scripts in one pipeline, one round trip for the
batch (each script still checks its own conversation; a pipeline is not a
transaction). On Redis Cluster, whose pipelines span nodes, each write goes
alone under a per-conversation lock.

Every replica caches states beside the commit id they were read at. A
``transact`` decides on the cached state and lets the script's check catch
a stale one, so a store costs one round trip when nothing else wrote and
three when another replica did (lost commit, fetch, commit). A ``read``
asks Redis for the current commit id first (one round trip, two if another
replica wrote), so a replica never answers from a stale state and the
search index, which syncs to the state it is given, follows; unless the
replica is alone and holds the read lease (backends/redis_read_lease.py),
when no other replica can have written. Reads and commits go on each
thread's own connection (backends/redis_direct.py).
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import threading
import time
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.cluster
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from chd.backends.base import Change, ConversationState, Decide, Outcome, T, apply_change
from chd.backends.group_commit import GroupCommit, Request
from chd.backends.records import (
    decode_summary,
    decode_utterance,
    encode_summary,
    encode_utterance,
)
from chd.backends.redis_direct import ThreadConnections
from chd.backends.redis_index import RedisIndex, run_lengths
from chd.backends.redis_keys import (
    conversation_key,
    conversation_of,
    conversation_tag,
    index_keys,
    partition_of,
)
from chd.backends.redis_meta import Meta
from chd.backends.redis_quota import ClusterQuota
from chd.backends.redis_read_lease import LEASE_KEY, READ_LEASE, ReadLease, stamp
from chd.backends.redis_scripts import COMMIT, EXPIRED, FETCH, FULL, RELEASE_LEASE, WAIT
from chd.core.errors import InvalidRequest, StorageError, StorageFull, TooLarge
from chd.core.utterance import Summary, Utterance

__all__ = ["RedisBackend", "conversation_key", "mask_url"]

log = logging.getLogger(__name__)

# Past this many lost races in a row a transact gives up (StorageError):
# only a conversation written by very many replicas at once gets there.
_MAX_ATTEMPTS = 200

# Seconds a cluster's swept conversation count is reused (count_conversations).
_CLUSTER_COUNT_AGE = 5.0


def mask_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


# Seconds a health probe waits for Redis to answer PING: health turns
# NOT_SERVING within this and the probe interval (0.5 s) of Redis hanging.
HEALTH_TIMEOUT = 1.0

# Seconds a commit's id is kept among its conversation's recent commits past the time
# redis-py can take to send it again (RedisBackend.__init__).
RECENT_COMMITS = 60.0


@dataclass(slots=True)
class _Snapshot:
    """A state and the commit it was read at (``commit`` '' : nothing stored).

    ``acknowledged`` is False for the state a commit would make, until
    Redis says it made it: such a state is decided on, never cached and
    never reused for its records (_refreshed), so what a replica answers
    is always a copy of a version Redis holds.
    """

    commit: str
    meta: Meta
    state: ConversationState
    # The read lease tenure it was last confirmed in (backends/redis_read_lease.py); 0: none.
    tenure: int = 0
    acknowledged: bool = True

    @property
    def size(self) -> int:
        state = self.state
        return 1 + len(state.utterances) + len(state.pending) + len(state.archive)


class _Conflict(Exception):
    """The conversation was committed to between two reads: start again."""


class RedisBackend:
    """Conversations in Redis, shared by every chd replica pointed at it.

    Args:
        redis_url: ``redis://[user:password@]host:port/db`` or ``rediss://`` (TLS).
        redis_password: used when the URL has none (``CHD_REDIS_PASSWORD``).
        redis_cluster: True for Redis Cluster; None finds out from the server.
        conversation_ttl: seconds a conversation may go without a write
            before Redis expires every key of it together; None keeps it.
        fold_lease: seconds one replica's fold lease lasts (a replica that
            dies mid-fold blocks the others' folds of it this long at most).
        cached_utterances: how many utterances the per-replica state cache holds.
        max_conversations: refuse (TooLarge) a commit that would create a
            conversation past this many, checked by the commit script against
            the index on standalone Redis, so replicas creating at once never
            pass it; None for no limit.
        redis_tls_ca: with ``rediss://``, the PEM CA bundle that must have
            signed the server's certificate (None: the system's CAs).

    Raises:
        StorageError: Redis cannot be reached or refuses the connection
            (the message names the URL with its password masked).
    """

    name = "redis"

    def __init__(
        self,
        redis_url: str = "redis://127.0.0.1:6379/0",
        redis_password: str | None = None,
        redis_cluster: bool | None = None,
        conversation_ttl: float | None = None,
        fold_lease: float = 30.0,
        cached_utterances: int = 200_000,
        socket_timeout: float = 2.0,
        max_conversations: int | None = None,
        redis_tls_ca: str | None = None,
        redis_timeout: float | None = None,
    ) -> None:
        if redis_timeout is not None:  # the configuration's name for it
            socket_timeout = redis_timeout
        self.url = mask_url(redis_url)
        self._ttl_ms = str(int(conversation_ttl * 1000)) if conversation_ttl else "0"
        self._lease_ms = max(1, int(fold_lease * 1000))
        self.max_conversations = max_conversations
        self._direct: ThreadConnections | None = None  # standalone Redis only: _connect sets it
        self._limit = str(max_conversations) if max_conversations else "0"
        options: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": min(socket_timeout, 2.0),
        }
        if redis_password and urlsplit(redis_url).password is None:
            options["password"] = redis_password
        if redis_tls_ca is not None:
            if urlsplit(redis_url).scheme != "rediss":
                # Accepting it would let a user believe the connection is verified.
                raise InvalidRequest(
                    f"redis_tls_ca is for TLS: use a rediss:// URL, not {self.url}"
                )
            options["ssl_ca_certs"] = redis_tls_ca
        self._options = options
        try:
            self._client = self._connect(redis_url, redis_cluster, options)
        except redis.RedisError as exc:
            raise StorageError(f"cannot use Redis at {self.url}: {_reason(exc)}") from None
        except ValueError as exc:  # a URL redis-py cannot parse
            raise StorageError(f"bad Redis URL {self.url}: {exc}") from None
        # A commit re-sent after its reply was lost must still find its id
        # among the recent ones (backends/redis_scripts.py). redis-py sends a
        # command once and then as often as its retry policy says (2 retries
        # here, 10 by default on a cluster); each attempt may wait for a
        # connect (2 s at most) and a reply (socket_timeout), on a cluster as
        # much again to refresh its map of slots, and back off up to 1 s.
        # Sized for a socket_timeout of at least 5 s, so replicas with
        # different redis_timeouts up to 5 s keep the same window (each
        # commit sets it, and a shorter one would trim ids a slower
        # replica may still send again).
        attempts = 1 + max(0, _retry_policy(self._client).get_retries())
        self._recent_ms = str(
            int((RECENT_COMMITS + attempts * (2 * max(socket_timeout, 5.0) + 5)) * 1000)
        )
        self._commit = self._client.register_script(COMMIT)
        self._fetch = self._client.register_script(FETCH)
        self._release = self._client.register_script(RELEASE_LEASE)
        self._index = RedisIndex(self._client, self.cluster)
        # A cluster's scripts cannot see other slots' index: its creations
        # reserve a place in one key first (backends/redis_quota.py), also
        # without a limit (chd import), so the quota always holds them all.
        self._quota = (
            ClusterQuota(self._client, max_conversations, int(self._ttl_ms))
            if self.cluster
            else None
        )
        self._health: list[redis.Redis] | None = None
        self._unanswered = False  # the last health probe found Redis not answering
        self._count_lock = threading.Lock()
        self._swept: tuple[int, float] | None = None
        self._sweeping = False
        self._created = (
            0  # conversations this replica created less those it emptied since the sweep
        )
        self._ids = _CommitIds()
        # Standalone only: a cluster's lease key would be in another slot than
        # the commit's keys. Never held with a ttl: Redis expires
        # conversations without a commit the cache could see.
        self._read_lease = (
            None
            if self.cluster
            else ReadLease(self._client, self._ids.replica, may_hold=not conversation_ttl)
        )
        try:
            self._index.ensure_built(self._meta_keys)
            if self._read_lease is not None:
                self._read_lease.start()
        except redis.RedisError as exc:
            raise StorageError(f"cannot use Redis at {self.url}: {_reason(exc)}") from None
        self._cache: OrderedDict[str, _Snapshot] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._cached = 0
        self._capacity = cached_utterances
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # Concurrent writes of this process share round trips (one pipeline
        # per batch); on a cluster a pipeline spans nodes, so each writes alone.
        self._group = None if self.cluster else GroupCommit(self._commit_batch)
        # Escaping the id and naming its partition were a tenth of preparing
        # a commit (callgrind), the same for every commit of a conversation.
        self._commit_keys = lru_cache(maxsize=4096)(self._keys_of)

    def _connect(self, url: str, cluster: bool | None, options: dict[str, Any]) -> Any:
        if not cluster:
            client = redis.Redis.from_url(url, retry=_retry(), **options)
            client.ping()
            if cluster is False or not _cluster_enabled(client):
                self.cluster = False
                self._direct = ThreadConnections(client, _retry())
                return client
            client.close()
        nodes = redis.cluster.RedisCluster.from_url(url, **options)
        nodes.ping()
        self.cluster = True
        return nodes

    # --- the protocol -----------------------------------------------------------

    def read(self, conversation_id: str) -> ConversationState:
        self._answering()
        if self._read_lease is not None:
            tenure = self._read_lease.tenure()
            if tenure is not None:
                cached = self._cached_snapshot(conversation_id)
                if cached is not None and cached.tenure == tenure:
                    return cached.state  # no other replica has written since it was confirmed
        with _translated():
            return self._current(conversation_id).state

    def transact(
        self,
        conversation_id: str,
        decide: Callable[[ConversationState], tuple[Change, T]],
    ) -> T:
        self._answering()
        if self._group is not None:
            with _translated():
                return self._group.run(conversation_id, decide)
        with self._lock(conversation_id), _translated():
            snapshot = self._cached_snapshot(conversation_id)
            verified = False
            if snapshot is None:
                snapshot, verified = self._current(conversation_id), True
            for attempt in range(_MAX_ATTEMPTS):
                self._answering()
                try:
                    change, value = decide(snapshot.state)
                except Exception:
                    if verified:
                        raise
                    # Decided on a cached state another replica may have
                    # overtaken: only a current one may refuse.
                    snapshot, verified = self._current(conversation_id), True
                    continue
                if change.is_empty:
                    if verified:
                        return value
                    snapshot, verified = self._current(conversation_id), True
                    continue
                try:
                    outcome = self._apply(snapshot, change)
                except redis.RedisError:
                    # Its reply may be lost with the commit made: Redis alone knows now.
                    self._forget([conversation_id])
                    raise
                if outcome is None:  # its place in the quota ran out: reserve again
                    continue
                if isinstance(outcome, _Snapshot):
                    self._remember(outcome)
                    if bool(snapshot.commit) != bool(outcome.commit):
                        with self._count_lock:
                            self._created += 1 if outcome.commit else -1
                    return value
                commit, meta_text = outcome
                try:
                    snapshot = self._refreshed(conversation_id, commit, meta_text, snapshot)
                except _Conflict:  # overtaken again while fetching
                    snapshot = self._current(conversation_id)
                verified = True
                if attempt >= 3:
                    time.sleep(random.uniform(0, 0.002 * min(attempt, 20)))
            raise StorageError(
                f"conversation {conversation_id!r} kept changing under {_MAX_ATTEMPTS} attempts to write it"
            )

    def conversations(self) -> list[str]:
        return list(self.iter_conversations())

    # --- optional capabilities (backends/base.py) ----------------------------------

    def iter_conversations(self, after: str = "") -> Iterator[str]:
        """Every conversation with state above ``after``, sorted.

        Standalone: pages of the index (ZRANGEBYLEX), streamed. Cluster: the
        index is split by slot, so SCAN on each master (cursor-based, never
        KEYS) collects the ids, which are sorted once.
        """
        self._answering()
        if not self.cluster:
            return _streamed(self._index.ids(after))
        with _translated():
            found = {conversation_of(key) for key in self._meta_keys()}
        return iter(sorted(cid for cid in found if not after or cid > after))

    def count_conversations(self) -> int:
        """From the index the commit script keeps: one command on standalone Redis.

        On a cluster the exact count is a sweep of every slot (16384 small
        scripts, ~0.8 s on loopback): the first call sweeps, later ones
        answer at once from the last sweep plus this replica's own creations
        and removals since, and start a new sweep in the background once it
        is ``_CLUSTER_COUNT_AGE`` seconds old. Exact for one replica, behind
        by what other replicas created since the sweep (the quota, not this
        count, keeps a cluster within max_conversations).
        """
        self._answering()
        with _translated():
            if not self.cluster:
                return self._index.count()
            with self._count_lock:
                swept = self._swept
                if swept is not None:
                    if time.monotonic() - swept[1] > _CLUSTER_COUNT_AGE and not self._sweeping:
                        self._sweeping = True
                        threading.Thread(
                            target=self._sweep, name="chd-redis-count", daemon=True
                        ).start()
                    return swept[0] + self._created
            self._sweep()
            with self._count_lock:
                assert self._swept is not None
                return self._swept[0] + self._created

    def _sweep(self) -> None:
        """Count every slot's index; creations meanwhile stay in the delta (counted twice at worst)."""
        with self._count_lock:
            self._sweeping = True
            before, started = self._created, time.monotonic()
        try:
            counted = self._index.count()
        except redis.RedisError as exc:
            if self._swept is None:
                raise
            log.warning(
                "could not count the cluster's conversations (kept the last count): %s",
                _reason(exc),
            )
            return
        finally:
            with self._count_lock:
                self._sweeping = False
        with self._count_lock:
            self._swept = (counted, started)
            self._created -= before

    def queued_conversations(self) -> Iterator[str]:
        """Conversations with a non-empty summary queue, from the index."""
        self._answering()
        with _translated():
            return iter(list(self._index.queued()))

    def transact_many(self, calls: list[tuple[str, Decide]]) -> list[Outcome]:
        """The calls of an import's batch; each outcome its own.

        Not one transaction, unlike disk: each conversation's commit is its
        own atomic script (a script may not span slots, and no conversation
        needs another's). On standalone Redis the batch is decided at once
        and sent as one pipeline per round, as concurrent stores are; on a
        cluster, whose pipelines refuse scripts, one commit at a time.
        """
        self._answering()
        if self._group is None:  # a cluster: its creations may also reserve places one at a time
            return [self._outcome(conversation_id, decide) for conversation_id, decide in calls]
        requests = [Request(cid, decide) for cid, decide in calls]
        with self._group.lock, _translated():
            self._commit_batch(requests)
        return [Outcome(request.value, request.error) for request in requests]

    def _outcome(self, conversation_id: str, decide: Decide) -> Outcome:
        try:
            return Outcome(value=self.transact(conversation_id, decide))
        except Exception as exc:  # the caller's to see, like transact's own
            return Outcome(error=exc)

    def iter_sizes(self) -> Iterator[tuple[str, int, int]]:
        """Buffer and queue lengths from the meta records' seq runs, a pipelined page at a time."""
        page: list[str] = []
        for conversation_id in self.iter_conversations():
            page.append(conversation_id)
            if len(page) >= 500:
                yield from self._sizes(page)
                page = []
        yield from self._sizes(page)

    def _sizes(self, ids: list[str]) -> Iterator[tuple[str, int, int]]:
        if not ids:
            return
        with _translated():
            pipe = self._client.pipeline(transaction=False)
            for conversation_id in ids:
                pipe.hget(conversation_key(conversation_id, "m"), "m")
            texts = pipe.execute()
        for conversation_id, text in zip(ids, texts):
            if text is not None:  # expired or cleared since it was listed
                buffered, pending = run_lengths(_text(text))
                yield conversation_id, buffered, pending

    def _meta_keys(self) -> Iterator[str]:
        """Every conversation's meta key, by SCAN on each master."""
        for node in self._nodes():
            for key in node.scan_iter(match="chd:{*}:m", count=1000):
                yield _text(key)

    def close(self) -> None:
        with self._cache_lock:
            self._cache.clear()
            self._cached = 0
        if self._read_lease is not None:
            # Giving the lease back to a Redis that does not answer would
            # hold the shutdown for three tries; it runs out by itself.
            self._read_lease.close(leave=not self._unanswered)
        if self._direct is not None:
            self._direct.close()
        self._close_probes()
        self._client.close()

    @contextmanager
    def lease(self, conversation_id: str) -> Iterator[bool]:
        """Hold this conversation's fold lease while the block runs; yields False if another replica holds it.

        The lease expires by itself after ``fold_lease`` seconds, so a
        replica that dies mid-fold blocks nobody for longer. A fold that
        outlives its lease is still safe: its commit checks that the summary
        and the queue are the ones it read.
        """
        self._answering()
        key = conversation_key(conversation_id, "lease")
        token = self._ids.next()
        with _translated():
            held = bool(self._client.set(key, token, nx=True, px=self._lease_ms))
        try:
            yield held
        finally:
            if held:
                try:
                    self._release(keys=[key], args=[token])
                except redis.RedisError:
                    log.warning(
                        "could not release the fold lease of %r; it expires by itself",
                        conversation_id,
                    )

    def available(self) -> bool:
        """True if every Redis node answers a PING within HEALTH_TIMEOUT (health follows this).

        Not on the client's connections: their timeout and retries are sized
        for commands, so a hung Redis would keep health SERVING for several
        of them. One try, a short timeout, a connection kept between probes.
        """
        try:
            for probe in self._probes():
                probe.ping()
        except redis.RedisError:
            self._close_probes()  # the next probe asks for the nodes and connects again
            self._unanswered = True
            return False
        self._unanswered = False
        return True

    def _answering(self) -> None:
        """Fail a call at once while the health probe finds Redis not answering.

        Otherwise every call, and every one queued behind a batch, would
        spend its three tries of redis_timeout on a Redis known to hang.
        Only a serving daemon probes (service/server.py); in-process use
        tries every call.
        """
        if self._unanswered:
            raise StorageError(
                f"Redis at {self.url} does not answer (health probe); nothing was done"
            )

    def _close_probes(self) -> None:
        probes, self._health = self._health or [], None
        for probe in probes:
            probe.close()
            probe.connection_pool.disconnect()

    def _probes(self) -> list[redis.Redis]:
        if self._health is None:
            quick = {
                **self._options,
                "socket_timeout": HEALTH_TIMEOUT,
                "socket_connect_timeout": HEALTH_TIMEOUT,
                "retry": Retry(NoBackoff(), 0),
            }
            if self.cluster:
                nodes = self._client.get_primaries()
                kwargs = self._client.get_redis_connection(
                    nodes[0]
                ).connection_pool.connection_kwargs
                tls = {k: v for k, v in kwargs.items() if k.startswith("ssl")}
                self._health = [
                    redis.Redis(
                        host=node.host,
                        port=node.port,
                        username=kwargs.get("username"),
                        password=kwargs.get("password"),
                        **{**tls, **quick},
                    )
                    for node in nodes
                ]
            else:
                kwargs = dict(self._client.connection_pool.connection_kwargs)
                kwargs.pop("retry", None)
                kwargs.update(quick)
                pool = redis.ConnectionPool(
                    connection_class=self._client.connection_pool.connection_class, **kwargs
                )
                self._health = [redis.Redis(connection_pool=pool)]
        return self._health

    # --- reading ------------------------------------------------------------------

    def _current(self, conversation_id: str) -> _Snapshot:
        """The conversation as of its last commit: one round trip when the cache is current."""
        lease = self._read_lease
        while True:
            before = self._cached_snapshot(conversation_id)
            # Stamped for the lease only while it is trusted (a state read
            # while trust had lapsed is asked for again once it is back).
            tenure = lease.tenure() if lease is not None else None
            commits = lease.commits() if lease is not None else 0
            if tenure is not None and self._direct is not None:
                key = conversation_key(conversation_id, "m")
                (commit, meta_text), ttl = _raised(
                    self._direct.run([("HMGET", key, "c", "m"), ("PTTL", key)])
                )
                # Keys written with a conversation_ttl (since turned off) still
                # expire, with no commit the lease would see: never trusted.
                trusted = int(ttl) < 0
            else:
                ((commit, meta_text),) = self._meta_of([conversation_id])
                trusted = False
            try:
                snapshot = self._refreshed(conversation_id, _text(commit), _text(meta_text), before)
            except _Conflict:
                continue
            # A commit of this process may have cached a newer state while
            # this read was on the wire: never put an older one over it.
            self._remember(snapshot, replacing=before)
            # Nothing cached when the read began is also what the cache holds
            # once such a commit's state was evicted or forgotten: then the
            # read's state is cached for deciding, not trusted by the lease.
            if trusted and tenure is not None and lease is not None:
                if before is not None or lease.commits() == commits:
                    stamp(snapshot, tenure)
            return snapshot

    def _current_many(self, batch: list[Request]) -> dict[str, _Snapshot]:
        """The current snapshots of the batch's uncached conversations, their meta in one pipeline.

        An import's batch is mostly conversations this replica never read:
        one round trip for all of them instead of one each.
        """
        missing = [
            cid
            for cid in dict.fromkeys(r.conversation_id for r in batch)
            if self._cached_snapshot(cid) is None
        ]
        if len(missing) < 2:
            return {}
        found = {}
        # Not stamped for the read lease: whether they expire is not asked
        # (a batch's commits stamp the states they make).
        for cid, (commit, meta_text) in zip(missing, self._meta_of(missing)):
            try:
                snapshot = self._refreshed(cid, _text(commit), _text(meta_text), None)
            except _Conflict:
                snapshot = self._current(cid)
            self._remember(snapshot, replacing=None)
            found[cid] = snapshot
        return found

    def _refreshed(
        self, conversation_id: str, commit: str, meta_text: str, old: _Snapshot | None
    ) -> _Snapshot:
        """The snapshot at ``commit`` (whose meta record is ``meta_text``), reusing what ``old`` holds.

        Raises:
            _Conflict: another commit came in since ``commit``.
        """
        if old is not None and not old.acknowledged:
            # A losing attempt's state: its records at seqs Redis gave to
            # another replica's utterances are not what was said.
            old = None
        if old is not None and old.commit == commit:
            return old
        if not commit:
            return _Snapshot("", Meta(conversation_id), ConversationState(conversation_id))
        meta = Meta.decode(meta_text, conversation_id)
        known: dict[int, Utterance] = {}
        if old is not None and old.commit and old.meta.updated_at == meta.updated_at:
            for items in (old.state.utterances, old.state.pending, old.state.archive):
                known.update((u.seq, u) for u in items)
        want_summary = bool(meta.summary_at) and (
            old is None or old.meta.summary_at != meta.summary_at
        )
        seqs = [
            seq
            for runs in (meta.buffer, meta.pending, meta.archive)
            for seq in runs
            if seq not in known
        ]
        summary = old.state.summary if old is not None and not want_summary else Summary()
        if seqs or want_summary:
            (reply,) = _raised(
                self._scripts(
                    self._fetch,
                    [
                        (
                            [
                                conversation_key(conversation_id, "m"),
                                conversation_key(conversation_id, "u"),
                            ],
                            [commit, "1" if want_summary else "0", *seqs],
                        )
                    ],
                )
            )
            if not reply[0]:
                raise _Conflict
            if want_summary:
                summary = decode_summary(_text(reply[1]), conversation_id)
            for seq, record in zip(seqs, reply[2:]):
                if record is None:
                    raise StorageError(
                        f"utterance {seq} of conversation {conversation_id!r} is missing from Redis"
                    )
                known[seq] = decode_utterance(_text(record), conversation_id, seq)
        state = ConversationState(
            conversation_id=conversation_id,
            next_seq=meta.next_seq,
            last_turn=meta.last_turn,
            utterances=[known[s] for s in meta.buffer],
            pending=[known[s] for s in meta.pending],
            summary=summary,
            settings=dict(meta.settings or {}),
            archive=[known[s] for s in meta.archive],
        )
        return _Snapshot(commit, meta, state)

    # --- writing --------------------------------------------------------------------

    def _apply(self, snapshot: _Snapshot, change: Change) -> _Snapshot | tuple[str, str] | None:
        """Commit ``change`` on ``snapshot``: the new snapshot, the (commit, meta) that overtook it,
        or None if its quota reservation ran out first."""
        conversation_id = snapshot.state.conversation_id
        deadline = 0
        if self._quota is not None and not snapshot.commit:
            deadline, held = self._quota.reserve(conversation_id)
            if not deadline:
                raise self._full(conversation_id, held)
        keys, args, after = self._prepare(snapshot, change, deadline)
        reply = self._commit(keys=keys, args=args)
        if reply[0] == FULL:
            raise self._full(conversation_id, reply[1])
        if reply[0] == EXPIRED:
            return None
        if reply[0] and self._quota is not None:
            if deadline and after.commit:
                self._quota.confirm(conversation_id, deadline)
            elif snapshot.commit and not after.commit:
                self._quota.release(conversation_id)
        if reply[0]:
            after.acknowledged = True
            return after
        return _text(reply[1]), _text(reply[2])

    def _full(self, conversation_id: str, held: Any) -> TooLarge:
        # The words of the limits layer (daemon/service/limits.py), which
        # checks first; this is the check two replicas cannot both pass.
        return TooLarge(
            f"this daemon already holds {int(held)} conversations, the max_conversations limit; "
            f"conversation {conversation_id!r} was not created"
        )

    def _prepare(
        self, snapshot: _Snapshot, change: Change, reserved: int = 0
    ) -> tuple[list[str], list[Any], _Snapshot]:
        """The commit script's keys and arguments for ``change`` on ``snapshot``, and the snapshot it makes."""
        state, old = snapshot.state, snapshot.meta
        conversation_id = state.conversation_id
        commit = self._ids.next()
        new_state = apply_change(state, change)
        stored_before = (old.buffer, old.pending, old.archive)
        buffer = old.buffer.without(change.remove).with_added([u.seq for u in change.append])
        # A store leaves the queue and the archive as they are: their runs are
        # kept, not rebuilt from empty changes on every commit.
        pending, archive = old.pending, old.archive
        if change.pending_remove or change.pending_add:
            pending = pending.without(change.pending_remove).with_added(
                [u.seq for u in change.pending_add]
            )
        if change.archive_remove or change.archive_add:
            archive = archive.without(change.archive_remove).with_added(
                [u.seq for u in change.archive_add]
            )
        writes: dict[int, Utterance] = {}
        rewritten = False
        # Seqs from next_seq on are new: nothing stored can hold them (a
        # store's common case, spared the lookups below).
        fresh = state.next_seq
        for u in (*change.append, *change.pending_add, *change.archive_add):
            if u.seq >= fresh or _stored(state, u.seq) is not u:
                writes[u.seq] = u
        for u in change.update:
            if u.seq in buffer and _stored(state, u.seq) is not u:
                writes[u.seq] = u
        for seq in writes:
            if seq < fresh and any(seq in runs for runs in stored_before):
                rewritten = True
        removed = (*change.remove, *change.pending_remove, *change.archive_remove)
        gone = {
            seq
            for seq in removed
            if seq not in buffer and seq not in pending and seq not in archive
        }
        meta = Meta(
            conversation_id=conversation_id,
            next_seq=new_state.next_seq,
            last_turn=new_state.last_turn,
            buffer=buffer,
            pending=pending,
            archive=archive,
            settings=new_state.settings,
            summary_at=commit if change.summary is not None else old.summary_at,
            updated_at=commit if rewritten else old.updated_at,
        )
        queued = "" if bool(state.pending) == bool(meta.pending) else ("1" if meta.pending else "0")
        args: list[Any] = [
            snapshot.commit,
            commit,
            meta.encode(),
            encode_summary(change.summary) if change.summary is not None else "",
            self._ttl_ms,
            conversation_id,
            queued,
            self._limit,
            reserved,
            len(writes),
            "" if self.cluster else self._ids.replica,
            int(READ_LEASE * 1000),
            self._recent_ms,
        ]
        for seq, u in writes.items():
            args += (seq, encode_utterance(u))
        args += sorted(gone - writes.keys())
        keys = list(self._commit_keys(conversation_id))
        if new_state.is_empty:
            args[2] = ""
            return keys, args, _Snapshot("", Meta(conversation_id), new_state, acknowledged=False)
        return keys, args, _Snapshot(commit, meta, new_state, acknowledged=False)

    def _keys_of(self, conversation_id: str) -> tuple[str, ...]:
        """The commit script's keys: the conversation's, its index partition's, its recent commits and
        (standalone) the read lease."""
        tag = conversation_tag(conversation_id)
        keys = (
            "chd:{" + tag + "}:m",
            "chd:{" + tag + "}:u",
            *index_keys(partition_of(tag, self.cluster)),
            "chd:{" + tag + "}:r",
        )
        return keys if self.cluster else (*keys, LEASE_KEY)

    def _commit_batch(self, batch: list[Request]) -> None:
        """Decide and commit the queued calls of this process with one pipeline per round (GroupCommit).

        Calls on one conversation decide in order, each on the state the
        previous one makes. Each commit is its own script with its own check,
        so a pipeline is one round trip for the batch and not a transaction:
        a commit that lost a race (and the later ones of its conversation,
        decided on what it would have made) decide again in the next round,
        on the state Redis has.
        """
        self._answering()  # calls queued behind a batch that waited on a hung Redis
        # conversation -> (snapshot, verified): verified means read from (or
        # committed to) Redis during this batch, so a refusal or a no-op may
        # be answered from it.
        working: dict[str, tuple[_Snapshot, bool]] = {
            cid: (snapshot, True) for cid, snapshot in self._current_many(batch).items()
        }
        waiting = list(batch)
        for attempt in range(_MAX_ATTEMPTS):
            sent: list[tuple[Request, Any, _Snapshot]] = []
            calls: list[tuple[list[str], list[Any]]] = []
            later: list[Request] = []
            speculative: set[str] = set()  # decided on a commit not yet acknowledged
            for request in waiting:
                cid = request.conversation_id
                if cid not in working:
                    cached = self._cached_snapshot(cid)
                    working[cid] = (
                        (cached, False) if cached is not None else (self._current(cid), True)
                    )
                snapshot, verified = working[cid]
                try:
                    change, value = request.decide(snapshot.state)
                except Exception as exc:
                    if verified and cid not in speculative:
                        request.error, request.done = exc, True
                    else:
                        later.append(request)
                        speculative.add(cid)  # nothing more for it this round
                        if not any(r.conversation_id == cid for r, _, _ in sent):
                            working[cid] = (self._current(cid), True)
                    continue
                if change.is_empty:
                    if verified and cid not in speculative:
                        request.value, request.done = value, True
                    else:
                        later.append(request)
                        speculative.add(cid)
                        if not any(r.conversation_id == cid for r, _, _ in sent):
                            working[cid] = (self._current(cid), True)
                    continue
                keys, args, after = self._prepare(snapshot, change)
                sent.append((request, value, after))
                calls.append((keys, args))
                working[cid] = (after, False)
                speculative.add(cid)
            tenure = self._tenure()
            try:
                replies = self._send(calls)
            except BaseException:
                # Some of these commits may have landed with their replies
                # lost: the cache must not answer for them any more.
                self._forget(request.conversation_id for request, _, _ in sent)
                raise
            lost: dict[str, tuple[str, str] | None] = {}
            for (request, value, after), reply in zip(sent, replies):
                cid = request.conversation_id
                if cid in lost:
                    later.append(request)  # decided on a state that was never committed
                elif isinstance(reply, Exception):
                    if not _is_oom(reply):
                        raise reply
                    request.error = StorageFull(
                        f"Redis refused the write: out of memory (maxmemory): {_reason(reply)}"
                    )
                    request.done = True
                    lost[cid] = None
                elif reply[0] == FULL:
                    request.error, request.done = self._full(cid, reply[1]), True
                    lost[cid] = None
                elif reply[0]:
                    request.value, request.done = value, True
                    after.acknowledged = True
                    working[cid] = (after, True)
                    if self._read_lease is not None:
                        self._read_lease.committed()  # before it is cached (and maybe evicted)
                    stamp(after, tenure)
                    self._remember(after)
                else:
                    later.append(request)
                    lost[cid] = (_text(reply[1]), _text(reply[2]))
            for cid, overtaking in lost.items():
                # What it decided on may be a state this batch would have
                # made: the records worth reusing are those of the version cached.
                old = (
                    working[cid][0] if working[cid][0].acknowledged else self._cached_snapshot(cid)
                )
                try:
                    if overtaking is None:
                        raise _Conflict
                    fresh = self._refreshed(cid, overtaking[0], overtaking[1], old)
                except _Conflict:
                    fresh = self._current(cid)
                working[cid] = (fresh, True)
            if not later:
                return
            waiting = sorted(later, key=batch.index)
            if attempt >= 3:
                time.sleep(random.uniform(0, 0.002 * min(attempt, 20)))
        raise StorageError(
            f"{len(waiting)} writes kept losing to other replicas in {_MAX_ATTEMPTS} attempts"
        )

    def _send(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """Run commit scripts in one round trip; each reply, or the exception of its call.

        Calls answered "wait" (another replica's read lease is running out)
        wrote nothing: they go again, in order, once it has.
        """
        replies = self._scripts(self._commit, calls) if calls else []
        resent = 0
        while waiting := [
            i for i, reply in enumerate(replies) if isinstance(reply, list) and reply[0] == WAIT
        ]:
            if resent == 3:
                raise StorageError("writes kept waiting for other replicas' read leases to run out")
            time.sleep(max(int(replies[i][1]) for i in waiting) / 1000)
            for i, reply in zip(waiting, self._scripts(self._commit, [calls[i] for i in waiting])):
                replies[i] = reply
            resent += 1
        return replies

    def _scripts(self, script: Any, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """Each call's reply to ``script``, or its error reply as the exception, in one round trip
        (one per call on a cluster, whose calls may live on different nodes)."""
        if self._direct is not None:
            return self._direct.scripts(script, calls)
        replies: list[Any] = []
        for keys, args in calls:
            try:
                replies.append(script(keys=keys, args=args))
            except redis.ResponseError as exc:
                replies.append(exc)
        return replies

    def _meta_of(self, conversation_ids: list[str]) -> list[tuple[Any, Any]]:
        """Each conversation's last commit id and meta record, in one round trip."""
        commands = [("HMGET", conversation_key(cid, "m"), "c", "m") for cid in conversation_ids]
        if self._direct is None:
            return [self._client.execute_command(*command) for command in commands]
        return _raised(self._direct.run(commands))

    # --- the cache and locks ------------------------------------------------------------

    def _tenure(self) -> int:
        return self._read_lease.current() if self._read_lease is not None else 0

    def _forget(self, conversation_ids: Iterable[str]) -> None:
        if self._read_lease is not None:
            self._read_lease.committed()  # some of them may have committed with their replies lost
        with self._cache_lock:
            for conversation_id in conversation_ids:
                dropped = self._cache.pop(conversation_id, None)
                if dropped is not None:
                    self._cached -= dropped.size

    def _cached_snapshot(self, conversation_id: str) -> _Snapshot | None:
        with self._cache_lock:
            return self._cache.get(conversation_id)

    def _remember(self, snapshot: _Snapshot, replacing: _Snapshot | None | bool = True) -> None:
        """Cache ``snapshot``; with ``replacing`` only if the cache still holds that (None: nothing)."""
        conversation_id = snapshot.state.conversation_id
        if not snapshot.acknowledged:
            raise AssertionError(
                f"a state Redis never acknowledged was about to be cached for {conversation_id!r}"
            )
        with self._cache_lock:
            if replacing is not True and self._cache.get(conversation_id) is not replacing:
                return
            old = self._cache.pop(conversation_id, None)
            if old is not None:
                self._cached -= old.size
            self._cache[conversation_id] = snapshot
            self._cached += snapshot.size
            while self._cached > self._capacity and len(self._cache) > 1:
                _, dropped = self._cache.popitem(last=False)
                self._cached -= dropped.size

    def _lock(self, conversation_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(conversation_id, threading.Lock())

    def _nodes(self) -> list[Any]:
        if self.cluster:
            return [
                self._client.get_redis_connection(node) for node in self._client.get_primaries()
            ]
        return [self._client]


class _CommitIds:
    """Commit ids unique across replicas and restarts: a random 64-bit prefix and a counter."""

    def __init__(self) -> None:
        self.replica = os.urandom(8).hex()
        self._prefix = self.replica + "."
        self._count = itertools.count(1)

    def next(self) -> str:
        return self._prefix + str(next(self._count))


def _raised(replies: list[Any]) -> list[Any]:
    """``replies``, with the first error reply among them raised."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _retry() -> Retry:
    return Retry(ExponentialBackoff(cap=0.5, base=0.05), 2)


def _retry_policy(client: Any) -> Retry:
    """The retry policy of a client: redis-py's standalone client offers it by a method, the cluster's as an attribute."""
    get = getattr(client, "get_retry", None)
    return get() if callable(get) else client.retry  # type: ignore[no-any-return]


def _stored(state: ConversationState, seq: int) -> Utterance | None:
    """The utterance ``seq`` in ``state``'s buffer, queue or archive (all seq-ordered)."""
    for items in (state.utterances, state.pending, state.archive):
        i = bisect_left(items, seq, key=lambda u: u.seq)
        if i < len(items) and items[i].seq == seq:
            return items[i]
    return None


def _streamed(ids: Iterator[str]) -> Iterator[str]:
    """``ids`` with Redis failures raised as storage errors, page by page."""
    with _translated():
        yield from ids


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def _cluster_enabled(client: redis.Redis) -> bool:
    try:
        return bool(client.info("cluster").get("cluster_enabled"))
    except redis.ResponseError:  # a proxy or managed Redis may refuse INFO
        return False


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, redis.exceptions.OutOfMemoryError) or "OOM command not allowed" in str(
        exc
    )


@contextmanager
def _translated() -> Iterator[None]:
    """Redis failures as the storage errors the service maps to gRPC statuses."""
    try:
        yield
    except redis.RedisError as exc:
        if _is_oom(exc):
            raise StorageFull(
                f"Redis refused the write: out of memory (maxmemory): {_reason(exc)}"
            ) from None
        raise StorageError(f"Redis failed: {type(exc).__name__}: {_reason(exc)}") from None
