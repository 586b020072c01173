"""HTTP ingest for log shippers: ``POST /v1/events`` → ErrorEvents → the analysis chain.

Accepts one JSON object, a JSON array (Vector's ``http`` sink with the json codec, Fluent Bit's
``http`` output with ``format json``) or NDJSON (``framing.method = "newline_delimited"`` /
``format json_lines``), optionally gzip- (every member) or deflate-compressed.

By default a batch is checked (size, record count, each record's JSON) and queued whole for the
``intake_batch`` task [intake] in one Redis MULTI (its body under its own key, its message
small), then answered 202 with the count queued: the shipper's request costs about what a
bare LPUSH does, and the events are as durable as Redis once it is answered
(workers/tasks/intake.py takes the batch: the event model, redaction, grouping, counting,
analyses). ``?wait=true`` takes the batch before answering instead, and
the reply says what became of each record (accepted ids and their groups, rejected and
ignored ones with the reason).

It answers as a sink that shippers can retry safely: Vector retries 429 and 5xx and gives up on
other 4xx; Fluent Bit retries a failed flush up to its Retry_Limit. So Redis out of reach is a
503 with Retry-After, a body that can never be accepted is a 4xx, and every event has an id that
a retry repeats (the record's own ``id``, else a hash of the record), so intake counts a retried
batch once. Bodies are bounded in bytes, records, nesting and read time.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import redis
import redis.asyncio as aioredis
from kombu.exceptions import OperationalError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from producers.ingest.auth import bearer_ok
from producers.ingest.body import read_body
from producers.ingest.metrics import BACKLOG, LAG, REDIS
from producers.ingest.replies import (
    REPLY_LIST_MAX,
    JSONReply,
    backlogged,
    group_replies,
    lagging,
    unavailable,
)
from shared.core import keys, queues
from shared.core.pipeline import intake_batch_message
from shared.groups.submit import Intake
from shared.intake.batch import (
    BodyError,
    QueuedBatch,
    batches_message,
    decode_records,
    parse_batch,
    queue_body,
)

log = logging.getLogger(__name__)

INTAKE_QUEUE = queues.ROUTES[queues.INTAKE_BATCH]  # its length is the backlog


class EventsRoute:
    """``POST /v1/events``: a shipper's batch queued whole (the default) or taken before the
    answer (``?wait=true``). ``refused`` is told the reason of each 503 (the metrics)."""

    def __init__(
        self,
        intake: Intake,
        *,
        token: str | None,
        max_body_bytes: int,
        max_trace_bytes: int,
        default_service: str | None,
        max_records: int,
        read_timeout: float,
        refused: Callable[[str], None],
    ) -> None:
        self.intake, self.token, self.refused = intake, token, refused
        self.max_body_bytes, self.max_trace_bytes = max_body_bytes, max_trace_bytes
        self.default_service, self.max_records = default_service, max_records
        self.read_timeout = read_timeout
        self.queue_now = Spool(
            intake, default_service=default_service, max_records=max_records, refused=refused
        )

    async def handle(self, request: Request) -> JSONReply:
        if not bearer_ok(request, self.token):
            return JSONReply(
                {"error": "missing or wrong bearer token"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        params = request.query_params
        try:
            raw = await read_body(request, self.max_body_bytes, self.read_timeout)
        except BodyError as exc:
            return JSONReply({"error": str(exc)}, status_code=exc.status)
        # The decompressed body and the query: a retry of this request repeats both (whether
        # it waits or not).
        query = urlencode([(k, v) for k, v in params.multi_items() if k != "wait"])
        digest = hashlib.sha1(raw + query.encode()).hexdigest()
        if params.get("wait", "").lower() not in ("1", "true", "yes"):
            return await self.queue_now(raw, digest, params.get("service"))
        try:
            records = decode_records(raw, max_records=self.max_records)
        except BodyError as exc:
            return JSONReply({"error": str(exc)}, status_code=exc.status)
        batch = parse_batch(
            records,
            service=params.get("service"),
            max_trace_bytes=self.max_trace_bytes,
            default_service=self.default_service,
            batch_digest=digest,
        )
        try:
            submitted = (
                await run_in_threadpool(self.intake.submit_many, batch.accepted)
                if batch.accepted
                else []
            )
        except (redis.RedisError, OperationalError, OSError) as exc:
            # Part of the batch may be counted already: the shipper's retry repeats the same
            # event ids, and intake counts each id once.
            self.refused(REDIS)
            return unavailable(exc)
        log.info(
            "ingest.batch",
            extra={
                "accepted": len(batch.accepted),
                "rejected": len(batch.rejected),
                "ignored": len(batch.ignored),
                "duplicates": sum(s.duplicate for s in submitted),
            },
        )
        body = {
            "accepted": [e.id for e in batch.accepted],
            # new: this event started an analysis; duplicate: its id was counted before (a
            # retry); otherwise it was counted in its group.
            "groups": group_replies(submitted),
            "rejected": batch.rejected[:REPLY_LIST_MAX],
            "rejected_count": len(batch.rejected),
            "ignored": batch.ignored[:REPLY_LIST_MAX],
            "ignored_count": len(batch.ignored),
        }
        if batch.rejected and not batch.accepted and not batch.ignored:
            first = batch.rejected[0]["error"]
            return JSONReply({**body, "error": first}, status_code=400)
        return JSONReply(body, status_code=202)


@dataclass(frozen=True)
class Outgoing:
    """A checked batch to queue: what its ``intake_batch`` message says of it, and its body,
    kept under its own key (shared/intake/batch.py ``queue_body``)."""

    queued: QueuedBatch
    raw: bytes


def queue_batch(
    raw: bytes,
    digest: str,
    *,
    service: str | None,
    default_service: str | None,
    max_records: int,
) -> tuple[dict[str, Any], int, Outgoing | None]:
    """The default: the batch's JSON checked and made one message for the intake_batch task
    (the caller queues it: durable once Redis has it, then 202). (reply, status, what to
    queue, or None when the batch is refused)."""
    try:
        records = decode_records(raw, max_records=max_records)
    except BodyError as exc:
        return {"error": str(exc)}, exc.status, None
    rejected = [
        {"index": i, "error": str(r)} for i, r in enumerate(records) if isinstance(r, BodyError)
    ]
    body: dict[str, Any] = {
        "queued": len(records) - len(rejected),
        "batch": digest,
        "rejected": rejected[:REPLY_LIST_MAX],
        "rejected_count": len(rejected),
    }
    if not records:  # an empty array: nothing to queue, nothing wrong
        return body, 202, None
    if len(rejected) == len(records):
        return {**body, "error": rejected[0]["error"]}, 400, None
    queued = QueuedBatch(
        body_id=uuid.uuid4().hex,
        digest=digest,
        service=service,
        default_service=default_service,
        max_records=max_records,
    )
    return body, 202, Outgoing(queued, raw)


class Spool:
    """Queues checked batches for the intake_batch task: ``queue_batch``, then the body's SET
    and the message's LPUSH in one MULTI through redis.asyncio (its client made in the
    server's event loop, on first use).

    A group commit: the batches checked while a MULTI is on its way to Redis go together in
    the next one, as one message of up to ``MAX_GROUP`` batches, and each is answered once
    that MULTI is done (never sooner: a 202 still means in Redis). While messages wait for the
    workers, a batch also waits up to ``ingest_linger`` for others to join it; with none
    waiting it is queued at once. The intake worker's consumer then fetches, restores and
    acks one message for several requests (shared/intake/batch.py ``QueuedBatches`` says why
    that was most of its cost; docs/benchmarks.md has the rates before and after).

    Backpressure: every LPUSH answers the queue's length (in messages), so the spool knows the
    backlog at no extra cost. Past ``ingest_max_backlog`` messages it answers 503 with
    Retry-After (what Vector, Fluent Bit and the SDKs retry) instead of queuing more, and asks
    Redis for the length again at most every ``RECHECK_S`` until the intake worker has caught
    up.

    A bound in batches holds the lag only on a machine as fast as the one it was chosen on (500
    batches were 2.5 s of the intake worker's work on one, 3.7 s on a slower one), so the lag
    is bounded too. While batches wait, the spool reads at most every ``LAG_RECHECK_S`` the
    queue's length and how many messages the workers have taken (keys.INTAKE_TAKEN). The wait
    of a batch accepted now is the length over the workers' pace in the last seconds, read
    only while they were busy all along (see ``_wait``), or, when they took nothing, how long
    they have not; past ``ingest_max_lag`` seconds it answers 503 with Retry-After until the
    workers have caught up. Not the oldest batch's age: while more arrives than is taken, a
    queue one second old holds more than a second of the workers' work (measured: lag p50
    1.5 s, p99 3-4 s with a 1-s bound on it); a message kombu restored after its visibility
    timeout sits at the tail with its first send time; and send times are other ingest
    servers' clocks."""

    RECHECK_S = 0.5
    LAG_RECHECK_S = 0.1
    MAX_GROUP = 16  # batches in one message: a redelivery redoes at most these
    PACE_S = 2.0  # the workers' pace is read over the last two seconds …
    PACE_MIN_S = 0.5  # … once half a second of it has been seen
    # A busy pace read stands in this long while none can be read. In a storm a window busy
    # at every reading comes seldom (the queue runs dry at each wave of Retry-After): at five
    # seconds the lag p99 went back to 2.7 s. The cost: workers that sped up since (scaled
    # out) and keep the queue short but never empty at a reading are held to the old pace
    # until a busy window is read again, at most this long.
    PACE_KEPT_S = 60.0

    def __init__(
        self,
        intake: Intake,
        *,
        default_service: str | None,
        max_records: int,
        refused: Callable[[str], None],
    ) -> None:
        self.intake, self.default_service, self.max_records = intake, default_service, max_records
        self.refused = refused
        self.max_backlog = intake.settings.ingest_max_backlog
        self.client: aioredis.Redis | None = None
        self.backlog = 0  # the queue's length as Redis last said it
        self.backlog_at = 0.0
        self.max_lag = intake.settings.ingest_max_lag
        self.linger = intake.settings.ingest_linger
        self.lag = 0.0  # seconds a batch accepted now would wait, as last worked out
        self.lag_at = 0.0
        # (when, batches taken by then, the queue's length then)
        self.taken: deque[tuple[float, int, int]] = deque()
        self.pace = 0.0  # batches a second, the last read while the workers were busy
        self.pace_at = 0.0
        # Checked batches waiting for the next MULTI, each with its request's answer to come.
        self.waiting: list[tuple[Outgoing, asyncio.Future[None]]] = []
        self.committer: asyncio.Task[None] | None = None
        self.group_full: asyncio.Event | None = None  # made in the server's loop, as the client

    async def __call__(self, raw: bytes, digest: str, service: str | None) -> JSONReply:
        def check() -> tuple[dict[str, Any], int, Outgoing | None]:
            return queue_batch(
                raw,
                digest,
                service=service,
                default_service=self.default_service,
                max_records=self.max_records,
            )

        # Past the bound, refused before its body is read as JSON: refusing must cost far less
        # than taking, or an overload spends the front door on its own 503s.
        if (refusal := await self.refusal()) is not None:
            return refusal[1]
        # About 7 us a record: on the event loop, unless the body is large enough to hold it up.
        reply, status, message = await run_in_threadpool(check) if len(raw) > 1 << 20 else check()
        if message is not None:
            try:
                await self.queue(message)
            except (redis.RedisError, OSError) as exc:
                self.refused(REDIS)
                return unavailable(exc)
        return JSONReply(reply, status_code=status)

    async def refusal(self) -> tuple[str, JSONReply] | None:
        """Why a batch is not to be queued now, and the 503 that says so (the metrics' reason:
        the backlog or the lag past its bound, Redis out of reach); None to queue it."""
        if self.client is None:
            self.client = aioredis.Redis.from_url(
                self.intake.settings.redis_url, socket_connect_timeout=5, socket_timeout=10
            )
        try:
            if self.backlog >= self.max_backlog:
                if time.monotonic() - self.backlog_at >= self.RECHECK_S:
                    self.backlog = await self.client.llen(INTAKE_QUEUE)
                    self.backlog_at = time.monotonic()
                if self.backlog >= self.max_backlog:
                    self.refused(BACKLOG)
                    return BACKLOG, backlogged(self.backlog, self.max_backlog)
            if await self._lagging():
                self.refused(LAG)
                return LAG, lagging(self.lag, self.max_lag)
        except (redis.RedisError, OSError) as exc:
            self.refused(REDIS)
            return REDIS, unavailable(exc)
        return None

    async def queue(self, message: Outgoing) -> None:
        """Once ``message`` is in Redis, with the others of its group (after ``refusal`` said
        None: it makes the client). Redis errors propagate."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append((message, done))
        if self.group_full is None:
            self.group_full = asyncio.Event()
        if len(self.waiting) >= self.MAX_GROUP:
            self.group_full.set()
        if self.committer is None or self.committer.done():
            self.committer = asyncio.create_task(self._commit_waiting())
        await done

    async def _commit_waiting(self) -> None:
        """Every waiting batch queued, ``MAX_GROUP`` a message; each request told the outcome
        of its own MULTI."""
        while self.waiting:
            if self.linger > 0 and self.backlog > 1 and len(self.waiting) < self.MAX_GROUP:
                # Messages wait for the workers besides the last one queued: a message queued
                # now waits for them anyway, so it waits here a little for others to share it
                # (Kafka's linger.ms). With none waiting, a batch is queued at once.
                assert self.group_full is not None
                self.group_full.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.group_full.wait(), self.linger)
            group = self.waiting[: self.MAX_GROUP]
            del self.waiting[: self.MAX_GROUP]
            try:
                await self._commit([m for m, _ in group])
            except BaseException as exc:  # a cancelled server too: no request waits forever
                for _, done in group:
                    if not done.done():
                        done.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                for _, done in group:
                    if not done.done():
                        done.set_result(None)

    async def _commit(self, group: list[Outgoing]) -> None:
        """The group's bodies and their one message in one MULTI: all in Redis, or none."""
        assert self.client is not None
        queue, message = intake_batch_message(
            self.intake.app, batches_message([m.queued for m in group])
        )
        pipe = self.client.pipeline(transaction=True)
        for m in group:
            assert m.queued.body_id is not None
            queue_body(pipe, m.queued.body_id, m.raw)
        pipe.lpush(queue, message)
        *_, self.backlog = await pipe.execute()
        self.backlog_at = time.monotonic()

    async def _lagging(self) -> bool:
        """Whether a batch accepted now would wait past ``ingest_max_lag`` (worked out again
        at most every ``LAG_RECHECK_S``; nothing to read while the queue is empty)."""
        if self.max_lag <= 0 or self.backlog == 0:
            return False
        now = time.monotonic()
        if now - self.lag_at >= self.LAG_RECHECK_S:
            self.lag_at = now  # before the round trip: requests meanwhile use the last answer
            assert self.client is not None
            pipe = self.client.pipeline(transaction=False)
            pipe.llen(INTAKE_QUEUE)
            pipe.get(keys.INTAKE_TAKEN)
            self.backlog, taken = await pipe.execute()
            self.lag = self._wait(now, int(taken or 0))
        return self.lag > self.max_lag

    def _wait(self, now: float, taken: int) -> float:
        """How long a batch accepted now would wait, from the last ``PACE_S`` seconds of
        (length, batches taken) — read only if batches waited at every reading of them and
        ``PACE_MIN_S`` of it has been seen: only a busy worker's pace is its speed (while it
        idles, what it takes is what arrives, and a burst after a quiet spell would be
        refused for being long against a slow arrival rate). The length over that pace;
        when nothing was taken (the workers stopped), how long nothing has been.

        Until a busy pace can be read again (for ``PACE_S`` after the queue ran dry), the last
        one read stands in: in a storm the queue runs dry while the shippers wait out their
        Retry-After, and they come back together, behind their schedule. Measured without it:
        the queue grew to the batch bound in those two seconds, 3 s of the workers' work."""
        self.taken.append((now, taken, self.backlog))
        while self.taken and now - self.taken[0][0] > self.PACE_S:
            self.taken.popleft()
        since, before, _ = self.taken[0]
        if now - since >= self.PACE_MIN_S and all(length > 0 for _, _, length in self.taken):
            if taken <= before:
                return now - since
            self.pace, self.pace_at = (taken - before) / (now - since), now
            return self.backlog / self.pace
        if self.pace > 0 and now - self.pace_at <= self.PACE_KEPT_S:
            return self.backlog / self.pace
        return 0.0
