"""Prometheus metrics of a worker: stage latency, queue wait, swaps, fallbacks, retries, calls
to Slack, errors taken in; read at each scrape: the analysis backlog (groups waiting, the
oldest one's age), queue depths, and its model hosts (answering, busy time).

With TRACEHOUND_METRICS_PORT set, the worker's main process serves ``/metrics`` and aggregates
its pool children through prometheus_client's multiprocess mode (the children write to
PROMETHEUS_MULTIPROC_DIR, set here before prometheus_client is first imported).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from celery.signals import (
    before_task_publish,
    task_postrun,
    task_prerun,
    task_retry,
    worker_process_init,
    worker_process_shutdown,
)

from shared.core import queues
from shared.core.metrics import IntakeCounters, LabelCap
from shared.core.pipeline import SENT_AT, stamp_sent_at
from shared.core.settings import Settings
from shared.groups import deferred
from shared.models.hosts import Keys, host_id
from shared.notify.notifiers import SLACK_OUTCOMES

before_task_publish.connect(stamp_sent_at, dispatch_uid="tracehound-sent-at")

log = logging.getLogger(__name__)

# The stages that degrade rather than fail (workers/tasks/analysis.py, shared/notify/delivery.py).
FALLBACK_STAGES = ("embed_query", "retrieve", "ranker", "rerank", "analyze", "notify")

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)


class _Metrics:
    def __init__(self, max_services: int) -> None:
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
        self.slack = Counter(
            "tracehound_slack_requests_total",
            "Calls to Slack by API method and outcome (ok, rate_limited, server_error, "
            "refused, no_answer).",
            ["method", "outcome"],
        )
        # Series with labels from a fixed set exist from the start at zero, so rate() and the
        # alerts see their first increase.
        for outcome in SLACK_OUTCOMES:
            self.slack.labels("chat.postMessage", outcome)
        for stage in FALLBACK_STAGES:
            self.fallbacks.labels(stage)
        for task in queues.TIME_LIMITS:
            self.retries.labels(task.rsplit(".", 1)[-1])
        self.intake = IntakeCounters(None, LabelCap(max_services))


_config: dict[str, int] = {}  # set by serve() in the main process; the pool's children inherit it


@cache
def metrics() -> _Metrics | None:
    """The metrics, or None when this worker does not export any."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    return _Metrics(_config.get("max_services", 50))


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


def slack_call(method: str, outcome: str) -> None:
    m = metrics()
    if m is not None:
        m.slack.labels(method, outcome).inc()


def counted(service: str, opened: bool) -> None:
    """An error taken in by this worker's intake (the batches ingest queued)."""
    m = metrics()
    if m is not None:
        m.intake.count(service, opened=opened)


@worker_process_init.connect
def _child_started(**_: Any) -> None:
    metrics()  # the series with fixed labels exist from the start, at zero


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
    """The deferred analyses (shared/groups/deferred.py) and the depth of every queue, read
    from Redis at each scrape: the same for every worker, so a dashboard takes ``max`` over
    them."""

    def __init__(self, redis_url: str) -> None:
        import redis

        self.r = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=2)

    def collect(self) -> Any:
        import redis
        from prometheus_client.core import GaugeMetricFamily

        try:
            waiting = deferred.backlog(self.r)
            depths = {q: queues.depth(self.r, q) for q in queues.ALL_QUEUES}
        except redis.RedisError:
            return  # Redis away: no reading rather than a false zero
        depth = GaugeMetricFamily(
            "tracehound_queue_depth", "Messages waiting in each queue.", labels=["queue"]
        )
        for queue, n in depths.items():
            depth.add_metric([queue], n)
        yield depth
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


# A rerank server's health request by backend (the hosted APIs have none: not probed).
RERANK_HEALTH = {
    "ollama": "/api/version",
    "llamacpp": "/health",
    "tei": "/health",
    "vllm": "/health",
}


@dataclass(frozen=True)
class HostProbe:
    """A cheap request that tells whether a model host's server answers."""

    host: str  # the machine, as its lease names it (shared/models/hosts.py)
    url: str


def host_probes(s: Settings, consumed: Collection[str]) -> list[HostProbe]:
    """The model servers this worker's queues call, each with its health request: Ollama's
    ``/api/version``; a rerank server's ``/health`` (llama.cpp, TEI, vLLM; hosted APIs have
    none and are not probed)."""
    urls = []
    if "embed" in consumed:
        urls.append(f"{s.embed_base_url.rstrip('/')}/api/version")
    if "llm" in consumed:
        urls.append(f"{s.llm_base_url.rstrip('/')}/api/version")
    rerank_health = RERANK_HEALTH.get(s.rerank_backend)
    if "rerank" in consumed and s.rerank_url and rerank_health:
        urls.append(f"{s.rerank_url.rstrip('/')}{rerank_health}")
    return [HostProbe(host_id(u), u) for u in dict.fromkeys(urls)]


class ModelHostCollector:
    """At each scrape: whether each model host this worker calls answers (a health request,
    2 s at most), and its busy time (seconds inside model calls, from every worker: the
    lease's counters in Redis)."""

    PROBE_TIMEOUT_S = 2.0

    def __init__(self, redis_url: str, probes: Callable[[], Sequence[HostProbe]]) -> None:
        import httpx
        import redis

        self.r = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=2)
        self.http = httpx.Client(timeout=self.PROBE_TIMEOUT_S)
        self.probes = probes

    def _answers(self, url: str) -> bool:
        import httpx

        try:
            return self.http.get(url).is_success
        except httpx.HTTPError:
            return False

    def collect(self) -> Any:
        import redis
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        probes = self.probes()
        if not probes:
            return
        up = GaugeMetricFamily(
            "tracehound_model_host_up",
            "1 when every model server this worker calls on the host answers its health request.",
            labels=["host"],
        )
        hosts: dict[str, bool] = {}
        for probe in probes:
            hosts[probe.host] = hosts.get(probe.host, True) and self._answers(probe.url)
        for host, answers in hosts.items():
            up.add_metric([host], 1.0 if answers else 0.0)
        yield up
        try:
            busy_ms = {h: self.r.hget(Keys(h).stats, "busy_ms") for h in hosts}
        except redis.RedisError:
            return
        busy = CounterMetricFamily(
            "tracehound_model_host_busy_seconds",
            "Seconds the host spent answering model calls, from every worker (host leases).",
            labels=["host"],
        )
        for host, ms in busy_ms.items():
            busy.add_metric([host], int(ms or 0) / 1000)
        yield busy


def serve(
    port: int,
    data_dir: Path,
    redis_url: str | None = None,
    host: str = "127.0.0.1",
    probes: Callable[[], Sequence[HostProbe]] | None = None,
    max_services: int = 50,
) -> None:
    """In the worker's main process, before the pool forks: start the /metrics server on
    ``host`` (loopback unless configured: it has no authentication)."""
    _config["max_services"] = max_services
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
        if probes is not None:
            registry.register(ModelHostCollector(redis_url, probes))
    start_http_server(port, addr=host, registry=registry)
    log.info("metrics.serving", extra={"host": host, "port": port, "dir": str(directory)})


@worker_process_shutdown.connect
def _child_exit(pid: int | None = None, **_: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())
