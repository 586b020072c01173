"""``tracehound ingest`` refuses what an attacker, not a shipper, sends: requests from other web
pages, other host names (DNS rebinding), bodies a page can post without a preflight, a
public DSN key used as the ingest token, unknown Sentry projects and malformed credentials —
and still takes what real shippers and SDKs send. Two real ingest processes (one open on
loopback, one with credentials) on a private redis-server, shared by the module's tests."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from shared.stack.localstack import start_ingest, start_redis
from tests.conftest import counted_in_groups

pytestmark = pytest.mark.integration

TOKEN = "ingest-token-1234567890"
DSN_KEY = "0123456789abcdef0123456789abcdef"
ALLOWED = "https://app.example.com"
RECORD = {"service": "shop", "level": "error", "message": "boom", "stack": "KeyError: 'sku'"}


def envelope(event_id: str) -> bytes:
    head = json.dumps({"event_id": event_id, "sent_at": "2026-12-01T10:00:00Z"})
    item = json.dumps(
        {
            "event_id": event_id,
            "level": "error",
            "platform": "python",
            "exception": {"values": [{"type": "KeyError", "value": "sku"}]},
        }
    )
    return f'{head}\n{{"type": "event", "length": {len(item)}}}\n{item}\n'.encode()


class Ingests:
    def __init__(self, workdir: Path) -> None:
        self.redis_proc, redis_url = start_redis(workdir)
        self.client = redis.Redis.from_url(redis_url)
        base = {"TRACEHOUND_REDIS_URL": redis_url, "TRACEHOUND_INCIDENT_SETTLE": "0"}
        self.open_proc, self.open = start_ingest(workdir / "open", base)
        # A token, and no DSN key: the Sentry routes take none (the token is never one).
        self.closed_proc, self.closed = start_ingest(
            workdir / "closed",
            base | {"TRACEHOUND_INGEST_TOKEN": TOKEN, "TRACEHOUND_SLACK_SIGNING_SECRET": "secret"},
        )
        self.keyed_proc, self.keyed = start_ingest(
            workdir / "keyed",
            base
            | {
                "TRACEHOUND_INGEST_TOKEN": TOKEN,
                "TRACEHOUND_SENTRY_KEYS": DSN_KEY,
                "TRACEHOUND_SENTRY_PROJECTS": "7=shop",
                "TRACEHOUND_INGEST_ALLOWED_ORIGINS": ALLOWED,
                "TRACEHOUND_SERVICE_REPOS": "victim=victim,victim2=victim2",
            },
        )

    def queued_events(self) -> list[dict[str, Any]]:
        """The events of the analysis chains queued so far (no worker runs here)."""
        events = []
        for message in self.client.lrange("embed", 0, -1):
            body = json.loads(base64.b64decode(json.loads(message)["body"]))
            events.append(body[0][0]["event"])
        return events

    def counted(self) -> int:
        return counted_in_groups(self.client)

    def close(self) -> None:
        for proc in (self.open_proc, self.closed_proc, self.keyed_proc):
            proc.stop()
        self.client.close()
        self.redis_proc.stop()


@pytest.fixture(scope="module")
def ingests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ingests]:
    i = Ingests(tmp_path_factory.mktemp("guard"))
    try:
        yield i
    finally:
        i.close()


def post(url: str, body: bytes | str, **headers: Any) -> httpx.Response:
    data = body.encode() if isinstance(body, str) else body
    return httpx.post(url, content=data, headers=headers, timeout=30)


def test_a_web_page_cannot_feed_errors_into_an_open_loopback_ingest(ingests: Ingests) -> None:
    """What a page in the developer's browser can send cross-site without a preflight: a
    text/plain or form body, with its Origin. Each endpoint refuses it; nothing is counted."""
    before = ingests.counted()
    body = json.dumps(RECORD)
    for path, payload in (
        ("/v1/events?wait=true", body),
        ("/api/1/store/", body),
        ("/api/1/envelope/", envelope("a" * 32)),
    ):
        page = post(
            ingests.open + path,
            payload,
            **{"content-type": "text/plain", "origin": "https://evil.example"},
        )
        assert page.status_code == 403, (path, page.text)
        form = post(
            ingests.open + path, payload, **{"content-type": "application/x-www-form-urlencoded"}
        )
        assert form.status_code == 415, (path, form.text)
    assert ingests.counted() == before


def test_a_host_name_that_rebinds_to_loopback_is_refused(ingests: Ingests) -> None:
    rebound = post(
        ingests.open + "/v1/events?wait=true",
        json.dumps(RECORD),
        **{"content-type": "application/json", "host": "evil.example"},
    )
    assert rebound.status_code == 400


def test_shippers_and_sdks_still_get_in(ingests: Ingests) -> None:
    """JSON and NDJSON from shippers, and a Sentry envelope with no content type at all
    (``@sentry/node``'s HTTP transport sends none)."""
    assert (
        post(
            ingests.open + "/v1/events?wait=true",
            json.dumps(RECORD),
            **{"content-type": "application/json"},
        ).status_code
        == 202
    )
    ndjson = post(
        ingests.open + "/v1/events?wait=true",
        json.dumps(RECORD) + "\n",
        **{"content-type": "application/x-ndjson"},
    )
    assert ndjson.status_code == 202
    bare = post(ingests.open + "/api/1/envelope/", envelope("b" * 32))
    assert bare.status_code == 200 and bare.json()["queued"]


def test_the_ingest_token_is_not_a_dsn_key_and_unknown_projects_are_refused(
    ingests: Ingests,
) -> None:
    """A DSN is often public (shipped in a web bundle): it never opens /v1/events, and the
    bearer token is no DSN key. With a project map, only its projects get in."""
    as_token = post(
        ingests.closed + "/api/7/envelope/",
        envelope("c" * 32),
        **{"x-sentry-auth": f"Sentry sentry_key={TOKEN}, sentry_version=7"},
    )
    assert as_token.status_code == 401 and "TRACEHOUND_SENTRY_KEYS" in as_token.text
    events_with_dsn = post(
        ingests.keyed + "/v1/events", json.dumps(RECORD), **{"authorization": f"Bearer {DSN_KEY}"}
    )
    assert events_with_dsn.status_code == 401
    unknown = post(
        ingests.keyed + "/api/8/envelope/",
        envelope("d" * 32),
        **{"x-sentry-auth": f"Sentry sentry_key={DSN_KEY}, sentry_version=7"},
    )
    assert unknown.status_code == 403 and "unknown project" in unknown.text
    known = post(
        ingests.keyed + "/api/7/envelope/",
        envelope("e" * 32),
        **{"x-sentry-auth": f"Sentry sentry_key={DSN_KEY}, sentry_version=7"},
    )
    assert known.status_code == 200 and known.json()["queued"]


def test_an_allowed_origin_may_report_from_the_browser(ingests: Ingests) -> None:
    preflight = httpx.options(
        ingests.keyed + "/api/7/envelope/",
        headers={"origin": ALLOWED, "access-control-request-method": "POST"},
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == ALLOWED
    browser = post(
        ingests.keyed + f"/api/7/envelope/?sentry_key={DSN_KEY}",
        envelope("f" * 32),
        **{"content-type": "text/plain;charset=UTF-8", "origin": ALLOWED},
    )
    assert browser.status_code == 200


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/v1/events", {"authorization": "Bearer ingest-tökén"}),
        ("/v1/logs", {"authorization": "Bearer ✓✓✓", "content-type": "application/json"}),
        ("/slack/actions", {"x-slack-request-timestamp": "soon", "x-slack-signature": "v0=ab"}),
    ],
)
def test_malformed_credentials_get_401_not_a_server_error(
    ingests: Ingests, path: str, headers: dict[str, str]
) -> None:
    encoded = {k: v.encode("utf-8") for k, v in headers.items()}  # sent as raw UTF-8 bytes
    response = httpx.post(ingests.closed + path, content=b"{}", headers=encoded, timeout=30)
    assert response.status_code == 401, response.text


