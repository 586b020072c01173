"""Analysis chains in flight: a chain whose message Redis lost is started again, once it has
been missing from every queue and from the workers' hands for the grace period; a finished
chain is forgotten (shared/core/inflight.py, on a real redis-server)."""

from __future__ import annotations

import json
import time

import pytest
import redis

from shared.core import inflight, keys
from shared.core.pipeline import enqueue_error, sender_app
from shared.core.settings import Settings
from shared.intake.events import parse_event
from tests.conftest import DATA

pytestmark = pytest.mark.integration

TRACE = (DATA / "sample-error.txt").read_text()


def _root(raw: bytes) -> str:
    return str(json.loads(raw)["headers"]["root_id"])


def test_a_chain_redis_lost_is_started_again_with_its_ids_and_a_finished_one_forgotten(
    fresh_redis: redis.Redis, private_redis_url: str
) -> None:
    app = sender_app(Settings(redis_url=private_redis_url))
    result = enqueue_error(app, parse_event(TRACE, service="shop-api", repo="shop"))
    [first] = fresh_redis.lrange("embed", 0, -1)
    assert inflight.sweep(fresh_redis, grace_s=0.2).alive == 1  # waiting on its queue

    # Held by a worker (kombu's unacked hash): alive too.
    fresh_redis.rpop("embed")
    fresh_redis.hset("unacked", "tag-1", json.dumps([json.loads(first), "", "embed"]))
    assert inflight.sweep(fresh_redis, grace_s=0.2).alive == 1

    # Gone from both, as when Redis popped it and shut down before answering.
    fresh_redis.delete("unacked")
    assert inflight.sweep(fresh_redis, grace_s=0.2).missing == 1
    assert fresh_redis.llen("embed") == 0  # not at once: a worker may be between two commands
    time.sleep(0.3)
    swept = inflight.sweep(fresh_redis, grace_s=0.2)
    [again] = fresh_redis.lrange("embed", 0, -1)
    assert swept.restarted == [_root(first)] and again == first  # the same chain, same ids

    # Its last task stored a result: done, and no longer swept.
    fresh_redis.set(f"celery-task-meta-{result.id}", json.dumps({"status": "SUCCESS"}))
    assert inflight.sweep(fresh_redis, grace_s=0.2).finished == 1
    assert fresh_redis.hlen(keys.INFLIGHT) == 0
    app.close()


def test_one_sweep_per_interval_across_workers(fresh_redis: redis.Redis) -> None:
    assert inflight.claim_sweep(fresh_redis, 5.0)
    assert not inflight.claim_sweep(fresh_redis, 5.0)
