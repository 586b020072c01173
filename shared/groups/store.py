"""Error groups in Redis: the first event of a group in a window runs the chain, the rest count.

Keys per group (``{fp}`` is the fingerprint value):
  th:group:{fp}          hash: service, first_seen, last_seen (ms, Redis time), total,
                         window_start, window_count, msg_channel, msg_ts, msg_window,
                         thread_reply_at
  th:group:{fp}:message  the last message posted for the group (JSON: text, blocks), so a
                         repeat can update its count with chat.update
  th:seen:{event id}     the event was counted (kept ``dedup_ttl`` seconds, less in a storm)
  th:seen-rate           ids stored per second over the last ten (the storm's rate)
Counting is one Lua script, so a storm of identical events yields exactly one "new", and an
event id counts once: a tailer's replay after a restart, a copy of a rotated file or a
shipper's retried batch adds nothing (and a replay still starts the window's analysis if the
producer died before it enqueued it).

An id costs about 150 bytes of Redis while it is remembered, so a storm of 20,000 events/s
would hold 10 GB after an hour of ``dedup_ttl``. The ids remembered are held near
``max_ids`` instead: an id is kept ``max_ids`` / (ids stored per second over the last ten)
seconds when that is shorter, never less than ``min_ttl``. A replay older than that counts
again (an over-count, never a loss). Over ten seconds, so that one burst of new ids after a
quiet spell (a tailer catching up) is not taken for a storm: 50,000 of them are kept 400 s
at the default bound, where a one-second rate kept them 60 s.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from shared.core import keys
from shared.groups.deferred import RANK_LUA

IDLE_EXPIRY_S = 30 * 24 * 3600
START_OVERDUE_MS = 30_000  # a window's chain not marked started by then is started again

_RECORD = (
    """
-- Counts a batch of events of one group, in order, each as if recorded alone.
-- KEYS: group, the seen rate, then one seen key per event ; ARGV: window_ms, service,
-- expiry_s, stale_ms, seen_ttl_s, min_ttl_s, max_ids, rate_s, then one event id per event.
-- Returns "new:window_start:count:duplicate" per event (one string each: a reply of 100
-- four-element arrays costs the Python client more to parse than the script takes to run), then
-- {total, first_seen, now, seen_ttl_s used}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window_ms, stale_ms = tonumber(ARGV[1]), tonumber(ARGV[4])
-- How long an id is remembered: seen_ttl_s, shortened in a storm so that about max_ids are
-- remembered at a time (the ids stored per second over the last rate_s, this call's
-- offered ones included, times the time each is kept), never below min_ttl_s. Ten seconds,
-- not one: a replay's burst of new ids after a quiet spell is not a storm's rate.
local ttl, max_ids, rate_s = tonumber(ARGV[5]), tonumber(ARGV[7]), tonumber(ARGV[8])
local sec = math.floor(now / 1000)
local ring = redis.call('HGETALL', KEYS[2])
local stored = 0
for j = 1, #ring, 2 do
  local at = tonumber(ring[j])
  if at and at > sec - rate_s and at <= sec then
    stored = stored + tonumber(ring[j + 1])
  else
    redis.call('HDEL', KEYS[2], ring[j])
  end
