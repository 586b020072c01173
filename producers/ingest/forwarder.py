"""The forwarder: a process beside the ingest server that drains the upstream queue
(upstream_queue.py) into the upstream Sentry, the oldest requests first, a few at a time.

What the upstream's answer does to an entry (as Sentry's SDKs read it: getsentry/sentry-python
``sentry_sdk/transport.py``, and the develop docs' "Rate Limiting" page):

- 2xx: delivered, removed.
- 429: kept; nothing is sent until the longest limit in ``X-Sentry-Rate-Limits`` has passed,
  else ``Retry-After``, else 60 s (what the SDKs wait), at most ``MAX_WAIT_S``.
- 503: kept; sent again after ``Retry-After`` or the backoff.
- another 4xx: it will never be taken (bad key, project, payload): logged, counted as
  ``refused``, removed.
- a network error, a timeout, 3xx or another 5xx: kept; sent again after a backoff that doubles
  from 1 s up to ``backoff_max``.

With several ingest processes on one Redis, one holds a lease (``th:upstream:lease``) and
drains; the others wait to take over when it lapses (a killed holder's after ``lease_ttl``).
"""

from __future__ import annotations

import contextlib
import email.utils
import logging
import multiprocessing
import os
import secrets
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import redis

from producers.ingest.upstream import Taken, Upstream, outgoing, parse_upstream
from producers.ingest.upstream_queue import Entry, UpstreamQueue
from shared.core import keys, logs, redisconn
from shared.core.logs import Throttle
from shared.core.settings import Settings

log = logging.getLogger(__name__)

# Requests in flight to the upstream at once: a round sends this many and waits for them all,
# so throughput is about SENDERS / the upstream's latency (at 50 ms: 71 requests/s with 4,
# 222 with 16, measured against a loopback server that sleeps 50 ms per request).
SENDERS = 16
DEFAULT_RATE_LIMIT_S = 60.0  # a 429 without a usable header: what the SDKs wait
MAX_WAIT_S = 3600.0  # an upstream's Retry-After is honoured up to an hour
MIN_WAIT_S = 1.0  # the shortest pause after an answer that keeps the entry
BLOCK_MS = 500  # how long an idle forwarder waits on the queue per round

# KEYS: lease. ARGV: token, ttl ms. Taken when free, renewed when ours.
_LEASE = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""


@dataclass(frozen=True)
class Outcome:
    settled: str | None  # "delivered" or "refused": remove the entry; None: keep it
    wait: float | None = None  # seconds the upstream asked for; None: the backoff decides


def outcome(status: int, headers: Mapping[str, str]) -> Outcome:
    """What an upstream answer means for the entry sent."""
    if 200 <= status < 300:
        return Outcome("delivered")
    if status == 429:
        return Outcome(None, rate_limit_wait(headers))
    if status == 503:
        return Outcome(None, retry_after(headers.get("retry-after")))
    if 400 <= status < 500:
        return Outcome("refused")
    return Outcome(None)


def rate_limit_wait(headers: Mapping[str, str]) -> float:
    """Seconds before sending again after a 429: the longest ``X-Sentry-Rate-Limits`` limit
    (``<seconds>:<categories>:<scope>…`` groups, comma-separated), else ``Retry-After``, else
    60 s. Every category waits: the forwarder keeps the order, not categories apart."""
    longest = None
    for group in headers.get("x-sentry-rate-limits", "").split(","):
        seconds = group.strip().split(":", 1)[0]
        try:
            value = float(seconds)
        except ValueError:
            continue
        if value >= 0:
            longest = value if longest is None else max(longest, value)
    if longest is None:
        longest = retry_after(headers.get("retry-after"))
    return min(DEFAULT_RATE_LIMIT_S if longest is None else longest, MAX_WAIT_S)


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds (a number or an HTTP date), at most ``MAX_WAIT_S``."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - time.time()
    return min(max(seconds, 0.0), MAX_WAIT_S)


