"""max_conversations on Redis Cluster: places reserved in one key before a conversation is created.

Every replica on a cluster keeps the quota, with or without a limit (the
transfer tools have none), so that it always holds every live conversation;
an index build (backends/redis_index.py) adds the conversations it finds.

On standalone Redis the commit script checks the limit against the index
itself. On a cluster it cannot: a script may only touch its own slot, and
the conversations are spread over all of them. So creations there go
through one sorted set, ``chd:{!}:quota``, whose members are a superset of
the live conversations (member: the id; score: ms on the Redis clock):

* reserve (before a creation commit): an id already there gets a new
  deadline; a new one is added only while the set holds fewer than the
  limit. The commit script refuses to create a conversation once its
  reservation's deadline has passed (on its own node's clock), so a
  reservation is only ever used in time.
* confirm (after the creation committed): the score becomes ``+inf`` (or,
  with ``conversation_ttl``, when the keys expire), only if it is still the
  deadline this replica set.
* release (after a commit emptied a conversation): a ``+inf`` score becomes
  "now", marking the place for a check.
* repair (when the set looks full): members whose score has passed by more
  than ``SKEW_MS`` are checked against the data: a live one is confirmed
  again, a dead one removed, each only if its score did not change since it
  was read, so a reservation made meanwhile is never undone. If that frees
  nothing, a page of confirmed (``+inf``) members is checked the same way,
  at most every ``AUDIT_SECONDS`` per replica and a page further each time:
  that finds the place of a conversation emptied by a replica killed before
  its release.

Every live conversation is in the set at all times, so the set's size, which
reserve never lets past the limit, bounds them: replicas creating at once
never pass it. What the set holds beyond the live conversations (a creation
that failed, a replica killed between its commit and the release, a
conversation Redis expired, a replica killed between emptying a conversation
and releasing its place) only makes it refuse early until repaired.
"""

from __future__ import annotations

import time
from typing import Any

from chd.backends.redis_index import NOW_MS
from chd.backends.redis_keys import QUOTA_KEY, conversation_key

__all__ = ["ClusterQuota", "RESERVATION_MS", "SKEW_MS", "AUDIT_SECONDS"]

# How long a reservation may wait for its creation commit.
RESERVATION_MS = 10_000
# Past a deadline by this much on the quota's node, no node's commit script
# can still take it: the bound on the clock difference between nodes.
SKEW_MS = 2_000
_REPAIR_BATCH = 200
# The most often one replica checks a page of confirmed places (a refused
# creation pays for it, so it stays about the cost of a store on average).
AUDIT_SECONDS = 5.0

_WRITES = "redis.replicate_commands()\n" + NOW_MS

# KEYS: quota. ARGV: id, limit (0: none), reservation ms. {1, deadline} or {0, held}.
_RESERVE = (
    _WRITES
    + """
local deadline = now + tonumber(ARGV[3])
local limit = tonumber(ARGV[2])
if limit > 0 and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local held = redis.call('ZCARD', KEYS[1])
  if held >= limit then return {0, held} end
end
redis.call('ZADD', KEYS[1], deadline, ARGV[1])
return {1, deadline}
"""
)

# KEYS: quota. ARGV: id, the deadline this replica set, ttl ms ('0': none).
_CONFIRM = (
    _WRITES
    + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  local ttl = tonumber(ARGV[3])
  redis.call('ZADD', KEYS[1], ttl > 0 and (now + ttl) or '+inf', ARGV[1])
end
return 1
"""
)

# KEYS: quota. ARGV: id.
_RELEASE = (
    _WRITES
    + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score == 'inf' then redis.call('ZADD', KEYS[1], now, ARGV[1]) end
return 1
"""
)

# KEYS: quota. ARGV: skew ms, count. Members past their score by more than skew: {id, score, ...}.
_STALE = (
    NOW_MS
    + """
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]), 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
"""
)

