"""What error SDKs send to ``tracehound ingest``: Sentry envelopes and OTLP logs → the chain.

- ``POST /api/<project>/envelope/`` and the older ``/api/<project>/store/``: a Sentry SDK whose
  DSN points here (``http://<key>@host:8080/<project>``). The key is checked against the
  configured DSN keys (``X-Sentry-Auth: Sentry sentry_key=…``, ``Authorization: Sentry …`` or
  ``?sentry_key=``). Event items are checked (JSON objects) and queued for the intake worker
  as ``/v1/events`` queues a batch (its Spool: one message for the requests checked together,
  the same backlog and lag bounds); the worker makes them ErrorEvents (shared/intake/sentry.py,
  shared/intake/batch.py ``sentry_batch``). Every other item type is dropped and counted, with
  a 200, since an SDK that gets errors backs off or retries. The reply is what SDKs expect:
  ``{"id": "<event_id>"}``; past the bounds a 429 with Retry-After, which SDKs honour by
  sending nothing for that long.
- ``POST /v1/logs``: OTLP/HTTP logs, protobuf or JSON (shared/intake/otlp.py), with the same
  bearer token as ``/v1/events``; the reply is an ``ExportLogsServiceResponse`` in the
  request's encoding. ``POST /v1/traces`` likewise, for the exceptions recorded on spans.
  The records are made ErrorEvents here (the reply's ``partialSuccess`` says which were
  refused) and queued for the intake worker to redact, group and count, under the same
  bounds: past them a 503 with Retry-After, which exporters retry.

With ``TRACEHOUND_SENTRY_UPSTREAM`` set, every Sentry request these routes took (200) is also
queued as it was sent, in one script call, for the upstream Sentry (upstream.py,
upstream_queue.py, forwarder.py); the SDK's answer does not wait for the upstream.

Both keep ``/v1/events``'s guarantees: bounded bodies and item counts, gzip/deflate/br bodies,
503 with Retry-After when Redis is out of reach (SDKs and OTLP exporters retry it), and ids a
retry repeats (the Sentry ``event_id``; a hash of the OTLP record), counted once by intake.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import re
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from producers.ingest.auth import bearer_ok, same
from producers.ingest.body import decoded, inflate, read_body, read_raw
from producers.ingest.events import Outgoing, Spool
from producers.ingest.metrics import REDIS
from producers.ingest.replies import JSONReply
from producers.ingest.replies import unavailable as ingest_unavailable
from producers.ingest.upstream import Kind, Taken, taken
from producers.ingest.upstream_queue import UpstreamQueue
from shared.intake import otlp
from shared.intake.batch import BodyError, QueuedBatch, loads
from shared.intake.sentry import (
    EnvelopeError,
    TooManyItems,
    auth_key,
    parse_envelope,
    project_target,
)

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
PROJECT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class SdkLimits:
    max_body_bytes: int
    max_trace_bytes: int
    max_records: int  # Sentry envelope items / OTLP log records per request
    read_timeout: float


def event_payload(payload: Any, envelope_id: str) -> dict[str, Any]:
    """A Sentry event item's payload as queued: a JSON object with its ``event_id`` (its own,
    else the envelope's, as SDKs send one of them; at most 200 characters)."""
    if not isinstance(payload, dict):
        raise BodyError(400, "an event payload must be a JSON object")
    return {**payload, "event_id": str(payload.get("event_id") or envelope_id)[:200]}


def _store_body(raw: bytes, limit: int) -> bytes:
    """A store request's JSON; very old SDKs sent it base64-encoded and zlib-compressed."""
    if raw.lstrip()[:1] in (b"{", b""):
        return raw
    try:
        packed = base64.b64decode(raw, validate=False)
    except (binascii.Error, ValueError) as exc:
        raise BodyError(400, "store body is neither JSON nor base64") from exc
    return inflate(packed, limit, zlib.MAX_WBITS, "deflate")


