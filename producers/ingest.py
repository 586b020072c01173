"""HTTP ingest for log shippers: ``POST /v1/events`` → ErrorEvents → the analysis chain.

Accepts one JSON object, a JSON array (Vector's ``http`` sink with the json codec, Fluent Bit's
``http`` output with ``format json``) or NDJSON (``framing.method = "newline_delimited"`` /
``format json_lines``), optionally gzip-compressed.
"""

from __future__ import annotations

import gzip
import json
import logging
import secrets
import zlib
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from shared.core.domain import ErrorEvent
from shared.core.errors import PermanentError
from shared.core.settings import Settings
from shared.intake.events import Ignored, from_record, from_text
from shared.intake.submit import Intake, Submitted

log = logging.getLogger(__name__)


class BodyError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Batch:
    accepted: list[ErrorEvent] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    ignored: list[dict[str, Any]] = field(default_factory=list)


def decode_records(body: bytes) -> list[Any]:
    """One object, an array, or NDJSON; a malformed NDJSON line is one bad record, not all."""
    text = body.decode("utf-8", errors="replace").strip()
    if not text:
        raise BodyError(400, "empty body: send a JSON object, a JSON array or NDJSON")
    try:
        parsed = json.loads(text)
        return parsed if isinstance(parsed, list) else [parsed]
    except json.JSONDecodeError as whole:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if len(lines) < 2:
            raise BodyError(
                400, f"malformed JSON: {whole.msg} at line {whole.lineno} column {whole.colno}"
            ) from whole
    records: list[Any] = []
    for n, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            records.append(BodyError(400, f"malformed JSON on line {n}: {exc.msg}"))
    return records


def parse_batch(
    records: list[Any],
    *,
    service: str | None,
    max_trace_bytes: int,
    default_service: str | None = None,
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
                batch.accepted.append(found)
    return batch


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " ".join(lines[1:3]) if len(lines) > 1 else text


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, decompressed, refused with 413 once it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyError(413, f"body of {declared} bytes exceeds the limit of {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyError(413, f"body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    if request.headers.get("content-encoding", "").lower() in ("gzip", "x-gzip"):
        try:
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            body = d.decompress(body, limit + 1)
        except (zlib.error, gzip.BadGzipFile) as exc:
            raise BodyError(400, f"bad gzip body: {exc}") from exc
        if len(body) > limit:
            raise BodyError(413, f"decompressed body exceeds the limit of {limit} bytes")
    return body


def create_app(
    intake: Intake,
    *,
    token: str | None,
    max_body_bytes: int,
    max_trace_bytes: int,
    default_service: str | None = None,
) -> Starlette:
    """The ingest ASGI app; ``intake`` redacts, groups and enqueues by task name (no worker
    code is imported)."""

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
            records = decode_records(await read_body(request, max_body_bytes))
        except BodyError as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        batch = parse_batch(
            records,
            service=request.query_params.get("service"),
            max_trace_bytes=max_trace_bytes,
            default_service=default_service,
        )
        submitted = (
            await run_in_threadpool(_submit_all, intake, batch.accepted) if batch.accepted else []
        )
        log.info(
            "ingest.batch",
            extra={
                "accepted": len(batch.accepted),
                "rejected": len(batch.rejected),
                "ignored": len(batch.ignored),
            },
        )
        body = {
            "accepted": [e.id for e in batch.accepted],
            # new: this event started an analysis; otherwise it was counted in its group.
            "groups": [
                {
                    "event_id": s.event_id,
                    "fingerprint": s.fingerprint,
                    "new": s.new,
                    "count": s.count,
                }
                for s in submitted
            ],
            "rejected": batch.rejected,
            "ignored": batch.ignored,
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
        except Exception as exc:  # any failure to reach the broker means not ready
            return JSONResponse({"status": "unavailable", "redis": str(exc)}, status_code=503)
        return JSONResponse({"status": "ready"})

    return Starlette(
        routes=[
            Route("/v1/events", events, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
        ]
    )


def _submit_all(intake: Intake, events: list[ErrorEvent]) -> list[Submitted]:
    return [intake.submit(event) for event in events]


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
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
