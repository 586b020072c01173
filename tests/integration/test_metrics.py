"""Workers export Prometheus metrics: stage latency, queue wait, fallbacks, the backlog."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis

from shared.core import keys
from shared.core.pipeline import enqueue_error
from shared.core.settings import Settings
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.index.reindex import index_repository
from shared.intake.events import parse_event
from shared.stack.children import wait_until
from shared.stack.localstack import LocalStack
from tests.conftest import DATA, SAMPLE_SERVICE

pytestmark = pytest.mark.integration


def scrape(stack: LocalStack, worker: str) -> str:
    return httpx.get(f"http://127.0.0.1:{stack.metrics_ports[worker]}/metrics", timeout=5).text


def value(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}") or (not labels and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_stage_latency_queue_wait_and_rerank_fallbacks_are_exported(
    stack: LocalStack,
    sender: Any,
    settings: Settings,
    rerank_sim: OllamaSimulator,
) -> None:
    index_repository(
        sender, SAMPLE_SERVICE, "sample-metrics", max_bytes=settings.max_file_bytes, timeout=120
    )
    before = value(scrape(stack, "rerank"), "tracehound_fallbacks_total", stage="rerank")
    rerank_sim.stop()
    try:
        event = parse_event(
            (DATA / "sample-error.txt").read_text(), service="shop-api", repo="sample-metrics"
        )
        enqueue_error(sender, event).get(timeout=90)
    finally:
        rerank_sim.start()

    llm = scrape(stack, "llm")
    assert value(llm, "tracehound_stage_seconds_count", stage="analyze") >= 1
    assert value(llm, "tracehound_queue_wait_seconds_count", queue="llm") >= 1
    cpu = scrape(stack, "cpu")
    # retrieve runs in every chain; notify only when analyze hands the post over (a paced
    # channel), which this test alone does not cause.
    assert value(cpu, "tracehound_stage_seconds_count", stage="retrieve") >= 1
    wait_until(
        lambda: (
            value(scrape(stack, "rerank"), "tracehound_fallbacks_total", stage="rerank")
            == before + 1
        ),
        10,
        "rerank fallback counted",
    )


def test_the_analysis_backlog_and_its_oldest_age_are_exported(
    stack: LocalStack, redis_client: redis.Redis
) -> None:
    assert "tracehound_analysis_backlog 0.0" in scrape(stack, "cpu")
    secs, micros = redis_client.time()
    now_ms = int(secs) * 1000 + int(micros) // 1000
    # Two groups waiting, deferred 90 s and 5 s ago (as intake records them: Redis time).
    waiting = {"v1:metrics-a": now_ms - 90_000, "v1:metrics-b": now_ms - 5_000}
    redis_client.zadd(keys.DEFERRED, waiting)
    try:
        text = scrape(stack, "llm")
        assert value(text, "tracehound_analysis_backlog") == 2
        assert 90 <= value(text, "tracehound_analysis_backlog_oldest_seconds") < 120
    finally:
        redis_client.zrem(keys.DEFERRED, *waiting)


def test_metrics_listen_on_loopback_only(stack: LocalStack) -> None:
    """/metrics has no authentication: it answers on loopback and is not reachable at the
    machine's own network addresses (TRACEHOUND_METRICS_HOST to open it)."""
    import socket
    import subprocess

    addresses = [a for a in subprocess.run(["hostname", "-I"], capture_output=True,
                                           text=True).stdout.split() if ":" not in a]  # fmt: skip
    assert addresses, "the machine has no non-loopback IPv4 address to try"
    port = next(iter(stack.metrics_ports.values()))
    assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200
    for address in addresses:
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(2)
            s.connect((address, port))
