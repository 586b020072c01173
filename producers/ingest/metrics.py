"""Ingest's Prometheus metrics, served at ``GET /metrics`` beside ``/healthz``: requests by
route and status, refusals (backlog or Redis: the 503s shippers retry), and the errors taken
in and groups opened by the routes that take events at once (``?wait=true``, SDKs, OTLP;
batches queued for the intake worker are counted by that worker).

Like ``/healthz`` it needs no token: a scraper holds no ingest credential. It carries counts
only — route names, status codes, refusal reasons and service names (reduced and capped by
shared/core/metrics.py) — never an event's message, trace, attributes or id.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.core.metrics import IntakeCounters, LabelCap

# Refusal reasons (the label's values): the intake queue past its bound in batches, a batch
# accepted now would wait past TRACEHOUND_INGEST_MAX_LAG, Redis out of reach.
BACKLOG, LAG, REDIS = "backlog", "lag", "redis"

# Route label by path: a fixed set, whatever paths clients send.
_ROUTES = (
    ("/v1/events", "events"),
    ("/v1/deploys", "deploys"),
    ("/v1/logs", "otlp_logs"),
    ("/v1/traces", "otlp_traces"),
    ("/slack/", "slack"),
)


def route_of(path: str) -> str | None:
    """The route label of a request path; None for the probes and /metrics (not counted)."""
    if path in ("/healthz", "/readyz", "/metrics"):
        return None
    for prefix, name in _ROUTES:
        if path.startswith(prefix):
            return name
    if path.startswith("/api/"):
        if path.endswith("/envelope/"):
            return "sentry_envelope"
        if path.endswith("/store/"):
            return "sentry_store"
    return "other"


class IngestMetrics:
    """One ingest app's metrics, in a registry of its own."""

    def __init__(self, max_services: int) -> None:
        from prometheus_client import CollectorRegistry, Counter

        self.registry = CollectorRegistry()
        self.requests = Counter(
            "tracehound_ingest_requests_total",
            "Requests to ingest by route and HTTP status.",
            ["route", "code"],
            registry=self.registry,
        )
        self.refused = Counter(
            "tracehound_ingest_refused_total",
            "Requests answered 503 + Retry-After (429 to Sentry SDKs): the intake queue past "
            "its bound in batches (backlog) or in the wait it means (lag), or Redis out of "
            "reach (redis, always 503).",
            ["reason"],
            registry=self.registry,
        )
        for reason in (BACKLOG, LAG, REDIS):  # present from the start, so rate() sees the first
            self.refused.labels(reason)
        self.intake = IntakeCounters(self.registry, LabelCap(max_services))

    def counted(self, service: str, opened: bool) -> None:
        self.intake.count(service, opened=opened)

    def refusal(self, reason: str) -> None:
        self.refused.labels(reason).inc()

    async def endpoint(self, request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class RequestCounter:
    """ASGI middleware: counts each answered request by route and status."""

    def __init__(self, app: ASGIApp, *, metrics: IngestMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = route_of(scope["path"]) if scope["type"] == "http" else None
        if route is None:
            await self.app(scope, receive, send)
            return

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(route, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting)