class Forwarder:
    """Sends the queue's entries to ``upstream``; ``run`` until ``stop`` is set."""

    def __init__(
        self,
        queue: UpstreamQueue,
        upstream: Upstream,
        client: httpx.Client,
        *,
        max_body_bytes: int,
        backoff_max: float = 60.0,
        lease_ttl: float = 30.0,
    ) -> None:
        self.queue = queue
        self.upstream = upstream
        self.client = client
        self.max_body_bytes = max_body_bytes
        self.backoff_max = backoff_max
        self.lease_ttl = lease_ttl
        self.failures = 0  # consecutive rounds that could not deliver
        self.token = secrets.token_hex(8)
        self._lease = queue.r.register_script(_LEASE)
        self._pool = ThreadPoolExecutor(SENDERS, thread_name_prefix="upstream-send")
        self._throttle = Throttle()

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                wait = self.round()
                if wait > 0:
                    stop.wait(wait)
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def round(self) -> float:
        """Send the oldest entries once; the seconds to wait before the next round."""
        try:
            if not self._lease(keys=[keys.UPSTREAM_LEASE], args=[self.token, self.ms_ttl]):
                return self.lease_ttl / 3  # another ingest process drains
            entries = self.queue.oldest(SENDERS, BLOCK_MS)
            if not entries:
                return 0.0
            outcomes = list(self._pool.map(self.send, entries))
            for entry, result in zip(entries, outcomes, strict=True):
                if result.settled is not None:
                    self.queue.ack(entry, result.settled)
        except redis.RedisError as exc:
            self.failed("redis", f"{type(exc).__name__}: {exc}")
            return self.backoff()
        kept = [o for o in outcomes if o.settled is None]
        if not kept:
            if self.failures:
                log.info("upstream.recovered", extra={"after_failures": self.failures})
                self._throttle.forget("upstream")
            self.failures = 0
            return 0.0
        asked = [o.wait for o in kept if o.wait is not None]
        # Retry-After: 0 would make a busy loop: a second at least.
        return max(*asked, MIN_WAIT_S) if asked else self.backoff()

    @property
    def ms_ttl(self) -> int:
        return int(self.lease_ttl * 1000)

    def backoff(self) -> float:
        self.failures += 1
        return float(min(2 ** (self.failures - 1), self.backoff_max))

    def send(self, entry: Entry) -> Outcome:
        """One entry to the upstream. Never raises: a failure is an outcome that keeps it."""
        try:
            taken = Taken.from_entry(entry.meta, entry.body)
        except (ValueError, KeyError, TypeError):
            log.error("upstream.unreadable_entry", extra={"entry": entry.id})
            return Outcome("refused")  # not written by this version: it can never be sent
        request = outgoing(self.upstream, taken, self.max_body_bytes)
        try:
            response = self.client.post(request.url, content=request.body, headers=request.headers)
        except httpx.HTTPError as exc:
            self.failed("network", f"{type(exc).__name__}: {exc}")
            return Outcome(None)
        result = outcome(response.status_code, response.headers)
        if result.settled == "refused":
            # The body is never logged: it is the SDK's data, secrets and all.
            log.warning(
                "upstream.refused",
                extra={
                    "status": response.status_code,
                    "project": taken.project,
                    "kind": taken.kind,
                    "detail": response.text[:200],
                },
            )
        elif result.settled is None:
            self.failed("status", f"HTTP {response.status_code}")
        return result

    def failed(self, kind: str, error: str) -> None:
        """A failure to deliver, logged once and then at most once a minute."""
        held = self._throttle.allow("upstream")
        if held is not None:
            log.warning(
                "upstream.unreachable",
                extra={"kind": kind, "error": error[:300], "repeats": held},
            )


@dataclass(frozen=True)
class ForwarderConfig:
    """What the forwarder process is built from (plain values: it crosses a process spawn)."""

    redis_url: str
    upstream: str
    max_bytes: int
    timeout: float
    max_body_bytes: int
    backoff_max: float

    def forwarder(self) -> Forwarder:
        return Forwarder(
            UpstreamQueue(redisconn.client(self.redis_url), self.max_bytes),
            parse_upstream(self.upstream),
            httpx.Client(timeout=self.timeout, follow_redirects=False),
            max_body_bytes=self.max_body_bytes,
            backoff_max=self.backoff_max,
            lease_ttl=2 * self.timeout + 5,
        )


def _run_process(config: ForwarderConfig, told: Any) -> None:
    """The forwarder process's body: until the ingest process that started it says stop or
    is gone — its end of the pipe closes with it, so a ``kill -9`` of ingest does not leave
    the forwarder sending (``told``: the pipe's reading end)."""
    logs.configure(os.environ.get("TRACEHOUND_LOG_LEVEL", "WARNING"))  # a spawned process
    done = threading.Event()

    def watch() -> None:
        with contextlib.suppress(OSError):
            told.poll(None)  # a word from the server, or the end of the pipe when it died
        done.set()

    threading.Thread(target=watch, name="upstream-watch", daemon=True).start()
    config.forwarder().run(done)


class ForwarderProcess:
    """The forwarder beside the ingest server, in a process of its own: its senders do not
    compete with the SDKs' requests for the interpreter (a thread of the server did: +5.3 ms
    at p95 with 16 senders). Started and stopped with the server."""

    def __init__(self, config: ForwarderConfig) -> None:
        self.config = config
        context = multiprocessing.get_context("spawn")  # no copy of the server's threads
        # A pipe, not an Event: a process killed while waiting on a multiprocessing Event
        # leaves its set() waiting for it forever.
        told, self._tell = context.Pipe(duplex=False)
        self.process = context.Process(
            target=_run_process, args=(config, told), name="upstream-forwarder", daemon=True
        )

    def start(self) -> None:
        self.process.start()

    def stop(self, timeout: float = 5.0) -> None:
        with contextlib.suppress(OSError):
            self._tell.send(None)
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout)


def forwarding(settings: Settings) -> tuple[UpstreamQueue, ForwarderProcess] | None:
    """The queue the Sentry routes add to and the forwarder that drains it, when
    ``TRACEHOUND_SENTRY_UPSTREAM`` is set (not started)."""
    if not settings.sentry_upstream:
        return None
    # The request path's client fails fast (the SDK gets a 503, as when intake cannot reach
    # Redis); the forwarder's rides out a Redis restart.
    fast = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=2, socket_timeout=5)
    queue = UpstreamQueue(fast, settings.sentry_upstream_max_bytes)
    config = ForwarderConfig(
        settings.redis_url,
        settings.sentry_upstream,
        settings.sentry_upstream_max_bytes,
        settings.sentry_upstream_timeout,
        settings.ingest_max_body_bytes,
        settings.retry_backoff_max,
    )
    return queue, ForwarderProcess(config)
