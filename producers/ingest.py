"""HTTP ingest for log shippers: ``POST /v1/events`` → ErrorEvents → the analysis chain.

Accepts one JSON object, a JSON array (Vector's ``http`` sink with the json codec, Fluent Bit's
``http`` output with ``format json``) or NDJSON (``framing.method = "newline_delimited"`` /
``format json_lines``), optionally gzip- (every member) or deflate-compressed.

By default a batch is checked (size, record count, each record's JSON) and queued whole for the
``intake_batch`` task [intake] in one Redis command, then answered 202 with the count queued:
the shipper's request costs about what a bare LPUSH does, and the events are as durable as
Redis once it is answered (workers/tasks/intake.py takes the batch: the event model, redaction,
grouping, counting, analyses). ``?wait=true`` takes the batch before answering instead, and
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
import gzip
import hashlib
import logging
import secrets
import zlib
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

import redis
import redis.asyncio as aioredis
from celery import Celery
from kombu.exceptions import OperationalError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Route

from producers.replies import JSONReply
from producers.request_guard import LOOPBACK_HOSTS, allowed_hosts_for, guard_middleware
from shared.core.errors import PermanentError
from shared.core.persistence import persistence_warning
from shared.core.pipeline import intake_batch_message
from shared.core.settings import Settings
from shared.intake.batch import BodyError, QueuedBatch, decode_records, parse_batch
from shared.intake.submit import Intake, Submitted

log = logging.getLogger(__name__)

REPLY_LIST_MAX = 100  # rejected / ignored entries listed in a reply (the counts are complete)
RETRY_AFTER_S = 5  # what a 503 asks the shipper to wait


async def read_body(request: Request, limit: int, timeout: float = 30.0) -> bytes:
    """The request body, decompressed, refused with 413 once it passes ``limit`` bytes and with
    408 when it has not all arrived within ``timeout`` seconds."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyError(413, f"body of {declared} bytes exceeds the limit of {limit}")
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BodyError(413, f"body exceeds the limit of {limit} bytes")
                chunks.append(chunk)
    except TimeoutError as exc:
        raise BodyError(408, f"the body did not arrive within {timeout:.0f} s") from exc
    body = b"".join(chunks)
    encoding = request.headers.get("content-encoding", "").lower()
    if encoding in ("gzip", "x-gzip"):
        return _inflate(body, limit, zlib.MAX_WBITS | 16, "gzip")
    if encoding == "deflate":
        return _inflate(body, limit, zlib.MAX_WBITS, "deflate")
    if encoding == "br":  # the Python Sentry SDK's default when brotli is installed
        return _unbrotli(body, limit)
    return body


def _inflate(body: bytes, limit: int, wbits: int, what: str) -> bytes:
    """Every member of a (possibly concatenated) compressed body, at most ``limit`` bytes."""
    out = bytearray()
    data = body
    try:
        while data:
            d = zlib.decompressobj(wbits=wbits)
            out += d.decompress(data, limit + 1 - len(out))
            if len(out) > limit or d.unconsumed_tail:
                raise BodyError(413, f"decompressed body exceeds the limit of {limit} bytes")
            if not d.eof:
                raise BodyError(400, f"bad {what} body: it ends before its compressed data does")
            data = d.unused_data
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise BodyError(400, f"bad {what} body: {exc}") from exc
    return bytes(out)


def _unbrotli(body: bytes, limit: int) -> bytes:
    """A brotli body, at most ``limit`` bytes: the output is bounded as it is produced, so a
    few kilobytes that expand to gigabytes stop at the limit."""
    import brotli

    d = brotli.Decompressor()
    try:
        out = bytearray(d.process(body, output_buffer_limit=limit + 1))
        while len(out) <= limit and not d.can_accept_more_data():
            more = d.process(b"", output_buffer_limit=limit + 1 - len(out))
            if not more:
                break
            out += more
        if len(out) > limit:
            raise BodyError(413, f"decompressed body exceeds the limit of {limit} bytes")
        if not d.is_finished():
            raise BodyError(400, "bad br body: it ends before its compressed data does")
    except brotli.error as exc:
        raise BodyError(400, f"bad br body: {exc}") from exc
    return bytes(out)


