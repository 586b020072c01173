"""What error SDKs send to ``tracehound ingest``: Sentry envelopes and OTLP logs → the chain.

- ``POST /api/<project>/envelope/`` and the older ``/api/<project>/store/``: a Sentry SDK whose
  DSN points here (``http://<key>@host:8080/<project>``). The key is checked against the
  configured DSN keys (``X-Sentry-Auth: Sentry sentry_key=…``, ``Authorization: Sentry …`` or
  ``?sentry_key=``). Event items become ErrorEvents (shared/intake/sentry.py); every other item
  type is dropped and counted, with a 200, since an SDK that gets errors backs off or retries.
  The reply is what SDKs expect: ``{"id": "<event_id>"}``.
- ``POST /v1/logs``: OTLP/HTTP logs, protobuf or JSON (shared/intake/otlp.py), with the same
  bearer token as ``/v1/events``; the reply is an ``ExportLogsServiceResponse`` in the
  request's encoding. ``POST /v1/traces`` likewise, for the exceptions recorded on spans.

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
import json
import logging
import re
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from kombu.exceptions import OperationalError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from producers.ingest.auth import bearer_ok, same
from producers.ingest.body import decoded, inflate, read_body, read_raw
from producers.ingest.metrics import REDIS
from producers.ingest.replies import RETRY_AFTER_S, JSONReply, group_replies
from producers.ingest.upstream import Kind, Taken, taken
from producers.ingest.upstream_queue import UpstreamQueue
from shared.core.domain import ErrorEvent
from shared.core.errors import PermanentError
from shared.groups.submit import Intake, Submitted
from shared.intake import otlp
from shared.intake.batch import BodyError, loads
from shared.intake.events import Ignored
from shared.intake.sentry import (
    EnvelopeError,
    TooManyItems,
    auth_key,
    event_from_sentry,
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


class Unavailable(Exception):
    """Redis out of reach: the client should retry after ``RETRY_AFTER_S``."""


async def submit(
    intake: Intake, events: list[ErrorEvent], then: Callable[[], object] | None = None
) -> list[Submitted]:
    """Intake takes the events, then ``then`` runs (in the same worker thread)."""
    if not events and then is None:
        return []

    def take() -> list[Submitted]:
        submitted = intake.submit_many(events) if events else []
        if then is not None:
            then()
        return submitted

    try:
        return await run_in_threadpool(take)
    except (redis.RedisError, OperationalError, OSError) as exc:
        # A retry repeats the same event ids, so what was counted already counts once.
        log.warning("ingest.unavailable", extra={"error": f"{type(exc).__name__}: {exc}"})
        raise Unavailable(f"cannot reach Redis, retry later: {type(exc).__name__}: {exc}") from exc


def unavailable(exc: Unavailable) -> JSONReply:
    return JSONReply(
        {"detail": str(exc)}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)}
    )


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

    intake: Intake
    token: str | None
    sentry_keys: Sequence[str] | None  # None: any key (loopback, no token); empty: none
    sentry_projects: dict[str, str]  # with a map, an id not in it is refused
    limits: SdkLimits
    default_service: str | None
    refused: Callable[[str], None]  # told the reason of each 503 (the metrics)
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

    def sentry_event(
        self, payload: Any, project: str, event_id: str
    ) -> tuple[ErrorEvent | None, str]:
        """The event, or None and why it was dropped."""
        if not isinstance(payload, dict):
            raise BodyError(400, "an event payload must be a JSON object")
        service, repo = project_target(self.sentry_projects, project)
        try:
            found = event_from_sentry(
                payload,
                service=service,
                repo=repo,
                project=project,
                max_bytes=self.limits.max_trace_bytes,
                event_id=str(payload.get("event_id") or event_id)[:200],
            )
        except (PermanentError, ValueError) as exc:
            return None, f"unusable event: {str(exc).splitlines()[0][:300]}"
        if isinstance(found, Ignored):
            return None, found.reason
        return found, ""

    async def sentry_reply(
        self,
        project: str,
        event_id: str,
        events: list[ErrorEvent],
        dropped: Counter[str],
        sent: Taken | None = None,
    ) -> JSONReply:
        try:
            submitted = await submit(self.intake, events, self.forward(sent))
        except Unavailable as exc:
            self.refused(REDIS)
            return unavailable(exc)
        log.info(
            "ingest.sentry",
            extra={
                "project": project,
                "accepted": len(events),
                "dropped": dict(dropped),
                "duplicates": sum(s.duplicate for s in submitted),
            },
        )
        body: dict[str, Any] = {"id": events[0].id if events else event_id}
        # Beyond what SDKs read: what became of each item.
        body |= {"accepted": [e.id for e in events], "groups": group_replies(submitted)}
        body["dropped"] = dict(dropped)
        return JSONReply(body, status_code=200)

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

    async def envelope(self, request: Request) -> JSONReply:
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
        events: list[ErrorEvent] = []
        dropped: Counter[str] = Counter()
        for n, item in enumerate(env.items):
            if item.type != "event":
                dropped[item.type] += 1  # transactions, sessions, client reports, attachments…
                continue
            try:
                payload = loads(item.payload.decode("utf-8", errors="replace"), f"item {n}")
                found, reason = self.sentry_event(payload, project, env.event_id)
            except json.JSONDecodeError as exc:
                return JSONReply(
                    {"detail": f"malformed envelope: item {n} is not JSON: {exc.msg}"}, 400
                )
            except BodyError as exc:
                return JSONReply({"detail": f"item {n}: {exc}"}, status_code=exc.status)
            if found is None:
                dropped[f"event ({reason})"] += 1
            else:
                events.append(found)
        return await self.sentry_reply(project, env.event_id, events, dropped, sent)

    async def store(self, request: Request) -> JSONReply:
        project = request.path_params["project_id"]
        if denied := self.sentry_denied(request):
            return denied
        limits = self.limits
        try:
            raw, sent = await self.read(request, "store")
            payload = loads(_store_body(raw, limits.max_body_bytes).decode(errors="replace"), "")
            found, reason = self.sentry_event(payload, project, "")
        except BodyError as exc:
            return JSONReply({"detail": str(exc)}, status_code=exc.status)
        except json.JSONDecodeError as exc:
            return JSONReply({"detail": f"malformed event JSON: {exc.msg}"}, 400)
        dropped: Counter[str] = Counter()
        if found is None:
            dropped[f"event ({reason})"] += 1
        event_id = str(payload.get("event_id") or "")
        return await self.sentry_reply(project, event_id, [found] if found else [], dropped, sent)

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
        try:
            submitted = await submit(self.intake, batch.accepted)
        except Unavailable as exc:
            self.refused(REDIS)
            return unavailable(exc)
        log.info(
            "ingest.otlp",
            extra={
                "signal": signal.what,
                "records": batch.records,
                "accepted": len(batch.accepted),
                "ignored": batch.ignored,
                "rejected": len(batch.rejected),
                "duplicates": sum(s.duplicate for s in submitted),
            },
        )
        reason = "; ".join(dict.fromkeys(batch.rejected))[:1000]
        body = otlp.response_body(len(batch.rejected), reason, protobuf, signal)
        return Response(body, status_code=200, media_type=PROTOBUF if protobuf else kind)
