"""``tracehound ingest``: what Vector and Fluent Bit send, through to a Slack message."""

from __future__ import annotations

import gzip
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from shared.core import keys
from shared.devtools.simulators.slack import SlackSimulator
from shared.stack.localstack import LocalStack, start_ingest, start_redis, start_worker
from tests.conftest import DATA, counted_in_groups, group_keys, pool_children

pytestmark = pytest.mark.integration

TOKEN = "ingest-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TRACE = (DATA / "sample-error.txt").read_text()


@pytest.fixture(scope="module")
def ingest_url(stack: LocalStack) -> Iterator[str]:
    env = {
        **stack.env,
        "TRACEHOUND_INGEST_TOKEN": TOKEN,
        "TRACEHOUND_INGEST_MAX_BODY_BYTES": "200000",
    }
    proc, url = start_ingest(stack.workdir, env, "--service", "shop-api")
    try:
        yield url
    finally:
        proc.stop()


def post(
    url: str, body: bytes | str, headers: dict[str, str] | None = None, *, wait: bool = True
) -> httpx.Response:
    """With ``wait`` the reply says what became of each record (the tests here read it)."""
    data = body.encode() if isinstance(body, str) else body
    return httpx.post(
        f"{url}/v1/events" + ("?wait=true" if wait else ""),
        content=data,
        headers={**AUTH, **(headers or {})},
        timeout=30,
    )