def test_a_record_cannot_have_another_services_repo_cited(ingests: Ingests) -> None:
    """With TRACEHOUND_SERVICE_REPOS, a record for victim2 that names repo "victim" is
    analysed against victim2's own repo: the sender cannot have victim's code cited in
    victim2's channel."""
    record = {**RECORD, "service": "victim2", "repo": "victim", "message": "cross-repo"}
    sent = post(
        ingests.keyed + "/v1/events?wait=true",
        json.dumps(record),
        **{"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
    )
    assert sent.status_code == 202 and sent.json()["groups"][0]["new"]
    [event] = [e for e in ingests.queued_events() if e["message"] == "cross-repo"]
    assert (event["service"], event["repo"]) == ("victim2", "victim2")
    assert not any(k.startswith("_tracehound") for k in event["attributes"])


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return (
        int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
        / 1024
    )


def test_a_small_otlp_body_of_millions_of_empty_messages_is_refused_in_bounded_memory(
    ingests: Ingests,
) -> None:
    """9.7 kB of gzip that expands to 5 million empty ResourceLogs: it is counted before it
    is decoded and refused at the bound, on a worker thread; ingest's memory hardly moves
    (decoding it took 790 MB and 7.6 s of the event loop)."""
    bomb = gzip.compress(b"\x0a\x00" * 5_000_000)
    assert len(bomb) < 20_000
    pid = ingests.open_proc.popen.pid
    before = rss_mb(pid)
    refused = post(
        ingests.open + "/v1/logs",
        bomb,
        **{"content-type": "application/x-protobuf", "content-encoding": "gzip"},
    )
    assert refused.status_code == 413 and "resources" in refused.text
    assert rss_mb(pid) - before < 100
    assert httpx.get(ingests.open + "/healthz", timeout=5).status_code == 200