# KEYS: quota. ARGV: id, the score read, '1' live (then ARGV[4]: its keys' ttl ms, -1 none) or '0' gone.
_SETTLE = (
    _WRITES
    + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or score ~= ARGV[2] then return 0 end
if ARGV[3] == '0' then return redis.call('ZREM', KEYS[1], ARGV[1]) end
local ttl = tonumber(ARGV[4])
redis.call('ZADD', KEYS[1], ttl > 0 and (now + ttl) or '+inf', ARGV[1])
return 1
"""
)


class ClusterQuota:
    """The reservations of one replica against ``limit`` (see the module docstring)."""

    def __init__(self, client: Any, limit: int | None, ttl_ms: int) -> None:
        self._client = client
        self._limit = limit or 0
        self._ttl_ms = ttl_ms
        self._reserve = client.register_script(_RESERVE)
        self._confirm = client.register_script(_CONFIRM)
        self._release = client.register_script(_RELEASE)
        self._stale = client.register_script(_STALE)
        self._settle = client.register_script(_SETTLE)
        self._audited = float("-inf")  # monotonic: when a page of confirmed places was last checked
        self._audit_from = 0  # where in the confirmed places the next page starts

    def reserve(self, conversation_id: str) -> tuple[int, int]:
        """``(deadline, 0)`` with a place held until ``deadline`` (ms, Redis clock), or ``(0, held)`` when full.

        A full set is repaired once before the answer is given.
        """
        for attempt in range(2):
            reply = self._reserve(
                keys=[QUOTA_KEY], args=[conversation_id, self._limit, RESERVATION_MS]
            )
            if reply[0]:
                return int(reply[1]), 0
            if attempt == 0 and not self.repair():
                break
        return 0, int(reply[1])

    def confirm(self, conversation_id: str, deadline: int) -> None:
        self._confirm(keys=[QUOTA_KEY], args=[conversation_id, deadline, self._ttl_ms])

    def release(self, conversation_id: str) -> None:
        self._release(keys=[QUOTA_KEY], args=[conversation_id])

    def repair(self) -> int:
        """Settle one batch of members past their score, else audit a page of confirmed ones;
        how many places that freed."""
        flat = self._stale(keys=[QUOTA_KEY], args=[SKEW_MS, _REPAIR_BATCH])
        freed = self._settled(_pairs(flat))
        if freed or time.monotonic() - self._audited < AUDIT_SECONDS:
            return freed
        self._audited = time.monotonic()
        flat = self._client.zrangebyscore(
            QUOTA_KEY,
            "+inf",
            "+inf",
            start=self._audit_from,
            num=_REPAIR_BATCH,
            withscores=True,
            score_cast_func=_text,
        )
        page = [(_text(member), score) for member, score in flat]
        self._audit_from = self._audit_from + len(page) if len(page) == _REPAIR_BATCH else 0
        return self._settled(page)

    def _settled(self, stale: list[tuple[str, str]]) -> int:
        """Check each (member, score read) against the data and settle it; how many were removed."""
        if not stale:
            return 0
        pipe = self._client.pipeline(transaction=False)
        for conversation_id, _ in stale:
            pipe.pttl(conversation_key(conversation_id, "m"))
        ttls = pipe.execute()
        # One pipeline down the quota's own master (a cluster pipeline refuses scripts).
        node = self._client.get_node_from_key(QUOTA_KEY)
        settle = self._client.get_redis_connection(node).pipeline(transaction=False)
        gone = []
        for (conversation_id, score), ttl in zip(stale, ttls):
            live = int(ttl) != -2  # -2: no such key
            gone.append(not live)
            self._settle(
                keys=[QUOTA_KEY], args=[conversation_id, score, int(live), int(ttl)], client=settle
            )
        return sum(int(n) for n, dead in zip(settle.execute(), gone) if dead)


def _pairs(flat: list[Any]) -> list[tuple[str, str]]:
    return [(_text(flat[i]), _text(flat[i + 1])) for i in range(0, len(flat), 2)]


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)
