"""HTTP ingest for log shippers: ``POST /v1/events`` → ErrorEvents → the analysis chain.

Accepts one JSON object, a JSON array (Vector's ``http`` sink with the json codec, Fluent Bit's
``http`` output with ``format json``) or NDJSON (``framing.method = "newline_delimited"`` /
``format json_lines``), optionally gzip- (every member) or deflate-compressed.

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
import json
import logging
import secrets
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from celery import Celery
from kombu.exceptions import OperationalError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from shared.core.domain import ErrorEvent
from shared.core.errors import PermanentError
from shared.core.persistence import persistence_warning
from shared.core.settings import Settings
from shared.intake.events import Ignored, from_record, from_text
from shared.intake.submit import Intake, Submitted

log = logging.getLogger(__name__)

MAX_DEPTH = 64  # JSON nesting a log record never needs; deeper is refused, not recursed into
REPLY_LIST_MAX = 100  # rejected / ignored entries listed in a reply (the counts are complete)
RETRY_AFTER_S = 5  # what a 503 asks the shipper to wait


class BodyError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Batch:
    accepted: list[ErrorEvent] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    ignored: list[dict[str, Any]] = field(default_factory=list)


def _depth_ok(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests at most ``limit`` levels (iteratively: no recursion to exhaust)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return True


def _loads(text: str, where: str) -> Any:
    try:
        value = json.loads(text)
    except RecursionError as exc:
        raise BodyError(400, f"{where}: JSON nested deeper than {MAX_DEPTH} levels") from exc
    if not _depth_ok(value):
        raise BodyError(400, f"{where}: JSON nested deeper than {MAX_DEPTH} levels")
    return value


def _array_items(text: str, max_records: int) -> Iterator[Any]:
    """The elements of a JSON array, decoded one by one: a 10 MB array of tiny records is
    refused at record ``max_records + 1`` instead of being built whole in memory."""
    decoder = json.JSONDecoder()
    i, n, count = 1, len(text), 0
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i < n and text[i] == "]" and count == 0:
            return
        try:
            value, i = decoder.raw_decode(text, i)
        except RecursionError as exc:
            raise BodyError(400, f"record {count}: JSON nested too deeply") from exc
        except json.JSONDecodeError as exc:
            raise BodyError(400, f"malformed JSON array at character {exc.pos}: {exc.msg}") from exc
        count += 1
        if count > max_records:
            raise BodyError(413, f"more than {max_records} records in one request")
        if not _depth_ok(value):
            raise BodyError(400, f"record {count - 1}: JSON nested deeper than {MAX_DEPTH} levels")
        yield value
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i < n and text[i] == ",":
            i += 1
            continue
        if i < n and text[i] == "]" and not text[i + 1 :].strip():
            return
        raise BodyError(400, f"malformed JSON array at character {i}")


def decode_records(body: bytes, *, max_records: int = 10_000) -> list[Any]:
    """One object, an array, or NDJSON; a malformed NDJSON line is one bad record, not all.
    More than ``max_records`` records is a 413, decided before they are all decoded."""
    text = body.decode("utf-8", errors="replace").strip()
    if not text:
        raise BodyError(400, "empty body: send a JSON object, a JSON array or NDJSON")
    if text.startswith("["):
        return list(_array_items(text, max_records))
    if text.count("\n") >= max_records * 2:  # surely too many lines: say so before splitting
        raise BodyError(413, f"more than {max_records} records in one request")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) > max_records:
        raise BodyError(413, f"more than {max_records} records in one request")
    if len(lines) == 1:
        try:
            return [_loads(text, "body")]
        except json.JSONDecodeError as whole:
            raise BodyError(
                400, f"malformed JSON: {whole.msg} at line {whole.lineno} column {whole.colno}"
            ) from whole
    try:
        return [_loads(text, "body")]  # one object pretty-printed over several lines
    except json.JSONDecodeError:
        pass
    records: list[Any] = []
    for n, line in enumerate(lines, start=1):
        try:
            records.append(_loads(line, f"line {n}"))
        except json.JSONDecodeError as exc:
            records.append(BodyError(400, f"malformed JSON on line {n}: {exc.msg}"))
        except BodyError as exc:
            records.append(exc)
    return records


def record_id(record: Any, batch_digest: str, index: int) -> str:
    """The id a shipper's retry repeats: the record's own ``id``, else a hash of the request
    body and the record's place in it. A retried batch is the same body (Vector and Fluent Bit
    resend the same request), so its events get the same ids; two identical records — the same
    error twice in one millisecond — are still two events."""
    if isinstance(record, dict) and record.get("id") not in (None, ""):
        return str(record["id"])[:200]
    return hashlib.sha1(f"{batch_digest}:{index}".encode()).hexdigest()[:32]


def parse_batch(
    records: list[Any],
    *,
    service: str | None,
    max_trace_bytes: int,
    default_service: str | None = None,
    batch_digest: str = "",
) -> Batch:
    """Each record through the one event model (shared/intake/events.py): a JSON object, or a
    JSON string holding a trace or log text; what is not an error is ignored with the reason.

    ``service`` (the request's ``?service=``) names every record's service; without it a
    record's own ``service`` field does, else the server's ``default_service``.
    """
    batch = Batch()
    for i, record in enumerate(records):
        if isinstance(record, BodyError):
            batch.rejected.append({"index": i, "error": str(record)})
            continue
        try:
            if isinstance(record, dict):
                own = record.get("service") not in (None, "")
                found = from_record(
                    record,
                    origin="sent",
                    service=service or (None if own else default_service),
                    repo=None,
                    max_bytes=max_trace_bytes,
                )
            elif isinstance(record, str):
                found = from_text(
                    record,
                    origin="sent",
                    service=service or default_service,
                    repo=None,
                    max_bytes=max_trace_bytes,
                )
            else:
                raise PermanentError(
                    f"event must be a JSON object or string, got {type(record).__name__}"
                )
        except PermanentError as exc:
            batch.rejected.append({"index": i, "error": str(exc)})
        except ValueError as exc:  # pydantic: a field of the wrong type
            batch.rejected.append({"index": i, "error": _first_line(str(exc))})
        else:
            if isinstance(found, Ignored):
                batch.ignored.append({"index": i, "reason": found.reason})
            else:
                event_id = record_id(record, batch_digest, i)
                batch.accepted.append(found.model_copy(update={"id": event_id}))
    return batch


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " ".join(lines[1:3]) if len(lines) > 1 else text


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
) -> Starlette:
    """The ingest ASGI app; ``intake`` redacts, groups and enqueues by task name (no worker
    code is imported). Besides ``/v1/events`` it serves what error SDKs send
    (producers/sdk_routes.py): Sentry envelopes and store events, and OTLP logs.
    ``sentry_keys`` None: the token is the DSN key (and with no token any key is accepted)."""
    from producers.sdk_routes import SdkLimits, SdkRoutes  # it imports this module's helpers

    def authorized(request: Request) -> bool:
        if token is None:
            return True
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(value.strip(), token)

    async def events(request: Request) -> JSONResponse:
        if not authorized(request):
            return JSONResponse(
                {"error": "missing or wrong bearer token"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        try:
            raw = await read_body(request, max_body_bytes, read_timeout)
            records = decode_records(raw, max_records=max_records)
        except BodyError as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        batch = parse_batch(
            records,
            service=request.query_params.get("service"),
            max_trace_bytes=max_trace_bytes,
            default_service=default_service,
            # The decompressed body and the query: a retry of this request repeats both.
            batch_digest=hashlib.sha1(raw + str(request.query_params).encode()).hexdigest(),
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
            log.warning("ingest.unavailable", extra={"error": f"{type(exc).__name__}: {exc}"})
            return JSONResponse(
                {"error": f"cannot reach Redis, retry later: {type(exc).__name__}: {exc}"},
                status_code=503,
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
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
            return JSONResponse({**body, "error": first}, status_code=400)
        return JSONResponse(body, status_code=202)

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        try:
            await run_in_threadpool(_ping, intake.app)
            warning = await run_in_threadpool(persistence_warning, intake.groups.r)
        except Exception as exc:  # any failure to reach the broker means not ready
            return JSONResponse({"status": "unavailable", "redis": str(exc)}, status_code=503)
        return JSONResponse({"status": "ready", "warnings": [warning] if warning else []})

    limits = SdkLimits(max_body_bytes, max_trace_bytes, max_records, read_timeout)
    # The Slack app's Request URL for button presses (producers/slack_routes.py), when set up.
    slack = []
    if slack_signing_secret:
        from producers.slack_routes import slack_routes

        slack = slack_routes(intake.app, slack_signing_secret, read_timeout=read_timeout)
    return Starlette(
        routes=[
            Route("/v1/events", events, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            *SdkRoutes(
                intake,
                token=token,
                sentry_keys=[token] if sentry_keys is None and token else sentry_keys,
                sentry_projects=dict(sentry_projects or {}),
                limits=limits,
                default_service=default_service,
            ).routes(),
            *slack,
        ]
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
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