@dataclass(frozen=True)
class SdkRoutes:
    """The Sentry and OTLP routes of the ingest app and what they need."""

    token: str | None
    sentry_keys: Sequence[str] | None  # None: any key (loopback, no token); empty: none
    sentry_projects: dict[str, str]  # with a map, an id not in it is refused
    limits: SdkLimits
    default_service: str | None
    refused: Callable[[str], None]  # told the reason of each 503 (the metrics)
    spool: Spool  # /v1/events's queue: Sentry requests' events go to the intake worker too
    upstream: UpstreamQueue | None = None  # TRACEHOUND_SENTRY_UPSTREAM: taken requests go on

    def routes(self) -> list[Route]:
        return [
            Route("/api/{project_id}/envelope/", self.envelope, methods=["POST"]),
            Route("/api/{project_id}/store/", self.store, methods=["POST"]),
            Route("/v1/logs", self.logs, methods=["POST"]),
            Route("/v1/traces", self.traces, methods=["POST"]),
        ]

    # --- Sentry ------------------------------------------------------------------------------

    def sentry_denied(self, request: Request) -> JSONReply | None:
        project = request.path_params["project_id"]
        if not PROJECT_ID.fullmatch(project):
            # The id names the service when it is not mapped: keep it a short plain name.
            return JSONReply({"detail": "a project id is up to 64 letters, digits, - or _"}, 400)
        if self.sentry_projects and project not in self.sentry_projects:
            return JSONReply(
                {"detail": f"unknown project {project} (not in TRACEHOUND_SENTRY_PROJECTS)"}, 403
            )
        if self.sentry_keys is None:
            return None
        if not self.sentry_keys:
            return JSONReply(
                {"detail": "no DSN key is configured here (TRACEHOUND_SENTRY_KEYS)"}, 401
            )
        given = ""
        for header in ("x-sentry-auth", "authorization"):
            value = request.headers.get(header, "")
            if value[:7].lower() == "sentry ":
                given = auth_key(value)
                break
        given = given or request.query_params.get("sentry_key", "")
        if not given:
            return JSONReply({"detail": "missing sentry_key (check the DSN)"}, 401)
        if not any(same(given, k) for k in self.sentry_keys):
            return JSONReply({"detail": "unknown sentry_key (check the DSN)"}, 403)
        return None

    async def sentry_reply(
        self,
        project: str,
        event_id: str,
        payloads: list[dict[str, Any]],
        dropped: Counter[str],
        sent: Taken | None = None,
    ) -> Response:
        """A Sentry request's events queued for the intake worker, as ``/v1/events`` queues a
        batch (one message with the other requests checked meanwhile; the same bounds), then
        200: they are in Redis. Past the bounds, 429 with Retry-After: what makes a Sentry SDK
        stop sending for that long (sentry_sdk/transport.py ``_update_rate_limits``;
        @sentry/core's ``updateRateLimits``), where a 503 only drops the event and the next
        comes at once. Redis out of reach stays a 503."""
        if payloads:
            if (refused := await self.spool.refusal()) is not None:
                reason, reply = refused
                if reason == REDIS:
                    return reply
                return Response(
                    bytes(reply.body),
                    status_code=429,
                    headers={"Retry-After": reply.headers["retry-after"]},
                    media_type="application/json",
                )
            body = b"\n".join(orjson.dumps(p) for p in payloads)
            service, repo = project_target(self.sentry_projects, project)
            queued = QueuedBatch(
                digest=hashlib.sha1(body).hexdigest(),
                body_id=uuid.uuid4().hex,
                service=service,
                repo=repo,
                kind="sentry",
                project=project,
                max_records=self.limits.max_records,
            )
            if (failed := await self.queue(queued, body)) is not None:
                return failed
        if (forward := self.forward(sent)) is not None:
            try:
                await run_in_threadpool(forward)
            except (redis.RedisError, OSError) as exc:
                # Queued already: the SDK's retry repeats the event ids, counted once.
                self.refused(REDIS)
                return ingest_unavailable(exc)
        log.info(
            "ingest.sentry",
            extra={"project": project, "queued": len(payloads), "dropped": dict(dropped)},
        )
        ids = [str(p["event_id"]) for p in payloads]
        body_reply: dict[str, Any] = {"id": (ids[0] if ids else "") or event_id}
        # Beyond what SDKs read: what was queued, and what was dropped here and why. An event
        # the event model cannot use is logged by the intake worker (intake.rejected).
        body_reply |= {"queued": ids, "dropped": dict(dropped)}
        return JSONReply(body_reply, status_code=200)

    async def queue(self, queued: QueuedBatch, body: bytes) -> Response | None:
        """``body`` in Redis for the intake worker, with the other requests' batches checked
        meanwhile; the 503 to answer when Redis is out of reach."""
        try:
            await self.spool.queue(Outgoing(queued, body))
        except (redis.RedisError, OSError) as exc:
            self.refused(REDIS)
            return ingest_unavailable(exc)
        return None

    def forward(self, sent: Taken | None) -> Callable[[], object] | None:
        """Queue a request intake took for the upstream Sentry (one script call). Refused
        requests are not forwarded: a bad key or project would fill the queue with what the
        upstream refuses too, and a body over the limit is never kept."""
        upstream = self.upstream
        if upstream is None or sent is None:
            return None
        return lambda: upstream.push(sent.meta(), sent.body)

    async def read(self, request: Request, kind: Kind) -> tuple[bytes, Taken | None]:
        """The body decompressed, and the request as sent when it is to be forwarded."""
        limits = self.limits
        raw = await read_raw(request, limits.max_body_bytes, limits.read_timeout)
        body = decoded(raw, request.headers.get("content-encoding", ""), limits.max_body_bytes)
        return body, taken(request, kind, raw) if self.upstream is not None else None

    async def envelope(self, request: Request) -> Response:
        project = request.path_params["project_id"]
        if denied := self.sentry_denied(request):
            return denied
        limits = self.limits
        try:
            raw, sent = await self.read(request, "envelope")
            env = parse_envelope(raw, max_items=limits.max_records)
        except BodyError as exc:
            return JSONReply({"detail": str(exc)}, status_code=exc.status)
        except TooManyItems as exc:
            return JSONReply({"detail": str(exc)}, status_code=413)
        except EnvelopeError as exc:
            return JSONReply({"detail": f"malformed envelope: {exc}"}, status_code=400)
        payloads: list[dict[str, Any]] = []
        dropped: Counter[str] = Counter()
        for n, item in enumerate(env.items):
            if item.type != "event":
                dropped[item.type] += 1  # transactions, sessions, client reports, attachments…
                continue
            try:
                payload = loads(item.payload.decode("utf-8", errors="replace"), f"item {n}")
                payloads.append(event_payload(payload, env.event_id))
            except json.JSONDecodeError as exc:
                return JSONReply(
                    {"detail": f"malformed envelope: item {n} is not JSON: {exc.msg}"}, 400
                )
            except BodyError as exc:
                return JSONReply({"detail": f"item {n}: {exc}"}, status_code=exc.status)
        return await self.sentry_reply(project, env.event_id, payloads, dropped, sent)

    async def store(self, request: Request) -> Response:
        project = request.path_params["project_id"]
        if denied := self.sentry_denied(request):
            return denied
        limits = self.limits
        try:
            raw, sent = await self.read(request, "store")
            payload = loads(_store_body(raw, limits.max_body_bytes).decode(errors="replace"), "")
            event = event_payload(payload, "")
        except BodyError as exc:
            return JSONReply({"detail": str(exc)}, status_code=exc.status)
        except json.JSONDecodeError as exc:
            return JSONReply({"detail": f"malformed event JSON: {exc.msg}"}, 400)
        return await self.sentry_reply(project, event["event_id"], [event], Counter(), sent)

    # --- OTLP --------------------------------------------------------------------------------

    def token_ok(self, request: Request) -> bool:
        return bearer_ok(request, self.token)

    async def logs(self, request: Request) -> Response:
        return await self.otlp_export(request, otlp.LOGS)

    async def traces(self, request: Request) -> Response:
        return await self.otlp_export(request, otlp.TRACES)

    async def otlp_export(self, request: Request, signal: otlp.Signal) -> Response:
        if not self.token_ok(request):
            return JSONReply(
                {"error": "missing or wrong bearer token"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind not in (PROTOBUF, "application/json"):
            return JSONReply(
                {"error": f"content-type {kind or '(none)'}: send {PROTOBUF} or application/json"},
                status_code=415,
            )
        protobuf = kind == PROTOBUF
        limits = self.limits
        bounds = otlp.Bounds.for_records(limits.max_records)
        read = otlp.read_logs if signal is otlp.LOGS else otlp.read_spans

        def decode(raw: bytes) -> otlp.LogBatch:
            decoded = otlp.decode_request(raw, protobuf, signal, bounds)
            return read(
                decoded,
                protobuf=protobuf,
                default_service=self.default_service,
                max_bytes=limits.max_trace_bytes,
            )

        # Past the bounds, refused before the body is read: exporters retry a 503 after its
        # Retry-After (the OTLP/HTTP spec's retryable codes), with the same request.
        if (refusal := await self.spool.refusal()) is not None:
            return refusal[1]
        try:
            raw = await read_body(request, limits.max_body_bytes, limits.read_timeout)
            # Counting, decoding and converting are CPU work: off the event loop, so /healthz
            # and the other requests are served meanwhile.
            batch = await run_in_threadpool(decode, raw)
        except BodyError as exc:
            return JSONReply({"error": str(exc)}, status_code=exc.status)
        except otlp.OverBounds as exc:
            return JSONReply({"error": str(exc)}, status_code=413)
        except otlp.OtlpError as exc:
            return JSONReply({"error": str(exc)}, status_code=400)
        if batch.accepted:
            # The events as built here (the reply says which records were refused), for the
            # intake worker to redact, group and count.
            body = b"\n".join(e.model_dump_json().encode() for e in batch.accepted)
            queued = QueuedBatch(
                digest=hashlib.sha1(body).hexdigest(),
                body_id=uuid.uuid4().hex,
                kind="events",
                max_records=limits.max_records,
            )
            if (failed := await self.queue(queued, body)) is not None:
                return failed
        log.info(
            "ingest.otlp",
            extra={
                "signal": signal.what,
                "records": batch.records,
                "queued": len(batch.accepted),
                "ignored": batch.ignored,
                "rejected": len(batch.rejected),
            },
        )
        reason = "; ".join(dict.fromkeys(batch.rejected))[:1000]
        body = otlp.response_body(len(batch.rejected), reason, protobuf, signal)
        return Response(body, status_code=200, media_type=PROTOBUF if protobuf else kind)
