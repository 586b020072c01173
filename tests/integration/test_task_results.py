"""A drain's results written in one batch read back as Celery's own, in a real Redis."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, states

from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from workers.results import store_successes

pytestmark = pytest.mark.integration


@pytest.fixture
def app(fresh_redis: redis.Redis, private_redis_url: str, tmp_path: Any) -> Iterator[Celery]:
    celery = sender_app(Settings(redis_url=private_redis_url, data_dir=tmp_path))
    yield celery
    celery.close()


def test_results_stored_in_one_batch_are_what_store_result_writes(
    app: Celery, fresh_redis: redis.Redis
) -> None:
    backend = app.backend
    ours, theirs = uuid.uuid4().hex, uuid.uuid4().hex
    result = {"repo": "shop", "files": ["a.py"], "embedded": 3}
    store_successes(backend, [(ours, result)])
    backend.store_result(theirs, result, states.SUCCESS)

    assert app.AsyncResult(ours).get(timeout=5) == result
    mine, celerys = (backend.get_task_meta(t) for t in (ours, theirs))
    for meta in (mine, celerys):
        meta.pop("date_done"), meta.pop("task_id")
    assert mine == celerys
    key, reference = (backend.get_key_for_task(t) for t in (ours, theirs))
    assert abs(fresh_redis.ttl(key) - fresh_redis.ttl(reference)) <= 1  # the same expiry


def test_a_client_already_waiting_gets_a_batch_stored_result(app: Celery) -> None:
    """``tracehound index`` waits on its tasks' results before the drain stores them: the
    result backend's publish must reach it."""
    task_id = uuid.uuid4().hex
    got: list[Any] = []
    waiting = threading.Thread(target=lambda: got.append(app.AsyncResult(task_id).get(5)))
    waiting.start()
    threading.Event().wait(0.3)
    store_successes(app.backend, [(task_id, {"embedded": 1}), (uuid.uuid4().hex, {})])
    waiting.join(10)
    assert got == [{"embedded": 1}]


def test_a_result_already_success_is_left_as_it_was(app: Celery) -> None:
    """A drain redone after a crash stores its files' results again: the first stays."""
    first, fresh = uuid.uuid4().hex, uuid.uuid4().hex
    app.backend.store_result(first, {"embedded": 1}, states.SUCCESS)
    store_successes(app.backend, [(first, {"embedded": 2}), (fresh, {"embedded": 2})])
    assert app.AsyncResult(first).get(timeout=5) == {"embedded": 1}
    assert app.AsyncResult(fresh).get(timeout=5) == {"embedded": 2}
