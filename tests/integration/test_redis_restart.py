"""Redis restarted under running workers: no worker dies, nothing queued is lost (append-only
Redis, as compose runs it), and a keyword index Redis lost is said and rebuilt."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from shared.core.persistence import NO_PERSISTENCE
from shared.core.pipeline import enqueue_error, sender_app
from shared.core.settings import Settings
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from shared.index.reindex import index_repository
from shared.intake.events import parse_event
from shared.stack.children import wait_until
from shared.stack.localstack import LocalStack, simulator_env, start_ingest, start_redis
from tests.conftest import DATA, INCIDENTS_OFF, SAMPLE_SERVICE, SLACK_CHANNEL

pytestmark = pytest.mark.integration

TRACE = (DATA / "sample-error.txt").read_text()


@pytest.fixture(scope="module")
def aof_stack(
    tmp_path_factory: pytest.TempPathFactory,
    ollama_sim: OllamaSimulator,
    slack_sim: SlackSimulator,
) -> Iterator[LocalStack]:
    env = simulator_env(ollama_sim.url, slack_sim.url, channel=SLACK_CHANNEL) | {
        "TRACEHOUND_REDELIVERY_AFTER": "15",
        "TRACEHOUND_STAGE_MAX_RETRIES": "2",
        "TRACEHOUND_RETRY_BACKOFF_MAX": "2",
        **INCIDENTS_OFF,  # ten services, one trace: ten analyses, not one incident
    }
    s = LocalStack(tmp_path_factory.mktemp("aof"), env, appendonly=True)
    try:
        s.start_services()
        s.start_workers()
        yield s
    finally:
        s.stop()


def posts_for(slack_sim: SlackSimulator, service: str) -> list[dict[str, Any]]:
    return [m for m in slack_sim.messages if not m.get("thread_ts") and service in json.dumps(m)]


def test_a_redis_restart_mid_stream_kills_no_worker_and_loses_nothing(
    aof_stack: LocalStack, slack_sim: SlackSimulator
) -> None:
    settings = Settings(redis_url=aof_stack.env["TRACEHOUND_REDIS_URL"])
    app = sender_app(settings)
    index_repository(app, SAMPLE_SERVICE, "sample", max_bytes=1_000_000, timeout=120)
    services = [f"svc-{uuid.uuid4().hex[:6]}" for _ in range(10)]
    for service in services:
        enqueue_error(app, parse_event(TRACE, service=service, repo="sample"))
    wait_until(lambda: any(posts_for(slack_sim, s) for s in services), 60, "a first message")
    redis_proc = next(p for p in aof_stack.procs if p.name.startswith("redis"))
    port = int(aof_stack.env["TRACEHOUND_REDIS_URL"].rsplit(":", 1)[1].split("/")[0])
    redis_proc.stop()
    time.sleep(3)
    restarted, _ = start_redis(aof_stack.workdir, port=port, appendonly=True)
    aof_stack.procs.append(restarted)
    wait_until(lambda: all(posts_for(slack_sim, s) for s in services), 180, "every error's message")
    time.sleep(3)
    assert [len(posts_for(slack_sim, s)) for s in services] == [1] * 10
    workers = [p for p in aof_stack.procs if p.name.startswith("worker-")]
    assert workers and all(p.alive() for p in workers), [p.log_tail(20) for p in workers]
    app.close()


def test_readyz_warns_when_redis_keeps_nothing_on_disk(
    stack: LocalStack, aof_stack: LocalStack
) -> None:
    for env, warned in ((stack.env, True), (aof_stack.env, False)):
        proc, url = start_ingest(aof_stack.workdir, env)
        try:
            body = httpx.get(f"{url}/readyz", timeout=10).json()
        finally:
            proc.stop()
        assert body["status"] == "ready"
        assert (NO_PERSISTENCE in body["warnings"]) is warned


def test_a_lost_keyword_index_is_said_and_rebuilt_without_embedding_again(
    stack: LocalStack, sender: Any, redis_client: redis.Redis, ollama_sim: OllamaSimulator
) -> None:
    repo = f"lost-{uuid.uuid4().hex[:6]}"
    index_repository(sender, SAMPLE_SERVICE, repo, max_bytes=1_000_000, timeout=120)
    for key in redis_client.scan_iter(match=f"th:corpus:{repo}:*"):
        redis_client.delete(key)  # what a restart without persistence does
    lost = enqueue_error(sender, parse_event(TRACE, service="shop-api", repo=repo))
    said = lost.get(timeout=120)
    notes = said["notes"]
    assert any("no keyword index" in n and "tracehound index" in n for n in notes), notes
    # Chroma keeps no chunk texts (the corpus did): until the rebuild there is no code to cite.
    assert not said["top_files"], said["top_files"]

    embeds_before = len(ollama_sim.requests_to("/api/embed"))
    report = index_repository(sender, SAMPLE_SERVICE, repo, max_bytes=1_000_000, timeout=120)
    assert report.embedded == 0  # the vectors were still in Chroma
    assert len(ollama_sim.requests_to("/api/embed")) == embeds_before
    again = enqueue_error(sender, parse_event(TRACE, service="shop-api", repo=repo)).get(
        timeout=120
    )
    assert not any("keyword" in n for n in again["notes"])
    assert any(f.startswith("shopapp/services/pricing.py") for f in again["top_files"])
