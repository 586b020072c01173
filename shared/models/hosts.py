"""Model hosts as scheduled resources: one model active per host, under a fenced Redis lease.

A small Ollama host (an M4 Mac mini) holds one model at a time. Every call to a model on a host
runs under that host's lease, whichever worker process or machine makes it:

- the lease is a Redis key with a TTL that a background thread renews; a holder that dies
  (``kill -9``) stops renewing and the lease expires — no deadlock;
- the lease is for one model, and the processes that serve that model share it: one that asks
  while the lease is held for its model, the host has that model loaded, and nobody else
  waits (or it is first in line), joins the holders. Each holder is a member with its own
  expiry; the lease is free once the last member leaves (or expires). Two analyses' chats
  then queue at the host instead of one waiting for the other's worker to post to Slack and
  fetch the next task, which left the host idle between every two chats; the model on the
  host is still only ever one;
- each acquisition takes a new fencing token from a counter; a holder checks its token before
  every call, so one that lost the lease (expired, or the key deleted by hand) cannot carry on;
- the holder keeps the lease while its own queue has work (the model stays loaded), up to a
  fairness bound in host time (``max_seconds``; a task count only when one is set) once
  someone else is waiting; then it releases. A count treated a 20 ms rerank like a 3 s chat:
  20 reranks per slot were under a second of host time, yet the rerank model yielded to the
  waiting LLM with ten of the burst's reranks still queued, and took the host back (two more
  loads) only after the LLM's own turn (benchmarks/host_scheduling.py);
- waiters are ranked by priority with aging (an error's query embedding first, bulk indexing
  last, but a waiter that has waited long enough goes first), so nothing starves;
- a holder whose last task was less urgent than a waiter's work (bulk indexing while an
  error's stage waits) releases after that task, without using up its fair share;
- when the model on the host changes, the previous Ollama model is unloaded (``keep_alive: 0``)
  so two are never resident.

Expiry and ordering use Redis server time only (TTLs, ``TIME``), so worker clock skew does not
matter.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlparse

import httpx
import redis

from shared.core import keys
from shared.core.errors import TransientError

log = logging.getLogger(__name__)
T = TypeVar("T")

# Waiter priorities (lower goes first) and how much head start each gets, in milliseconds of
# waiting: a bulk waiter that has waited longer than a query's head start outranks new queries.
PRIORITY_QUERY = 0
PRIORITY_CHAIN = 1
PRIORITY_BULK = 2
HEAD_START_MS = {PRIORITY_QUERY: 60_000, PRIORITY_CHAIN: 30_000, PRIORITY_BULK: 0}

# Redis server time in ms, in a script: expiries and ranks never use a worker's clock.
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# Joining needs more than the lease's model: the host must have it loaded already. Until the
# holder that took the lease has finished its swap (unloaded the last model) and its first
# call succeeded, a joiner's request could reach the host while the old model is still there.
_ACQUIRE = (
    """
-- KEYS: lease, fence, waiting, members, loaded ; ARGV: holder, model, ttl_ms
"""
    + _NOW
    + """
local cur = redis.call('GET', KEYS[1])
local first = redis.call('ZRANGE', KEYS[3], 0, 0)
local ahead = first[1] and first[1] ~= ARGV[1]
if cur then
  local d = cjson.decode(cur)
  if redis.call('ZSCORE', KEYS[4], ARGV[1]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return {cur, 'joined'}
  end
  local loaded = redis.call('GET', KEYS[5])
  if d.model ~= ARGV[2] or ahead or not loaded or cjson.decode(loaded).model ~= ARGV[2] then
    return false
  end
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[3]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('PEXPIRE', KEYS[4], ARGV[3])
  redis.call('ZREM', KEYS[3], ARGV[1])
  return {cur, 'joined'}
end
if ahead then
  return false
end
local token = redis.call('INCR', KEYS[2])
local v = cjson.encode({holder=ARGV[1], model=ARGV[2], token=token, since=now})
redis.call('SET', KEYS[1], v, 'PX', ARGV[3])
redis.call('DEL', KEYS[4])
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[4], ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[1])
return {v, 'taken'}
"""
)

# The uncontended case in one round trip: nobody waits, and the lease is free or held for this
# model, loaded (then this holder joins). Also returns the model left loaded on the host, which
# the caller needs to decide on a swap.
_TAKE_FREE = (
    """