def delivered(slack_sim: SlackSimulator, event_ids: list[str], timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    found: set[str] = set()
    while time.monotonic() < deadline and len(found) < len(event_ids):
        blob = json.dumps([m.get("blocks") for m in slack_sim.messages])
        found = {e for e in event_ids if e[:12] in blob}
        time.sleep(0.2)
    return len(found)


def event(**fields: Any) -> dict[str, Any]:
    return {"service": "shop-api", "repo": "sample", "message": "boom", **fields}


def fresh_service() -> str:
    """Groups are per service: a new name keeps other tests' groups out of this one."""
    return f"svc-{uuid.uuid4().hex[:8]}"


def test_single_event_is_accepted_and_analyzed(ingest_url: str, slack_sim: SlackSimulator) -> None:
    r = post(
        ingest_url,
        json.dumps(
            {
                "message": "ZeroDivisionError: division by zero",
                "stack": TRACE,
                "repo": "sample",
                "service": fresh_service(),
            }
        ),
    )
    assert r.status_code == 202, r.text
    [event_id] = r.json()["accepted"]
    assert r.json()["groups"][0]["new"] is True
    assert delivered(slack_sim, [event_id]) == 1


def test_vector_json_array_and_fluent_bit_ndjson_shapes(
    ingest_url: str, slack_sim: SlackSimulator
) -> None:
    service = fresh_service()
    vector = [
        event(stack_trace=TRACE, service=service),
        event(error={"message": "x", "stack": TRACE}, service=service),
    ]
    fluent = "\n".join(
        json.dumps(
            {
                "date": 1732950000.1,
                "log": "payment failed: card declined",
                "level": "error",
                "repo": "sample",
                "service": service,
            }
        )
        for _ in range(2)
    )
    r1 = post(ingest_url, json.dumps(vector), {"Content-Type": "application/json"})
    r2 = post(ingest_url, fluent, {"Content-Type": "application/x-ndjson"})
    assert r1.status_code == r2.status_code == 202
    assert len(r1.json()["accepted"] + r2.json()["accepted"]) == 4
    # Same trace twice, same message twice: two groups, each analyzed once, counted twice.
    groups = r1.json()["groups"] + r2.json()["groups"]
    assert [g["new"] for g in groups] == [True, False, True, False]
    assert [g["count"] for g in groups] == [1, 2, 1, 2]
    new_ids = [g["event_id"] for g in groups if g["new"]]
    assert delivered(slack_sim, new_ids) == 2


def test_gzip_body_is_accepted(ingest_url: str) -> None:
    r = post(ingest_url, gzip.compress(json.dumps(event()).encode()), {"Content-Encoding": "gzip"})
    assert r.status_code == 202 and len(r.json()["accepted"]) == 1


def test_batch_with_bad_events_accepts_the_good_ones_and_lists_the_rest(
    ingest_url: str,
) -> None:
    body = "\n".join(
        [
            json.dumps(event()),
            "{not json",
            json.dumps({"service": "x"}),
            json.dumps(event(level="info")),
            json.dumps([1]),
        ]
    )
    r = post(ingest_url, body)
    assert r.status_code == 202
    out = r.json()
    assert len(out["accepted"]) == 1
    errors = {item["index"]: item["error"] for item in out["rejected"]}
    assert "malformed JSON on line 2" in errors[1]
    assert "neither 'message' nor a stack" in errors[2]
    assert "JSON object" in errors[4]
    assert out["ignored"] == [{"index": 3, "reason": "level INFO is not an error"}]


def test_only_bad_events_is_a_400_naming_the_problem(ingest_url: str) -> None:
    r = post(ingest_url, json.dumps({"level": "error"}))
    assert r.status_code == 400
    assert "neither 'message' nor a stack" in r.json()["error"]
    r = post(ingest_url, "{oops")
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"]


def test_missing_or_wrong_token_is_401(ingest_url: str) -> None:
    r = httpx.post(f"{ingest_url}/v1/events", content=json.dumps(event()))
    assert r.status_code == 401
    r = httpx.post(
        f"{ingest_url}/v1/events",
        content=json.dumps(event()),
        headers={"Authorization": "Bearer nope"},
    )
    assert r.status_code == 401


def test_oversized_body_is_413(ingest_url: str) -> None:
    big = json.dumps(event(stack="x" * 300_000))
    assert post(ingest_url, big).status_code == 413
    bomb = gzip.compress(b" " * 5_000_000)  # small on the wire, huge decompressed
    assert post(ingest_url, bomb, {"Content-Encoding": "gzip"}).status_code == 413


def test_readyz_reports_redis(ingest_url: str) -> None:
    r = httpx.get(f"{ingest_url}/readyz", timeout=10)
    assert r.status_code == 200 and r.json()["status"] == "ready"


def test_by_default_a_batch_is_queued_answered_at_once_and_taken_by_the_intake_worker(
    ingest_url: str, slack_sim: SlackSimulator
) -> None:
    service = fresh_service()
    ids = [uuid.uuid4().hex, uuid.uuid4().hex]
    records = [
        json.dumps(event(id=ids[0], service=service, stack=TRACE, message="ZeroDivisionError")),
        "{not json",
        # Another function: its own group, its own analysis.
        json.dumps(
            event(id=ids[1], service=service, stack=TRACE.replace("_allocate_discount", "_refund"))
        ),
    ]
    r = post(ingest_url, "\n".join(records), wait=False)
    assert r.status_code == 202, r.text
    reply = r.json()
    assert reply["queued"] == 2 and reply["rejected_count"] == 1
    assert "malformed JSON on line 2" in reply["rejected"][0]["error"]
    assert "accepted" not in reply  # decided later, by the intake worker
    assert delivered(slack_sim, ids) == 2


def test_past_the_backlog_bound_ingest_answers_503_with_retry_after_and_queues_nothing_more(
    tmp_path: Path,
) -> None:
    """No intake worker runs here, so the queue only grows: at the bound, shippers are told to
    retry (Vector and Fluent Bit do on a 503) and the backlog stops growing; once batches are
    taken, the same batch is accepted."""
    redis_proc, redis_url = start_redis(tmp_path)
    env = {
        "TRACEHOUND_REDIS_URL": redis_url,
        "TRACEHOUND_INGEST_TOKEN": TOKEN,
        "TRACEHOUND_INGEST_MAX_BACKLOG": "3",
        "TRACEHOUND_INGEST_MAX_LAG": "0",  # the batch bound alone (the next test: the lag's)
    }
    proc, url = start_ingest(tmp_path, env, "--service", "shop-api")
    client = redis.Redis.from_url(redis_url)
    try:
        batches = [json.dumps(event(id=f"b{i}", stack=TRACE)) for i in range(5)]
        assert [post(url, b, wait=False).status_code for b in batches[:3]] == [202, 202, 202]
        [queue] = [k for k in client.keys("*") if client.type(k) == b"list"]
        refused = post(url, batches[3], wait=False)
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "1"  # the backlog drains within a second
        assert "3 batches behind" in refused.json()["error"]
        assert post(url, batches[4], wait=False).status_code == 503
        # Refused before its JSON is read: a refusal costs the front door next to nothing.
        assert post(url, "{not json", wait=False).status_code == 503
        assert client.llen(queue) == 3  # the backlog did not grow
        client.rpop(queue, 2)  # the intake worker takes two batches
        time.sleep(0.6)  # the spool asks Redis again after half a second
        retried = post(url, batches[3], wait=False)  # the shipper's retry of the refused batch
        assert retried.status_code == 202, retried.text
        assert client.llen(queue) == 2
    finally:
        client.close()
        proc.stop()
        redis_proc.stop()


@contextmanager
def _ingest_without_worker(
    tmp_path: Path, *, max_lag: str, linger: str | None = None
) -> Iterator[tuple[str, redis.Redis]]:
    """``tracehound ingest`` on a private Redis that no intake worker drains (the tests take
    batches themselves, or start one), with TRACEHOUND_INGEST_MAX_LAG ``max_lag`` (and
    TRACEHOUND_INGEST_LINGER ``linger``): its URL and a client."""
    redis_proc, redis_url = start_redis(tmp_path)
    env = {
        "TRACEHOUND_REDIS_URL": redis_url,
        "TRACEHOUND_INGEST_TOKEN": TOKEN,
        "TRACEHOUND_INGEST_MAX_LAG": max_lag,
        **({"TRACEHOUND_INGEST_LINGER": linger} if linger is not None else {}),
    }
    proc, url = start_ingest(tmp_path, env, "--service", "shop-api")
    client = redis.Redis.from_url(redis_url)
    try:
        yield url, client
    finally:
        client.close()
        proc.stop()
        redis_proc.stop()


def _send(http: httpx.Client, record_id: str) -> httpx.Response:
    return http.post("/v1/events", content=json.dumps(event(id=record_id)))


def test_a_batch_waiting_past_the_lag_bound_makes_ingest_answer_503_until_it_is_taken(
    tmp_path: Path,
) -> None:
    """Far below the batch bound, a batch that has waited longer than
    TRACEHOUND_INGEST_MAX_LAG (no intake worker runs here) has shippers told to retry: what is
    accepted is counted within about the bound whatever the machine's pace."""
    with _ingest_without_worker(tmp_path, max_lag="0.5") as (url, client):
        batches = [json.dumps(event(id=f"l{i}", stack=TRACE)) for i in range(3)]
        assert post(url, batches[0], wait=False).status_code == 202
        assert post(url, batches[1], wait=False).status_code == 202  # 0.5 s not yet waited
        time.sleep(0.7)
        refused = post(url, batches[2], wait=False)
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "1"
        assert "s behind (bound 0.5 s)" in refused.json()["error"]
        scraped = httpx.get(f"{url}/metrics").text  # the alert's reason says which bound
        assert 'tracehound_ingest_refused_total{reason="lag"} 1.0' in scraped
        assert 'tracehound_ingest_refused_total{reason="backlog"} 0.0' in scraped
        [queue] = [k for k in client.keys("*") if client.type(k) == b"list"]
        assert client.llen(queue) == 2  # two batches of the bound's 500: the lag refused it
        client.rpop(queue, 2)  # the intake worker takes both
        time.sleep(0.2)  # the spool reads the queue again after a tenth of a second
        retried = post(url, batches[2], wait=False)
        assert retried.status_code == 202, retried.text


def test_a_queue_longer_than_the_workers_pace_clears_in_the_bound_is_refused_while_young(
    tmp_path: Path,
) -> None:
    """The wait of a batch accepted now is the queue over the workers' pace: with a worker
    taking about six batches a second (played here: RPOP and the taken counter, as
    take_batch counts), 16 waiting are over two seconds of work, refused long before the oldest
    has waited the bound's 1.5 s."""
    with _ingest_without_worker(tmp_path, max_lag="1.5") as (url, client):
        with httpx.Client(base_url=url, headers=AUTH) as http:
            first = time.monotonic()
            for i in range(16):
                assert _send(http, f"q{i}").status_code == 202
            [queue] = [k for k in client.keys("*") if client.type(k) == b"list"]
            for i in range(4):  # the worker's pace, seen by ingest on each request
                client.rpop(queue)
                client.incr(keys.INTAKE_TAKEN)
                _send(http, f"p{i}")
                time.sleep(0.15)
            refused = _send(http, "late")
            assert time.monotonic() - first < 1.5  # the oldest waiting has not waited so long
        assert refused.status_code == 503, refused.text
        assert refused.json()["lag_s"] > 1.5


def test_a_burst_after_a_quiet_spell_is_not_refused_for_the_quiet_spells_pace(
    tmp_path: Path,
) -> None:
    """While the worker keeps up, what it takes is what arrives: its pace then says nothing of
    its speed, and a burst of 30 batches after a trickle of five a second is accepted (the
    queue over that pace would be six seconds, past the bound of 1.5)."""
    with (
        _ingest_without_worker(tmp_path, max_lag="1.5") as (url, client),
        httpx.Client(base_url=url, headers=AUTH) as http,
    ):
        for i in range(6):  # a trickle the worker takes at once (played here)
            assert _send(http, f"t{i}").status_code == 202
            [queue] = [k for k in client.keys("*") if client.type(k) == b"list"]
            client.rpop(queue)
            client.incr(keys.INTAKE_TAKEN)
            time.sleep(0.2)
        burst = [_send(http, f"b{i}").status_code for i in range(30)]
        assert burst == [202] * 30
        time.sleep(0.15)
        assert _send(http, "after").status_code == 202


def test_a_burst_after_the_queue_ran_dry_is_held_to_the_workers_last_busy_pace(
    tmp_path: Path,
) -> None:
    """In a storm the queue runs dry while every shipper waits out its Retry-After, and they
    come back together. For two seconds after, no busy pace can be read (the queue was
    empty at a reading): the last one read, about six batches a second here, holds the
    burst to the bound instead of letting the queue grow to the batch bound."""
    with (
        _ingest_without_worker(tmp_path, max_lag="1.5") as (url, client),
        httpx.Client(base_url=url, headers=AUTH) as http,
    ):
        for i in range(16):
            assert _send(http, f"q{i}").status_code == 202
        [queue] = [k for k in client.keys("*") if client.type(k) == b"list"]
        for i in range(4):  # the busy worker's pace, seen by ingest on each request
            client.rpop(queue)
            client.incr(keys.INTAKE_TAKEN)
            _send(http, f"p{i}")
            time.sleep(0.15)
        assert _send(http, "late").status_code == 503  # 16 waiting: past 1.5 s at that pace
        taken = client.rpop(queue, 100) or []  # the worker catches up: the queue runs dry
        client.incrby(keys.INTAKE_TAKEN, len(taken))
        time.sleep(0.15)
        assert _send(http, "dry").status_code == 202  # read empty: nothing waits
        burst = []
        for i in range(30):
            burst.append(_send(http, f"b{i}"))
            time.sleep(0.02)
        accepted = sum(1 for r in burst if r.status_code == 202)
        refused = [r for r in burst if r.status_code == 503]
        assert refused and refused[0].json()["lag_s"] > 1.5
        assert accepted < 20, accepted  # about 1.5 s at six a second, and a reading's worth


def _storm_body(first: int, n: int) -> str:
    """``n`` events of one group (a storm), ids ``first``… (each counts once)."""
    return "\n".join(
        json.dumps(event(id=f"s{i}", stack=TRACE, message=f"division by zero (request {i})"))
        for i in range(first, first + n)
    )


def _queue_in_company(url: str, bodies: list[str]) -> list[int]:
    """Each body POSTed at once by a shipper of its own: the status codes."""

    def send(body: str) -> int:
        with httpx.Client(base_url=url, headers=AUTH, timeout=30) as http:
            return http.post("/v1/events", content=body).status_code

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(send, bodies))


