"""The requests waiting for the upstream Sentry: a Redis stream, bounded in bytes.

A request tracehound took is added with one script call (``push``: XADD and the byte count);
past ``max_bytes`` the oldest entries are deleted and counted as ``dropped`` (the newest is
always kept: the bound is at least one request of the body limit). An entry stays until the
forwarder (forwarder.py) ``ack``s it — the upstream answered 2xx, or a 4xx that will never
change — so entries outlive an ingest restart, and one sent when ingest died before its ack
is sent again (at least once). Each entry is ``m`` (the request's query and headers, JSON),
``b`` (its body as sent) and ``n`` (its size in bytes, for the count).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis

from shared.core import keys
from shared.core.logs import Throttle

log = logging.getLogger(__name__)

# KEYS: queue, bytes, stats. ARGV: meta, body, size, bound. Returns the entries dropped.
_PUSH = """
local id = redis.call('XADD', KEYS[1], '*', 'm', ARGV[1], 'b', ARGV[2], 'n', ARGV[3])
local total = redis.call('INCRBY', KEYS[2], ARGV[3])
redis.call('HINCRBY', KEYS[3], 'queued', 1)
local limit = tonumber(ARGV[4])
local dropped = 0
while total > limit do
  local oldest = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
  if oldest == nil or oldest[1] == id then break end
  local size = 0
  local fields = oldest[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'n' then size = tonumber(fields[i + 1]) end
  end
  redis.call('XDEL', KEYS[1], oldest[1])
  total = redis.call('DECRBY', KEYS[2], size)
  dropped = dropped + 1
end
if dropped > 0 then redis.call('HINCRBY', KEYS[3], 'dropped', dropped) end
return dropped
"""

# KEYS: queue, bytes, stats. ARGV: id, size, outcome. An entry the bound dropped meanwhile is
# not counted twice.
_ACK = """
if redis.call('XDEL', KEYS[1], ARGV[1]) == 1 then
  redis.call('DECRBY', KEYS[2], ARGV[2])
  redis.call('HINCRBY', KEYS[3], ARGV[3], 1)
  return 1
end
return 0
"""

_KEYS = (keys.UPSTREAM_QUEUE, keys.UPSTREAM_BYTES, keys.UPSTREAM_STATS)


@dataclass(frozen=True)
class Entry:
    id: str
    meta: bytes
    body: bytes

    @property
    def size(self) -> int:
        return len(self.meta) + len(self.body)


@dataclass(frozen=True)
class Stats:
    waiting: int
    waiting_bytes: int
    counts: dict[str, int]  # queued, delivered, refused, dropped: since Redis was emptied


class UpstreamQueue:
    """The stream on one Redis connection; its scripts are sent once, then run by digest."""

    def __init__(self, r: redis.Redis, max_bytes: int) -> None:
        self.r = r
        self.max_bytes = max_bytes
        self._push = r.register_script(_PUSH)
        self._ack = r.register_script(_ACK)
        self._throttle = Throttle()

    def push(self, meta: bytes, body: bytes) -> int:
        """Add a request; the number of oldest entries dropped to stay within the bound (a
        drop is logged, then at most once a minute with the count held back)."""
        size = len(meta) + len(body)
        dropped = int(self._push(keys=_KEYS, args=[meta, body, size, self.max_bytes]))
        if dropped and (held := self._throttle.allow("dropped")) is not None:
            log.warning(
                "upstream.dropped",
                extra={"dropped": dropped, "bound_bytes": self.max_bytes, "repeats": held},
            )
        return dropped

    def oldest(self, count: int, block_ms: int) -> list[Entry]:
        """Up to ``count`` entries, oldest first, left in place; waits up to ``block_ms`` for
        one when there are none."""
        reply: Any = self.r.xread({keys.UPSTREAM_QUEUE: "0-0"}, count=count, block=block_ms)
        entries = []
        for _stream, items in reply or []:
            for entry_id, fields in items:
                entries.append(Entry(_text(entry_id), fields[b"m"], fields[b"b"]))
        return entries

    def ack(self, entry: Entry, outcome: str) -> bool:
        """Remove a settled entry, counted under ``outcome`` (``delivered``, ``refused``)."""
        return bool(self._ack(keys=_KEYS, args=[entry.id, entry.size, outcome]))

    def stats(self) -> Stats:
        with self.r.pipeline(transaction=False) as p:
            p.xlen(keys.UPSTREAM_QUEUE)
            p.get(keys.UPSTREAM_BYTES)
            p.hgetall(keys.UPSTREAM_STATS)
            waiting, size, counts = p.execute()
        return Stats(
            int(waiting), int(size or 0), {_text(k): int(v) for k, v in (counts or {}).items()}
        )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
