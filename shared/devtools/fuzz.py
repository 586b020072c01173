"""Generated requests for every ingest endpoint (Hypothesis strategies), and a runner that sends
them to a real ``tracehound ingest`` and tallies the answers.

Each endpoint gets bodies that follow its wire format most of the time, so that generation
reaches deep into the parsers, and breaks it the rest: JSON records, arrays and NDJSON for
``/v1/events``; Sentry envelopes (header line, item headers with right, wrong or no length,
event payloads of any JSON) and store bodies; OTLP logs and traces as protobuf (built with the
real message classes, then cut, flipped or padded) and as JSON; signed Slack interaction
payloads. Credentials are mostly right (the parser is what is under test) and sometimes wrong
or garbage; bodies are sometimes compressed, truly or falsely.

Used by ``benchmarks/fuzz_ingest.py`` (10,000+ requests) and
``tests/integration/test_ingest_fuzz.py`` (a few hundred, in the suite).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import hmac
import json
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as seeded
from hypothesis import strategies as st

TOKEN = "fuzz-ingest-token-0123456789abcdef"
DSN_KEY = "0123456789abcdef0123456789abcdef"
SIGNING_SECRET = "fuzz-slack-signing-secret"
PROJECT = "42"
ENV = {
    "TRACEHOUND_INGEST_TOKEN": TOKEN,
    "TRACEHOUND_SENTRY_KEYS": DSN_KEY,
    "TRACEHOUND_SENTRY_PROJECTS": f"{PROJECT}=fuzzed",
    "TRACEHOUND_SLACK_SIGNING_SECRET": SIGNING_SECRET,
    # No intake worker drains the queue here: with a bound on its age, every accepted batch
    # after the first second would be a 503 (correct backpressure, but it would end the fuzzing
    # of what follows). The batch bound (500) still holds.
    "TRACEHOUND_INGEST_MAX_LAG": "0",
}


@dataclass(frozen=True)
class Req:
    endpoint: str  # the route, for the tally
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""


# --- values ------------------------------------------------------------------------------------

_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=400),
    st.sampled_from(["", "\x00", "\ud800", "\n\n\n", "Traceback", "🔥" * 50, "a" * 5000]),
)
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), _text
)
_json = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=6), st.dictionaries(_text, children, max_size=6)
    ),
    max_leaves=30,
)
_level = st.one_of(st.sampled_from(["error", "ERROR", "fatal", "warning", "info", "50"]), _json)
_trace = st.one_of(
    _text,
    st.builds(
        lambda lines, exc: (
            "Traceback (most recent call last):\n"
            + "".join(f'  File "{p}", line {n}, in {f}\n    x\n' for p, n, f in lines)
            + exc
        ),
        st.lists(st.tuples(_text, st.integers(-5, 10**9), _text), max_size=8),
        _text,
    ),
)


def _field(name: str, value: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(st.just({}), st.builds(lambda v: {name: v}, value))


def _merged(*parts: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(*parts).map(lambda ds: {k: v for d in ds for k, v in d.items()})


_record = _merged(
    _field("level", _level),
    _field("message", st.one_of(_text, _json)),
    _field("stack", st.one_of(_trace, _json)),
    _field("exception_type", st.one_of(_text, _json)),
    _field("service", st.one_of(_text, _json)),
    _field("repo", st.one_of(_text, _json)),
    _field("timestamp", st.one_of(_text, st.integers(), st.floats())),
    _field("attributes", _json),
    _field("id", st.one_of(_text, _json)),
)


# --- bodies ------------------------------------------------------------------------------------


def _dumps(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogatepass")


_events_body = st.one_of(
    _record.map(_dumps),
    st.lists(_record, max_size=20).map(_dumps),
    st.lists(_record, max_size=20).map(lambda rs: b"\n".join(_dumps(r) for r in rs)),
    _json.map(_dumps),
    st.binary(max_size=2000),
)

_frame = _merged(
    _field("filename", _text),
    _field("abs_path", _text),
    _field("function", _text),
    _field("lineno", st.one_of(st.integers(-5, 2**40), _json)),
    _field("in_app", _json),
    _field("context_line", _text),
    _field("pre_context", _json),
)
_exception = _merged(
    _field("type", st.one_of(_text, _json)),
    _field("value", st.one_of(_text, _json)),
    _field("module", _text),
    _field("stacktrace", st.one_of(_json, st.builds(lambda fs: {"frames": fs}, st.lists(_frame)))),
)
_sentry_event = _merged(
    _field("event_id", st.one_of(st.just("a" * 32), _text)),
    _field("level", _level),
    _field("platform", _text),
    _field("message", st.one_of(_text, _json)),
    _field("logentry", _json),
    _field("exception", st.one_of(_json, st.builds(lambda v: {"values": v}, st.lists(_exception)))),
    _field("tags", _json),
    _field("breadcrumbs", _json),
    _field("contexts", _json),
    _field("extra", _json),
    _field("request", _json),
    _field("user", _json),
    _field("release", st.one_of(_text, _json)),
    _field("environment", st.one_of(_text, _json)),
    _field("server_name", st.one_of(_text, _json)),
)


@st.composite
def _envelope(draw: st.DrawFn) -> bytes:
    header = draw(st.one_of(st.just({"event_id": "b" * 32}), _json))
    lines = [_dumps(header)]
    for _ in range(draw(st.integers(0, 4))):
        payload = draw(st.one_of(_sentry_event.map(_dumps), st.binary(max_size=500)))
        kind = draw(
            st.one_of(
                st.sampled_from(["event", "transaction", "attachment", "session", "check_in"]),
                _text,
            )
        )
        item: dict[str, Any] = {"type": kind}
        length = draw(st.sampled_from(["right", "none", "short", "long", "garbage"]))
        if length == "right":
            item["length"] = len(payload)
        elif length == "short":
            item["length"] = max(0, len(payload) - 3)
        elif length == "long":
            item["length"] = len(payload) + draw(st.integers(1, 10**12))
        elif length == "garbage":
            item["length"] = draw(_json)
        lines += [_dumps(item), payload]
    return b"\n".join(lines) + draw(st.sampled_from([b"", b"\n", b"\n\n"]))


def _any_value(depth: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    leaves = st.one_of(
        st.builds(lambda v: {"stringValue": v}, _text),
        st.builds(lambda v: {"intValue": v}, st.one_of(st.integers(), _text)),
        st.builds(lambda v: {"boolValue": v}, _json),
        st.builds(lambda v: {"doubleValue": v}, st.floats()),
        _json.map(lambda v: {"kvlistValue": v}),
    )
    if depth == 0:
        return leaves
    return st.one_of(
        leaves,
        st.builds(lambda vs: {"arrayValue": {"values": vs}}, st.lists(_any_value(depth - 1))),
    )


_attributes = st.lists(st.builds(lambda k, v: {"key": k, "value": v}, _text, _any_value()))
_log_record = _merged(
    _field("severityNumber", st.one_of(st.integers(-3, 30), _json)),
    _field("severityText", _text),
    _field("body", _any_value()),
    _field("attributes", st.one_of(_attributes, _json)),
    _field("timeUnixNano", st.one_of(st.integers(), _text)),
)
_otlp_logs_json = st.builds(
    lambda attrs, records: {
        "resourceLogs": [
            {"resource": {"attributes": attrs}, "scopeLogs": [{"logRecords": records}]}
        ]
    },
    _attributes,
    st.lists(_log_record, max_size=10),
)
_span = _merged(
    _field("name", _text),
    _field("status", _json),
    _field("attributes", st.one_of(_attributes, _json)),
    _field(
        "events",
        st.lists(st.builds(lambda a: {"name": "exception", "attributes": a}, _attributes)),
    ),
)
_otlp_traces_json = st.builds(
    lambda attrs, spans: {
        "resourceSpans": [{"resource": {"attributes": attrs}, "scopeSpans": [{"spans": spans}]}]
    },
    _attributes,
    st.lists(_span, max_size=10),
)


def _protobuf(kind: str, doc: dict[str, Any]) -> bytes:
    """The OTLP JSON document as protobuf, through the real message classes (values the
    JSON mapping refuses become an empty request)."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    message = ExportLogsServiceRequest() if kind == "logs" else ExportTraceServiceRequest()
    # anything the mapping refuses (upb raises SystemError on a key with a lone surrogate)
    with contextlib.suppress(Exception):
        json_format.ParseDict(doc, message, ignore_unknown_fields=True)
    return bytes(message.SerializeToString())