def _redis_url(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"


def test_requests_queued_while_the_workers_are_behind_share_a_message_and_count_once(
    tmp_path: Path,
) -> None:
    """The intake worker's consumer pays three Redis round trips per message, whatever it
    holds: with messages waiting, the batches of shippers sending at once go in one message
    (TRACEHOUND_INGEST_LINGER), each answered 202 once it is in Redis, and a real intake worker
    then counts every event once."""
    with _ingest_without_worker(tmp_path, max_lag="0", linger="1") as (url, client):
        with httpx.Client(base_url=url, headers=AUTH) as http:
            for first in (0, 10):  # queued at once, one message each: none waited before
                sent = time.monotonic()
                assert http.post("/v1/events", content=_storm_body(first, 10)).status_code == 202
                assert time.monotonic() - sent < 0.8  # not held for the 1-s linger
        [queue] = [k for k in client.keys("*") if client.type(k) == b"list"]
        assert client.llen(queue) == 2
        bodies = [_storm_body(100 + 10 * i, 10) for i in range(8)]
        assert _queue_in_company(url, bodies) == [202] * 8
        assert client.llen(queue) - 2 < 4, client.llen(queue)  # eight batches, not 8 messages
        env = {"TRACEHOUND_REDIS_URL": _redis_url(client), "TRACEHOUND_DATA_DIR": str(tmp_path)}
        worker = start_worker("intake", ["intake"], 1, tmp_path, env)
        try:
            deadline = time.monotonic() + 60
            while counted_in_groups(client) < 100 and time.monotonic() < deadline:
                time.sleep(0.1)
            while client.llen(queue) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)  # a second count of any batch would show by now
            assert counted_in_groups(client) == 100
        finally:
            worker.stop()


