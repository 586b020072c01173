"""Deploys in the message: announced by ``tracehound deploy`` from a real checkout through a
real ingest, or seen as a release in events; a new group's Slack message names the deploy it
came after and whether its suspect commit came with it."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from shared.core.domain import ErrorEvent
from shared.core.pipeline import enqueue_error
from shared.core.settings import Settings
from shared.devtools.sample_history import STEPS, SampleRepo
from shared.devtools.simulators.slack import SlackSimulator
from shared.groups.deploys import DeployStore
from shared.groups.submit import intake_for
from shared.intake.events import parse_event
from shared.stack.localstack import LocalStack, start_ingest
from tests.conftest import DATA, indexed_history
from tests.integration.test_cli import run_cli

pytestmark = pytest.mark.integration

TOKEN = "deploy-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TRACE = (DATA / "sample-error.txt").read_text()
REPO = "sample-deploys"


@pytest.fixture(scope="module")
def ingest_url(stack: LocalStack) -> Iterator[str]:
    proc, url = start_ingest(stack.workdir, {**stack.env, "TRACEHOUND_INGEST_TOKEN": TOKEN})
    try:
        yield url
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def history(
    stack: LocalStack, sender: Any, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> SampleRepo:
    """The sample service as a git history (the bug planted by one commit), indexed."""
    return indexed_history(sender, settings, tmp_path_factory.mktemp("deploys") / "sample", REPO)


def announce(stack: LocalStack, url: str, *args: str) -> str:
    done = run_cli(
        ["deploy", *args],
        {**stack.env, "TRACEHOUND_INGEST_URL": url, "TRACEHOUND_INGEST_TOKEN": TOKEN},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def ago(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds))


def error(service: str, **attributes: str) -> ErrorEvent:
    event = parse_event(TRACE, service=service, repo=REPO)
    return event.model_copy(update={"attributes": {**event.attributes, **attributes}})


def deploy_line(slack_sim: SlackSimulator, event_id: str, timeout: float = 90) -> str:
    """The message's deploy section (or "" when it has none)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in slack_sim.messages:
            blocks = m.get("blocks") or []
            if event_id[:12] in json.dumps(blocks):
                sections = [b for b in blocks if b["type"] == "section"]
                texts = [b.get("text", {}).get("text", "") for b in sections]
                return next((t for t in texts if t.startswith("*Deploy:*")), "")
        time.sleep(0.2)
    raise AssertionError(f"no message for {event_id}")


def test_a_deploy_that_brought_the_suspect_commit_is_named_with_its_range(
    stack: LocalStack,
    ingest_url: str,
    history: SampleRepo,
    sender: Any,
    slack_sim: SlackSimulator,
) -> None:
    service = f"shop-{uuid.uuid4().hex[:6]}"
    first = history.shas[STEPS[0].subject]
    said = announce(stack, ingest_url, "--service", service, "--version", "1.4.1",
                    "--env", "production", "--range", f"{first[:10]}..1.4.1",
                    "--repo-dir", str(history.path))  # fmt: skip
    assert "3 commits: recorded" in said
    again = announce(stack, ingest_url, "--service", service, "--version", "1.4.1",
                     "--env", "production", "--range", f"{first}..1.4.1",
                     "--repo-dir", str(history.path))  # fmt: skip
    assert "already recorded" in again  # a retried pipeline step adds nothing

    result = enqueue_error(sender, error(service, environment="production")).get(timeout=90)

    line = deploy_line(slack_sim, result["event_id"])
    head = history.shas[STEPS[-1].subject]
    assert (
        f"first seen under a minute after deploy `1.4.1` (`{first[:7]}..{head[:7]}`) to "
        f"`production`; suspect commit `{history.bug_commit[:7]}` came with it" in line
    ), line


def test_a_later_deploy_without_the_suspect_commit_says_it_is_older(
    stack: LocalStack,
    ingest_url: str,
    history: SampleRepo,
    sender: Any,
    slack_sim: SlackSimulator,
) -> None:
    service = f"shop-{uuid.uuid4().hex[:6]}"
    after_bug = history.shas[STEPS[2].subject]
    announce(stack, ingest_url, "--service", service, "--version", "1.4.0",
             "--range", f"{history.shas[STEPS[0].subject]}..{after_bug}",
             "--repo-dir", str(history.path), "--time", ago(7200))  # fmt: skip
    announce(stack, ingest_url, "--service", service, "--version", "1.4.1",
             "--range", f"{after_bug}..1.4.1", "--repo-dir", str(history.path),
             "--time", ago(1500))  # fmt: skip

    result = enqueue_error(sender, error(service)).get(timeout=90)

    line = deploy_line(slack_sim, result["event_id"])
    assert "first seen 25 min after deploy `1.4.1`" in line, line
    older = line.partition("the suspect commits (")[2].partition(") are older than it")[0]
    assert f"`{history.bug_commit[:7]}`" in older.split(", "), line
    assert "came with it" not in line


