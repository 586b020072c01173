"""The stages' retry policy: capped exponential backoff, or the server's Retry-After."""

from __future__ import annotations

from typing import Any

from shared.core.errors import TransientError
from workers import context


def attempts_left(task: Any, max_retries: int | None = None) -> bool:
    limit = context.settings().stage_max_retries if max_retries is None else max_retries
    return bool(task.request.retries < limit)


def retry(
    task: Any, exc: TransientError, max_retries: int | None = None, *, forever: bool = False
) -> Exception:
    """The exception that reschedules ``task``; raise it (``raise retry(self, exc)``).

    ``forever``: no limit (Slack delivery waits as long as Slack needs); the task must be
    declared with ``task_options(..., retry_forever=True)``.
    """
    s = context.settings()
    limit = s.stage_max_retries if max_retries is None else max_retries
    countdown = (
        exc.retry_after
        if exc.retry_after is not None
        else min(2**task.request.retries, s.retry_backoff_max)
    )
    if forever:
        return task.retry(exc=exc, countdown=countdown)  # type: ignore[no-any-return]
    return task.retry(exc=exc, countdown=countdown, max_retries=limit)  # type: ignore[no-any-return]


def visit(task: Any) -> tuple[str, str, str]:
    """(stage, queue, worker) of the running task, for the investigation's trail."""
    info = task.request.delivery_info or {}
    queue = info.get("routing_key") or info.get("queue") or "?"
    return task.name.rsplit(".", 1)[-1], str(queue), str(task.request.hostname or "?")
