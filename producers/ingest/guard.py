"""What ingest refuses before a route sees a request: other web pages, other host names, and
bodies a web page can send without asking.

A browser on the developer's machine can reach ``tracehound ingest`` on loopback; without a
token, a page it opens could feed errors in — a cross-site POST with a "simple" content type
needs no CORS preflight. So (checked in this order):

- **Host.** A name that resolves to loopback can point at ingest (DNS rebinding): the Host
  header must be one of ``allowed_hosts`` (default when ingest listens on loopback:
  ``localhost``, ``127.0.0.1``, ``::1``; when it listens on the network, a token guards it).
  Starlette's ``TrustedHostMiddleware`` does the check (400 "Invalid host header").
- **Origin.** Browsers send ``Origin`` on every cross-origin POST; server-side shippers and
  SDKs do not. A request whose Origin is not in ``allowed_origins`` (a web app whose browser
  Sentry SDK reports here) is refused with 403; for an allowed one, CORS preflights are
  answered (Starlette's ``CORSMiddleware``).
- **Content type.** The types a page can send without a preflight (``text/plain``,
  ``application/x-www-form-urlencoded``, ``multipart/form-data``) are refused with 415 on the
  ingest routes — JSON, NDJSON, protobuf and Sentry envelopes are what shippers and SDKs send;
  a body with no content type passes (``@sentry/node`` sends none). The browser Sentry SDK's
  ``text/plain`` passes from an allowed origin. ``/slack/actions`` takes Slack's signed form
  posts.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from producers.ingest.replies import JSONReply

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")
LOOPBACK_BINDS = ("127.0.0.1", "localhost", "::1")
# What a web page may POST cross-site without a CORS preflight (the Fetch standard's
# "CORS-safelisted request-header" values of Content-Type).
SIMPLE_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"})
SIGNED_FORM_PATHS = ("/slack/actions",)  # Slack signs what it posts there


def allowed_hosts_for(bind: str, configured: Sequence[str]) -> list[str]:
    """The Host names ingest answers to: ``configured``, else the loopback names when it
    listens on loopback, else any (``*``)."""
    if configured:
        return list(configured)
    return list(LOOPBACK_HOSTS) if bind in LOOPBACK_BINDS else ["*"]


class OriginAndTypeGuard:
    """Refuses web pages' requests (an Origin not allowed) and bodies a page could send
    without a preflight; see the module doc."""

    def __init__(self, app: ASGIApp, *, allowed_origins: Sequence[str]) -> None:
        self.app = app
        self.allowed_origins = frozenset(o.rstrip("/") for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        origin = headers.get("origin")
        allowed = origin is not None and origin.rstrip("/") in self.allowed_origins
        refusal = None
        if origin is not None and not allowed:
            refusal = JSONReply(
                {
                    "error": f"requests from web pages are refused (Origin {origin[:200]}): add "
                    "the origin to TRACEHOUND_INGEST_ALLOWED_ORIGINS if it should report here"
                },
                status_code=403,
            )
        elif scope["method"] == "POST" and not scope["path"].startswith(SIGNED_FORM_PATHS):
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            if kind in SIMPLE_TYPES and not (allowed and kind == "text/plain"):
                refusal = JSONReply(
                    {
                        "error": f"content-type {kind} is refused: send application/json, "
                        "application/x-ndjson, application/x-protobuf or a Sentry envelope"
                    },
                    status_code=415,
                )
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)


def guard_middleware(
    *, allowed_hosts: Sequence[str], allowed_origins: Sequence[str]
) -> list[Middleware]:
    """The middleware stack, outermost first: Host, then CORS preflights for allowed origins,
    then the Origin and content-type checks."""
    stack = [Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))]
    if allowed_origins:
        stack.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(allowed_origins),
                allow_methods=["POST"],
                allow_headers=["*"],
            )
        )
    stack.append(Middleware(OriginAndTypeGuard, allowed_origins=list(allowed_origins)))
    return stack