def test_an_error_from_another_release_or_service_names_no_deploy(
    stack: LocalStack,
    ingest_url: str,
    history: SampleRepo,
    sender: Any,
    slack_sim: SlackSimulator,
) -> None:
    service = f"shop-{uuid.uuid4().hex[:6]}"
    announce(stack, ingest_url, "--service", service, "--version", "2.0.0")

    other_release = enqueue_error(sender, error(service, release="1.9.9")).get(timeout=90)
    other_service = enqueue_error(sender, error(f"{service}-x")).get(timeout=90)

    assert deploy_line(slack_sim, other_release["event_id"]) == ""
    assert deploy_line(slack_sim, other_service["event_id"]) == ""


def test_a_release_seen_in_events_counts_as_a_deploy_and_status_lists_it(
    stack: LocalStack,
    settings: Settings,
    history: SampleRepo,
    sender: Any,
    slack_sim: SlackSimulator,
) -> None:
    service = f"shop-{uuid.uuid4().hex[:6]}"
    intake = intake_for(settings, sender)

    [submitted] = intake.submit_many([error(service, release=f"{service}@3.1.0")])

    assert submitted.new and submitted.result is not None
    line = deploy_line(slack_sim, submitted.event_id)
    assert (
        f"first seen under a minute after release `{service}@3.1.0` first appeared in events "
        "(no deploy was announced)" in line
    ), line
    status = run_cli(["status"], {**stack.env, "COLUMNS": "200"}, timeout=60)
    assert status.returncode == 0, status.stderr
    assert service in status.stdout and "release seen" in status.stdout


def test_the_deploys_endpoint_answers_as_a_pipeline_expects(
    ingest_url: str, redis_client: redis.Redis
) -> None:
    service = f"shop-{uuid.uuid4().hex[:6]}"
    body = {"service": service, "version": "5.0", "range": "a1b2c3d..d4e5f6a",
            "commits": ["d4e5f6a"], "time": 1796000000}  # fmt: skip

    first = httpx.post(f"{ingest_url}/v1/deploys", json=body, headers=AUTH, timeout=10)
    repeat = httpx.post(f"{ingest_url}/v1/deploys", json=body, headers=AUTH, timeout=10)

    assert first.status_code == 201 and first.json()["new"] is True, first.text
    assert repeat.status_code == 200 and repeat.json() == {**first.json(), "new": False}
    [stored] = DeployStore(redis_client).of_service(service, since=0, until=2e9)
    assert (stored.commit_from, stored.commit_to, stored.commits) == (
        "a1b2c3d",
        "d4e5f6a",
        ("d4e5f6a",),
    )
    no_token = httpx.post(f"{ingest_url}/v1/deploys", json=body, timeout=10)
    assert no_token.status_code == 401
    typo = httpx.post(
        f"{ingest_url}/v1/deploys", json={**body, "verison": "5"}, headers=AUTH, timeout=10
    )
    assert typo.status_code == 400 and "unknown field(s): verison" in typo.json()["error"]
    huge = httpx.post(
        f"{ingest_url}/v1/deploys", content=b"{" + b" " * 300_000 + b"}", headers=AUTH, timeout=10
    )
    assert huge.status_code == 413


def test_a_range_git_cannot_read_fails_the_pipeline_step_with_the_reason(
    stack: LocalStack, ingest_url: str, history: SampleRepo
) -> None:
    done = run_cli(
        ["deploy", "--service", "s", "--version", "1", "--range", "nope..HEAD",
         "--repo-dir", str(history.path)],
        {**stack.env, "TRACEHOUND_INGEST_URL": ingest_url, "TRACEHOUND_INGEST_TOKEN": TOKEN},
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "nope..HEAD" in done.stderr and "rev-parse" in done.stderr
    refused = run_cli(
        ["deploy", "--service", "s", "--version", "1"],
        {**stack.env, "TRACEHOUND_INGEST_URL": ingest_url, "TRACEHOUND_INGEST_TOKEN": "wrong"},
        timeout=60,
    )
    assert refused.returncode == 1 and "HTTP 401" in refused.stderr
