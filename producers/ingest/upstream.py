"""What ingest forwards to an upstream Sentry (``TRACEHOUND_SENTRY_UPSTREAM``), and where: the
request a Sentry SDK sent, kept as it arrived (upstream_queue.py holds it, forwarder.py sends
it), and the request the upstream gets.

Two kinds of upstream, as relay authenticates (getsentry/relay,
``relay-server/src/extractors/request_meta.rs``: the key comes from ``X-Sentry-Auth``,
``Authorization: Sentry …``, Basic auth or a ``sentry_*`` query parameter — exactly one of them,
two are a 401 — and the project from the URL path):

- a **base URL** (``https://sentry.example.com``): the SDK's own project id and key go on;
  body, query and headers are forwarded byte for byte. The SDK's DSN key must then be one the
  upstream project knows (and one ``TRACEHOUND_SENTRY_KEYS`` lists).
- a **DSN** (``https://<key>@o1.ingest.sentry.io/42``): every request goes to that project,
  and the key is swapped where the SDK put it (auth header or query), nothing else. relay
  also compares an envelope header's ``dsn`` with the request's project and key and refuses
  a mismatch (400; ``relay-server/src/envelope/mod.rs``, ``EnvelopeHeaders::complete``; the
  host is not compared): only an envelope that carries one (the JS SDKs with a ``tunnel``)
  has that header line rewritten, its items untouched and the body compressed again as it
  came. The Python SDK writes no ``dsn`` there.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.requests import Request

from producers.ingest.body import decoded
from shared.intake.batch import BodyError

Kind = Literal["envelope", "store"]

# Request headers the upstream reads (relay's RequestMeta: auth, client, user agent, origin
# for allowed domains); ``Authorization`` only with the Sentry scheme, which carries the key.
FORWARDED = ("content-type", "content-encoding", "x-sentry-auth", "user-agent", "origin")
_KEY = re.compile(r"(sentry_key\s*=\s*)[^,\s]*")


@dataclass(frozen=True)
class Upstream:
    base: str  # scheme://host[:port][/path prefix], no trailing slash
    project: str | None = None  # a DSN's project id: every request goes there
    key: str | None = None  # a DSN's public key: it replaces the SDK's
    dsn: str | None = None

    def url(self, kind: Kind, project: str, query: str) -> str:
        url = f"{self.base}/api/{self.project or project}/{kind}/"
        return f"{url}?{query}" if query else url


def parse_upstream(value: str) -> Upstream:
    """A base URL or a DSN (``scheme://key[:secret]@host[:port][/prefix]/project``)."""
    parts = urlsplit(value.strip())
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError("the upstream Sentry is an http(s) URL or DSN with a host")
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{parts.port}" if parts.port else ""
    path = parts.path.rstrip("/")
    if not parts.username:
        return Upstream(f"{parts.scheme}://{netloc}{path}")
    prefix, _, project = path.rpartition("/")
    if not project:
        raise ValueError("a DSN ends in its project id")
    return Upstream(f"{parts.scheme}://{netloc}{prefix}", project, parts.username, value.strip())


@dataclass(frozen=True)
class Taken:
    """A Sentry request tracehound took, as the SDK sent it."""

    kind: Kind
    project: str
    query: str  # as sent (latin-1), auth parameters included
    headers: dict[str, str]  # FORWARDED ones, names lower-case, values as sent (latin-1)
    body: bytes  # as sent: still compressed

    def meta(self) -> bytes:
        """Everything but the body, for the queue entry (no body is ever logged from it)."""
        fields = {"k": self.kind, "p": self.project, "q": self.query, "h": self.headers}
        return json.dumps(fields, separators=(",", ":")).encode()

    @classmethod
    def from_entry(cls, meta: bytes, body: bytes) -> Taken:
        fields = json.loads(meta)
        kind: Kind = "store" if fields["k"] == "store" else "envelope"
        return cls(kind, str(fields["p"]), str(fields["q"]), dict(fields["h"]), body)


def taken(request: Request, kind: Kind, body: bytes) -> Taken:
    """The request as it will be forwarded: its raw body, query and the headers that matter.
    ``X-Forwarded-For`` gains the SDK's address, as any proxy adds it (relay reads the
    client's address from its first entry)."""
    headers = {name: request.headers[name] for name in FORWARDED if name in request.headers}
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "sentry ":
        headers["authorization"] = auth
    if request.client is not None:
        peer = request.client.host
        chain = request.headers.get("x-forwarded-for", "")
        headers["x-forwarded-for"] = f"{chain}, {peer}" if chain else peer
    query = request.scope.get("query_string", b"").decode("latin-1")
    return Taken(kind, request.path_params["project_id"], query, headers, body)


@dataclass(frozen=True)
class Outgoing:
    url: str
    headers: dict[bytes, bytes]
    body: bytes


def outgoing(upstream: Upstream, t: Taken, limit: int) -> Outgoing:
    """The upstream's request for ``t``: unchanged, but for a DSN upstream's key and project
    (and an envelope header ``dsn`` naming another, which relay would refuse)."""
    headers, query, body = dict(t.headers), t.query, t.body
    if upstream.key is not None:
        for name in ("x-sentry-auth", "authorization"):
            if name in headers:
                headers[name] = _KEY.sub(lambda m: m[1] + str(upstream.key), headers[name])
        query = _with_key(query, upstream.key)
        if t.kind == "envelope" and upstream.dsn:
            body = _with_dsn(body, headers.get("content-encoding", ""), upstream.dsn, limit)
    return Outgoing(
        upstream.url(t.kind, t.project, query),
        {k.encode("latin-1"): v.encode("latin-1", "replace") for k, v in headers.items()},
        body,
    )


def _with_key(query: str, key: str) -> str:
    if "sentry_key" not in query:
        return query
    pairs = parse_qsl(query, keep_blank_values=True)
    return urlencode([(k, key if k == "sentry_key" else v) for k, v in pairs])


def _with_dsn(body: bytes, encoding: str, dsn: str, limit: int) -> bytes:
    """The envelope with its header's ``dsn`` (when it has one) naming ``dsn``; else as is."""
    try:
        plain = decoded(body, encoding, limit)
    except BodyError:
        return body  # ingest read it before: not reached; the upstream decides
    first, newline, rest = plain.partition(b"\n")
    try:
        header = json.loads(first)
    except ValueError:
        return body
    if not isinstance(header, dict) or "dsn" not in header or header["dsn"] == dsn:
        return body
    header["dsn"] = dsn
    plain = json.dumps(header, separators=(",", ":")).encode() + newline + rest
    return _compressed(plain, encoding)


def _compressed(plain: bytes, encoding: str) -> bytes:
    match encoding.strip().lower():
        case "gzip" | "x-gzip":
            return gzip.compress(plain)
        case "deflate":
            return zlib.compress(plain)
        case "br":
            import brotli

            return bytes(brotli.compress(plain))
        case _:
            return plain
