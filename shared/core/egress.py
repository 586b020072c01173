"""Egress: every host a configuration makes tracehound contact, derived from the one Settings.

``tracehound config`` prints this list and the zero-egress test
(tests/integration/test_egress.py) checks a running demo against it: a connection to anything
not listed here is a bug. A new setting that names somewhere to connect to goes into
``OUTBOUND`` and gets its line in :func:`destinations`; one that only looks like an address
goes into ``NOT_OUTBOUND`` with the reason (tests/unit/test_egress.py refuses an unclassified
one).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from shared.core.settings import Settings

# Settings naming a destination; each is read by destinations() below.
OUTBOUND: frozenset[str] = frozenset(
    {
        "redis_url",
        "chroma_url",
        "pg_url",
        "ollama_url",
        "embed_url",
        "llm_url",
        "rerank_url",
        "slack_base_url",
        "slack_webhook_url",
        "routing",  # its rules may name webhooks: the caller reads them (see destinations)
        "sentry_upstream",
    }
)

# Settings that look like addresses but are never connected to.
NOT_OUTBOUND: dict[str, str] = {
    "chroma_path": "a local directory (single-process Chroma)",
    "metrics_host": "the address /metrics listens on (inbound)",
    "host_leases": "a switch: model hosts taken in turn",
    "ingest_allowed_hosts": "Host headers ingest answers to (inbound)",
    "ingest_allowed_origins": "web pages that may send to ingest (inbound)",
    "repo_url_template": "links written into messages; never fetched",
    "sentry_upstream_max_bytes": "the forwarding queue's bound (sentry_upstream is the address)",
    "sentry_upstream_timeout": "the forwarding request's timeout",
}

DEFAULT_PORTS = {
    "http": 80,
    "https": 443,
    "ws": 80,
    "wss": 443,
    "redis": 6379,
    "rediss": 6379,
    "postgres": 5432,
    "postgresql": 5432,
}


@dataclass(frozen=True)
class Destination:
    """One place tracehound connects to: ``port`` None means any (a host Slack names at run
    time); ``host`` is a socket path for ``unix``. Never carries credentials or paths."""

    role: str
    scheme: str
    host: str
    port: int | None
    setting: str  # the TRACEHOUND_* variable that says so
    purpose: str

    @property
    def address(self) -> str:
        if self.scheme == "unix":
            return f"unix:{self.host}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}" + (f":{self.port}" if self.port is not None else "")

    def line(self) -> str:
        """``role address setting purpose``: split(None, 3) reads it back."""
        return f"{self.role:<14} {self.address:<32} {self.setting:<28} {self.purpose}"


def _url(role: str, url: str, setting: str, purpose: str, port: int | None = None) -> Destination:
    """A destination from a URL; ``port`` when the client's default differs from the scheme's."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower() or "http"
    if scheme == "unix":
        return Destination(role, "unix", parts.path, None, setting, purpose)
    try:
        explicit = parts.port
    except ValueError:  # not a number: the client fails on it too; the host is still named
        explicit = None
    return Destination(
        role,
        scheme,
        parts.hostname or "127.0.0.1",
        explicit if explicit is not None else port or DEFAULT_PORTS.get(scheme),
        setting,
        purpose,
    )


_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[^\]]*)\]|(?P<host>[^:]*))(?::(?P<port>\d*))?$")


