"""The Redis backend's conversation index: counts, listing and queued folds without scanning.

Three sorted sets per partition (backends/redis_keys.py), kept by the commit
script in the same atomic step as the conversation's data
(backends/redis_backend.py), so they are exact across replicas and after
any crash:

    chd:{<p>}:n   every conversation with state (member: its id in UTF-8, score 0,
                  so ``ZRANGEBYLEX`` lists them in the order Python sorts ids)
    chd:{<p>}:q   those whose summary queue is not empty (same members, score 0)
    chd:{<p>}:e   with ``conversation_ttl``: when each conversation's keys expire
                  (score: ms on the Redis clock), so counts and lists leave out
                  what Redis has expired before anything prunes it

Standalone Redis has one partition: a count is one command, a list one
command per page. On Redis Cluster each of the 16384 slots is a partition
(a script may only declare keys of one slot), so a count or the queued list
asks every slot once, pipelined per master: a constant 16384 small commands
whatever the data.

Stores written before the index existed (no ``chd:{!}:index`` marker) are
indexed once at start-up, one conversation per atomic script, while other
replicas of this version keep writing.
"""

from __future__ import annotations

import json
import logging
import os
import time
from binascii import crc_hqx
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from chd.backends.redis_keys import (
    QUOTA_KEY,
    SLOTS,
    STANDALONE,
    conversation_of,
    index_keys,
    partition_of,
    partitions,
)
from chd.backends.redis_scripts import RELEASE_LEASE
from chd.backends.seq_runs import SeqRuns

__all__ = ["RedisIndex", "INDEX_MARKER", "NOW_MS", "run_lengths"]

log = logging.getLogger(__name__)

INDEX_MARKER = "chd:{!}:index"
_BUILD_LOCK = "chd:{!}:index-build"
_BUILD_LEASE_MS = 60_000
_PAGE = 1000
_BATCH = 500

# Redis's clock in ms, inside a script (the clock key expiry goes by).
NOW_MS = "local _t = redis.call('TIME'); local now = tonumber(_t[1]) * 1000 + math.floor(tonumber(_t[2]) / 1000)\n"

# KEYS: ids, expiries. The live count: members of ids less those past expiry.
_COUNT = (
    NOW_MS
    + """
return redis.call('ZCARD', KEYS[1]) - redis.call('ZCOUNT', KEYS[2], '-inf', now)
"""
)

# KEYS: a set (ids or queued), expiries. ARGV: start ('-' or '(' .. id), count.
# One page: {last member read ('' none), how many were read, live members...}.
_PAGE_SCRIPT = (
    NOW_MS
    + """
local got = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], '+', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {got[#got] or '', #got}
local timed = redis.call('EXISTS', KEYS[2]) == 1
for _, member in ipairs(got) do
  local expires = timed and redis.call('ZSCORE', KEYS[2], member)
  if not expires or tonumber(expires) > now then out[#out + 1] = member end
end
return out
"""
)

# KEYS: meta, ids, queued, expiries. ARGV: member. Indexes one conversation
# written before the index existed; atomic, so a commit of a replica of this
# version on the same conversation comes wholly before or after it.
_INDEX_ONE = (
    "redis.replicate_commands()\n"
    + NOW_MS
    + """
local meta = redis.call('HGET', KEYS[1], 'm')
if not meta then return 0 end
redis.call('ZADD', KEYS[2], 0, ARGV[1])
local pending = cjson.decode(meta)['pending']
if pending and #pending > 0 then redis.call('ZADD', KEYS[3], 0, ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('ZADD', KEYS[4], now + ttl, ARGV[1]) end
return 1
"""
)