-- KEYS: lease, fence, waiting, loaded, members ; ARGV: holder, model, ttl_ms
if redis.call('ZCARD', KEYS[3]) > 0 then
  return false
end
"""
    + _NOW
    + """
local cur = redis.call('GET', KEYS[1])
local loaded = redis.call('GET', KEYS[4])
if cur then
  if cjson.decode(cur).model ~= ARGV[2] or not loaded or cjson.decode(loaded).model ~= ARGV[2] then
    return false
  end
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[3]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('PEXPIRE', KEYS[5], ARGV[3])
  return {cur, loaded, 'joined'}
end
local token = redis.call('INCR', KEYS[2])
local v = cjson.encode({holder=ARGV[1], model=ARGV[2], token=token, since=now})
redis.call('SET', KEYS[1], v, 'PX', ARGV[3])
redis.call('DEL', KEYS[5])
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[5], ARGV[3])
return {v, loaded or '', 'taken'}
"""
)

_RENEW = (
    """
-- KEYS: lease, members ; ARGV: token, ttl_ms, holder
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
if cjson.decode(cur).token ~= tonumber(ARGV[1]) then return 0 end
if not redis.call('ZSCORE', KEYS[2], ARGV[3]) then return 0 end
"""
    + _NOW
    + """
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
"""
)

# A holder that calls another of its models under the lease (a worker serving two model
# queues): the lease's model changes only while it is the lease's only member.
_SWITCH = (
    """
-- KEYS: lease, members ; ARGV: token, holder, model
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local d = cjson.decode(cur)
if d.token ~= tonumber(ARGV[1]) then return 0 end
"""
    + _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local members = redis.call('ZRANGE', KEYS[2], 0, -1)
if #members ~= 1 or members[1] ~= ARGV[2] then return 0 end
d.model = ARGV[3]
d.holder = ARGV[2]
redis.call('SET', KEYS[1], cjson.encode(d), 'KEEPTTL')
return 1
"""
)

_RELEASE = (
    """
-- KEYS: lease, members ; ARGV: token, holder
"""
    + _NOW
    + """
local cur = redis.call('GET', KEYS[1])
if cur and cjson.decode(cur).token == tonumber(ARGV[1]) then
  redis.call('ZREM', KEYS[2], ARGV[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) == 0 then
    redis.call('DEL', KEYS[1], KEYS[2])
  end
  return 1
end
return 0
"""
)


class LeaseLost(TransientError):
    """This worker's lease on a host expired or was taken away: it must not call the host."""


def host_id(url: str) -> str:
    """The machine behind a URL: servers on one machine (Ollama, llama-server) share a lease."""
    host = (urlparse(url).hostname or url).lower()
    return "127.0.0.1" if host in ("localhost", "::1", "ip6-localhost") else host


@dataclass
class Keys:
    host: str

    def __post_init__(self) -> None:
        h = self.host
        self.lease, self.fence = keys.host(h, "lease"), keys.host(h, "fence")
        self.waiting, self.loaded = keys.host(h, "waiting"), keys.host(h, "loaded")
        self.stats, self.waiter = keys.host(h, "stats"), keys.host(h, "waiter:")
        self.members = keys.host(h, "members")


def _text(raw: Any) -> str:
    """A Redis reply's string (bytes from a client without decode_responses)."""
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def server_ms(r: redis.Redis) -> int:
    secs, micros = r.time()
    return int(secs) * 1000 + int(micros) // 1000


