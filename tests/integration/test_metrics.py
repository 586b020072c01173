"""Workers and ingest export Prometheus metrics: stage latency, queue wait, fallbacks, the
backlog, model hosts, Slack calls, errors in, refusals; and every metric the dashboard and
the alert rules (shared/ops) name is one of them."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from shared.core import keys
from shared.core.pipeline import enqueue_error
from shared.core.settings import Settings
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from shared.index.reindex import index_repository
from shared.intake.events import parse_event
from shared.ops import ALERT_RULES, DASHBOARD
from shared.stack.children import wait_until
from shared.stack.localstack import LocalStack, start_ingest, start_redis
from tests.conftest import DATA, SAMPLE_SERVICE, own_cause

pytestmark = pytest.mark.integration

TOKEN = "metrics-ingest-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TRACE = (DATA / "sample-error.txt").read_text()


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


# --- the dashboard and the alert rules name only what is exported ----------------------------

METRIC = re.compile(r"\btracehound_[a-z_]+")


def named_metrics() -> set[str]:
    """Every metric name in the dashboard's queries and the alert rules' expressions."""
    exprs = [
        t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", [])
    ]
    rules = yaml.safe_load(ALERT_RULES.read_text())
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    return {name for e in exprs for name in METRIC.findall(e)}


def sample_names(text: str) -> set[str]:
    """The names of the samples in a scrape (a histogram's _bucket/_sum/_count, a counter's
    _total): what a query can select, not the HELP and TYPE lines."""
    return {
        re.split(r"[{ ]", line, maxsplit=1)[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


@pytest.fixture(scope="module")
def ingest_url(stack: LocalStack) -> Iterator[str]:
    proc, url = start_ingest(
        stack.workdir, {**stack.env, "TRACEHOUND_INGEST_TOKEN": TOKEN}, "--service", "shop-api"
    )
    try:
        yield url
    finally:
        proc.stop()


def scrape_all(stack: LocalStack, ingest_url: str) -> str:
    texts = [scrape(stack, worker) for worker in stack.metrics_ports]
    return "\n".join([*texts, httpx.get(f"{ingest_url}/metrics", timeout=5).text])


def post_error(url: str, service: str, *, wait: bool) -> httpx.Response:
    record = {"service": service, "repo": "sample-metrics", "stack": own_cause(TRACE)}
    return httpx.post(
        f"{url}/v1/events" + ("?wait=true" if wait else ""),
        json=[record],
        headers=AUTH,
        timeout=30,
    )


def test_every_metric_the_dashboard_and_alerts_name_is_exported_by_a_worker_or_ingest(
    stack: LocalStack, ingest_url: str, slack_sim: SlackSimulator
) -> None:
    """One error through ingest and the whole chain; then every name the dashboard and the
    rules query is a sample some worker or ingest serves (a renamed or dropped metric fails
    here)."""
    named = named_metrics()
    assert len(named) >= 15, named
    assert post_error(ingest_url, f"svc-{uuid.uuid4().hex[:6]}", wait=True).status_code == 202
    assert post_error(ingest_url, f"svc-{uuid.uuid4().hex[:6]}", wait=False).status_code == 202
    missing: set[str] = set()

    def all_exported() -> bool:
        nonlocal missing
        missing = named - sample_names(scrape_all(stack, ingest_url))
        return not missing

    try:
        wait_until(all_exported, 90, "every named metric exported", interval=1)
    except TimeoutError:
        pytest.fail(f"named by the dashboard or the rules but exported by none: {missing}")
    text = scrape_all(stack, ingest_url)
    # The chain ran on the model host (the simulators: one machine, 127.0.0.1).
    assert value(text, "tracehound_model_host_busy_seconds_total", host="127.0.0.1") > 0
    assert value(text, "tracehound_model_host_up", host="127.0.0.1") == 1


def total(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples that carry ``labels`` (over every worker's scrape)."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    found = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(w in line for w in want):
            found += float(line.rsplit(" ", 1)[1])
    return found


def slack_calls(stack: LocalStack, outcome: str) -> float:
    text = "\n".join(scrape(stack, worker) for worker in stack.metrics_ports)
    return total(text, "tracehound_slack_requests_total", outcome=outcome)


@pytest.mark.parametrize(("fault", "outcome"), [("500", "server_error"), ("429", "rate_limited")])
def test_slack_failing_raises_the_slack_failure_counter(
    stack: LocalStack, sender: Any, slack: SlackSimulator, fault: str, outcome: str
) -> None:
    before = slack_calls(stack, outcome)
    if fault == "429":
        slack.rate_limit(1, retry_after=1)
    else:
        slack.fail("chat.postMessage", "internal_error", times=1, status=500)
    event = parse_event(
        own_cause(TRACE), service=f"svc-{uuid.uuid4().hex[:6]}", repo="sample-metrics"
    )
    enqueue_error(sender, event)
    wait_until(lambda: slack_calls(stack, outcome) >= before + 1, 90, f"a {fault} counted")
    assert slack_calls(stack, "ok") >= 1  # the retry got through, and was counted as such


def test_a_model_host_that_stops_answering_reads_down_until_it_is_back(
    stack: LocalStack, rerank_sim: OllamaSimulator
) -> None:
    def up() -> float:
        return value(scrape(stack, "rerank"), "tracehound_model_host_up", host="127.0.0.1")

    assert up() == 1
    rerank_sim.stop()
    try:
        assert up() == 0
    finally:
        rerank_sim.start()
    wait_until(lambda: up() == 1, 10, "the rerank host up again")
    # The cpu worker calls no model: it probes nothing.
    assert "tracehound_model_host_up" not in scrape(stack, "cpu")


def test_errors_in_and_groups_opened_are_counted_where_intake_takes_them(
    stack: LocalStack, ingest_url: str
) -> None:
    """``?wait=true`` is taken by ingest itself; a queued batch by the intake worker."""
    service = f"svc-{uuid.uuid4().hex[:6]}"
    assert post_error(ingest_url, service, wait=True).status_code == 202
    assert post_error(ingest_url, service, wait=True).status_code == 202  # the same group
    ingest = httpx.get(f"{ingest_url}/metrics", timeout=5).text
    assert value(ingest, "tracehound_events_total", service=service) == 2
    assert value(ingest, "tracehound_groups_new_total", service=service) == 1
    queued = f"svc-{uuid.uuid4().hex[:6]}"
    assert post_error(ingest_url, queued, wait=False).status_code == 202
    wait_until(
        lambda: value(scrape(stack, "cpu"), "tracehound_events_total", service=queued) == 1,
        30,
        "the intake worker counted the queued batch",
    )
    assert value(scrape(stack, "cpu"), "tracehound_groups_new_total", service=queued) == 1


def test_ingest_counts_its_refusals_and_serves_metrics_without_the_token(
    tmp_path: Path,
) -> None:
    """No intake worker: past the backlog bound ingest refuses (backlog), with Redis gone it
    refuses (redis); both counted. /metrics needs no token and carries no event content, and
    sender-chosen service names are reduced and capped."""
    redis_proc, redis_url = start_redis(tmp_path)
    env = {
        "TRACEHOUND_REDIS_URL": redis_url,
        "TRACEHOUND_INGEST_TOKEN": TOKEN,
        "TRACEHOUND_INGEST_MAX_BACKLOG": "1",
        "TRACEHOUND_METRICS_MAX_SERVICES": "2",
    }
    proc, url = start_ingest(tmp_path, env)
    try:

        def metrics() -> str:
            reply = httpx.get(f"{url}/metrics", timeout=5)  # no Authorization header
            assert reply.status_code == 200
            return reply.text

        assert value(metrics(), "tracehound_ingest_refused_total", reason="backlog") == 0
        secret = "card 4111-1111-1111-1111 in message"
        for i, service in enumerate(["a", "B", "c", 'd"}\n', "e"]):
            record = {"service": service, "message": f"{secret} {i}", "stack": own_cause(TRACE)}
            r = httpx.post(f"{url}/v1/events?wait=true", json=record, headers=AUTH, timeout=30)
            assert r.status_code == 202, r.text
        text = metrics()
        services = set(re.findall(r'tracehound_events_total\{service="([^"]*)"\}', text))
        assert services == {"a", "b", "other"}
        assert value(text, "tracehound_events_total", service="other") == 3
        assert "4111" not in text and "card" not in text

        assert post_error(url, "a", wait=False).status_code == 202
        assert post_error(url, "a", wait=False).status_code == 503
        text = metrics()
        assert value(text, "tracehound_ingest_refused_total", reason="backlog") == 1
        assert total(text, "tracehound_ingest_requests_total", route="events", code="503") == 1
        redis_proc.stop()
        assert post_error(url, "a", wait=True).status_code == 503  # taken at once: Redis
        assert value(metrics(), "tracehound_ingest_refused_total", reason="redis") == 1
    finally:
        proc.stop()
        redis_proc.stop()
