"""Unit tests of task routing and Celery reliability settings, and of the tasks the workers
register: every task must land on a queue that some worker consumes."""

from __future__ import annotations

import pytest

from shared.core import queues
from shared.core.domain import ErrorEvent
from shared.core.pipeline import analysis_chain, sender_app
from shared.core.settings import Settings

TASK_NAMES = [
    queues.EMBED_QUERY,
    queues.RETRIEVE,
    queues.RERANK,
    queues.ANALYZE,
    queues.NOTIFY,
    queues.INDEX_FILES,
    queues.INDEX_FILE,
    queues.REMOVE_FILE,
    queues.PRUNE_REPO,
    queues.EMBED_CHUNKS,
    queues.EMBED_BACKLOG,
    queues.UPDATE_GROUP,
    queues.THREAD_REPLY,
    queues.REANALYZE,
    queues.RECORD_HISTORY,
    queues.RECORD_OWNERS,
    queues.INTAKE_BATCH,
    queues.SLACK_ACTION,
    queues.DRAIN_DEFERRED,
    queues.UPDATE_INCIDENT,
]


def test_there_are_seven_queues_three_of_them_for_models() -> None:
    assert set(queues.MODEL_QUEUES) == {"embed", "rerank", "llm"}
    assert set(queues.CPU_QUEUES) == {"retrieve", "index", "notify", "intake"}
    assert len(set(queues.ALL_QUEUES)) == 7


@pytest.mark.parametrize("name", TASK_NAMES)
def test_every_task_is_routed_to_one_of_the_seven_queues(name: str) -> None:
    assert queues.ROUTES[name] in queues.ALL_QUEUES


@pytest.mark.parametrize("name", TASK_NAMES)
def test_every_task_has_a_time_limit(name: str) -> None:
    assert queues.TIME_LIMITS[name] > 10  # the soft limit is 10 s below the hard one


def test_stages_that_call_a_model_run_on_that_models_queue() -> None:
    assert queues.ROUTES[queues.EMBED_QUERY] == "embed"
    assert queues.ROUTES[queues.EMBED_CHUNKS] == "embed"
    assert queues.ROUTES[queues.EMBED_BACKLOG] == "embed"
    assert queues.ROUTES[queues.RERANK] == "rerank"
    assert queues.ROUTES[queues.ANALYZE] == "llm"


def test_routes_and_time_limits_name_the_same_tasks() -> None:
    assert set(queues.ROUTES) == set(queues.TIME_LIMITS) == set(TASK_NAMES)


def test_celery_config_accepts_json_only() -> None:
    conf = queues.celery_config("redis://127.0.0.1:1/0", max_retries=3, backoff_max=60)
    assert conf["task_serializer"] == conf["result_serializer"] == "json"
    assert conf["accept_content"] == ["json"]
    assert conf["result_accept_content"] == ["json"]


def test_celery_config_redelivers_tasks_of_lost_workers() -> None:
    conf = queues.celery_config("redis://127.0.0.1:1/0", max_retries=3, backoff_max=60)
    assert conf["task_acks_late"] is True
    assert conf["task_reject_on_worker_lost"] is True
    assert conf["worker_prefetch_multiplier"] == 1


def test_celery_config_carries_routes_broker_and_a_short_redelivery() -> None:
    conf = queues.celery_config("redis://h:1/2", max_retries=2, backoff_max=30, redelivery_after=45)
    assert conf["broker_url"] == "redis://h:1/2"
    assert conf["task_routes"] == {n: {"queue": q} for n, q in queues.ROUTES.items()}
    assert conf["task_default_queue"] in queues.ALL_QUEUES
    transport = conf["broker_transport_options"]
    # A dead worker's message comes back after the timeout plus one sweep, not after the
    # longest task with all its retries (workers renew what they hold: workers/heartbeat.py).
    assert transport["visibility_timeout"] == 45
    assert transport["unacked_restore_interval"] * transport["unacked_restore_throttle"] <= 5


def test_analysis_chain_runs_the_four_stages_in_order_on_their_queues() -> None:
    app = sender_app(Settings(redis_url="redis://127.0.0.1:1/0"))
    try:
        chain = analysis_chain(app, ErrorEvent(service="checkout", repo="shop", message="x"))
        stages = [(sig.task, sig.options.get("queue")) for sig in chain.tasks]
    finally:
        app.close()
    assert stages == [
        ("tracehound.embed_query", "embed"),
        ("tracehound.retrieve", "retrieve"),
        ("tracehound.rerank", "rerank"),
        ("tracehound.analyze", "llm"),  # posts, or hands the post to notify
    ]


# ------------------------------------------------------------------ worker tasks


@pytest.fixture(scope="module")
def registered() -> dict[str, object]:
    """The tracehound tasks the worker app registers, imported here without Redis running."""
    from workers.app import app

    app.loader.import_default_modules()  # what `celery worker` does: the app's include list
    return {name: task for name, task in app.tasks.items() if name.startswith("tracehound.")}


def test_importing_the_workers_builds_no_clients(registered: dict[str, object]) -> None:
    from workers import context

    # Redis, Chroma and HTTP clients are built on first use in a worker process, never at
    # import: producers and tests can load the task modules with nothing running.
    assert "clients" not in context._state


def test_the_worker_app_routes_every_task_to_its_queue(
    registered: dict[str, object],
) -> None:
    from workers.app import app

    assert registered
    for name in registered:
        assert name in queues.ROUTES, f"{name} has no route"
        route = app.amqp.router.route({}, name, args=(), kwargs={})
        assert route["queue"].name == queues.ROUTES[name], name


def test_every_routed_task_is_implemented_by_a_worker(registered: dict[str, object]) -> None:
    assert set(queues.ROUTES) <= set(registered)


def test_worker_tasks_have_the_declared_time_limits(registered: dict[str, object]) -> None:
    for name, task in registered.items():
        assert getattr(task, "time_limit", None) == queues.TIME_LIMITS[name], name
        assert getattr(task, "soft_time_limit", 0) < queues.TIME_LIMITS[name], name