def test_a_worker_killed_mid_message_counts_each_batch_of_it_once(tmp_path: Path) -> None:
    """kill -9 of the pool child while it takes a message of sixteen batches: the message is
    delivered again, the batches it had taken are found taken, and the storm's count ends
    exact: nothing lost, nothing counted twice."""
    with _ingest_without_worker(tmp_path, max_lag="0", linger="1") as (url, client):
        with httpx.Client(base_url=url, headers=AUTH) as http:
            for first in (0, 1):
                assert http.post("/v1/events", content=_storm_body(first, 1)).status_code == 202
        bodies = [_storm_body(1000 + 400 * i, 400) for i in range(16)]
        assert _queue_in_company(url, bodies) == [202] * 16
        [queue] = [k for k in client.keys("*") if client.type(k) == b"list"]
        assert client.llen(queue) - 2 < 4  # the sixteen in one message, or a few
        want = 2 + 16 * 400
        env = {"TRACEHOUND_REDIS_URL": _redis_url(client), "TRACEHOUND_DATA_DIR": str(tmp_path)}
        worker = start_worker("intake", ["intake"], 1, tmp_path, env)
        try:
            deadline = time.monotonic() + 60
            while not (children := pool_children(worker.popen.pid)):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            [child] = children
            while not (found := group_keys(client)):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            [group] = found  # the storm's one group
            # Between the first batch of the big message and the fifth from its end.
            while not 2 + 400 <= int(client.hget(group, "total") or 0) < want - 2000:
                assert time.monotonic() < deadline, client.hget(group, "total")
                time.sleep(0.001)
            os.kill(child, signal.SIGKILL)
            while int(client.hget(group, "total") or 0) < want:
                assert time.monotonic() < deadline, client.hget(group, "total")
                time.sleep(0.1)
            time.sleep(1.0)  # a batch counted twice would show by now
            assert int(client.hget(group, "total") or 0) == want
            assert worker.alive() and pool_children(worker.popen.pid) != [child]
        finally:
            worker.stop()
