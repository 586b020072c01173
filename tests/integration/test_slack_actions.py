"""Buttons on the message: pressed over Socket Mode and through the signed Request URL, applied
by the real notify worker (real Redis, Celery, Chroma; Slack and Ollama simulated)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from producers.slack_listen import Listener
from shared.core import keys
from shared.core.settings import Settings
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from shared.devtools.simulators.slack_socket import block_actions, signed_request
from shared.groups.submit import Intake, intake_for
from shared.index.reindex import index_repository
from shared.intake.events import parse_event
from shared.notify import actions
from shared.stack.children import wait_until
from shared.stack.localstack import LocalStack, start_ingest
from tests.conftest import (
    DATA,
    SAMPLE_SERVICE,
    SLACK_CHANNEL,
    SLACK_SIGNING_SECRET,
    own_cause,
    slack_listening,
)

pytestmark = pytest.mark.integration

REPO = "sample"
BUGGY = "shopapp/services/pricing.py"
TRACE = (DATA / "sample-error.txt").read_text()
USER = "U0ONCALL"


@pytest.fixture(scope="module")
def indexed(stack: LocalStack, sender: Any, settings: Settings) -> None:
    report = index_repository(
        sender, SAMPLE_SERVICE, REPO, max_bytes=settings.max_file_bytes, timeout=120
    )
    assert report.files > 10 and not report.failed


@pytest.fixture(scope="module")
def intake(settings: Settings, sender: Any) -> Intake:
    return intake_for(settings, sender)


@pytest.fixture(scope="module")
def listener(
    indexed: None, settings: Settings, sender: Any, slack_sim: SlackSimulator
) -> Iterator[Listener]:
    with slack_listening(settings, sender, slack_sim) as listening:
        yield listening


@pytest.fixture(scope="module")
def ingest_url(stack: LocalStack, indexed: None) -> Iterator[str]:
    proc, url = start_ingest(stack.workdir, stack.env)
    try:
        yield url
    finally:
        proc.stop()


def message(slack_sim: SlackSimulator, ts: str) -> dict[str, Any]:
    return next(m for m in slack_sim.messages if m["ts"] == ts and not m.get("thread_ts"))


@pytest.fixture
def posted(intake: Intake, slack_sim: SlackSimulator) -> Callable[..., dict[str, Any]]:
    """An error of a service of its own (its own group and incident) through intake to a posted
    message."""

    def post(service: str | None = None, text: str | None = None) -> dict[str, Any]:
        text = own_cause(TRACE) if text is None else text
        event = parse_event(text, service=service or f"shop-{uuid.uuid4().hex[:8]}", repo=REPO)
        submitted = intake.submit(event)
        assert submitted.new and submitted.result is not None
        result = dict(submitted.result.get(timeout=120))
        assert result["destination"] == "slack", result
        return {**result, "fingerprint": submitted.fingerprint, "service": event.service}

    return post


def has_block(slack_sim: SlackSimulator, ts: str, block_id: str) -> bool:
    return any(b.get("block_id") == block_id for b in message(slack_sim, ts)["blocks"])


def press_socket(slack_sim: SlackSimulator, payload: dict[str, Any]) -> None:
    envelope = slack_sim.socket_mode.deliver(payload)
    ack = slack_sim.socket_mode.wait_ack(envelope, timeout=3.0)  # Slack's limit
    assert ack == {"envelope_id": envelope}


def activity_of(slack_sim: SlackSimulator, ts: str) -> str:
    blocks = message(slack_sim, ts).get("blocks") or []
    return json.dumps([b for b in blocks if b.get("block_id") == actions.ACTIVITY_BLOCK])


def wait_activity(slack_sim: SlackSimulator, ts: str, needle: str) -> str:
    wait_until(lambda: needle in activity_of(slack_sim, ts), 60, f"activity {needle!r}")
    return activity_of(slack_sim, ts)


def feedback_of(r: redis.Redis, fp: str) -> dict[str, Any] | None:
    raw = r.hget(keys.FEEDBACK, fp)
    return json.loads(raw) if raw else None


def test_messages_carry_the_buttons_with_stable_ids(
    listener: Listener, posted: Callable[..., dict[str, Any]], slack_sim: SlackSimulator
) -> None:
    result = posted()
    blocks = message(slack_sim, result["ts"])["blocks"]
    [buttons] = [b for b in blocks if b.get("block_id") == "th-actions"]
    assert [e["action_id"] for e in buttons["elements"]] == [
        "th_right_file",
        "th_wrong_file",
        "th_mute",
        "th_resolve",
        "th_analyze_again",
    ]
    assert {e["value"] for e in buttons["elements"]} == {result["fingerprint"]}


def test_right_file_over_socket_mode_stores_a_case_and_shows_who_as_a_mention(
    listener: Listener,
    posted: Callable[..., dict[str, Any]],
    slack_sim: SlackSimulator,
    redis_client: redis.Redis,
) -> None:
    result = posted()
    payload = block_actions(message(slack_sim, result["ts"]), actions.RIGHT_FILE, user=USER)
    payload["user"] |= {"name": "<!channel>", "username": "<!channel>"}  # never shown
    press_socket(slack_sim, payload)

    shown = wait_activity(slack_sim, result["ts"], f"<@{USER}> confirmed")
    assert BUGGY in shown and "<!channel>" not in json.dumps(message(slack_sim, result["ts"]))
    case = feedback_of(redis_client, result["fingerprint"])
    assert case is not None
    assert case["gold_files"] == [BUGGY] and case["answer"] == "right"
    assert case["pypi_name"] == REPO and case["service"] == result["service"]
    assert "ZeroDivisionError" in case["query"] and case["by"] == USER


def test_wrong_file_offers_the_candidates_then_a_pick_or_a_typed_path_is_the_gold(
    listener: Listener,
    posted: Callable[..., dict[str, Any]],
    slack_sim: SlackSimulator,
    redis_client: redis.Redis,
) -> None:
    result = posted()
    ts, fp = result["ts"], result["fingerprint"]
    press_socket(slack_sim, block_actions(message(slack_sim, ts), actions.WRONG_FILE, user=USER))
    wait_until(
        lambda: has_block(slack_sim, ts, "th-pick"),
        60,
        "the file picker",
    )
    [picker] = [b for b in message(slack_sim, ts)["blocks"] if b.get("block_id") == "th-pick"]
    options = [o["text"]["text"] for o in picker["elements"][0]["options"]]
    assert len(options) >= 2

    press_socket(
        slack_sim, block_actions(message(slack_sim, ts), actions.PICK_FILE, user=USER, option=1)
    )
    wait_until(lambda: (feedback_of(redis_client, fp) or {}).get("answer") == "wrong", 60, "pick")
    assert feedback_of(redis_client, fp)["gold_files"] == [options[1]]  # type: ignore[index]
    wait_until(
        lambda: not has_block(slack_sim, ts, "th-pick"),
        60,
        "the picker removed",
    )

    # A typed path is text from a user: kept as the label, shown escaped.
    wrong = block_actions(message(slack_sim, ts), actions.WRONG_FILE, user=USER)
    press_socket(slack_sim, wrong)
    wait_until(
        lambda: has_block(slack_sim, ts, "th-pick-path"),
        60,
        "the path input",
    )
    typed = block_actions(
        message(slack_sim, ts), actions.TYPE_PATH, user=USER, typed="./shopapp/<!here>.py"
    )
    press_socket(slack_sim, typed)
    wait_until(
        lambda: (feedback_of(redis_client, fp) or {}).get("gold_files") == ["shopapp/<!here>.py"],
        60,
        "typed path",
    )
    shown = wait_activity(slack_sim, ts, "&lt;!here&gt;")
    assert "<!here>" not in json.dumps(message(slack_sim, ts)["blocks"]) and USER in shown


def test_mute_then_a_recurrence_in_a_new_window_is_counted_not_analysed_nor_posted(
    listener: Listener,
    posted: Callable[..., dict[str, Any]],
    intake: Intake,
    slack_sim: SlackSimulator,
    redis_client: redis.Redis,
    settings: Settings,
) -> None:
    result = posted()
    ts, fp = result["ts"], result["fingerprint"]
    press_socket(slack_sim, block_actions(message(slack_sim, ts), actions.MUTE, user=USER))
    wait_activity(slack_sim, ts, f"Muted by <@{USER}> until")
    assert redis_client.ttl(keys.group_muted(fp)) > 23 * 3600

    # The group window has passed (as 31 minutes later): a recurrence opens a new one.
    window_ms = int(settings.group_window * 1000)
    start = int(redis_client.hget(keys.group(fp), "window_start") or 0)
    redis_client.hset(keys.group(fp), "window_start", start - 2 * window_ms)
    total = int(redis_client.hget(keys.group(fp), "total") or 0)
    tops = len([m for m in slack_sim.messages_in(SLACK_CHANNEL) if not m.get("thread_ts")])

    again = intake.submit(parse_event(TRACE, service=result["service"], repo=REPO))
    assert again.fingerprint == fp
    assert not again.new and again.result is None  # no analysis chain started
    assert int(redis_client.hget(keys.group(fp), "total") or 0) == total + 1
    time.sleep(2)  # two count-update intervals: nothing may reach the channel
    assert len([m for m in slack_sim.messages_in(SLACK_CHANNEL) if not m.get("thread_ts")]) == tops


def test_resolve_then_a_recurrence_posts_regressed_linking_the_first_message(
    listener: Listener,
    posted: Callable[..., dict[str, Any]],
    intake: Intake,
    slack_sim: SlackSimulator,
    redis_client: redis.Redis,
) -> None:
    first = posted()
    ts, fp = first["ts"], first["fingerprint"]
    press_socket(slack_sim, block_actions(message(slack_sim, ts), actions.RESOLVE, user=USER))
    wait_activity(slack_sim, ts, f"Resolved by <@{USER}>")

    again = intake.submit(parse_event(TRACE, service=first["service"], repo=REPO))
    assert again.fingerprint == fp and again.new and again.result is not None
    regression = again.result.get(timeout=120)
    assert regression["ts"] != ts
    posted_again = message(slack_sim, regression["ts"])  # top level, not in the thread
    head = json.dumps(posted_again["blocks"][:3])
    link = f"https://tracehound-sim.slack.com/archives/{SLACK_CHANNEL}/p{ts.replace('.', '')}"
    assert "*Regressed*" in head and f"<@{USER}>" in head and link in head
    assert redis_client.get(keys.group_resolved(fp)) is None  # open again


def test_analyze_again_runs_the_model_afresh_and_rewrites_the_message(
    listener: Listener,
    posted: Callable[..., dict[str, Any]],
    slack_sim: SlackSimulator,
    ollama_sim: OllamaSimulator,
) -> None:
    result = posted()
    ts = result["ts"]
    chats = len(ollama_sim.requests_to("/api/chat"))
    updates = len(message(slack_sim, ts)["history"])
    press_socket(slack_sim, block_actions(message(slack_sim, ts), actions.ANALYZE_AGAIN, user=USER))
    wait_activity(slack_sim, ts, f"<@{USER}> asked for a new analysis")
    # The analysis cache would answer the same code: the model must be asked again.
    wait_until(lambda: len(ollama_sim.requests_to("/api/chat")) > chats, 90, "a new LLM call")
    wait_until(lambda: len(message(slack_sim, ts)["history"]) >= updates + 2, 90, "the rewrite")
    final = message(slack_sim, ts)["blocks"]
    assert any(b.get("block_id") == "th-actions" for b in final)
    assert f"<@{USER}> asked for a new analysis" in json.dumps(final)  # kept by the rewrite

    # Each run is a fresh, uncached LLM call: five more presses within the interval run none.
    chats = len(ollama_sim.requests_to("/api/chat"))
    for _ in range(5):
        press = block_actions(message(slack_sim, ts), actions.ANALYZE_AGAIN, user=USER)
        press_socket(slack_sim, press)
    wait_activity(slack_sim, ts, "one runs at most every 5 min per group")
    time.sleep(3)
    assert len(ollama_sim.requests_to("/api/chat")) == chats


def post_signed(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{url}/slack/actions", content=body, headers=headers, timeout=30)


def test_request_url_takes_signed_presses_and_refuses_bad_or_replayed_ones(
    ingest_url: str,
    posted: Callable[..., dict[str, Any]],
    slack_sim: SlackSimulator,
    redis_client: redis.Redis,
) -> None:
    result = posted()
    ts, fp = result["ts"], result["fingerprint"]
    payload = block_actions(message(slack_sim, ts), actions.RIGHT_FILE, user=USER)

    body, headers = signed_request(payload, "not-the-secret")
    assert post_signed(ingest_url, body, headers).status_code == 401
    old = int(time.time()) - 600  # a captured request sent again ten minutes later
    body, headers = signed_request(payload, SLACK_SIGNING_SECRET, timestamp=old)
    assert post_signed(ingest_url, body, headers).status_code == 401
    tampered, headers = signed_request(payload, SLACK_SIGNING_SECRET)
    assert post_signed(ingest_url, tampered + b"x", headers).status_code == 401
    time.sleep(1)
    assert feedback_of(redis_client, fp) is None  # none of them was applied

    body, headers = signed_request(payload, SLACK_SIGNING_SECRET)
    assert post_signed(ingest_url, body, headers).status_code == 200
    wait_activity(slack_sim, ts, f"<@{USER}> confirmed")
    assert feedback_of(redis_client, fp)["gold_files"] == [BUGGY]  # type: ignore[index]

    wrong = block_actions(message(slack_sim, ts), actions.WRONG_FILE, user=USER)
    body, headers = signed_request(wrong, SLACK_SIGNING_SECRET)
    assert post_signed(ingest_url, body, headers).status_code == 200
    wait_until(
        lambda: has_block(slack_sim, ts, "th-pick"),
        60,
        "the file picker",
    )


def test_a_button_naming_another_group_is_refused(
    ingest_url: str,
    posted: Callable[..., dict[str, Any]],
    slack_sim: SlackSimulator,
    redis_client: redis.Redis,
) -> None:
    """A signed press carries its message; a value naming another group changes nothing."""
    mine, other = posted(), posted()
    payload = block_actions(message(slack_sim, mine["ts"]), actions.MUTE, user=USER)
    payload["actions"][0]["value"] = other["fingerprint"]
    body, headers = signed_request(payload, SLACK_SIGNING_SECRET)
    assert post_signed(ingest_url, body, headers).status_code == 200
    honest = block_actions(message(slack_sim, mine["ts"]), actions.RIGHT_FILE, user=USER)
    body, headers = signed_request(honest, SLACK_SIGNING_SECRET)
    assert post_signed(ingest_url, body, headers).status_code == 200
    wait_activity(slack_sim, mine["ts"], "confirmed")  # the press after it was applied
    assert redis_client.get(keys.group_muted(other["fingerprint"])) is None
    assert redis_client.get(keys.group_muted(mine["fingerprint"])) is None


def test_eval_feedback_prints_recall_per_service_on_the_live_index(
    listener: Listener,
    posted: Callable[..., dict[str, Any]],
    slack_sim: SlackSimulator,
    redis_client: redis.Redis,
    stack: LocalStack,
    tmp_path: Path,
) -> None:
    redis_client.delete(keys.FEEDBACK)
    hit, miss = posted(service="shop-feedback-a"), posted(service="shop-feedback-b")
    press_socket(
        slack_sim, block_actions(message(slack_sim, hit["ts"]), actions.RIGHT_FILE, user=USER)
    )
    press_socket(
        slack_sim, block_actions(message(slack_sim, miss["ts"]), actions.WRONG_FILE, user=USER)
    )
    wait_until(
        lambda: "th-pick-path" in json.dumps(message(slack_sim, miss["ts"])["blocks"]),
        60,
        "the path input",
    )
    typed = block_actions(
        message(slack_sim, miss["ts"]), actions.TYPE_PATH, user=USER, typed="shopapp/absent.py"
    )
    press_socket(slack_sim, typed)
    wait_until(lambda: redis_client.hlen(keys.FEEDBACK) == 2, 60, "two labelled cases")

    export = tmp_path / "feedback.jsonl"
    env = {**os.environ, **stack.env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-m", "producers.cli", "eval", "--feedback", "--export", str(export)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 3}
    assert {"shop-feedback-a", "shop-feedback-b", "all"} <= set(rows)
    assert "1.000" in rows["shop-feedback-a"] and "0.000" in rows["shop-feedback-b"]
    assert "TRACEHOUND_MIN_RELEVANCE=" in out  # the stack reranks: from the team's labels
    # The same cases as a file `tracehound eval --cases` reads.
    from shared.devtools.eval import load_cases

    cases = load_cases(export)
    assert {c.gold for c in cases} == {(BUGGY,), ("shopapp/absent.py",)}
    assert {c.corpus.split("-")[0] for c in cases} == {REPO}
