"""The deferred backlog: new groups whose analysis waits for the model host to be free.

A group waits here when it joined an incident after its first group, or when its service
started ``max_new_groups`` analyses in the cap window (shared/intake/incidents.py). Its chain's
first message is kept whole; ``take_next`` starts the waiting group with the most events in
its window (ties: the longest waiting), atomically, so two drains never start one twice. The
``drain_deferred`` task (workers/tasks/intake.py) calls it while the analysis queues are empty,
every ``DRAIN_EVERY_S``. Keys: shared/core/keys.py (``DEFERRED*``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from shared.core import keys, queues

DRAIN_EVERY_S = 2.0
# The drain token outlives a few drain intervals: a drain message lost with its worker is
# replaced by the next deferral once it expires.
DRAIN_TOKEN_S = 30

_TAKE = """
-- KEYS: deferred zset, messages hash, in-flight hash. Start the waiting group with the most
-- events, and record its chain in flight as intake would have.
local members = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local best, best_count, best_at = nil, -1, nil
for i = 1, #members, 2 do
  local fp, at = members[i], tonumber(members[i + 1])
  local count = tonumber(redis.call('HGET', 'th:group:' .. fp, 'window_count')) or 0
  if count > best_count or (count == best_count and at < best_at) then
    best, best_count, best_at = fp, count, at
  end
end
if not best then
  return nil
end
local raw = redis.call('HGET', KEYS[2], best)
redis.call('ZREM', KEYS[1], best)
redis.call('HDEL', KEYS[2], best)
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
return {best, best_count}
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
) -> None:
    """Keep a group's first chain message to start later (in the caller's pipeline); when it
    starts, it is recorded in flight (shared/core/inflight.py) by its root id and last id."""
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


def take_next(r: redis.Redis) -> tuple[str, int] | None:
    """Start the waiting group with the most events: (fingerprint, its count), or None."""
    reply = r.register_script(_TAKE)(keys=[keys.DEFERRED, keys.DEFERRED_MESSAGES, keys.INFLIGHT])
    if not reply:
        return None
    fp, count = reply
    return (fp.decode() if isinstance(fp, bytes) else fp), int(count)


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