end
if max_ids > 0 then
  local rate = (stored + #KEYS - 2) / rate_s
  ttl = math.max(tonumber(ARGV[6]), math.min(ttl, math.floor(max_ids / rate)))
end
local out = {}
local counted = 0
-- The group's window as the call starts. Only this script writes these fields ('started' is
-- the producer's), so they are read once, kept here while the batch counts, and written back
-- once: two HGETs and an HINCRBY per event were half the script's time.
local g = redis.call('HMGET', KEYS[1], 'window_start', 'started', 'pending', 'window_count')
local ws, started, pending = tonumber(g[1]), g[2], g[3]
local count = tonumber(g[4]) or 0
local ws0, pending0 = ws, pending
-- A window opened by this call counts as started for the rest of it: its producer starts the
-- chain right after, as it would have before recording the next event one by one.
local opened = nil
for i = 3, #KEYS do
  local id = ARGV[6 + i]
  local st = opened or started
  if not redis.call('SET', KEYS[i], '1', 'NX', 'EX', ttl) then
    -- Counted before: count nothing. If this event opened the window and its chain was never
    -- enqueued (the producer died in between), its replay starts it now.
    local again = 0
    if ws and st ~= tostring(ws) and pending == id then
      again = 1
      opened = tostring(ws)
    end
    out[#out + 1] = string.format('%d:%d:%d:1', again, ws or 0, count)
  else
    local new = 0
    if (not ws) or (now - ws >= window_ms) then
      ws, count, pending, new = now, 0, id, 1
    elseif st ~= tostring(ws) then
      -- The window's first event never got its chain enqueued (the producer died in between):
      -- its replay (same id), or any event once the start is overdue, starts it instead.
      if pending == id or now - ws > stale_ms then
        new = 1
        pending = id
      end
    end
    count = count + 1
    counted = counted + 1
    if new == 1 then
      opened = tostring(ws)
    end
    out[#out + 1] = string.format('%d:%d:%d:0', new, ws, count)
  end
end
if ws ~= ws0 or pending ~= pending0 then
  redis.call('HSET', KEYS[1], 'window_start', ws, 'window_count', count, 'pending', pending)
elseif counted > 0 then
  redis.call('HSET', KEYS[1], 'window_count', count)
end
if counted > 0 then
  redis.call('HINCRBY', KEYS[2], sec, counted)
  redis.call('EXPIRE', KEYS[2], rate_s + 1)
  redis.call('HSETNX', KEYS[1], 'first_seen', now)
  redis.call('HSETNX', KEYS[1], 'service', ARGV[2])
  redis.call('HSET', KEYS[1], 'last_seen', now)
  redis.call('HINCRBY', KEYS[1], 'total', counted)
  redis.call('EXPIRE', KEYS[1], ARGV[3])
"""
    + RANK_LUA
    + """
end
local g = redis.call('HMGET', KEYS[1], 'total', 'first_seen', 'last_seen')
out[#out + 1] = {tonumber(g[1]) or 0, tonumber(g[2]) or now, tonumber(g[3]) or now, ttl}
return out
"""
)


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
DEDUP_MIN_TTL_S = 60
DEDUP_MAX_IDS = 2_000_000
DEDUP_RATE_S = 10  # the storm's rate is the ids stored per second over this many seconds


class GroupStore:
    """``dedup_ttl_s``: how long an event id is remembered, shortened in a storm so that about
    ``dedup_max_ids`` are (never below ``dedup_min_ttl_s``; 0 ids: no bound); see the module
    doc. ``dedup_window_s``: what the last count used."""

    def __init__(
        self,
        r: redis.Redis,
        *,
        window_s: float,
        dedup_ttl_s: int = DEDUP_TTL_S,
        dedup_min_ttl_s: int = DEDUP_MIN_TTL_S,
        dedup_max_ids: int = DEDUP_MAX_IDS,
        dedup_rate_s: int = DEDUP_RATE_S,
    ) -> None:
        self.r = r
        self.window_ms = int(window_s * 1000)
        self.dedup_ttl_s = dedup_ttl_s
        self.dedup_min_ttl_s = max(1, min(dedup_min_ttl_s, dedup_ttl_s))  # EX 0 is refused
        self.dedup_max_ids = dedup_max_ids
        self.dedup_rate_s = max(1, dedup_rate_s)
        self.dedup_window_s = dedup_ttl_s
        self._record = r.register_script(_RECORD)

    def record(self, fp: str, service: str, event_id: str) -> Occurrence:
        """Count one event of the group (once per event id)."""
        [occurrence] = self.record_many([(fp, service, [event_id])])[0]
        return occurrence

    def record_many(
        self, batches: Sequence[tuple[str, str, Sequence[str]]]
    ) -> list[list[Occurrence]]:
        """Count events group by group, each id once: ``(fingerprint, service, event ids)``
        per group, one script call per group and one round trip for all of them. Within a
        group the ids count in order, exactly as one ``record`` each would."""
        if len(batches) == 1:  # no pipeline: it would first ask whether the script is loaded
            fp, service, ids = batches[0]
            replies = [self._call(fp, service, ids, self.r)]
        else:
            pipe = self.r.pipeline(transaction=False)
            for fp, service, ids in batches:
                self._call(fp, service, ids, pipe)
            replies = pipe.execute()
        if replies:
            self.dedup_window_s = int(replies[-1][-1][3])
        return [self._parse(fp, reply) for (fp, _, _), reply in zip(batches, replies, strict=True)]

    def _call(self, fp: str, service: str, ids: Sequence[str], client: Any) -> Any:
        return self._record(
            keys=[keys.group(fp), keys.SEEN_RATE, *(keys.seen(service, i) for i in ids)],
            args=[
                self.window_ms,
                service,
                IDLE_EXPIRY_S,
                START_OVERDUE_MS,
                self.dedup_ttl_s,
                self.dedup_min_ttl_s,
                self.dedup_max_ids,
                self.dedup_rate_s,
                *ids,
            ],
            client=client,
        )

    @staticmethod
    def _parse(fp: str, reply: list[Any]) -> list[Occurrence]:
        total, first, now = (int(v) for v in reply[-1][:3])
        out = []
        for item in reply[:-1]:
            new, ws, count, dup = (int(v) for v in item.split(b":"))
            out.append(Occurrence(fp, bool(new), ws, count, total, first, now, bool(dup)))
        return out

    def claim_analysis(
        self, fp: str, window_start: int, task_id: str, *, revision: bool = False
    ) -> bool:
        """Whether the chain whose first task is ``task_id`` analyses this group window: the
        first chain to ask does (and its redelivered message still does); any other does not.
        A ``revision`` (a degraded message's second chance) has its own one claim."""
        key = keys.analysis_started(fp, window_start) + (":revision" if revision else "")
        # SET NX GET (Redis >= 7.0): the earlier owner, or None when this chain took it.
        owner = self.r.set(key, task_id, nx=True, ex=IDLE_EXPIRY_S, get=True)
        return owner is None or _s(owner) == task_id

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
        [claimed] = self.claim_updates([fp], interval_s)
        return claimed

    def claim_updates(self, fps: Sequence[str], interval_s: float) -> list[bool]:
        """``claim_update`` for several groups in one round trip."""
        if not fps:
            return []
        pipe = self.r.pipeline(transaction=False)
        for fp in fps:
            pipe.set(keys.group_update(fp), "1", nx=True, px=max(1, int(interval_s * 1000)))
        return [bool(v) for v in pipe.execute()]

    def mark_thread_reply(self, fp: str, at_ms: int) -> None:
        self.r.hset(keys.group(fp), "thread_reply_at", at_ms)

    def now_ms(self) -> int:
        secs, micros = self.r.time()
        return int(secs) * 1000 + int(micros) // 1000
