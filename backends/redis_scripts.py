"""The Lua scripts of the redis backend (backends/redis_backend.py): commit, fetch, lease release.

Each runs atomically in Redis and declares only keys of one conversation's
slot (its own keys and its index partition's, backends/redis_keys.py), so
they are legal on Redis Cluster too.
"""

from __future__ import annotations

__all__ = [
    "COMMIT",
    "FETCH",
    "RELEASE_LEASE",
    "HEARTBEAT",
    "LEAVE",
    "FULL",
    "EXPIRED",
    "WAIT",
    "RECENT_COMMITS_KEPT",
]

# The most commit ids a conversation's recent commits keep, whatever the rate.
RECENT_COMMITS_KEPT = 10_000

# KEYS: meta, utterances, then the index of the conversation's partition
# (backends/redis_index.py): ids, queued, expiries, then the conversation's
# recent commits (a sorted set: commit id -> when, in ms). ARGV: expected
# commit id, this commit's id, meta record ('' for an empty state: delete the
# conversation), summary record ('' unchanged), idle ttl in ms ('0' none), the
# id (the index's member), the queue after ('1' not empty, '0' empty, ''
# unchanged), max_conversations ('0' none), the deadline of this creation's
# place in a cluster's quota (ms, '0' none: backends/redis_quota.py), number
# of utterance records to set, this replica's id ('' on a cluster: no read
# lease), the read lease in ms, how long a commit id is kept among the recent
# ones (ms), then seq/record pairs, then seqs to delete.
# On standalone Redis KEYS[7] is the read lease key (backends/redis_read_lease.py).
# Replies {1} applied, {0, commit, meta} overtaken, {2, count} refused: full,
# {3} the quota reservation ran out before the commit: reserve again,
# {4, ms} another replica answers reads from its cache: nothing written, send
# again after ms, when its lease has run out.
# The first write is the meta HSET (or the DEL of an emptied conversation):
# under maxmemory Redis refuses a script's first write that needs memory and
# nothing is written (later writes of a script that has started writing are
# never refused halfway); the limit is checked before it with reads only.
COMMIT = """
local c = redis.call('HGET', KEYS[1], 'c') or ''
if c ~= ARGV[1] then
  if c == ARGV[2] then return {1} end
  -- redis-py re-sends a script whose reply was lost with the connection; if
  -- this commit was applied and another replica's came after it, deciding
  -- again would store the utterance twice: answered as applied instead.
  if redis.call('ZSCORE', KEYS[6], ARGV[2]) then return {1} end
  -- A chd before 2026-11-27 kept its last commits' ids in the meta hash, in
  -- one string; replicas of that version may still be re-sending.
  local legacy = redis.call('HGET', KEYS[1], 'r')
  if legacy and string.find(' ' .. legacy .. ' ', ' ' .. ARGV[2] .. ' ', 1, true) then return {1} end
  return {0, c, redis.call('HGET', KEYS[1], 'm') or ''}
end
if c == '' and redis.call('ZSCORE', KEYS[6], ARGV[2]) then
  -- This creation was applied, then another replica emptied the
  -- conversation, and now it comes again: applied already, not again.
  return {1}
end
-- TIME before a write needs effects replication on Redis 6 (the default on 7).
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[11] ~= '' then
  local w = redis.call('GET', KEYS[7])
  local mine = 'sole:' .. ARGV[11] .. ':'
  if w and string.sub(w, 1, #mine) ~= mine then
    if string.sub(w, 1, 5) == 'sole:' then
      -- End its lease: it renews only 'sole:<its id>:<its tenure>', so it stops
      -- answering from its cache within one lease, and no write lands before that.
      local lease = tonumber(ARGV[12])
      redis.call('SET', KEYS[7], 'writers:' .. (now + lease), 'PX', lease + 1000)
      return {4, lease}
    end
    local open = tonumber(string.sub(w, 9))
    if now < open then return {4, open - now} end
  end
end
local member = ARGV[6]
local ttl = tonumber(ARGV[5])
local function remember(version)
  -- This commit among the recent ones, for as long as redis-py may re-send
  -- it (never longer than the conversation's own idle ttl).
  local window = tonumber(ARGV[13])
  redis.call('ZADD', KEYS[6], now, ARGV[2])
  redis.call('PEXPIRE', KEYS[6], (ttl > 0 and ttl < window) and ttl or window)
  -- Trimmed every 16th commit (two calls fewer on the others): ids past the
  -- window, and past a bound on memory no conversation's real rate reaches.
  if version % 16 == 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - window)
    redis.call('ZREMRANGEBYRANK', KEYS[6], 0, -_RECENT_KEPT - 1)
  end
end
if ARGV[3] == '' then
  -- Back to an empty state (settings cleared, a clear before any store): no
  -- keys but its recent commits (which expire), so it is neither listed nor
  -- counted.
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('ZREM', KEYS[3], member)
  redis.call('ZREM', KEYS[4], member)
  redis.call('ZREM', KEYS[5], member)
  remember(0)
  return {1}
end
if c == '' then
  local reserved = tonumber(ARGV[9])
  if reserved > 0 and now > reserved then return {3} end
  local limit = tonumber(ARGV[8])
  if limit > 0 then
    local held = redis.call('ZCARD', KEYS[3]) - redis.call('ZCOUNT', KEYS[5], '-inf', now)
    local expires = redis.call('ZSCORE', KEYS[5], member)
    local counted = redis.call('ZSCORE', KEYS[3], member) and not (expires and tonumber(expires) <= now)
    if not counted and held >= limit then return {2, held} end
  end
end
redis.call('HSET', KEYS[1], 'c', ARGV[2], 'm', ARGV[3])
remember(redis.call('HINCRBY', KEYS[1], 'v', 1))
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 's', ARGV[4]) end
local i = 14
for _ = 1, tonumber(ARGV[10]) do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for j = i, #ARGV do redis.call('HDEL', KEYS[2], ARGV[j]) end
if c == '' then
  -- A new conversation (or one Redis expired): drop what expired from the
  -- index first, so the sets do not grow with conversations long gone.
  local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 100)
  for _, old in ipairs(gone) do
    if old ~= member then
      redis.call('ZREM', KEYS[3], old)
      redis.call('ZREM', KEYS[4], old)
    end
    redis.call('ZREM', KEYS[5], old)
  end
  redis.call('ZADD', KEYS[3], 0, member)
  if ARGV[7] == '' then redis.call('ZREM', KEYS[4], member) end
end
if ARGV[7] == '1' then redis.call('ZADD', KEYS[4], 0, member)
elseif ARGV[7] == '0' then redis.call('ZREM', KEYS[4], member) end
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('ZADD', KEYS[5], now + ttl, member)
elseif redis.call('ZREM', KEYS[5], member) == 1 then
  -- conversation_ttl was turned off since it was last written.
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
end
return {1}
""".replace("_RECENT_KEPT", str(RECENT_COMMITS_KEPT))

