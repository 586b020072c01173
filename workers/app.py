"""The Celery app: configured from Settings when first used, never at import time."""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

from celery import Celery
from celery.signals import worker_init
from pydantic import ValidationError

from shared.core import queues
from shared.core.settings import invalid_settings
from shared.core.telemetry import switch_off_telemetry
from shared.notify.routing import RoutingError, routing_for
from workers import context, heartbeat, metrics, redis_restart  # metrics: signal handlers

log = logging.getLogger(__name__)

app = Celery(
    "tracehound",
    include=[
        "workers.tasks.actions",
        "workers.tasks.analysis",
        "workers.tasks.delivery",
        "workers.tasks.indexing",
        "workers.tasks.intake",
    ],
)
# Renews the messages this worker holds, so only a dead worker's come back (and soon).
app.steps["consumer"].add(heartbeat.VisibilityHeartbeat)


@app.on_configure.connect
def _configure(sender: Celery, **_: Any) -> None:
    """Celery's settings from ours. Invalid settings stop the worker here, naming each bad
    variable (Celery logs and swallows an Exception from a signal handler and would go on
    with its defaults: an AMQP broker on localhost)."""
    try:
        s = context.settings()
    except ValidationError as exc:
        problems = invalid_settings(exc)
        log.error("settings.invalid", extra={"error": problems})
        raise SystemExit(f"tracehound: invalid TRACEHOUND_* settings:\n{problems}") from exc
    sender.config_from_object(
        queues.celery_config(
            s.redis_url,
            max_retries=s.stage_max_retries,
            backoff_max=s.retry_backoff_max,
            redelivery_after=s.redelivery_after,
            task_events=s.task_events,
        )
    )


@worker_init.connect
def _telemetry_off(**_: Any) -> None:
    """Before the pool forks and any client is built: a worker started as ``celery -A workers
    worker`` (not through ``tracehound worker``) has not had it done."""
    switch_off_telemetry(os.environ)


@worker_init.connect
def _check_routing(**_: Any) -> None:
    """A bad routing file stops the worker at start, saying which rule and what is wrong,
    instead of sending every message to the default channel. (Celery logs and swallows an
    Exception from a signal handler; SystemExit ends the start.)"""
    try:
        routing = routing_for(context.settings())
    except RoutingError as exc:
        log.error("routing.invalid", extra={"error": str(exc)})
        raise SystemExit(f"tracehound: bad routing file: {exc}") from exc
    if routing.rules:
        log.info("routing.loaded", extra={"rules": len(routing.rules)})


@worker_init.connect
def _serve_metrics(**_: Any) -> None:
    s = context.settings()
    if s.metrics_port:
        metrics.serve(
            s.metrics_port,
            s.data_dir,
            s.redis_url,
            s.metrics_host,
            probes=lambda: metrics.host_probes(s, context.consumed_queues()),
            max_services=s.metrics_max_services,
        )


@worker_init.connect
def _survive_redis_restarts(**_: Any) -> None:
    redis_restart.apply()


@worker_init.connect
def _import_clients(sender: Any = None, **_: Any) -> None:
    """Import the heavy client libraries this worker's queues use before the pool forks: the
    children share them, and the first error after a start does not wait 1-2 s for
    langchain-ollama or chromadb to import inside a task."""
    amqp = getattr(getattr(sender, "app", None), "amqp", None)  # -Q has been applied by now
    names = set(amqp.queues.consume_from or ()) if amqp is not None else set()
    context.remember_queues(names or set(queues.ALL_QUEUES))
    modules = context.client_modules(names or set(queues.ALL_QUEUES))
    for module in modules:
        importlib.import_module(module)
    log.info("worker.imported", extra={"queues": sorted(names), "modules": modules})


def task_options(name: str, *, retry_forever: bool = False) -> dict[str, Any]:
    """Name, time limits and retry limit of a task; its queue comes from task_routes.

    A ``queue=`` on the decorator is deprecated in Celery 5.x and ignored from 6.0.
    ``retry_forever``: the task's own ``max_retries`` is None (Celery's ``retry(max_retries=
    None)`` means "the task's default", not "no limit").
    """
    hard = queues.TIME_LIMITS[name]
    options: dict[str, Any] = {
        "name": name,
        "bind": True,
        "time_limit": hard,
        "soft_time_limit": hard - 10,
    }
    if retry_forever:
        options["max_retries"] = None
    if name in queues.RESULT_NOT_READ:
        options |= {"ignore_result": True, "store_errors_even_if_ignored": True}
    return options
