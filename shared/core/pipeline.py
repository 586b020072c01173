"""The pipeline wired in one place: which tasks, in which order, on which queues.

    embed_query [embed] → retrieve [retrieve] → rerank [rerank] → analyze + post [llm]
    notify [notify]: a post Slack did not take at once (paced, 429, down), retried there
    update_group, thread_reply [notify]: a group's count updates and thread replies
    slack_action [notify]: a button pressed on a message (Socket Mode or the Request URL)
    index_files / index_file [index] → embed_backlog [embed]     remove_file, prune_repo [index]
    record_history [index]: the git history index and watch read from the checkout
    record_owners [index]: the CODEOWNERS file index and watch read from the checkout

Every task signature is built in this module; nothing else calls ``app.signature``.

Producers and the CLI use a sending-only Celery app and enqueue by task name, so they never
import ``workers`` (no Chroma, no LangChain in a log tailer).
"""

from __future__ import annotations

import time
import uuid
from functools import cache
from typing import Any

import redis
from celery import Celery, Signature, chain
from celery.result import AsyncResult
from celery.signals import before_task_publish

from shared.core import inflight, queues, redisconn
from shared.core.domain import ErrorEvent, GroupRef, Posted, RepoHistory
from shared.core.messages import SENT_AT, chain_message
from shared.core.settings import Settings

# The analysis chain, in order; each stage passes its result to the next. The last one posts
# the message itself when Slack takes it at once (one queue hop less per error) and hands it to
# ``notify`` otherwise, so the model worker never waits on Slack's pacing or retries.
ANALYSIS_STAGES = (
    queues.EMBED_QUERY,
    queues.RETRIEVE,
    queues.RERANK,
    queues.ANALYZE,
)


def stamp_sent_at(headers: dict[str, Any] | None = None, **_: Any) -> None:
    if headers is not None:
        headers.setdefault(SENT_AT, time.time())


def sender_app(settings: Settings) -> Celery:
    """A Celery app that only sends: same broker, routing and serializer as the workers."""
    before_task_publish.connect(stamp_sent_at, dispatch_uid="tracehound-sent-at")
    app = Celery("tracehound-sender", set_as_current=False)
    app.conf.update(
        queues.celery_config(
            settings.redis_url,
            max_retries=settings.stage_max_retries,
            backoff_max=settings.retry_backoff_max,
            redelivery_after=settings.redelivery_after,
        )
    )
    return app


def _sig(
    app: Celery, name: str, *args: Any, priority: int | None = None
) -> Signature:  # every signature is built here
    options: dict[str, Any] = {"queue": queues.ROUTES[name]}
    if priority is not None:
        options["priority"] = priority
    return app.signature(name, args=args, **options)


def _send(
    app: Celery,
    name: str,
    *args: Any,
    task_id: str | None = None,
    countdown: float | None = None,
    priority: int | None = None,
) -> AsyncResult:
    return _sig(app, name, *args, priority=priority).apply_async(
        task_id=task_id, countdown=countdown
    )


def _payload(
    event: ErrorEvent,
    group: GroupRef | None = None,
    revises: Posted | None = None,
    rerun: str | None = None,
) -> dict[str, Any]:
    payload: dict[str, Any] = {"event": event.model_dump(mode="json")}
    if rerun is not None:
        payload["rerun"] = rerun
    if group is not None:
        payload["group"] = group.model_dump(mode="json")
    if revises is not None:
        payload["revises"] = revises.model_dump(mode="json")
    return payload


def analysis_chain(
    app: Celery,
    event: ErrorEvent,
    group: GroupRef | None = None,
    revises: Posted | None = None,
    rerun: str | None = None,
) -> Any:
    """The stages for one error event; each stage passes its result to the next."""
    first, *rest = ANALYSIS_STAGES
    payload = _payload(event, group, revises, rerun)
    return chain(_sig(app, first, payload), *(_sig(app, n) for n in rest))


def analysis_message(
    app: Celery, event: ErrorEvent, group: GroupRef | None = None
) -> tuple[str, bytes, AsyncResult]:
    """The message that starts ``analysis_chain`` — Celery's own format, built without its
    publisher (shared/core/messages.py) — for intake to LPUSH in its Redis pipeline:
    (queue, message, the chain's result)."""
    steps = [(name, queues.ROUTES[name]) for name in ANALYSIS_STAGES]
    queue, message, ids = chain_message(steps, [_payload(event, group)], reply_to=app.thread_oid)
    return queue, message, AsyncResult(ids[-1], app=app)


def intake_batch_message(app: Celery, batch: dict[str, Any]) -> tuple[str, bytes]:
    """The message that hands a batch the ingest endpoint received to the ``intake_batch``
    task [intake] (producers/ingest/events.py LPUSHes it: one Redis command per request)."""
    queue, message, _ = chain_message(
        [(queues.INTAKE_BATCH, queues.ROUTES[queues.INTAKE_BATCH])],
        [batch],
        reply_to=app.thread_oid,
    )
    return queue, message


