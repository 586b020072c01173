"""Surviving a Redis restart: a workaround for kombu 5.7's Redis transport.

When the broker connection drops while the worker holds messages (a task's countdown, a task
under way), the old channel's connection is set to ``None``, and two things still use it: the
channel's close restores the held messages through it, and a task that finishes afterwards
acknowledges its message through it. Both fail with ``AttributeError: 'NoneType' object has no
attribute 'hostname'`` (or ``'client'``) and the worker exits with "Unrecoverable error".

Here an orphaned channel raises a connection error instead — which Celery logs and survives —
and its restore is skipped. The messages are still in Redis (``unacked``), nobody renews them
any more (workers/heartbeat.py), so the transport's sweep hands them out again after
``TRACEHOUND_REDELIVERY_AFTER``; a task that had finished then runs again, which every stage
tolerates (they are idempotent, and delivery is claimed once per group window).
tests/integration/test_redis_restart.py restarts a real redis-server under running workers.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from typing import Any

import redis

log = logging.getLogger(__name__)


def apply() -> None:
    """Wrap kombu's Redis ``Channel.conn_or_acquire`` and ``QoS.restore_unacked`` (once)."""
    from kombu.transport import redis as kombu_redis

    original = kombu_redis.QoS.restore_unacked
    if getattr(original, "_tracehound", False):
        return
    acquire = kombu_redis.Channel.conn_or_acquire

    @contextlib.contextmanager
    def conn_or_acquire(self: Any, client: Any = None) -> Iterator[Any]:
        connection = getattr(self, "connection", None)
        if client is None and (connection is None or connection.client is None):
            raise redis.exceptions.ConnectionError("broker channel closed: its connection was lost")
        with acquire(self, client) as acquired:
            yield acquired

    kombu_redis.Channel.conn_or_acquire = conn_or_acquire  # type: ignore[method-assign]

    @functools.wraps(original)
    def restore_unacked(self: Any, client: Any = None) -> Any:
        connection = getattr(self.channel, "connection", None)
        if client is None and (connection is None or connection.client is None):
            held = len(getattr(self, "_delivered", ()) or ())
            log.warning("broker.restore_skipped", extra={"held": held})
            self._delivered.clear()
            return None
        return original(self, client)

    restore_unacked._tracehound = True  # type: ignore[attr-defined]
    kombu_redis.QoS.restore_unacked = restore_unacked  # type: ignore[method-assign]
