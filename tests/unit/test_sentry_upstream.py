"""What goes to an upstream Sentry and where (producers/ingest/upstream.py), and what its
answers mean (producers/ingest/forwarder.py)."""

from __future__ import annotations

import gzip
import json

import brotli
import pytest
from pydantic import ValidationError

from producers.ingest.forwarder import Outcome, outcome, rate_limit_wait, retry_after
from producers.ingest.upstream import Taken, outgoing, parse_upstream
from shared.core.settings import Settings

SDK_KEY = "0123456789abcdef0123456789abcdef"
UP_KEY = "fedcba9876543210fedcba9876543210"
AUTH = f"Sentry sentry_key={SDK_KEY}, sentry_version=7, sentry_client=sentry.python/2.0"


def envelope(header: dict[str, object]) -> bytes:
    return json.dumps(header).encode() + b'\n{"type":"event","length":16}\n{"message":"boom"}\n'


def taken(body: bytes, encoding: str = "", query: str = "", **headers: str) -> Taken:
    base = {"x-sentry-auth": AUTH, "content-type": "application/x-sentry-envelope"}
    if encoding:
        base["content-encoding"] = encoding
    return Taken("envelope", "7", query, base | headers, body)


def test_a_base_url_keeps_the_sdks_project_key_and_bytes() -> None:
    up = parse_upstream("https://sentry.example.com:8443/prefix/")
    body = gzip.compress(envelope({"event_id": "a" * 32}))
    t = taken(body, "gzip", query="wait=1", **{"user-agent": "sentry.python/2.0"})
    out = outgoing(up, t, 1_000_000)
    assert out.url == "https://sentry.example.com:8443/prefix/api/7/envelope/?wait=1"
    assert out.body is body
    assert out.headers[b"x-sentry-auth"] == AUTH.encode()
    assert out.headers[b"content-encoding"] == b"gzip"
    assert out.headers[b"user-agent"] == b"sentry.python/2.0"


def test_a_dsn_sends_every_request_to_its_project_with_its_key_where_the_sdk_put_one() -> None:
    up = parse_upstream(f"https://{UP_KEY}@o1.ingest.sentry.io/api-prefix/42")
    assert (up.base, up.project, up.key) == ("https://o1.ingest.sentry.io/api-prefix", "42", UP_KEY)
    out = outgoing(up, taken(envelope({"event_id": "b" * 32})), 1_000_000)
    assert out.url == "https://o1.ingest.sentry.io/api-prefix/api/42/envelope/"
    assert out.headers[b"x-sentry-auth"] == AUTH.replace(SDK_KEY, UP_KEY).encode()
    # The key as a query parameter (browser SDKs): swapped there, the rest of the query kept.
    t = Taken("store", "7", f"sentry_key={SDK_KEY}&sentry_version=7", {}, b"{}")
    out = outgoing(up, t, 1_000_000)
    assert (
        out.url
        == f"https://o1.ingest.sentry.io/api-prefix/api/42/store/?sentry_key={UP_KEY}&sentry_version=7"
    )


@pytest.mark.parametrize("encoding", ["", "gzip", "br"])
def test_with_a_dsn_an_envelope_header_naming_the_sdks_dsn_names_the_upstreams(
    encoding: str,
) -> None:
    """relay refuses an envelope whose header dsn names another project or key (400)."""
    dsn = f"https://{UP_KEY}@sentry.example.com/42"
    plain = envelope({"event_id": "c" * 32, "dsn": f"http://{SDK_KEY}@tracehound:8080/7"})
    pack = {"": lambda b: b, "gzip": gzip.compress, "br": brotli.compress}[encoding]
    out = outgoing(parse_upstream(dsn), taken(pack(plain), encoding), 1_000_000)
    unpack = {"": lambda b: b, "gzip": gzip.decompress, "br": brotli.decompress}[encoding]
    header, _, items = unpack(out.body).partition(b"\n")
    assert json.loads(header) == {"event_id": "c" * 32, "dsn": dsn}
    assert items == plain.partition(b"\n")[2]  # the items byte for byte


def test_with_a_dsn_an_envelope_without_a_header_dsn_is_sent_as_it_came() -> None:
    body = brotli.compress(envelope({"event_id": "d" * 32}))
    up = parse_upstream(f"https://{UP_KEY}@sentry.example.com/42")
    assert outgoing(up, taken(body, "br"), 1_000_000).body is body


def test_a_taken_request_survives_the_queue_entry() -> None:
    t = taken(b"\x00\xffbinary", "br", query="a=1", **{"user-agent": "caf\xe9"})
    assert Taken.from_entry(t.meta(), t.body) == t


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (200, {}, Outcome("delivered")),
        (202, {}, Outcome("delivered")),
        (429, {"retry-after": "7"}, Outcome(None, 7.0)),
        (429, {}, Outcome(None, 60.0)),  # the SDKs' default
        (503, {"retry-after": "4"}, Outcome(None, 4.0)),
        (503, {}, Outcome(None)),  # the backoff decides
        (400, {}, Outcome("refused")),
        (401, {}, Outcome("refused")),
        (413, {}, Outcome("refused")),
        (500, {}, Outcome(None)),
        (302, {}, Outcome(None)),
    ],
)
def test_what_an_upstream_answer_does_to_the_entry(
    status: int, headers: dict[str, str], expected: Outcome
) -> None:
    assert outcome(status, headers) == expected


def test_rate_limits_take_the_longest_group_and_are_bounded() -> None:
    limits = {"x-sentry-rate-limits": "60:transaction:key, 2700:default;error:organization"}
    assert rate_limit_wait({**limits, "retry-after": "10"}) == 2700
    assert rate_limit_wait({"x-sentry-rate-limits": "garbage, 5::org"}) == 5
    assert rate_limit_wait({"x-sentry-rate-limits": "99999999::org"}) == 3600
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    assert retry_after("soon") is None


def test_settings_take_a_dsn_or_url_mask_its_key_and_bound_one_request() -> None:
    s = Settings(sentry_upstream=f"https://{UP_KEY}@sentry.example.com/42")
    assert UP_KEY not in json.dumps(s.masked())
    with pytest.raises(ValidationError):
        Settings(sentry_upstream="ftp://sentry.example.com")
    with pytest.raises(ValidationError):
        Settings(sentry_upstream=f"https://{UP_KEY}@sentry.example.com/")
    with pytest.raises(ValidationError, match="MAX_BYTES"):
        Settings(
            sentry_upstream="https://sentry.example.com",
            sentry_upstream_max_bytes=1_000_000,
            ingest_max_body_bytes=2_000_000,
        )
