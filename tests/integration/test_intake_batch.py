"""Batched intake: the hand-built chain message is Celery's own, and a batch counts exactly as
the same events submitted one by one."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from shared.core import keys
from shared.core.pipeline import analysis_chain, analysis_message, sender_app
from shared.core.settings import Settings
from shared.groups.submit import Intake
from shared.intake.batch import (
    QueuedBatch,
    batches_message,
    queue_body,
    queued_batches,
    take_batch,
    take_batches,
)
from shared.intake.events import parse_event
from tests.conftest import DATA, counted_in_groups

pytestmark = pytest.mark.integration

TRACE = (DATA / "sample-error.txt").read_text()


def _decoded(raw: bytes) -> dict[str, Any]:
    message = json.loads(raw)
    message["body"] = json.loads(base64.b64decode(message["body"]))
    # Per send: a fresh delivery tag and send time; argsrepr/origin are for display only.
    message["properties"].pop("delivery_tag")
    for name in ("th_sent_at", "argsrepr", "origin"):
        message["headers"].pop(name)
    # Celery copies a task's time limits and ignore_result into the message when the task is
    # registered in this process (another test imported the worker's task modules: Celery
    # shares tasks between apps); the worker applies its own task's settings either way.
    if message["headers"]["timelimit"] != [None, None]:
        message["headers"]["timelimit"] = [None, None]
        message["headers"]["ignore_result"] = None
    return message


def test_the_compact_message_is_the_one_celery_sends(
    fresh_redis: redis.Redis, private_redis_url: str
) -> None:
    app = sender_app(Settings(redis_url=private_redis_url))
    event = parse_event(TRACE, service="shop-api", repo="shop")
    queue, ours, result = analysis_message(app, event)
    ids = [json.loads(ours)["headers"]["id"]]
    ids += [s["options"]["task_id"] for s in _decoded(ours)["body"][2]["chain"][::-1]]
    celery_chain = analysis_chain(app, event)
    for sig, task_id in zip(celery_chain.tasks, ids, strict=True):
        sig.set(task_id=task_id)
    sent = celery_chain.apply_async()
    [theirs] = fresh_redis.lrange(queue, 0, -1)
    assert sent.id == result.id == ids[-1]  # the chain's result is the last stage's
    assert _decoded(ours) == _decoded(theirs)
    app.close()


@pytest.fixture
def intake_pair(
    fresh_redis: redis.Redis, private_redis_url: str
) -> Iterator[tuple[Intake, redis.Redis]]:
    settings = Settings(redis_url=private_redis_url, incident_settle=0)
    app = sender_app(settings)
    yield Intake(app, fresh_redis, settings), fresh_redis
    app.close()


def _events(n_groups: int, per_group: int) -> list[Any]:
    events = []
    for i in range(per_group):
        for g in range(n_groups):
            text = TRACE.replace("ZeroDivisionError", f"Group{g}Error")
            events.append(
                parse_event(text, service="shop-api", repo="shop").model_copy(
                    update={"id": f"e-{g}-{i}"}
                )
            )
    return events


def test_a_batch_counts_as_one_by_one(intake_pair: tuple[Intake, redis.Redis]) -> None:
    intake, r = intake_pair
    events = _events(n_groups=3, per_group=4)
    replayed = events[1]  # the same id twice in one batch, and again in the next
    batch = intake.submit_many([*events, replayed])
    assert [s.new for s in batch[:3]] == [True, True, True]  # each group's first event
    assert not any(s.new for s in batch[3:])
    assert batch[-1].duplicate and not batch[1].duplicate
    assert [s.count for s in batch[:12:3]] == [1, 2, 3, 4]  # group 0, in order
    assert r.llen("embed") == 3  # one chain per group
    again = intake.submit_many(events[:3])
    assert all(s.duplicate and not s.new for s in again)
    totals = sorted(int(r.hget(f"th:group:{s.fingerprint}", "total")) for s in batch[:3])
    assert totals == [4, 4, 4]
    assert r.llen("embed") == 3
    # One delayed count update per repeated group.
    assert sum(1 for _ in r.scan_iter("th:group:*:update")) == 3


def test_one_chain_analyses_a_group_window_and_its_redelivery_still_does(
    fresh_redis: redis.Redis,
) -> None:
    from shared.groups.store import GroupStore

    store = GroupStore(fresh_redis, window_s=60)
    assert store.claim_analysis("fp", 1000, "chain-a")
    assert not store.claim_analysis("fp", 1000, "chain-b")  # enqueued twice: stops at once
    assert store.claim_analysis("fp", 1000, "chain-a")  # its message redelivered: goes on
    assert store.claim_analysis("fp", 2000, "chain-b")  # the next window is another claim
    assert store.claim_analysis("fp", 1000, "chain-c", revision=True)  # its one second chance
    assert not store.claim_analysis("fp", 1000, "chain-d", revision=True)


def _ndjson(n: int) -> bytes:
    return "\n".join(
        json.dumps({"level": "error", "message": f"payment {i} failed", "stack": TRACE})
        for i in range(n)
    ).encode()


def test_a_queued_body_is_taken_once_and_an_older_inline_message_still_is(
    intake_pair: tuple[Intake, redis.Redis],
) -> None:
    intake, r = intake_pair
    body = _ndjson(30)
    pipe = r.pipeline(transaction=True)
    queue_body(pipe, "b1", body)
    pipe.execute()
    queued = QueuedBatch(body_id="b1", digest="d1", service="shop-api")
    assert take_batch(queued, intake, max_trace_bytes=64_000)["accepted"] == 30
    assert not r.exists(keys.queued_body("b1")) and counted_in_groups(r) == 30
    # Delivered again (a worker killed between the count and its ack): a repeat, not a loss.
    assert take_batch(queued, intake, max_trace_bytes=64_000) == {
        "accepted": 0, "rejected": 0, "ignored": 0, "new": 0,
    }  # fmt: skip
    # A message an ingest of before this change queued, its body inline.
    inline = QueuedBatch(body=_ndjson(5).decode(), digest="d2", service="shop-api")
    assert take_batch(inline, intake, max_trace_bytes=64_000)["accepted"] == 5
    assert counted_in_groups(r) == 35


def test_a_message_of_several_batches_delivered_again_counts_each_once(
    intake_pair: tuple[Intake, redis.Redis],
) -> None:
    """Ingest queues the batches of requests sent together in one message; a worker killed
    after the first of them (tests/integration/test_ingest.py kills one for real) takes the
    message again: the batch it took is found taken, the others are counted once."""
    intake, r = intake_pair
    pipe = r.pipeline(transaction=True)
    for i in range(3):
        queue_body(pipe, f"m{i}", _ndjson(10 + i))
    pipe.execute()
    batches = [QueuedBatch(body_id=f"m{i}", digest=f"dm{i}", service="shop-api") for i in range(3)]
    message = batches_message(batches)
    assert queued_batches(message) == batches
    assert take_batch(batches[0], intake, max_trace_bytes=64_000)["accepted"] == 10
    counts = take_batches(queued_batches(message), intake, max_trace_bytes=64_000)
    assert counts["accepted"] == 11 + 12 and counted_in_groups(r) == 33
    # The workers' pace counts messages, as the queue's length does (ingest's lag bound).
    assert int(r.get(keys.INTAKE_TAKEN)) == 2
    # A message of one batch is the one every worker reads, an ingest's of before too.
    assert batches_message(batches[:1]) == batches[0].model_dump(exclude_none=True)
    assert queued_batches(batches_message(batches[:1])) == batches[:1]


def test_a_body_gone_before_it_was_taken_is_said_lost(
    intake_pair: tuple[Intake, redis.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    """Expired (past BODY_TTL_S with no worker) or lost with a Redis that keeps nothing on disk:
    the batch is reported lost, loudly, not mistaken for one already taken."""
    intake, r = intake_pair
    queued = QueuedBatch(body_id="never-stored", digest="d3", service="shop-api")
    with caplog.at_level(logging.ERROR, logger="shared.intake.batch"):
        assert take_batch(queued, intake, max_trace_bytes=64_000)["lost"] == 1
    assert [rec.message for rec in caplog.records] == ["intake.batch_lost"]
    assert counted_in_groups(r) == 0


def test_the_event_that_opens_a_window_is_analysed_with_its_message_redacted(
    intake_pair: tuple[Intake, redis.Redis],
) -> None:
    """Repeats of a trace with frames are counted without redacting their messages; the one
    that opens its group's window (here the first of a second group, mid-batch, and one of a
    group without frames, grouped by its message) goes to analysis with its secrets gone."""
    intake, r = intake_pair
    secret = "password=hunter2xyz"

    def event(text: str, i: int) -> Any:
        found = parse_event(text, service="shop-api", repo="shop")
        return found.model_copy(update={"id": f"s-{i}", "message": f"{found.message} {secret}"})

    other = TRACE.replace("ZeroDivisionError", "LedgerError")
    batch = [event(TRACE, i) for i in range(3)] + [event(other, i) for i in range(3, 6)]
    batch.append(event(f"payment declined {secret}", 6))  # no trace: its message is the group
    submitted = intake.submit_many(batch)
    assert [s.new for s in submitted] == [True, False, False, True, False, False, True]
    queued = [_decoded(m)["body"][0][0]["event"] for m in r.lrange("embed", 0, -1)]
    assert len(queued) == 3
    for sent in queued:
        assert "hunter2xyz" not in json.dumps(sent) and "[REDACTED:password]" in sent["message"]