def _postgres(dsn: str, setting: str) -> list[Destination]:
    """A libpq URL or ``key=value`` conninfo; each of several hosts (``h1,h2``) is a
    destination, and a host starting with ``/`` is a socket directory."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        query = dict(kv.split("=", 1) for kv in parts.query.split("&") if "=" in kv)
        pairs = []
        for item in parts.netloc.rpartition("@")[2].split(","):
            m = _HOST_PORT.match(item)
            pairs.append(((m["v6"] or m["host"] or "") if m else item, (m and m["port"]) or ""))
        if pairs == [("", "")]:  # postgresql:///db?host=/run/postgresql&port=5433
            pairs = [(unquote(query.get("host", "")), query.get("port", ""))]
    else:
        fields = dict(kv.split("=", 1) for kv in dsn.split() if "=" in kv)
        names = fields.get("host", "").split(",")
        ports = fields.get("port", "").split(",")
        pairs = [(h, ports[min(i, len(ports) - 1)]) for i, h in enumerate(names)]
    purpose = "vector store (pgvector)"
    out = []
    for host, port in pairs:
        if not host or host.startswith("/"):  # no host: libpq's default socket directory
            path = host or "default"
            out.append(Destination("postgres", "unix", path, None, setting, purpose))
        else:
            number = int(port) if port.isdigit() else 5432
            out.append(Destination("postgres", "postgresql", host, number, setting, purpose))
    return out


def _env(field: str) -> str:
    return f"TRACEHOUND_{field.upper()}"


def destinations(settings: Settings, *, webhooks: Iterable[str] = ()) -> list[Destination]:
    """Every host ``settings`` make tracehound contact, once each by role, and nothing else.
    ``webhooks``: the routing file's (``shared.notify.routing``; its reader lives above
    ``core``)."""
    s = settings
    out = [_url("redis", s.redis_url, _env("redis_url"), "Celery broker, results, keyword index")]
    if s.vector_store == "chroma" and s.chroma_url:
        # The Chroma client's own default port when the URL names none (shared/index/vectors).
        port = None if urlsplit(s.chroma_url).scheme == "https" else 8000
        out.append(_url("chroma", s.chroma_url, _env("chroma_url"), "vector store", port))
    if s.vector_store == "pgvector" and s.pg_url:
        out += _postgres(s.pg_url, _env("pg_url"))
    serves = [what for what, own in (("embeddings", s.embed_url), ("chat", s.llm_url)) if not own]
    purpose = "model host: " + " and ".join(serves) if serves else "probed by `up` and `demo`"
    out.append(_url("ollama", s.ollama_url, _env("ollama_url"), purpose))
    if s.embed_url:
        out.append(_url("ollama-embed", s.embed_url, _env("embed_url"), "embedding model host"))
    if s.llm_url:
        out.append(_url("ollama-llm", s.llm_url, _env("llm_url"), "chat model host"))
    if s.rerank_backend != "none" and s.rerank_url:
        purpose = f"rerank server ({s.rerank_backend})"
        out.append(_url("rerank", s.rerank_url, _env("rerank_url"), purpose))
    if s.slack_bot_token or s.slack_app_token:
        out.append(_url("slack", s.slack_base_url, _env("slack_base_url"), "Slack Web API"))
    if s.slack_app_token:
        base = urlsplit(s.slack_base_url).hostname or ""
        # The websocket's URL comes from apps.connections.open (wss-primary.slack.com, …).
        host = "*.slack.com" if base == "slack.com" or base.endswith(".slack.com") else base
        scheme = "wss" if urlsplit(s.slack_base_url).scheme == "https" else "ws"
        out.append(
            Destination(
                "slack-socket",
                scheme,
                host,
                None,
                _env("slack_app_token"),
                "Socket Mode websocket (the URL apps.connections.open hands out)",
            )
        )
    if s.slack_webhook_url:
        hook = s.slack_webhook_url.get_secret_value()
        out.append(_url("slack-webhook", hook, _env("slack_webhook_url"), "incoming webhook"))
    for hook in webhooks:
        out.append(_url("slack-webhook", hook, _env("routing"), "a routing rule's webhook"))
    if s.sentry_upstream:  # a DSN's key is userinfo: _url keeps host and port only
        purpose = "upstream Sentry: every Sentry request ingest took, forwarded"
        out.append(_url("sentry-upstream", s.sentry_upstream, _env("sentry_upstream"), purpose))
    return list(dict.fromkeys(out))
