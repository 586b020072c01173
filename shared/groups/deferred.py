"""The deferred backlog: new groups whose analysis waits for the model host to be free.

A group waits here when it opened or joined an incident, or when its service started
``max_new_groups`` analyses in the cap window (shared/groups/incidents.py). Its chain's first
message is kept whole. An incident's first group waits only for the incident to settle:
``take_settled`` then starts the incident's most frequent waiting group, host free or not
(that is the incident's message). ``take_next`` starts the waiting group with the most events
in its window (ties: the longest waiting) when the analysis queues are empty. Both are
atomic, so two drains never start one twice. The ``drain_deferred`` task
(workers/tasks/intake.py) calls them every ``DRAIN_EVERY_S`` while groups wait. Keys:
shared/core/keys.py (``DEFERRED*``).

The backlog is ranked as it fills: ``DEFERRED_RANK`` scores each waiting group by its window's
count (intake's counting script raises it with every event), so a drain reads the top of a
sorted set — O(log n), never a scan of the whole backlog inside Redis, which stalled every
other Redis client for 1.5-1.9 s at 400k waiting groups. It is bounded too: ``trim`` drops
groups that waited longer than the TTL, and the lowest-ranked ones beyond the size bound (a
storm of distinct errors keeps its most frequent); dropped groups are counted, their events
stay counted, and their next window may start an analysis again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from shared.core import keys, queues

DRAIN_EVERY_S = 2.0
RANK_PAGE = 32  # waiting groups read at a time from the top of the rank (incidents settling)
RANK_PAGES = 8
# The drain token outlives a few drain intervals: a drain message lost with its worker is
# replaced by the next deferral once it expires.
DRAIN_TOKEN_S = 30
# How long an incident's other groups wait for its lead's message once the lead has started:
# as long as a delivery claim lives (shared/notify/courier.py, ``claim_ttl_s``), after which a
# lead that never delivered no longer holds them back.
LEAD_WAIT_S = 90.0

# KEYS: deferred zset, messages hash, in-flight hash (as every script below). Start one
# waiting group's chain, and record it in flight as intake would have.
_START = """
local function start(fp)
  local raw = redis.call('HGET', KEYS[2], fp)
  redis.call('ZREM', KEYS[1], fp)
  redis.call('HDEL', KEYS[2], fp)
  redis.call('ZREM', KEYS[5], fp)
  redis.call('HDEL', 'th:group:' .. fp, 'deferred_at')
  if raw then
    local m = cjson.decode(raw)
    redis.call('LPUSH', m['queue'], m['body'])
    if m['root'] then
      local t = redis.call('TIME')
      local entry = {queue = m['queue'], body = m['body'], last = m['last'],
                     at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
      redis.call('HSET', KEYS[3], m['root'], cjson.encode(entry))
    end
  end
end
local function count(fp)
  return tonumber(redis.call('HGET', 'th:group:' .. fp, 'window_count')) or 0
end
"""

# KEYS[4]: the settling incidents, KEYS[5]: the rank; ARGV: page, pages, lead wait (ms). The
# waiting group with the most events (ties: the longest waiting) of those whose incident has
# settled and whose lead, once started, has posted the incident's message (or has had ARGV[3]
# ms to: a lead whose run died does not hold its incident back for good): read from the top
# of the rank, a page at a time, for at most ARGV[2] pages of ARGV[1]. A member started
# beside its lead could deliver first and become the incident's message.
_TAKE = (
    _START
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local page = tonumber(ARGV[1])
local function held(fp)
  local incident = redis.call('HGET', 'th:group:' .. fp, 'incident')
  if not incident then
    return false
  end
  if redis.call('ZSCORE', KEYS[4], incident) then
    return true  -- still settling: its lead starts first
  end
  local lead = redis.call('HMGET', 'th:incident:' .. incident, 'lead_started', 'msg_ts')
  local started = tonumber(lead[1])
  return started ~= nil and not lead[2] and now - started < tonumber(ARGV[3])
end
for p = 0, tonumber(ARGV[2]) - 1 do
  local top = redis.call('ZREVRANGE', KEYS[5], p * page, (p + 1) * page - 1)
  if #top == 0 then
    return nil
  end
  for _, fp in ipairs(top) do
    if not held(fp) then
      local n = count(fp)
      start(fp)
      return {fp, n}
    end
  end
end
return nil
"""
)