def create_app(
    intake: Intake,
    *,
    token: str | None,
    max_body_bytes: int,
    max_trace_bytes: int,
    default_service: str | None = None,
    max_records: int = 10_000,
    read_timeout: float = 30.0,
    sentry_keys: Sequence[str] | None = None,
    sentry_projects: Mapping[str, str] | None = None,
    slack_signing_secret: str | None = None,
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
    allowed_origins: Sequence[str] = (),
) -> Starlette:
    """The ingest ASGI app; ``intake`` redacts, groups and enqueues by task name (no worker
    code is imported). Besides ``/v1/events`` it serves what error SDKs send
    (producers/sdk_routes.py): Sentry envelopes and store events, and OTLP logs.
    ``sentry_keys`` None: any DSN key. Requests from other web pages, to other host names, or
    with a body a page can send without a preflight are refused (producers/request_guard.py).
    """
    from producers.sdk_routes import SdkLimits, SdkRoutes  # it imports this module's helpers

    queue_now = Spool(intake, default_service=default_service, max_records=max_records)

    async def events(request: Request) -> JSONReply:
        if not bearer_ok(request, token):
            return JSONReply(
                {"error": "missing or wrong bearer token"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        params = request.query_params
        try:
            raw = await read_body(request, max_body_bytes, read_timeout)
        except BodyError as exc:
            return JSONReply({"error": str(exc)}, status_code=exc.status)
        # The decompressed body and the query: a retry of this request repeats both (whether
        # it waits or not).
        query = urlencode([(k, v) for k, v in params.multi_items() if k != "wait"])
        digest = hashlib.sha1(raw + query.encode()).hexdigest()
        if params.get("wait", "").lower() not in ("1", "true", "yes"):
            return await queue_now(raw, digest, params.get("service"))
        try:
            records = decode_records(raw, max_records=max_records)
        except BodyError as exc:
            return JSONReply({"error": str(exc)}, status_code=exc.status)
        batch = parse_batch(
            records,
            service=params.get("service"),
            max_trace_bytes=max_trace_bytes,
            default_service=default_service,
            batch_digest=digest,
        )
        try:
            submitted = (
                await run_in_threadpool(intake.submit_many, batch.accepted)
                if batch.accepted
                else []
            )
        except (redis.RedisError, OperationalError, OSError) as exc:
            # Part of the batch may be counted already: the shipper's retry repeats the same
            # event ids, and intake counts each id once.
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

    async def healthz(request: Request) -> JSONReply:
        return JSONReply({"status": "ok"})

    async def readyz(request: Request) -> JSONReply:
        try:
            await run_in_threadpool(_ping, intake.app)
            warning = await run_in_threadpool(persistence_warning, intake.groups.r)
        except Exception as exc:  # any failure to reach the broker means not ready
            return JSONReply({"status": "unavailable", "redis": str(exc)}, status_code=503)
        return JSONReply({"status": "ready", "warnings": [warning] if warning else []})

    limits = SdkLimits(max_body_bytes, max_trace_bytes, max_records, read_timeout)
    # The Slack app's Request URL for button presses (producers/slack_routes.py), when set up.
    slack = []
    if slack_signing_secret:
        from producers.slack_routes import slack_routes

        slack = slack_routes(intake.app, slack_signing_secret, read_timeout=read_timeout)
    return Starlette(
        middleware=guard_middleware(allowed_hosts=allowed_hosts, allowed_origins=allowed_origins),
        routes=[
            Route("/v1/events", events, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            *SdkRoutes(
                intake,
                token=token,
                sentry_keys=sentry_keys,
                sentry_projects=dict(sentry_projects or {}),
                limits=limits,
                default_service=default_service,
            ).routes(),
            *slack,
        ],
    )


def same(given: str, expected: str) -> bool:
    """Constant-time comparison of a credential from a header (bytes: a non-ASCII header
    value is a mismatch, not an exception)."""
    return secrets.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def bearer_ok(request: Request, token: str | None) -> bool:
    """``Authorization: Bearer <token>`` (no token configured: every request)."""
    if token is None:
        return True
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and same(value.strip(), token)


def queue_batch(
    intake: Intake,
    raw: bytes,
    digest: str,
    *,
    service: str | None,
    default_service: str | None,
    max_records: int,
) -> tuple[dict[str, Any], int, tuple[str, bytes] | None]:
    """The default: the batch's JSON checked and made one message for the intake_batch task
    (the caller LPUSHes it: durable once Redis has it, then 202). (reply, status, the queue
    and message, or None when the batch is refused)."""
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
        body=raw.decode("utf-8", errors="replace"),
        digest=digest,
        service=service,
        default_service=default_service,
        max_records=max_records,
    )
    return body, 202, intake_batch_message(intake.app, queued.model_dump())


class Spool:
    """Queues checked batches for the intake_batch task: ``queue_batch``, then an LPUSH
    through redis.asyncio (its client made in the server's event loop, on first use)."""

    def __init__(self, intake: Intake, *, default_service: str | None, max_records: int) -> None:
        self.intake, self.default_service, self.max_records = intake, default_service, max_records
        self.client: aioredis.Redis | None = None

    async def __call__(self, raw: bytes, digest: str, service: str | None) -> JSONReply:
        def check() -> tuple[dict[str, Any], int, tuple[str, bytes] | None]:
            return queue_batch(
                self.intake,
                raw,
                digest,
                service=service,
                default_service=self.default_service,
                max_records=self.max_records,
            )

        # About 7 us a record: on the event loop, unless the body is large enough to hold it up.
        reply, status, message = await run_in_threadpool(check) if len(raw) > 1 << 20 else check()
        if message is not None:
            if self.client is None:
                self.client = aioredis.Redis.from_url(
                    self.intake.settings.redis_url, socket_connect_timeout=5, socket_timeout=10
                )
            try:
                await self.client.lpush(*message)
            except (redis.RedisError, OSError) as exc:
                return unavailable(exc)
        return JSONReply(reply, status_code=status)


def unavailable(exc: Exception) -> JSONReply:
    """Redis out of reach: a 503 the shipper retries after Retry-After."""
    log.warning("ingest.unavailable", extra={"error": f"{type(exc).__name__}: {exc}"})
    return JSONReply(
        {"error": f"cannot reach Redis, retry later: {type(exc).__name__}: {exc}"},
        status_code=503,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def group_replies(submitted: list[Submitted]) -> list[dict[str, Any]]:
    """What became of each accepted event, as the endpoints' replies list it."""
    return [
        {
            "event_id": s.event_id,
            "fingerprint": s.fingerprint,
            "new": s.new,
            "count": s.count,
            "duplicate": s.duplicate,
        }
        for s in submitted
    ]


def _ping(sender: Celery) -> None:
    with sender.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
        conn.default_channel.client.ping()  # the broker's own redis client


def serve(settings: Settings, *, host: str, port: int, service: str | None) -> None:
    """Run the ingest server in the foreground (``tracehound ingest``)."""
    import uvicorn

    from shared.core.pipeline import sender_app
    from shared.intake.submit import intake_for

    token = settings.ingest_token.get_secret_value() if settings.ingest_token else None
    if token is None and host not in ("127.0.0.1", "localhost", "::1"):
        raise PermanentError(
            f"refusing to listen on {host} without TRACEHOUND_INGEST_TOKEN: anyone who can "
            "reach the port could flood the analysis queue"
        )
    app = create_app(
        intake_for(settings, sender_app(settings)),
        token=token,
        max_body_bytes=settings.ingest_max_body_bytes,
        max_trace_bytes=settings.max_trace_bytes,
        default_service=service,
        max_records=settings.ingest_max_records,
        read_timeout=settings.ingest_read_timeout,
        sentry_keys=settings.sentry_key_values,
        sentry_projects=settings.sentry_projects,
        slack_signing_secret=(
            settings.slack_signing_secret.get_secret_value()
            if settings.slack_signing_secret
            else None
        ),
        allowed_hosts=allowed_hosts_for(host, settings.ingest_allowed_hosts),
        allowed_origins=settings.ingest_allowed_origins,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