@dataclass
class HostLease:
    """One worker process's handle on one host's lease."""

    r: redis.Redis
    host: str
    holder: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    ttl: float = 15.0
    poll: float = 0.02
    token: int | None = None
    model: str | None = None
    lost: bool = False

    def __post_init__(self) -> None:
        self.keys = Keys(self.host)
        self._acquire = self.r.register_script(_ACQUIRE)
        self._take_free = self.r.register_script(_TAKE_FREE)
        self._renew = self.r.register_script(_RENEW)
        self._switch = self.r.register_script(_SWITCH)
        self._release = self.r.register_script(_RELEASE)

    @property
    def held(self) -> bool:
        return self.token is not None and not self.lost

    def _rank(self, priority: int, waited_since_ms: int) -> float:
        return waited_since_ms - HEAD_START_MS.get(priority, 0)

    def acquire(self, model: str, priority: int, timeout: float) -> dict[str, Any]:
        """Wait (not holding anything) until this holder has taken the lease, or has joined
        its holders for ``model``; its JSON value, with ``"joined"`` and ``"loaded"``: what
        the host had loaded (raw JSON) when it was taken at once."""
        k = self.keys
        ttl_ms = int(self.ttl * 1000)
        free = self._take_free(
            keys=[k.lease, k.fence, k.waiting, k.loaded, k.members],
            args=[self.holder, model, ttl_ms],
        )
        if free:
            value: dict[str, Any] = json.loads(free[0])
            self.token, self.model, self.lost = int(value["token"]), model, False
            return {**value, "loaded": free[1], "joined": _text(free[2]) == "joined"}
        deadline = time.monotonic() + timeout
        rank = self._rank(priority, server_ms(self.r))
        try:
            while True:
                # Heartbeat (holding this waiter's priority, see waiting_ahead_of) first, then
                # the ranking, on every poll: a waiter pruned as dead - between a ranking and
                # its first heartbeat, or a heartbeat that expired while this process was not
                # scheduled - comes back with its rank. It used to stay out of the ranking and
                # get the host only once nobody else waited: an analysis waited 15 s while
                # the embed worker, seeing no other waiter, kept it for 120 index drains.
                pipe = self.r.pipeline(transaction=False)
                pipe.set(
                    k.waiter + self.holder, str(priority), px=max(1000, int(self.poll * 50_000))
                )
                pipe.zadd(k.waiting, {self.holder: rank}, nx=True)
                pipe.execute()
                got = self._acquire(
                    keys=[k.lease, k.fence, k.waiting, k.members, k.loaded],
                    args=[self.holder, model, ttl_ms],
                )
                if got:
                    value = json.loads(got[0])
                    self.token, self.model, self.lost = int(value["token"]), model, False
                    return {**value, "joined": _text(got[1]) == "joined"}
                self._prune_dead_waiters()
                if time.monotonic() > deadline:
                    raise TransientError(f"host {self.host}: lease not free after {timeout:.0f}s")
                time.sleep(self.poll)
        finally:
            self.r.zrem(k.waiting, self.holder)
            self.r.delete(k.waiter + self.holder)

    def _prune_dead_waiters(self) -> None:
        k = self.keys
        waiting: list[Any] = list(self.r.zrange(k.waiting, 0, 4))
        for w in waiting:
            name = _text(w)
            if name != self.holder and not self.r.exists(k.waiter + name):
                self.r.zrem(k.waiting, name)  # a waiter that died while queued

    def renew(self) -> bool:
        if self.token is None:
            return False
        ok = bool(
            self._renew(
                keys=[self.keys.lease, self.keys.members],
                args=[self.token, int(self.ttl * 1000), self.holder],
            )
        )
        if not ok:
            self.lost = True
        return ok

    def check(self) -> None:
        """Fencing: before a call, confirm this holder's token is still the lease's."""
        if self.token is None or self.lost or not self.renew():
            self.lost = True
            raise LeaseLost(f"host {self.host}: lease lost (expired or removed); not calling it")

    def others_waiting(self) -> bool:
        return any(_text(w) != self.holder for w in self.r.zrange(self.keys.waiting, 0, -1))

    def waiting_ahead_of(self, priority: int) -> bool:
        """Another live waiter has work more urgent than ``priority`` (lower goes first)."""
        others = [_text(w) for w in self.r.zrange(self.keys.waiting, 0, -1)]
        others = [w for w in others if w != self.holder]
        if not others:
            return False
        for value in self.r.mget([self.keys.waiter + w for w in others]):
            if value is not None and int(value) < priority:
                return True
        return False

    def switch(self, model: str) -> bool:
        """Make the held lease ``model``'s; False (nothing changed) while others share it."""
        if self.token is None:
            return False
        args: list[str | int] = [self.token, self.holder, model]
        if not self._switch(keys=[self.keys.lease, self.keys.members], args=args):
            return False
        self.model = model
        return True

    def release(self) -> None:
        if self.token is not None:
            self._release(keys=[self.keys.lease, self.keys.members], args=[self.token, self.holder])
        self.token, self.lost = None, False


def unload_ollama_model(client: httpx.Client, url: str, model: str) -> None:
    """Ask Ollama to drop ``model`` from memory now (``keep_alive: 0`` with no prompt).

    ``client`` is the worker's own, kept across calls: a client per call built a new TLS
    context each time, 28-37 ms of CPU on every model swap (issue 14).
    """
    client.post(
        f"{url.rstrip('/')}/api/generate", json={"model": model, "keep_alive": 0}
    ).raise_for_status()