# KEYS[5]: the rank; ARGV: now, ttl_ms, max waiting, most dropped per call. Drop what waited
# longer than the TTL, then the lowest-ranked beyond the bound; the fingerprints dropped.
_TRIM = (
    _START
    + """
local function drop(fp)
  redis.call('ZREM', KEYS[1], fp)
  redis.call('HDEL', KEYS[2], fp)
  redis.call('ZREM', KEYS[5], fp)
  redis.call('HDEL', 'th:group:' .. fp, 'deferred_at')
end
local limit = tonumber(ARGV[4])
local out = {}
local expired = tonumber(ARGV[1]) - tonumber(ARGV[2])
for _, fp in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', expired, 'LIMIT', 0, limit)) do
  drop(fp)
  table.insert(out, fp)
end
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[3])
if over > 0 then
  for _, fp in ipairs(redis.call('ZRANGE', KEYS[5], 0, math.min(over, limit) - 1)) do
    drop(fp)
    table.insert(out, fp)
  end
end
return out
"""
)

# KEYS[4]: the settling incidents. Each incident whose settle is over (by Redis's clock, as
# intake deferred it) starts its most frequent waiting group, not necessarily its first.
_TAKE_SETTLED = (
    _START
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, incident in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do
  redis.call('ZREM', KEYS[4], incident)
  local best, best_count = nil, -1
  for _, fp in ipairs(redis.call('ZRANGE', 'th:incident:' .. incident .. ':groups', 0, -1)) do
    if redis.call('ZSCORE', KEYS[1], fp) then
      local n = count(fp)
      if n > best_count then
        best, best_count = fp, n
      end
    end
  end
  if best then
    start(best)
    redis.call('HSET', 'th:incident:' .. incident, 'lead_started', now)
    table.insert(out, best)
    table.insert(out, best_count)
  end
end
return out
"""
)


def rank(count: int, deferred_at_ms: int) -> float:
    """A waiting group's place: its window's count, then the longest waiting (a fraction that
    shrinks with time, exact to about a second at the counts of a storm)."""
    return count + (1.0 - deferred_at_ms / 1e13)


# The same, in Lua, for intake's counting script (shared/groups/store.py), which keeps a waiting
# group's rank as its count grows.
RANK_LUA = """
local deferred_at = redis.call('HGET', KEYS[1], 'deferred_at')
if deferred_at then
  local n = tonumber(redis.call('HGET', KEYS[1], 'window_count')) or 0
  local score = string.format('%.17g', n + (1 - tonumber(deferred_at) / 1e13))
  redis.call('ZADD', 'th:deferred:rank', 'XX', score, string.sub(KEYS[1], 10))
end
"""


@dataclass(frozen=True)
class Backlog:
    waiting: int
    oldest_age_s: float  # 0 when nothing waits


def defer(
    pipe: Any,
    fingerprint: str,
    queue: str,
    body: bytes,
    *,
    last_id: str,
    now_ms: int,
    reason: str,
    count: int = 1,
    settle_until_ms: tuple[str, int] | None = None,
) -> None:
    """Keep a group's first chain message to start later (in the caller's pipeline); when it
    starts, it is recorded in flight (shared/core/inflight.py) by its root id and last id.
    ``settle_until_ms`` (incident, ms): the incident's first group, whose incident starts its
    most frequent group then, whether or not the host is free (``take_settled``)."""
    root = orjson.loads(body)["headers"]["id"]
    message = {
        "queue": queue,
        "body": body.decode(),
        "reason": reason,
        "root": root,
        "last": last_id,
    }
    pipe.hset(keys.DEFERRED_MESSAGES, fingerprint, json.dumps(message))
    pipe.zadd(keys.DEFERRED, {fingerprint: now_ms}, nx=True)
    pipe.zadd(keys.DEFERRED_RANK, {fingerprint: rank(count, now_ms)}, nx=True)
    pipe.hsetnx(keys.group(fingerprint), "deferred_at", now_ms)
    if settle_until_ms is not None:
        incident, until = settle_until_ms
        pipe.zadd(keys.DEFERRED_SETTLING, {incident: until}, nx=True)


_KEYS = (
    keys.DEFERRED,
    keys.DEFERRED_MESSAGES,
    keys.INFLIGHT,
    keys.DEFERRED_SETTLING,
    keys.DEFERRED_RANK,
)


def take_next(r: redis.Redis, *, lead_wait_s: float = LEAD_WAIT_S) -> tuple[str, int] | None:
    """Start the waiting group with the most events: (fingerprint, its count), or None. A
    group of an incident still settling is not taken (its incident starts first), nor one
    whose incident's lead has started but not posted the incident's message, for up to
    ``lead_wait_s`` after the lead started."""
    reply = r.register_script(_TAKE)(
        keys=list(_KEYS), args=[RANK_PAGE, RANK_PAGES, int(lead_wait_s * 1000)]
    )
    if not reply:
        return None
    fp, count = reply
    return _s(fp), int(count)


def take_settled(r: redis.Redis) -> list[tuple[str, int]]:
    """For each incident whose settle is over, start its most frequent waiting group (its
    first analysis, so it does not wait for the host to be free): (fingerprint, count)."""
    reply = r.register_script(_TAKE_SETTLED)(keys=list(_KEYS))
    return [(_s(reply[i]), int(reply[i + 1])) for i in range(0, len(reply), 2)]


def trim(r: redis.Redis, *, ttl_s: float, max_waiting: int, at_most: int = 1000) -> list[str]:
    """Drop the groups that waited longer than ``ttl_s`` and, beyond ``max_waiting``, the
    lowest-ranked; at most ``at_most`` a call. The fingerprints dropped."""
    seconds, micros = r.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    reply = r.register_script(_TRIM)(
        keys=list(_KEYS), args=[now_ms, int(ttl_s * 1000), max_waiting, at_most]
    )
    return [_s(fp) for fp in reply]


def settling(r: redis.Redis) -> int:
    return int(r.zcard(keys.DEFERRED_SETTLING))


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def analyses_queued(r: redis.Redis) -> int:
    """Analysis messages waiting for a stage: the host is free when none are."""
    pipe = r.pipeline(transaction=False)
    for key in queues.ANALYSIS_QUEUES:  # bulk index embedding does not hold the backlog back
        pipe.llen(key)
    return int(sum(pipe.execute()))


def backlog(r: redis.Redis) -> Backlog:
    """How many groups wait, and how long the oldest has (by Redis's clock, as deferred)."""
    pipe = r.pipeline(transaction=False)
    pipe.zcard(keys.DEFERRED)
    pipe.zrange(keys.DEFERRED, 0, 0, withscores=True)
    pipe.time()
    waiting, oldest, (secs, micros) = pipe.execute()
    now_ms = int(secs) * 1000 + int(micros) // 1000
    age = max(0.0, (now_ms - oldest[0][1]) / 1000) if oldest else 0.0
    return Backlog(int(waiting), age)


def claim_drain(r: redis.Redis) -> bool:
    """Whether the caller should schedule a drain: none is scheduled (SET NX)."""
    return bool(r.set(keys.DEFERRED_DRAIN, "1", nx=True, ex=DRAIN_TOKEN_S))


def keep_draining(r: redis.Redis) -> None:
    r.set(keys.DEFERRED_DRAIN, "1", ex=DRAIN_TOKEN_S)


def stop_draining(r: redis.Redis) -> None:
    r.delete(keys.DEFERRED_DRAIN)


def first_messages(r: redis.Redis) -> list[bytes]:
    """The first messages of the analysis chains started and still queued (the embed queue)
    or waiting here, in that order: what producers handed over, for tests and benchmarks."""
    queued = [m if isinstance(m, bytes) else m.encode() for m in r.lrange("embed", 0, -1)]
    return queued + [json.loads(m)["body"].encode() for m in r.hvals(keys.DEFERRED_MESSAGES)]