@st.composite
def _mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` as it is, cut short, with bytes flipped, or with garbage spliced in."""
    how = draw(st.sampled_from(["same", "same", "cut", "flip", "splice"]))
    if how == "cut" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if how == "flip" and data:
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
        return bytes(out)
    if how == "splice":
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(min_size=1, max_size=64)) + data[at:]
    return data


# --- requests ----------------------------------------------------------------------------------


@st.composite
def _encoded(draw: st.DrawFn, body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    """Sometimes compressed (gzip or deflate, truly or by header only)."""
    how = draw(st.sampled_from(["plain", "plain", "plain", "gzip", "deflate", "lie", "bad"]))
    if how == "gzip":
        return gzip.compress(body), {**headers, "Content-Encoding": "gzip"}
    if how == "deflate":
        return zlib.compress(body), {**headers, "Content-Encoding": "deflate"}
    if how == "lie":
        return body, {**headers, "Content-Encoding": draw(st.sampled_from(["gzip", "br"]))}
    if how == "bad":
        return body, {**headers, "Content-Encoding": draw(st.text(max_size=20))}
    return body, headers


def _wire(value: str) -> bytes:
    """A header value as bytes on the wire: any UTF-8, without the control characters HTTP/1.1
    cannot carry (the client refuses them, and whitespace at either end, before sending)."""
    kept = "".join(c for c in value if c == "\t" or (ord(c) >= 0x20 and c != "\x7f"))
    return kept.strip(" \t").encode("utf-8", "surrogatepass")  # no edge whitespace either


def _ascii(value: str) -> str:
    return value.encode("ascii", "replace").decode("ascii")


_bearer = st.one_of(
    st.just(f"Bearer {TOKEN}"),
    st.just(f"Bearer {TOKEN}"),
    st.just(f"Bearer {TOKEN}"),
    st.text(max_size=60).map(_ascii),
)


@st.composite
def _events(draw: st.DrawFn) -> Req:
    body, headers = draw(
        _encoded(
            draw(_events_body),
            {
                "Authorization": draw(_bearer),
                "Content-Type": draw(
                    st.sampled_from(["application/json", "application/x-ndjson", "", "text/plain"])
                ),
            },
        )
    )
    query = {"wait": draw(st.sampled_from(["true", "true", "false", "1", ""]))}
    if draw(st.booleans()):
        query["service"] = draw(_text)
    return Req(
        "/v1/events",
        "POST",
        "/v1/events?" + urlencode(query, errors="surrogatepass"),
        headers,
        body,
    )


_project = st.one_of(st.just(PROJECT), st.just(PROJECT), st.text(max_size=12).map(_ascii))
_sentry_auth: st.SearchStrategy[dict[str, str]] = st.one_of(
    st.just({"X-Sentry-Auth": f"Sentry sentry_version=7, sentry_key={DSN_KEY}"}),
    st.just({"X-Sentry-Auth": f"Sentry sentry_version=7, sentry_key={DSN_KEY}"}),
    st.just({}),
    st.text(max_size=60).map(lambda t: {"X-Sentry-Auth": _ascii(t)}),
)


@st.composite
def _sentry(draw: st.DrawFn) -> Req:
    project = quote(draw(_project), safe="") or "0"
    auth = draw(_sentry_auth)
    query = "" if auth else f"?sentry_key={DSN_KEY}"
    if draw(st.booleans()):
        path, endpoint = f"/api/{project}/envelope/{query}", "/api/{id}/envelope/"
        body = draw(_envelope())
        kind = "application/x-sentry-envelope"
    else:
        path, endpoint = f"/api/{project}/store/{query}", "/api/{id}/store/"
        body = draw(st.one_of(_sentry_event.map(_dumps), st.binary(max_size=500)))
        kind = "application/json"
    body, headers = draw(_encoded(body, {**auth, "Content-Type": kind}))
    return Req(endpoint, "POST", path, headers, body)


@st.composite
def _otlp(draw: st.DrawFn) -> Req:
    kind = draw(st.sampled_from(["logs", "traces"]))
    doc = draw(_otlp_logs_json if kind == "logs" else _otlp_traces_json)
    if draw(st.booleans()):
        body = draw(_mutated(_protobuf(kind, doc)))
        ctype = "application/x-protobuf"
    else:
        body = draw(st.one_of(st.just(_dumps(doc)), _json.map(_dumps)))
        ctype = "application/json"
    ctype = draw(st.sampled_from([ctype, ctype, ctype, "application/xml", ""]))
    body, headers = draw(_encoded(body, {"Authorization": draw(_bearer), "Content-Type": ctype}))
    return Req(f"/v1/{kind}", "POST", f"/v1/{kind}", headers, body)


def _signed(body: bytes, stamp: str, secret: str = SIGNING_SECRET) -> dict[str, str]:
    base = b"v0:" + stamp.encode() + b":" + body
    signature = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature}


_action = _merged(
    _field("action_id", st.one_of(st.sampled_from(["mute", "resolve", "rerun", "x"]), _text)),
    _field("value", st.one_of(_text, _json.map(lambda v: json.dumps(v, allow_nan=True)))),
    _field("block_id", _text),
)
_slack_payload = _merged(
    st.just({"type": "block_actions"}),
    _field("user", _json),
    _field("container", _json),
    _field("channel", _json),
    _field("message", _json),
    _field("actions", st.one_of(st.lists(_action, max_size=4), _json)),
)


@st.composite
def _slack(draw: st.DrawFn) -> Req:
    payload = draw(st.one_of(_slack_payload, _json))
    body = draw(
        st.one_of(
            st.just(urlencode({"payload": json.dumps(payload, allow_nan=True)}).encode()),
            st.binary(max_size=300),
        )
    )
    now = str(int(time.time()))
    stamp = draw(st.one_of(*[st.just(now)] * 4, st.text(max_size=12).map(_ascii)))
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if draw(st.integers(0, 4)):
        headers |= _signed(body, stamp)
    else:
        headers |= _signed(body, stamp, secret="wrong")
    return Req("/slack/actions", "POST", "/slack/actions", headers, body)


_probe = st.sampled_from(
    [Req("/healthz", "GET", "/healthz", {}), Req("/readyz", "GET", "/readyz", {})]
)

# How often each endpoint is drawn: the parsers get the most.
REQUESTS: st.SearchStrategy[Req] = st.one_of(
    _events(), _events(), _sentry(), _sentry(), _otlp(), _otlp(), _slack(), _probe
)


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Tally:
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)  # "<endpoint> <status>: <excerpt>"
    failed: list[Req] = field(default_factory=list)  # the requests that got them, whole
    seconds: float = 0.0

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())

    def by_endpoint(self) -> dict[str, Counter[int]]:
        out: dict[str, Counter[int]] = {}
        for (endpoint, status), n in self.statuses.items():
            out.setdefault(endpoint, Counter())[status] += n
        return out


def fuzz(
    base_url: str, requests: int, *, seed: int = 0, on_request: Callable[[], None] = lambda: None
) -> Tally:
    """Sends ``requests`` generated requests to the ingest at ``base_url``; every answer's
    status is tallied, and a 5xx (or no answer) is kept with an excerpt of what was sent."""
    tally = Tally()
    started = time.monotonic()
    with httpx.Client(base_url=base_url, timeout=60) as client:

        @settings(
            max_examples=requests,
            database=None,
            deadline=None,
            derandomize=False,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @seeded(seed)
        @given(req=REQUESTS)
        def send(req: Req) -> None:
            try:
                headers = {k.encode(): _wire(v) for k, v in req.headers.items()}
                answer = client.request(req.method, req.path, headers=headers, content=req.body)
                status = answer.status_code
                detail = answer.text[:200]
            except httpx.HTTPError as exc:  # no answer at all counts as a server error
                status, detail = 599, f"{type(exc).__name__}: {exc}"
            tally.statuses[(req.endpoint, status)] += 1
            if status >= 500:
                sent = base64.b64encode(req.body[:300]).decode()
                tally.failed.append(req)
                tally.server_errors.append(
                    f"{req.endpoint} {status}: {detail!r} (path {req.path!r}, "
                    f"headers {req.headers!r}, body[:300] b64 {sent})"
                )
            on_request()

        send()
    tally.seconds = time.monotonic() - started
    return tally
