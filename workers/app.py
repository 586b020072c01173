"""The Celery app: configured from Settings when first used, never at import time."""

from __future__ import annotations

from typing import Any

from celery import Celery

from shared import queues
from workers import context, metrics  # noqa: F401  (metrics connects its signal handlers)

app = Celery(
    "tracehound",
    include=["workers.tasks.analysis", "workers.tasks.delivery", "workers.tasks.indexing"],
)


@app.on_configure.connect
def _configure(sender: Celery, **_: Any) -> None:
    s = context.settings()
    sender.config_from_object(
        queues.celery_config(
            s.redis_url, max_retries=s.stage_max_retries, backoff_max=s.retry_backoff_max
        )
    )


def task_options(name: str) -> dict[str, Any]:
    """Name and time limits of a task; its queue comes from task_routes (the routing table).

    A ``queue=`` on the decorator is deprecated in Celery 5.x and ignored from 6.0.
    """
    hard = queues.TIME_LIMITS[name]
    return {
        "name": name,
        "bind": True,
        "time_limit": hard,
        "soft_time_limit": hard - 10,
    }
