"""The Redis client workers use: it rides out a Redis restart instead of failing the task.

After a restart every pooled connection is dead. redis-py replaces a dead connection and
retries the command, but its default (10 tries, backoff capped at 1 s: about 4 s) gives up
before a restarted Redis is back, and the task then fails, which acknowledges its message: an
error lost (tests/integration/test_redis_hand_off.py: a thread reply that met its pool's dead
connection right after the cut). Here the retries span about 15 s. A command may then run
twice when the connection broke after Redis applied it; the commands tasks send tolerate that
(SET NX claims, scripts that count each event id once, LPUSH of a stage that claims its work).
"""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

RETRIES = 10
BACKOFF_BASE_S = 0.2
BACKOFF_CAP_S = 2.0  # 0.2 + 0.4 + 0.8 + 1.6 + 2 x 6: about 15 s in all


SOCKET_TIMEOUT_S = 30.0  # no worker command blocks on purpose; a dead socket must not hang


def client(url: str, **kwargs: Any) -> redis.Redis:
    kwargs.setdefault("socket_timeout", SOCKET_TIMEOUT_S)
    kwargs.setdefault("socket_connect_timeout", 5.0)
    return redis.Redis.from_url(
        url,
        retry=Retry(ExponentialBackoff(cap=BACKOFF_CAP_S, base=BACKOFF_BASE_S), RETRIES),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        **kwargs,
    )


def ping_once(url: str, timeout: float = 2.0) -> None:
    """One PING on a fresh connection, not retried: raises at once when Redis is down, where
    ``client``'s retries would wait about 15 s first."""
    probe = redis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        probe.ping()
    finally:
        probe.close()