class RedisIndex:
    """Reads the index (and builds it once for an older store)."""

    def __init__(self, client: Any, cluster: bool) -> None:
        self._client = client
        self._cluster = cluster
        self._count = client.register_script(_COUNT)
        self._page = client.register_script(_PAGE_SCRIPT)
        self._index_one = client.register_script(_INDEX_ONE)
        self._release = client.register_script(RELEASE_LEASE)

    def count(self) -> int:
        """Conversations with state now: one script, or one per slot pipelined on a cluster."""
        if not self._cluster:
            ids, _, expiries = index_keys(STANDALONE)
            return int(self._count(keys=[ids, expiries]))
        replies = self._every_slot(self._count, lambda keys: ([keys[0], keys[2]], []))
        return sum(int(n) for n in replies)

    def ids(self, after: str = "") -> Iterator[str]:
        """Ids above ``after``, sorted, a page at a time (the one partition of standalone Redis)."""
        return self._members(STANDALONE, 0, after)

    def queued(self) -> Iterator[str]:
        """Ids with a non-empty summary queue, sorted."""
        if not self._cluster:
            return self._members(STANDALONE, 1, "")
        # Few conversations have a queue at once: one page of every slot in
        # one pipeline, and only a slot with more reads on alone.
        found: list[str] = []
        parts = partitions(True)
        replies = self._every_slot(self._page, lambda keys: ([keys[1], keys[2]], ["-", _PAGE]))
        for part, reply in zip(parts, replies):
            found += (_text(m) for m in reply[2:])
            if int(reply[1]) >= _PAGE:
                found += self._members(part, 1, _text(reply[0]))
        return iter(sorted(found))

    def _every_slot(
        self, script: Any, call: Callable[[list[str]], tuple[list[str], list[Any]]]
    ) -> list[Any]:
        """``script`` on every slot's index keys; the replies in slot order."""
        tags = partitions(True)
        return self._pipelined(
            script, [(slot, *call(index_keys(tag))) for slot, tag in enumerate(tags)]
        )

    def _pipelined(self, script: Any, calls: list[tuple[int, list[str], list[Any]]]) -> list[Any]:
        """``script`` once per ``(slot, keys, args)``, one pipeline per master; the replies in order.

        redis-py's cluster pipeline refuses scripts, so on a cluster the
        calls are grouped by the master the client's slot map names and each
        group goes down that master's own connection.
        """
        if not self._cluster:
            pipe = self._client.pipeline(transaction=False)
            for _, keys, args in calls:
                script(keys=keys, args=args, client=pipe)
            return list(pipe.execute())
        slots_cache = self._client.nodes_manager.slots_cache
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i, (slot, _, _) in enumerate(calls):
            node = slots_cache[slot][0]
            groups.setdefault(node.name, (node, []))[1].append(i)
        replies: list[Any] = [None] * len(calls)
        for node, members in groups.values():
            pipe = self._client.get_redis_connection(node).pipeline(transaction=False)
            for i in members:
                _, keys, args = calls[i]
                script(keys=keys, args=args, client=pipe)
            for i, reply in zip(members, pipe.execute()):
                replies[i] = reply
        return replies

    def _members(self, part: str, which: int, after: str) -> Iterator[str]:
        keys = index_keys(part)
        start = "(" + after if after else "-"
        while True:
            reply = self._page(keys=[keys[which], keys[2]], args=[start, _PAGE])
            yield from (_text(m) for m in reply[2:])
            if int(reply[1]) < _PAGE:
                return
            start = "(" + _text(reply[0])

    # --- the one-time build for a store written before the index -----------------

    def ensure_built(self, meta_keys: Callable[[], Iterable[str]]) -> None:
        """Index a store written by a chd without the index, once (logged); one GET after that.

        ``meta_keys`` streams every conversation's meta key (SCAN on each
        master). Replicas starting together build it once: one holds a
        lease, the others wait for the marker.
        """
        if self._client.get(INDEX_MARKER) is not None:
            return
        token = os.urandom(8).hex()
        while not self._client.set(_BUILD_LOCK, token, nx=True, px=_BUILD_LEASE_MS):
            if self._client.get(INDEX_MARKER) is not None:
                return
            time.sleep(0.05)  # another replica builds it; its lease bounds the wait
        try:
            if self._client.get(INDEX_MARKER) is not None:
                return
            batch: list[str] = []
            indexed = 0
            for key in meta_keys():
                batch.append(key)
                if len(batch) >= _BATCH:
                    indexed += self._index_batch(batch)
                    batch = []
            indexed += self._index_batch(batch)
            self._client.set(INDEX_MARKER, "1")
            if indexed:
                log.info(
                    "Redis store written without a conversation index (chd before issue 17): "
                    "indexed its %d conversations once",
                    indexed,
                )
        finally:
            # Compare and delete in one step: a lease that expired mid-build may be another replica's now.
            self._release(keys=[_BUILD_LOCK], args=[token])

    def _index_batch(self, meta_keys: list[str]) -> int:
        if not meta_keys:
            return 0
        calls = []
        for key in meta_keys:
            tag = key[len("chd:{") : -len("}:m")]
            slot = crc_hqx(tag.encode(), 0) % SLOTS
            calls.append(
                (
                    slot,
                    [key, *index_keys(partition_of(tag, self._cluster))],
                    [conversation_of(key).encode()],
                )
            )
        found = self._pipelined(self._index_one, calls)
        if self._cluster:
            # The quota holds every live conversation (backends/redis_quota.py); NX
            # keeps a reservation a replica made meanwhile.
            live = {
                conversation_of(key): float("inf") for key, n in zip(meta_keys, found) if int(n)
            }
            if live:
                self._client.zadd(QUOTA_KEY, live, nx=True)
        return sum(int(n) for n in found)


def run_lengths(meta_text: str) -> tuple[int, int]:
    """Buffer and queue lengths from a meta record, without decoding an utterance."""
    record = json.loads(meta_text)
    return len(SeqRuns(tuple(r) for r in record["buffer"])), len(
        SeqRuns(tuple(r) for r in record["pending"])
    )


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)
