"""Taking the batches the ingest endpoint queued: ``intake_batch`` [intake]; starting the
deferred backlog's analyses while the model host is free: ``drain_deferred`` [intake].

``POST /v1/events`` (producers/ingest/events.py) checks a batch's JSON, LPUSHes it here (one
message holds the batches of the requests queued together) and answers 202 at once; this task
runs each record through the event model and intake (redaction, grouping, counting, starting
analyses) exactly as the endpoint does with ``?wait=true``. Records that the event model
refuses are logged with the reason (``intake.rejected``). Redis out of reach is retried for as
long as it takes: an accepted batch is never dropped, and a batch taken twice (a worker killed
mid-message) counts each event once, since event ids come from the batch's digest and the
record's place in it.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from kombu.exceptions import OperationalError

from shared.core import keys
from shared.core import queues as q
from shared.core.errors import TransientError
from shared.core.pipeline import enqueue_drain
from shared.groups import deferred
from shared.intake.batch import queued_batches, take_batches
from workers import context, metrics
from workers.app import app, task_options
from workers.retry import retry

log = logging.getLogger(__name__)


@app.task(**task_options(q.INTAKE_BATCH, retry_forever=True))
def intake_batch(self: Any, payload: dict[str, Any]) -> dict[str, int]:
    """A message's queued batches through the event model and intake; a Redis failure is
    retried (the batches taken already are found taken)."""
    ctx = context.clients()
    batches = queued_batches(payload)
    try:
        return take_batches(batches, ctx.intake, max_trace_bytes=ctx.settings.max_trace_bytes)
    except (redis.RedisError, OperationalError, OSError) as exc:
        raise retry(self, TransientError(f"{type(exc).__name__}: {exc}"), forever=True) from exc


@app.task(**task_options(q.DRAIN_DEFERRED))
def drain_deferred(self: Any) -> dict[str, Any]:
    """Start each settled incident's most frequent group, and the deferred backlog's group with
    the most events when no analysis is queued (not a member of an incident whose lead has not
    posted yet); come back every ``DRAIN_EVERY_S`` while groups wait
    (shared/groups/deferred.py)."""
    r = context.clients().redis
    s = context.settings()
    dropped = deferred.trim(r, ttl_s=s.deferred_ttl, max_waiting=s.max_deferred)
    if dropped:
        log.warning("deferred.dropped", extra={"groups": len(dropped), "first": dropped[0]})
        metrics.deferred_dropped(len(dropped))
    started = deferred.take_settled(r)
    if deferred.analyses_queued(r) == 0 and (taken := deferred.take_next(r)) is not None:
        started.append(taken)
    for fp, count in started:
        log.info("deferred.started", extra={"fingerprint": fp, "count": count})
    if r.zcard(keys.DEFERRED) or deferred.settling(r):
        deferred.keep_draining(r)
        enqueue_drain(app, countdown=deferred.DRAIN_EVERY_S)
    else:
        deferred.stop_draining(r)
        # A group deferred between the look and the stop found the token still set: look again.
        if r.zcard(keys.DEFERRED) and deferred.claim_drain(r):
            enqueue_drain(app, countdown=deferred.DRAIN_EVERY_S)
    return {"started": [fp for fp, _ in started]}
