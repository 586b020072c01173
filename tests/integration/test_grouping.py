"""Error groups through HTTP ingest: a storm is one analysis and one message; repeats count."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from shared.stack.children import Proc, wait_until
from shared.stack.localstack import LocalStack, start_ingest
from tests.conftest import DATA, own_cause

pytestmark = pytest.mark.integration

TOKEN = "grouping-secret"
TRACE = (DATA / "sample-error.txt").read_text()


@pytest.fixture
def ingest(stack: LocalStack) -> Iterator[Callable[..., str]]:
    """Start ``tracehound ingest`` with extra settings; returns its URL."""
    procs: list[Proc] = []

    def start(**env: str) -> str:
        proc, url = start_ingest(
            stack.workdir, {**stack.env, "TRACEHOUND_INGEST_TOKEN": TOKEN, **env}
        )
        procs.append(proc)
        return url

    yield start
    for p in procs:
        p.stop()


def post(url: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    body = "\n".join(json.dumps(r) for r in records)
    r = httpx.post(
        f"{url}/v1/events?wait=true",
        content=body,
        timeout=120,
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert r.status_code == 202, r.text
    return dict(r.json())


def top_level(slack_sim: SlackSimulator, service: str) -> list[dict[str, Any]]:
    """The service's own messages in the channel: headed with its name. (Another service's
    message may name it too: "Seen before: looks like <this service>: …", incident memory.)"""
    return [
        m
        for m in slack_sim.messages
        if not m.get("thread_ts")
        and service in json.dumps(m.get("blocks"))
        and _header(m).startswith(f"{service}:")
    ]


def _header(message: dict[str, Any]) -> str:
    blocks = message.get("blocks") or []
    head = blocks[0] if blocks and blocks[0].get("type") == "header" else {}
    return str(head.get("text", {}).get("text", ""))


def replies(slack_sim: SlackSimulator, ts: str) -> list[dict[str, Any]]:
    return [m for m in slack_sim.messages if m.get("thread_ts") == ts]


def storm_event(service: str, i: int) -> dict[str, Any]:
    # Different request ids and timings in the message: the same error all the same.
    return {
        "service": service,
        "repo": "sample",
        "level": "ERROR",
        "message": f"ZeroDivisionError: division by zero (request {i}, took {i % 97} ms)",
        "stack": TRACE,
    }


def test_a_storm_of_10000_identical_events_is_one_analysis_and_one_message(
    ingest: Callable[..., str],
    slack_sim: SlackSimulator,
    ollama_sim: OllamaSimulator,
) -> None:
    url = ingest()
    service = f"storm-{uuid.uuid4().hex[:6]}"
    ollama_sim.clear_log()
    new = 0
    for start in range(0, 10_000, 1000):
        out = post(url, [storm_event(service, i) for i in range(start, start + 1000)])
        new += sum(g["new"] for g in out["groups"])
    assert new == 1

    def counted() -> bool:
        msgs = top_level(slack_sim, service)
        return len(msgs) == 1 and "*10,000* times" in json.dumps(msgs[0]["blocks"])

    wait_until(counted, 60, "the message's count reaching 10,000", interval=0.5)
    chats = [r for r in ollama_sim.requests_to("/api/chat") if service in json.dumps(r["body"])]
    assert len(chats) == 1
    [message] = top_level(slack_sim, service)
    wait_until(
        lambda: any("Stack trace" in m["text"] for m in replies(slack_sim, message["ts"])),
        30,
        "the trace in the thread",
    )
    thread = replies(slack_sim, message["ts"])
    # At most one "still happening" reply per interval (1 s in the tests), not one per event.
    assert len(thread) < 30


def test_after_the_window_a_recurrence_replies_in_the_thread_reusing_the_analysis(
    ingest: Callable[..., str],
    slack_sim: SlackSimulator,
    ollama_sim: OllamaSimulator,
) -> None:
    url = ingest(TRACEHOUND_GROUP_WINDOW="2")
    service = f"recur-{uuid.uuid4().hex[:6]}"
    ollama_sim.clear_log()
    assert post(url, [storm_event(service, 1)])["groups"][0]["new"]
    wait_until(lambda: len(top_level(slack_sim, service)) == 1, 60, "first message")
    time.sleep(2.2)  # the 2 s window closes

    assert post(url, [storm_event(service, 2)])["groups"][0]["new"]

    [first] = top_level(slack_sim, service)
    wait_until(
        lambda: any("reused" in json.dumps(m["blocks"]) for m in replies(slack_sim, first["ts"])),
        60,
        "recurrence reply",
    )
    chats = [r for r in ollama_sim.requests_to("/api/chat") if service in json.dumps(r["body"])]
    assert len(chats) == 1  # same group, model, prompt and code: the analysis was reused
    assert len(top_level(slack_sim, service)) == 1  # thread-only mode kept the channel quiet


def test_a_planted_secret_never_reaches_the_models_or_slack(
    ingest: Callable[..., str],
    slack_sim: SlackSimulator,
    ollama_sim: OllamaSimulator,
    rerank_sim: OllamaSimulator,
) -> None:
    url = ingest()
    service = f"secret-{uuid.uuid4().hex[:6]}"
    secrets = ["AKIAIOSFODNN7EXAMPLE", "hunter2hunter2", "oncall@example.com"]
    ollama_sim.clear_log()
    event = storm_event(service, 0) | {
        "message": "ConnectionError: postgres://app:hunter2hunter2@db:5432/shop refused "
        "for oncall@example.com <!channel> key=AKIAIOSFODNN7EXAMPLE",
    }
    post(url, [event])
    wait_until(lambda: len(top_level(slack_sim, service)) == 1, 60, "the message")

    seen_by_models = json.dumps([r["body"] for r in ollama_sim.requests + rerank_sim.requests])
    seen_by_slack = json.dumps([m for m in slack_sim.messages if service in json.dumps(m)])
    for secret in secrets:
        assert secret not in seen_by_models
        assert secret not in seen_by_slack
    assert "[REDACTED" in seen_by_slack
    assert "<!channel>" not in seen_by_slack  # escaped: no mention from a log line


def test_six_groups_at_once_are_paced_on_the_channel_and_none_is_dropped(
    ingest: Callable[..., str],
    slack_sim: SlackSimulator,
) -> None:
    url = ingest()
    services = [f"pace-{i}-{uuid.uuid4().hex[:6]}" for i in range(6)]
    # Six root causes: one would be one incident, one message.
    post(url, [storm_event(s, 0) | {"stack": own_cause(TRACE)} for s in services])
    wait_until(lambda: all(top_level(slack_sim, s) for s in services), 90, "all six")
    times = sorted(m["t"] for s in services for m in top_level(slack_sim, s))
    assert len(times) == 6  # waiting for the channel's slot retried more than 3 times
    # Every post to the channel, the traces' thread replies included, keeps its distance.
    tops = {m["ts"] for s in services for m in top_level(slack_sim, s)}
    wait_until(
        lambda: sum(m.get("thread_ts") in tops for m in slack_sim.messages) >= 6,
        60,
        "six trace replies",
    )
    # These six messages and their replies: the Slack simulator is shared with other files'
    # stacks (other Redis servers, other pacing), whose late posts are not this one's to pace.
    # The slot is 1 s apart in Redis; on a loaded machine a post may reach Slack a few hundred
    # ms after taking it, while without pacing the posts arrive milliseconds apart.
    ours = [m["t"] for m in slack_sim.messages if m["ts"] in tops or m.get("thread_ts") in tops]
    assert len(ours) >= 12
    assert all(b - a >= 0.5 for a, b in itertools.pairwise(sorted(ours)))


def test_group_counting_is_atomic_under_concurrency_and_windows_roll(
    redis_client: Any,
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from shared.groups.store import GroupStore

    # A window far longer than the 800 counts take on a loaded machine: with 1 s, CI once saw
    # the window roll halfway and a second "new" that was the test's timing, not a race.
    store = GroupStore(redis_client, window_s=600.0)
    fp = f"v1:test-{uuid.uuid4().hex}"
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: store.record(fp, "svc", f"e{i}"), range(800)))
    assert sum(r.new for r in results) == 1
    starter = next(i for i, r in enumerate(results) if r.new)
    store.mark_started(fp, results[starter].window_start)
    assert sorted(r.count for r in results) == list(range(1, 801))
    # Windows roll: a store whose window has passed (the script compares with the window it
    # is given) opens the next one.
    short = GroupStore(redis_client, window_s=0.5)
    time.sleep(0.6)
    later = short.record(fp, "svc", "later")
    assert later.new and later.count == 1 and later.total == 801
    assert later.first_seen == results[0].first_seen < later.window_start


def test_a_producer_dying_between_counting_and_enqueueing_loses_nothing(
    redis_client: Any,
) -> None:
    from shared.groups.store import GroupStore

    store = GroupStore(redis_client, window_s=60.0)
    fp = f"v1:test-{uuid.uuid4().hex}"
    a, b = f"event-a-{fp}", f"event-b-{fp}"  # event ids are counted once, store-wide
    first = store.record(fp, "svc", a)
    assert first.new  # ... and the producer is killed before it enqueues the chain
    assert not store.record(fp, "svc", b).new  # a different event only counts
    replay = store.record(fp, "svc", a)  # the restarted tailer re-reads event-a
    assert replay.new  # so it starts the chain after all
    store.mark_started(fp, replay.window_start)
    assert not store.record(fp, "svc", a).new  # once started, repeats only count


def test_the_same_event_id_counts_once(redis_client: Any) -> None:
    from shared.groups.store import GroupStore

    store = GroupStore(redis_client, window_s=60.0)
    fp = f"v1:test-{uuid.uuid4().hex}"
    a, b = f"event-a-{fp}", f"event-b-{fp}"  # event ids are counted once, store-wide
    first = store.record(fp, "svc", a)
    store.mark_started(fp, first.window_start)
    store.record(fp, "svc", b)
    again = store.record(fp, "svc", a)  # a replay: a restarted tailer, a retried batch
    assert again.duplicate and not again.new
    assert (again.count, again.total) == (2, 2)
    assert store.state(fp).total == 2  # type: ignore[union-attr]


def test_a_group_window_enqueued_twice_is_analysed_and_posted_once(
    sender: Any, redis_client: Any, ollama_sim: OllamaSimulator, slack_sim: SlackSimulator
) -> None:
    """A producer that died after enqueueing a chain but before recording it replays the event,
    and intake enqueues the chain again: one chain analyses, the other stops at its first
    stage. Which one is a race (the embed worker runs two tasks at once, and either may claim
    the window first), so neither is assumed."""
    from shared.core import queues
    from shared.core.domain import GroupRef
    from shared.core.pipeline import enqueue_error
    from shared.groups.store import GroupStore
    from shared.intake.events import parse_event

    service = f"svc-{uuid.uuid4().hex[:8]}"
    event = parse_event(TRACE, service=service, repo="sample")
    occurrence = GroupStore(redis_client, window_s=60.0).record(f"v1:{service}", service, event.id)
    group = GroupRef(fingerprint=f"v1:{service}", window_start=occurrence.window_start)
    chains = [enqueue_error(sender, event, group=group) for _ in range(2)]
    wait_until(lambda: any(c.ready() for c in chains), 90, "one chain's result")
    next(c for c in chains if c.ready()).get(timeout=5)  # it succeeded
    wait_until(
        lambda: all(queues.depth(redis_client, q) == 0 for q in queues.ALL_QUEUES),
        30,
        "the queues to drain",
    )
    time.sleep(2)  # a second analysis would have reached its last stage by now
    # The other chain stopped at its first stage: nothing ran, no result.
    assert sorted(c.state for c in chains) == ["PENDING", "SUCCESS"]
    chats = [r for r in ollama_sim.requests_to("/api/chat") if service in json.dumps(r["body"])]
    assert len(chats) == 1
    assert len(top_level(slack_sim, service)) == 1
