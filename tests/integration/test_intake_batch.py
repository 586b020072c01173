"""Batched intake: the hand-built chain message is Celery's own, and a batch counts exactly as
the same events submitted one by one."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from shared.core.pipeline import analysis_chain, analysis_message, sender_app
from shared.core.settings import Settings
from shared.groups.submit import Intake
from shared.intake.events import parse_event
from tests.conftest import DATA

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
