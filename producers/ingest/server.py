"""The ingest server: one ASGI app for shippers (producers/ingest/events.py), error SDKs
(sdk_routes.py) and Slack's button presses (slack_routes.py), behind the request guard
(guard.py); ``tracehound ingest`` runs it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from celery import Celery
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.routing import Route

from producers.ingest.deploy_routes import deploy_routes
from producers.ingest.events import EventsRoute
from producers.ingest.forwarder import ForwarderProcess, forwarding
from producers.ingest.guard import LOOPBACK_HOSTS, allowed_hosts_for, guard_middleware
from producers.ingest.metrics import IngestMetrics, RequestCounter
from producers.ingest.replies import JSONReply
from producers.ingest.sdk_routes import SdkLimits, SdkRoutes
from producers.ingest.slack_routes import slack_routes
from producers.ingest.upstream_queue import UpstreamQueue
from shared.core.errors import PermanentError
from shared.core.persistence import persistence_warning
from shared.core.settings import Settings
from shared.groups.submit import Intake
from shared.index.store_health import StoreHealth, store_health


def create_app(
    intake: Intake,
    *,
    metrics: IngestMetrics,
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
    store_check: Callable[[], StoreHealth] | None = None,
    upstream: UpstreamQueue | None = None,
    forwarder: ForwarderProcess | None = None,
) -> Starlette:
    """The ingest ASGI app; ``intake`` redacts, groups and enqueues by task name (no worker
    code is imported). Besides ``/v1/events`` and ``/v1/deploys`` (deploy_routes.py) it serves
    what error SDKs send (producers/ingest/sdk_routes.py): Sentry envelopes and store events,
    and OTLP logs.
    ``sentry_keys`` None: any DSN key. Requests from other web pages, to other host names, or
    with a body a page can send without a preflight are refused (producers/ingest/guard.py).
    ``metrics`` (whose ``counted`` the intake reports to) are served at ``GET /metrics``
    without a token, like the probes (producers/ingest/metrics.py).
    ``upstream``: Sentry requests taken go on to an upstream Sentry, sent by ``forwarder``
    while the app runs (producers/ingest/forwarder.py).
    """
    events = EventsRoute(
        intake,
        token=token,
        max_body_bytes=max_body_bytes,
        max_trace_bytes=max_trace_bytes,
        default_service=default_service,
        max_records=max_records,
        read_timeout=read_timeout,
        refused=metrics.refusal,
    )

    async def healthz(request: Request) -> JSONReply:
        return JSONReply({"status": "ok"})

    async def readyz(request: Request) -> JSONReply:
        try:
            await run_in_threadpool(_ping, intake.app)
            warning = await run_in_threadpool(persistence_warning, intake.groups.r)
        except Exception as exc:  # any failure to reach the broker means not ready
            return JSONReply({"status": "unavailable", "redis": str(exc)}, status_code=503)
        warnings = [warning] if warning else []
        body: dict[str, object] = {"status": "ready", "warnings": warnings}
        if store_check is not None:
            # Reported, not a 503: errors still come in; retrieval goes keyword-only.
            store = await run_in_threadpool(store_check)
            body["vector_store"] = store.as_dict()
            if not store.ok:
                warnings.append(
                    f"the vector store ({store.kind}, {store.where}) does not answer: "
                    f"{store.detail}; analyses use keyword search only until it does"
                )
        return JSONReply(body)

    limits = SdkLimits(max_body_bytes, max_trace_bytes, max_records, read_timeout)
    # The Slack app's Request URL for button presses (slack_routes.py), when set up.
    slack = []
    if slack_signing_secret:
        slack = slack_routes(intake.app, slack_signing_secret, read_timeout=read_timeout)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if forwarder is not None:
            forwarder.start()
        try:
            yield
        finally:
            if forwarder is not None:
                await run_in_threadpool(forwarder.stop)

    return Starlette(
        lifespan=lifespan,
        middleware=[
            # Outermost: the guard's refusals are counted too.
            Middleware(RequestCounter, metrics=metrics),
            *guard_middleware(allowed_hosts=allowed_hosts, allowed_origins=allowed_origins),
        ],
        routes=[
            Route("/v1/events", events.handle, methods=["POST"]),
            *deploy_routes(intake.deploys, token=token, read_timeout=read_timeout),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics.endpoint, methods=["GET"]),
            *SdkRoutes(
                token=token,
                sentry_keys=sentry_keys,
                sentry_projects=dict(sentry_projects or {}),
                limits=limits,
                default_service=default_service,
                refused=metrics.refusal,
                spool=events.queue_now,
                upstream=upstream,
            ).routes(),
            *slack,
        ],
    )


def _ping(sender: Celery) -> None:
    with sender.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
        conn.default_channel.client.ping()  # the broker's own redis client


def serve(settings: Settings, *, host: str, port: int, service: str | None) -> None:
    """Run the ingest server in the foreground (``tracehound ingest``)."""
    import uvicorn

    from shared.core.pipeline import sender_app
    from shared.groups.submit import intake_for

    token = settings.ingest_token.get_secret_value() if settings.ingest_token else None
    if token is None and host not in ("127.0.0.1", "localhost", "::1"):
        raise PermanentError(
            f"refusing to listen on {host} without TRACEHOUND_INGEST_TOKEN: anyone who can "
            "reach the port could flood the analysis queue"
        )
    metrics = IngestMetrics(settings.metrics_max_services)
    upstream, forwarder = forwarding(settings) or (None, None)
    app = create_app(
        intake_for(settings, sender_app(settings), counted=metrics.counted),
        metrics=metrics,
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
        store_check=lambda: store_health(settings),
        upstream=upstream,
        forwarder=forwarder,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
