"""Prometheus metrics of a worker: stage latency, queue wait, swaps, fallbacks, retries, and
the analysis backlog (groups waiting, the oldest one's age).

With TRACEHOUND_METRICS_PORT set, the worker's main process serves ``/metrics`` and aggregates
its pool children through prometheus_client's multiprocess mode (the children write to
PROMETHEUS_MULTIPROC_DIR, set here before prometheus_client is first imported).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from functools import cache
from pathlib import Path
from typing import Any

from celery.signals import (
    before_task_publish,
    task_postrun,
    task_prerun,
    task_retry,
    worker_process_shutdown,
)

from shared.core.pipeline import SENT_AT, stamp_sent_at
from shared.groups import deferred

before_task_publish.connect(stamp_sent_at, dispatch_uid="tracehound-sent-at")

log = logging.getLogger(__name__)

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        self.stage = Histogram(
            "tracehound_stage_seconds", "Task run time per stage.", ["stage"], buckets=BUCKETS
        )
        self.wait = Histogram(
            "tracehound_queue_wait_seconds",
            "Time from publish to start, per queue.",
            ["queue"],
            buckets=BUCKETS,
        )
        self.swaps = Counter(
            "tracehound_model_swaps_total",
            "Model switches on a host made by this worker.",
            ["host"],
        )
        self.fallbacks = Counter(
            "tracehound_fallbacks_total",
            "Stages that degraded instead of doing their job.",
            ["stage"],
        )
        self.retries = Counter("tracehound_retries_total", "Task retries.", ["stage"])
        self.deferred_dropped = Counter(
            "tracehound_deferred_dropped_total",
            "Waiting groups dropped from the backlog (too old, or past its size bound).",
        )


@cache
def metrics() -> _Metrics | None:
    """The metrics, or None when this worker does not export any."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    return _Metrics()


def fallback(stage: str) -> None:
    m = metrics()
    if m is not None:
        m.fallbacks.labels(stage).inc()


def deferred_dropped(n: int) -> None:
    m = metrics()
    if m is not None and n:
        m.deferred_dropped.inc(n)


def swap(host: str) -> None:
    m = metrics()
    if m is not None:
        m.swaps.labels(host).inc()


def _stage(task: Any) -> str:
    return str(getattr(task, "name", "?")).rsplit(".", 1)[-1]


_started: dict[str, float] = {}


@task_prerun.connect
def _prerun(task_id: str = "", task: Any = None, **_: Any) -> None:
    _started[task_id] = time.monotonic()
    m = metrics()
    sent = getattr(task.request, SENT_AT, None) if task is not None else None
    if m is not None and isinstance(sent, int | float):
        queue = (task.request.delivery_info or {}).get("routing_key", "?")
        m.wait.labels(queue).observe(max(0.0, time.time() - sent))


@task_postrun.connect
def _postrun(task_id: str = "", task: Any = None, **_: Any) -> None:
    started = _started.pop(task_id, None)
    m = metrics()
    if m is not None and started is not None:
        m.stage.labels(_stage(task)).observe(time.monotonic() - started)


@task_retry.connect
def _retry(sender: Any = None, **_: Any) -> None:
    m = metrics()
    if m is not None:
        m.retries.labels(_stage(sender)).inc()


class BacklogCollector:
    """The deferred analyses (shared/groups/deferred.py), read from Redis at each scrape: the
    same for every worker, so a dashboard takes ``max`` over them."""

    def __init__(self, redis_url: str) -> None:
        import redis

        self.r = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=2)

    def collect(self) -> Any:
        import redis
        from prometheus_client.core import GaugeMetricFamily

        try:
            waiting = deferred.backlog(self.r)
        except redis.RedisError:
            return  # Redis away: no reading rather than a false zero
        yield GaugeMetricFamily(
            "tracehound_analysis_backlog",
            "New groups waiting for their analysis (incident members, over the cap).",
            value=waiting.waiting,
        )
        yield GaugeMetricFamily(
            "tracehound_analysis_backlog_oldest_seconds",
            "How long the longest-waiting group has waited.",
            value=waiting.oldest_age_s,
        )


def serve(port: int, data_dir: Path, redis_url: str | None = None, host: str = "127.0.0.1") -> None:
    """In the worker's main process, before the pool forks: start the /metrics server on
    ``host`` (loopback unless configured: it has no authentication)."""
    directory = Path(data_dir) / "metrics" / f"worker-{os.getpid()}"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    if redis_url:
        registry.register(BacklogCollector(redis_url))
    start_http_server(port, addr=host, registry=registry)
    log.info("metrics.serving", extra={"host": host, "port": port, "dir": str(directory)})


@worker_process_shutdown.connect
def _child_exit(pid: int | None = None, **_: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())