class HostSession:
    """A worker's use of one host across tasks: acquire, drain, yield, unload on switch.

    ``call`` runs one model call under the lease. ``after_task`` decides whether to keep the
    lease (more work for the loaded model, within the fairness bound) or release it. A renewer
    thread keeps the lease alive and lets it go when no task follows within ``idle_release``.
    """

    def __init__(
        self,
        r: redis.Redis,
        host: str,
        *,
        ttl: float = 15.0,
        max_tasks: int | None = None,
        max_seconds: float = 30.0,
        idle_release: float = 1.0,
        wait_timeout: float = 600.0,
        unload: Callable[[str, str], None] | None = None,
        on_swap: Callable[[str], None] | None = None,
        queue_depth: Callable[[], int] | None = None,
    ) -> None:
        self.lease = HostLease(r, host, ttl=ttl)
        # Work waiting for this worker's model(s): none left when a call ends, the host goes
        # to whoever waits at once, not after the rest of the task (an analysis's Slack post).
        self.queue_depth = queue_depth
        self.on_swap = on_swap
        self.r = r
        self.max_tasks, self.max_seconds = max_tasks, max_seconds
        self.idle_release, self.wait_timeout = idle_release, wait_timeout
        self.unload = unload
        self.tasks_in_hold = 0
        self.hold_started = 0.0
        self.last_activity = 0.0
        self.last_priority: int | None = None  # of the last call in this hold
        self.busy = False
        self.pinned = 0  # holding() blocks open: calls of one task that keep the host
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the call path -------------------------------------------------------------------

    def call(self, model: str, url: str, kind: str, priority: int, fn: Callable[[], T]) -> T:
        """Run ``fn`` (one request to ``model`` at ``url``) as the only user of the host."""
        with self._lock:
            self.busy = True
            self.last_activity = time.monotonic()
            self.last_priority = priority
        try:
            self._ensure(model, url, kind, priority)
            # Fencing, also just after an acquisition: a swap's unload can outlast the TTL.
            self.lease.check()
            started = time.monotonic()
            ok = False
            try:
                result = fn()
                ok = True
            except TransientError:
                # The host is down or overloaded: never hold it while waiting to retry.
                self._release()
                raise
            finally:
                elapsed_ms = int((time.monotonic() - started) * 1000)
                pipe = self.r.pipeline(transaction=False)
                pipe.hincrby(self.lease.keys.stats, "busy_ms", elapsed_ms)
                pipe.hincrby(self.lease.keys.stats, "calls", 1)
                if ok:
                    loaded = json.dumps({"model": model, "url": url, "kind": kind})
                    pipe.set(self.lease.keys.loaded, loaded)
                pipe.execute()
            if not self.pinned and self.queue_depth is not None and self.queue_depth() == 0:
                self._release()
            return result
        finally:
            with self._lock:
                self.busy = self.pinned > 0
                self.last_activity = time.monotonic()

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Calls inside keep the lease between them (neither the end of a call nor the idle
        renewer releases it): one analysis's tool rounds, with the index reads between them,
        run on one load of the model. Released at the end when nothing waits for it."""
        with self._lock:
            self.pinned += 1
            self.busy = True
        try:
            yield
        finally:
            with self._lock:
                self.pinned -= 1
                self.busy = self.pinned > 0
                self.last_activity = time.monotonic()
            idle = self.queue_depth is not None and self.queue_depth() == 0
            if not self.pinned and self.lease.held and idle:
                self._release()

    def _ensure(self, model: str, url: str, kind: str, priority: int) -> None:
        """Hold the lease with ``model`` on the host: taken (swapping models when the host had
        another loaded), joined, or switched to under the lease when alone."""
        with self._lock:
            if self.lease.held and self.lease.model == model:
                return
            if self.lease.held and self.lease.switch(model):
                self._switch_to(model, url, kind)  # another model of ours, under the lease
                return
            if self.lease.held:  # others share the lease for the model it holds: leave them
                self._release()
            value = self.lease.acquire(model, priority, self.wait_timeout)
            self.tasks_in_hold = 0
            self.hold_started = time.monotonic()
            self._start_renewer()
            if not value["joined"]:  # a joiner finds its model loaded already
                self._switch_to(model, url, kind, value.get("loaded"))

    def _switch_to(
        self, model: str, url: str, kind: str, loaded: str | bytes | None = None
    ) -> None:
        """``loaded``: the host's loaded model as the lease's acquisition read it, if it did."""
        raw = self.r.get(self.lease.keys.loaded) if loaded is None else loaded
        previous = json.loads(raw) if raw else None
        if previous and previous.get("model") != model:
            self.r.hincrby(self.lease.keys.stats, "swaps", 1)
            if self.on_swap is not None:
                self.on_swap(self.lease.host)
            if previous.get("kind") == "ollama" and self.unload is not None:
                try:
                    self.unload(previous["url"], previous["model"])
                except Exception as exc:  # unloading is best effort; the load still happens
                    log.warning(
                        "host.unload_failed",
                        extra={
                            "host": self.lease.host,
                            "model": previous["model"],
                            "error": str(exc),
                        },
                    )
            self.r.delete(self.lease.keys.loaded)
            log.info(
                "host.switch",
                extra={"host": self.lease.host, "from": previous["model"], "to": model},
            )

    # --- between tasks -----------------------------------------------------------------

    def after_task(self, queue_depth: int) -> None:
        """Keep the host while our queue has work, unless others wait past the fairness bound,
        or more urgent work waits: an error's stage preempts bulk indexing between two of its
        tasks (without this, an error's rerank waited for up to ``max_seconds`` of index
        drains, each up to 128 chunks, before it got the host)."""
        with self._lock:
            if not self.lease.held:
                return
            self.tasks_in_hold += 1
            held_for = time.monotonic() - self.hold_started
            counted_out = self.max_tasks is not None and self.tasks_in_hold >= self.max_tasks
            fair_share_used = counted_out or held_for >= self.max_seconds
            # Only bulk work yields early: an error's query overtaking its own chain's rerank
            # would swap models back and forth between stages of the same analyses.
            preempted = self.last_priority == PRIORITY_BULK and self.lease.waiting_ahead_of(
                PRIORITY_BULK
            )
            if queue_depth == 0 or preempted or (fair_share_used and self.lease.others_waiting()):
                self._release()

    def _release(self) -> None:
        with self._lock:
            if self.lease.token is not None:
                log.info(
                    "host.release", extra={"host": self.lease.host, "tasks": self.tasks_in_hold}
                )
            self.lease.release()
            self.tasks_in_hold = 0

    def _start_renewer(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._renew_loop, daemon=True, name=f"lease-renewer:{self.lease.host}"
        )
        self._thread.start()

    def _renew_loop(self) -> None:
        interval = max(0.05, min(self.lease.ttl / 3, self.idle_release / 2))
        while not self._stop.wait(interval):
            try:
                self._renew_once()
            except redis.RedisError as exc:
                # Redis restarting: keep the thread; the lease expires on its own if this
                # lasts, and the next task's fencing check finds that out before any call.
                log.warning("host.renew_failed", extra={"host": self.lease.host, "error": str(exc)})

    def _renew_once(self) -> None:
        with self._lock:
            if self.lease.token is None:
                return
            idle = not self.busy and time.monotonic() - self.last_activity > self.idle_release
            if idle:
                self._release()  # no task followed: let others have the host
            elif not self.lease.renew():
                log.warning("host.lease_lost", extra={"host": self.lease.host})

    def close(self) -> None:
        self._stop.set()
        self._release()


def host_status(r: redis.Redis, host: str) -> dict[str, Any]:
    """What ``tracehound status`` shows for a host."""
    k = Keys(host)
    lease = r.get(k.lease)
    loaded = r.get(k.loaded)
    members = r.zcard(k.members) if lease else 0
    stats = {_text(a): int(b) for a, b in r.hgetall(k.stats).items()}
    return {
        "host": host,
        "holder": json.loads(lease) if lease else None,
        "holders": members,
        "loaded": json.loads(loaded)["model"] if loaded else None,
        "waiting": r.zcard(k.waiting),
        "swaps": stats.get("swaps", 0),
        "calls": stats.get("calls", 0),
        "busy_s": round(stats.get("busy_ms", 0) / 1000, 1),
    }


def known_hosts(r: redis.Redis) -> list[str]:
    hosts = set()
    for key in r.scan_iter(match=keys.HOST_STATS_PATTERN):
        hosts.add(keys.host_of_stats_key(_text(key)))
    return sorted(hosts)