# The commit script's reply when max_conversations refuses a new conversation.
FULL = 2
# Its reply when a cluster quota reservation ran out before the commit.
EXPIRED = 3
# Its reply when a read lease of another replica must run out first.
WAIT = 4

# KEYS: meta, utterances. ARGV: expected commit id, '1' to return the
# summary, then seqs. Reads the records a replica lacks, atomically with a
# check that nothing was committed since the meta record it is building on.
FETCH = """
if (redis.call('HGET', KEYS[1], 'c') or '') ~= ARGV[1] then return {0} end
local out = {1, ARGV[2] == '1' and (redis.call('HGET', KEYS[1], 's') or '') or ''}
local n = #ARGV
local i = 3
while i <= n do
  local j = math.min(i + 499, n)
  local got = redis.call('HMGET', KEYS[2], unpack(ARGV, i, j))
  for k = 1, #got do out[#out + 1] = got[k] end
  i = j + 1
end
return out
"""

# KEYS: lease. ARGV: token. Deletes the lease only if it is still ours.
RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: the read lease, the replicas (a sorted set: id -> when its presence
# expires). ARGV: this replica's id, the lease in ms, the presence in ms, '1'
# if it may take the lease, the tenure it holds, the tenure a take starts.
# Marks the replica present, renews its lease, or takes the lease when it is
# alone and no write is waiting for one to run out. The lease names its
# tenure ('sole:<id>:<tenure>'): a renewal is of that tenure only, so a take
# whose reply was lost (or that redis-py re-sent) is found by the next
# heartbeat as the new tenure it is, never as the old one renewed, which a
# write of another replica may have ended in between.
# Replies 1 renewed, 2 taken (the new tenure starts), 0 not held.
HEARTBEAT = """
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[3]))
local w = redis.call('GET', KEYS[1])
local mine = 'sole:' .. ARGV[1] .. ':'
if w == mine .. ARGV[5] or w == mine .. ARGV[6] then
  redis.call('PEXPIRE', KEYS[1], lease)
  return w == mine .. ARGV[5] and 1 or 2
end
if ARGV[4] ~= '1' or redis.call('ZCARD', KEYS[2]) > 1 then return 0 end
if w and string.sub(w, 1, 5) == 'sole:' and string.sub(w, 1, #mine) ~= mine then return 0 end
if w and string.sub(w, 1, 8) == 'writers:' and now < tonumber(string.sub(w, 9)) then return 0 end
redis.call('SET', KEYS[1], mine .. ARGV[6], 'PX', lease)
return 2
"""

# KEYS: the read lease, the replicas. ARGV: this replica's id. At close: gone
# from the replicas, and its lease (if it holds one) ended at once.
LEAVE = """
redis.call('ZREM', KEYS[2], ARGV[1])
local w = redis.call('GET', KEYS[1])
local mine = 'sole:' .. ARGV[1] .. ':'
if w and string.sub(w, 1, #mine) == mine then redis.call('DEL', KEYS[1]) end
return 1
"""
