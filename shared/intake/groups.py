"""Error groups in Redis: the first event of a group in a window runs the chain, the rest count.

Keys per group (``{fp}`` is the fingerprint value):
  th:group:{fp}          hash: service, first_seen, last_seen (ms, Redis time), total,
                         window_start, window_count, msg_channel, msg_ts, msg_window,
                         thread_reply_at
  th:group:{fp}:message  the last message posted for the group (JSON: text, blocks), so a
                         repeat can update its count with chat.update
  th:seen:{event id}     the event was counted (kept ``dedup_ttl`` seconds)
Counting is one Lua script, so a storm of identical events yields exactly one "new", and an
event id counts once: a tailer's replay after a restart, a copy of a rotated file or a
shipper's retried batch adds nothing (and a replay still starts the window's analysis if the
producer died before it enqueued it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from shared.core import keys

IDLE_EXPIRY_S = 30 * 24 * 3600
START_OVERDUE_MS = 30_000  # a window's chain not marked started by then is started again

_RECORD = """
-- KEYS: group, seen ; ARGV: window_ms, service, expiry_s, event_id, stale_ms, seen_ttl_s
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ws = tonumber(redis.call('HGET', KEYS[1], 'window_start'))
if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[6]) then
  -- Counted before: count nothing. If this event opened the window and its chain was never
  -- enqueued (the producer died in between), its replay starts it now.
  local again = 0
  if ws and redis.call('HGET', KEYS[1], 'started') ~= tostring(ws)
      and redis.call('HGET', KEYS[1], 'pending') == ARGV[4] then
    again = 1
  end
  local g = redis.call('HMGET', KEYS[1], 'window_count', 'total', 'first_seen', 'last_seen')
  return {again, ws or 0, tonumber(g[1]) or 0, tonumber(g[2]) or 0, tonumber(g[3]) or now,
          tonumber(g[4]) or now, 1}
end
local new = 0
if (not ws) or (now - ws >= tonumber(ARGV[1])) then
  ws = now
  new = 1
  redis.call('HSET', KEYS[1], 'window_start', now, 'window_count', 0, 'pending', ARGV[4])
elseif redis.call('HGET', KEYS[1], 'started') ~= tostring(ws) then
  -- The window's first event never got its chain enqueued (the producer died in between):
  -- its replay (same id), or any event once the start is overdue, starts it instead.
  if redis.call('HGET', KEYS[1], 'pending') == ARGV[4] or now - ws > tonumber(ARGV[5]) then
    new = 1
    redis.call('HSET', KEYS[1], 'pending', ARGV[4])
  end
end
redis.call('HSETNX', KEYS[1], 'first_seen', now)
redis.call('HSETNX', KEYS[1], 'service', ARGV[2])
redis.call('HSET', KEYS[1], 'last_seen', now)
local count = redis.call('HINCRBY', KEYS[1], 'window_count', 1)
local total = redis.call('HINCRBY', KEYS[1], 'total', 1)
redis.call('EXPIRE', KEYS[1], ARGV[3])
return {new, ws, count, total, tonumber(redis.call('HGET', KEYS[1], 'first_seen')), now, 0}
"""


@dataclass(frozen=True)
class Occurrence:
    """What recording one event told us about its group."""

    fingerprint: str
    new: bool  # first event of the group in this window: run the analysis chain
    window_start: int  # ms; identifies the window
    count: int  # events in this window so far
    total: int
    first_seen: int  # ms
    last_seen: int  # ms
    duplicate: bool = False  # this event id was counted before: nothing was added


@dataclass(frozen=True)
class GroupState:
    fingerprint: str
    first_seen: int
    last_seen: int
    total: int
    window_start: int
    window_count: int
    msg_channel: str | None
    msg_ts: str | None
    msg_window: int | None
    thread_reply_at: int | None


def _s(v: Any) -> str | None:
    return v.decode() if isinstance(v, bytes) else v


DEDUP_TTL_S = 3600


class GroupStore:
    def __init__(self, r: redis.Redis, *, window_s: float, dedup_ttl_s: int = DEDUP_TTL_S) -> None:
        self.r = r
        self.window_ms = int(window_s * 1000)
        self.dedup_ttl_s = dedup_ttl_s
        self._record = r.register_script(_RECORD)

    def record(self, fp: str, service: str, event_id: str) -> Occurrence:
        """Count one event of the group (once per event id)."""
        new, ws, count, total, first, now, dup = self._record(
            keys=[keys.group(fp), keys.seen(service, event_id)],
            args=[
                self.window_ms,
                service,
                IDLE_EXPIRY_S,
                event_id,
                START_OVERDUE_MS,
                self.dedup_ttl_s,
            ],
        )
        return Occurrence(
            fp, bool(new), int(ws), int(count), int(total), int(first), int(now), bool(dup)
        )

    def claim_analysis(
        self, fp: str, window_start: int, task_id: str, *, revision: bool = False
    ) -> bool:
        """Whether the chain whose first task is ``task_id`` analyses this group window: the
        first chain to ask does (and its redelivered message still does); any other does not.
        A ``revision`` (a degraded message's second chance) has its own one claim."""
        key = keys.analysis_started(fp, window_start) + (":revision" if revision else "")
        self.r.set(key, task_id, nx=True, ex=IDLE_EXPIRY_S)
        owner = self.r.get(key)
        return owner is not None and _s(owner) == task_id

    def mark_started(self, fp: str, window_start: int) -> None:
        """The window's analysis chain is enqueued: later events of the window only count."""
        self.r.hset(keys.group(fp), "started", window_start)

    def state(self, fp: str) -> GroupState | None:
        raw = {_s(k): _s(v) for k, v in self.r.hgetall(keys.group(fp)).items()}
        if not raw:
            return None

        def num(name: str) -> int | None:
            value = raw.get(name)
            return int(value) if value not in (None, "") else None

        return GroupState(
            fingerprint=fp,
            first_seen=num("first_seen") or 0,
            last_seen=num("last_seen") or 0,
            total=num("total") or 0,
            window_start=num("window_start") or 0,
            window_count=num("window_count") or 0,
            msg_channel=raw.get("msg_channel"),
            msg_ts=raw.get("msg_ts"),
            msg_window=num("msg_window"),
            thread_reply_at=num("thread_reply_at"),
        )

    def set_message(
        self,
        fp: str,
        window_start: int,
        channel: str | None,
        ts: str | None,
        text: str,
        blocks: list[dict[str, Any]],
    ) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(
            keys.group(fp),
            mapping={"msg_channel": channel or "", "msg_ts": ts or "", "msg_window": window_start},
        )
        pipe.set(
            keys.group_message(fp),
            json.dumps({"text": text, "blocks": blocks}),
            ex=IDLE_EXPIRY_S,
        )
        pipe.execute()

    def message(self, fp: str) -> dict[str, Any] | None:
        raw = self.r.get(keys.group_message(fp))
        return json.loads(raw) if raw else None

    def claim_update(self, fp: str, interval_s: float) -> bool:
        """At most one pending count update per group and interval (SET NX)."""
        return bool(
            self.r.set(keys.group_update(fp), "1", nx=True, px=max(1, int(interval_s * 1000)))
        )

    def mark_thread_reply(self, fp: str, at_ms: int) -> None:
        self.r.hset(keys.group(fp), "thread_reply_at", at_ms)

    def now_ms(self) -> int:
        secs, micros = self.r.time()
        return int(secs) * 1000 + int(micros) // 1000
