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

A third gap is kombu's hand-off: BRPOP takes a message off the queue, and only then does the
worker record it as unacknowledged (a second command, ``QoS.append``). When Redis goes away
between the two — a restart lands there under load: the pop is served in Redis's last moments
and the record arrives after it closed — the message was in neither place and was lost (one
analysis in ten, in about half of the restart test's runs). Here the worker keeps a message it
could not record (``kept``) and puts it back at the head of its queue when it is connected again
(the heartbeat step restores it on the consumer's restart, and retries every tick until Redis
takes it). If the record had in fact been written, the message also comes back from ``unacked``:
a stage that runs twice is harmless, as above. A worker killed with -9 while holding such a
message still loses it; kombu's own window, without this, is the same.
tests/integration/test_redis_restart.py restarts a real redis-server under running workers.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Iterator
from typing import Any

import redis

log = logging.getLogger(__name__)

# Messages taken off a queue whose unacked record failed: (payload, exchange, routing key).
_kept: list[tuple[dict[str, Any], str, str]] = []
_kept_lock = threading.Lock()


def keep(payload: dict[str, Any], exchange: str, routing_key: str) -> None:
    with _kept_lock:
        _kept.append((payload, exchange, routing_key))


def kept() -> int:
    with _kept_lock:
        return len(_kept)


def restore_kept(channel: Any) -> int:
    """Put the kept messages back at the head of their queues through ``channel`` (a connected
    kombu Redis channel); the number restored. A message Redis does not take stays kept."""
    with _kept_lock:
        pending = list(_kept)
        _kept.clear()
    restored = 0
    try:
        for i, (payload, exchange, routing_key) in enumerate(pending):
            with channel.conn_or_acquire() as client:
                pipe = client.pipeline()
                # rpush: BRPOP takes from the right, so it is the next message handed out.
                channel._do_restore_message(payload, exchange, routing_key, pipe, False)
                pipe.execute()
            restored = i + 1
    finally:
        if restored < len(pending):
            with _kept_lock:
                _kept[:0] = pending[restored:]
    if restored:
        log.warning("broker.hand_off_restored", extra={"messages": restored})
    return restored


def apply() -> None:
    """Wrap kombu's Redis ``Channel.conn_or_acquire``, ``QoS.restore_unacked`` and
    ``QoS.append`` (once)."""
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

    append = kombu_redis.QoS.append

    @functools.wraps(append)
    def append_or_keep(self: Any, message: Any, delivery_tag: Any) -> Any:
        try:
            return append(self, message, delivery_tag)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
            # Popped but not recorded: only this process has it now (see the module doc).
            info = message.delivery_info
            keep(message._raw, info["exchange"], info["routing_key"])
            log.warning("broker.hand_off_kept", extra={"delivery_tag": delivery_tag})
            raise

    kombu_redis.QoS.append = append_or_keep  # type: ignore[method-assign]