def enqueue_error(
    app: Celery,
    event: ErrorEvent,
    group: GroupRef | None = None,
    *,
    task_id: str | None = None,
    revises: Posted | None = None,
    rerun: str | None = None,
) -> AsyncResult:
    """Start an analysis; the returned result is the chain's last (the message sent).

    Producers go through shared.groups.submit.Intake, which redacts, groups and starts the
    chain once per group and window; tools (re-analyses, the CLI) and tests call this for one
    analysis. The chain's first message is LPUSHed with its in-flight record
    (shared/core/inflight.py) in one pipeline; ``task_id`` is the chain's last id.
    """
    steps = [(name, queues.ROUTES[name]) for name in ANALYSIS_STAGES]
    ids = None if task_id is None else [*(str(uuid.uuid4()) for _ in steps[1:]), task_id]
    payload = _payload(event, group, revises, rerun)
    queue, message, ids = chain_message(steps, [payload], reply_to=app.thread_oid, task_ids=ids)
    pipe = _broker(app.conf.broker_url).pipeline(transaction=False)
    pipe.lpush(queue, message)
    inflight.record(pipe, queue, message, last_id=ids[-1], now_ms=int(time.time() * 1000))
    pipe.execute()
    result = None
    for task_id in ids:  # each stage's result knows the one before, as Celery's chain sets
        result = AsyncResult(task_id, app=app, parent=result)
    assert result is not None
    return result


@cache
def _broker(url: str) -> redis.Redis:
    """The broker's Redis, to LPUSH chain messages to (one client per process and URL)."""
    return redisconn.client(url)


def notify_step(app: Celery, investigation: dict[str, Any]) -> Signature:
    """Delivery on the notify queue, for the analyze task to ``replace`` itself with (the
    chain's result is then notify's, under the same task id)."""
    return _sig(app, queues.NOTIFY, investigation)


def enqueue_reanalysis(
    app: Celery, investigation: dict[str, Any], *, countdown: float
) -> AsyncResult:
    """A degraded message's second chance: once the model host answers, analyse it again."""
    return _send(app, queues.REANALYZE, investigation, countdown=countdown)


def enqueue_slack_action(app: Celery, payload: dict[str, Any]) -> AsyncResult:
    """A button pressed in Slack (its signed payload), applied on the notify queue: the
    listener acks Slack at once and never waits for the work."""
    return _send(app, queues.SLACK_ACTION, payload)


def enqueue_update_group(app: Celery, fingerprint: str, *, countdown: float) -> AsyncResult:
    """One delayed count update that carries every repeat of its interval to Slack."""
    return _send(app, queues.UPDATE_GROUP, fingerprint, countdown=countdown)


def enqueue_drain(app: Celery, *, countdown: float) -> AsyncResult:
    """Start the deferred backlog's next group once the analysis queues are empty."""
    return _send(app, queues.DRAIN_DEFERRED, countdown=countdown)


def enqueue_update_incident(app: Celery, incident: str, *, countdown: float) -> AsyncResult:
    """Rewrite an incident's list of groups on its message (shared/notify/incident.py)."""
    return _send(app, queues.UPDATE_INCIDENT, incident, countdown=countdown)


def enqueue_thread_reply(
    app: Celery, thread_ts: str, text: str, key: str, *, channel: str | None = None
) -> AsyncResult:
    """A reply in a message's thread (in ``channel``, where its message was posted; None:
    the default channel), posted (and paced) by its own task, once per ``key``."""
    return _send(app, queues.THREAD_REPLY, thread_ts, text, key, channel)


def enqueue_files(
    app: Celery,
    repo: str,
    files: list[dict[str, str]],
    *,
    task_id: str | None = None,
    priority: int | None = None,
) -> AsyncResult:
    """Index a batch of ``{"path", "text"}`` files of one repo."""
    return _send(app, queues.INDEX_FILES, repo, files, task_id=task_id, priority=priority)


def enqueue_file(app: Celery, repo: str, path: str, text: str) -> AsyncResult:
    return _send(app, queues.INDEX_FILE, repo, path, text)


def enqueue_remove(app: Celery, repo: str, path: str, *, task_id: str | None = None) -> AsyncResult:
    return _send(app, queues.REMOVE_FILE, repo, path, task_id=task_id)


def enqueue_prune(
    app: Celery, repo: str, live_paths: list[str], *, task_id: str | None = None
) -> AsyncResult:
    return _send(app, queues.PRUNE_REPO, repo, live_paths, task_id=task_id)


def enqueue_embed_backlog(app: Celery, repo: str) -> AsyncResult:
    """A drain of ``repo``'s embedding backlog (shared/index/backlog.py), at bulk priority."""
    return _send(app, queues.EMBED_BACKLOG, repo, priority=queues.BULK_PRIORITY)


def enqueue_owners(app: Celery, repo: str, codeowners: str | None) -> AsyncResult:
    """Store the checkout's CODEOWNERS text (None: it has none) for notify to mention owners."""
    return _send(app, queues.RECORD_OWNERS, repo, codeowners)


def enqueue_history(app: Celery, repo: str, record: RepoHistory) -> AsyncResult:
    """Store what the indexer read from git (shared/index/history.py) for analyze to use."""
    return _send(app, queues.RECORD_HISTORY, repo, record.model_dump(mode="json"))
