"""Renewing the messages a live worker holds, so that only a dead worker's are redelivered.

Celery's Redis transport keeps every message a worker has taken but not acknowledged
(``acks_late``: until its task finished) in the ``unacked_index`` sorted set, scored by when it
was taken, and hands it out again once the score is older than the visibility timeout. A
timeout long enough for the longest task with all its retries meant a worker killed with -9
held its messages for 96 minutes. Here the timeout is short (``TRACEHOUND_REDELIVERY_AFTER``,
30 s) and this consumer step re-scores every message the worker holds — running, or waiting
for its countdown — every quarter of it. A worker that dies stops renewing, and its messages
are handed out again within the timeout plus one restore sweep.

It also puts back a message the worker took off a queue but could not record as unacknowledged
(Redis went away in between: workers/redis_restart.py), when the consumer starts again after
the reconnection and, should that fail, on every later tick; and once per tick across all
workers it sweeps the analysis chains in flight, starting again one whose message Redis lost
(shared/core/inflight.py).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis
from celery import bootsteps

from shared.core import inflight
from workers import redis_restart

log = logging.getLogger(__name__)


class VisibilityHeartbeat(bootsteps.StartStopStep):
    """A thread of the worker's main process; it starts and stops with the task consumer."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, c: Any) -> None:
        channel = c.task_consumer.channel
        options = c.app.conf.broker_transport_options or {}
        timeout = float(options.get("visibility_timeout", 3600))
        client = redis.Redis.from_url(
            c.app.conf.broker_url, socket_connect_timeout=5, socket_timeout=5
        )
        self._put_back(channel)
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run,
            args=(channel, channel.unacked_index_key, client, timeout / 4),
            name="visibility-heartbeat",
            daemon=True,
        )
        self._thread.start()

    @staticmethod
    def _put_back(channel: Any) -> None:
        if not redis_restart.kept():
            return
        try:
            redis_restart.restore_kept(channel)
        except redis.RedisError as exc:
            log.warning("heartbeat.put_back_failed", extra={"error": str(exc)})

    @staticmethod
    def _sweep(client: redis.Redis, every: float, grace: float) -> None:
        """Start again an analysis chain Redis lost the message of (shared/core/inflight.py);
        one worker per interval does it."""
        try:
            if inflight.claim_sweep(client, every):
                inflight.sweep(client, grace_s=grace)
        except (redis.RedisError, ValueError, KeyError) as exc:
            log.warning("heartbeat.sweep_failed", extra={"error": str(exc)})

    def _run(self, channel: Any, index_key: str, client: redis.Redis, every: float) -> None:
        while not self._stop.wait(every):
            self._put_back(channel)
            self._sweep(client, every, grace=every * 4)  # the visibility timeout
            held = list(channel.qos._delivered)  # delivery tags this worker has not acknowledged
            if not held:
                continue
            try:
                # XX: only renew what is still waiting; an acknowledged message stays gone.
                client.zadd(index_key, dict.fromkeys(held, time.time()), xx=True)
            except redis.RedisError as exc:
                log.warning("heartbeat.failed", extra={"held": len(held), "error": str(exc)})
        client.close()

    def stop(self, c: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    shutdown = stop
