"""Sentry alongside, not instead: the real ``sentry-sdk`` reports through a real ``tracehound
ingest`` (TRACEHOUND_SENTRY_UPSTREAM) to a recording upstream, a loopback HTTP server written
here that keeps every request it answered byte for byte, and that is stopped, made to hang,
rate-limits and comes back.

The SDK runs in a process of its own, as an app would; its transport is wrapped only to write
down what it sent (body, headers), how long each request took and what it got back.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from producers.ingest.events import INTAKE_QUEUE
from producers.ingest.upstream_queue import UpstreamQueue
from shared.stack.children import free_port
from shared.stack.localstack import start_ingest, start_redis
from tests.conftest import SETTLE_OFF

pytestmark = pytest.mark.integration

KEY = "0123456789abcdef0123456789abcdef"
MAX_BODY = 200_000


# --- the recording upstream ------------------------------------------------------------------


@dataclass
class Received:
    path: str
    headers: dict[str, str]  # names lower-case
    body: bytes
    at: float  # time.monotonic() when it was answered


@dataclass
class Recorder:
    """A Sentry stand-in on a fixed port: ``answer`` decides each reply (status, headers);
    only requests it answered 2xx are ``received`` (what the upstream took)."""

    port: int = field(default_factory=free_port)
    received: list[Received] = field(default_factory=list)
    attempts: list[float] = field(default_factory=list)  # every request's arrival
    answer: Callable[[int], tuple[int, dict[str, str]]] = lambda n: (200, {})
    hang: threading.Event = field(default_factory=threading.Event)  # set: never answer
    server: ThreadingHTTPServer | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with recorder.lock:
                    recorder.attempts.append(time.monotonic())
                    n = len(recorder.attempts)
                if recorder.hang.is_set():
                    time.sleep(30)  # longer than the forwarder's timeout: it gives up first
                    self.close_connection = True
                    return
                status, headers = recorder.answer(n)
                if 200 <= status < 300:
                    with recorder.lock:
                        recorder.received.append(
                            Received(
                                self.path,
                                {k.lower(): v for k, v in self.headers.items()},
                                body,
                                time.monotonic(),
                            )
                        )
                reply = json.dumps({"id": "x"}).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def wait_for(self, count: int, timeout: float = 60.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        return list(self.received)


@pytest.fixture
def upstream() -> Iterator[Recorder]:
    recorder = Recorder()
    recorder.start()
    try:
        yield recorder
    finally:
        recorder.hang.clear()
        recorder.stop()


# --- tracehound ingest ----------------------------------------------------------------------


class Ingest:
    def __init__(self, workdir: Path, upstream_url: str, **env: str) -> None:
        self.workdir = workdir
        self.redis_proc, self.redis_url = start_redis(workdir)
        self.env = {
            "TRACEHOUND_REDIS_URL": self.redis_url,
            "TRACEHOUND_SENTRY_KEYS": KEY,
            "TRACEHOUND_INGEST_MAX_BODY_BYTES": str(MAX_BODY),
            "TRACEHOUND_SENTRY_UPSTREAM": upstream_url,
            # Quick retries and a quick lease hand-over after a kill -9 (production: 10 s
            # timeout, backoff capped at 60 s).
            "TRACEHOUND_SENTRY_UPSTREAM_TIMEOUT": "2",
            "TRACEHOUND_RETRY_BACKOFF_MAX": "1",
            # No intake worker takes the events queued here: with a bound on their wait, the
            # SDK's requests after the first second would be refused (429), as they should.
            "TRACEHOUND_INGEST_MAX_LAG": "0",
            **SETTLE_OFF,
            **env,
        }
        self.proc, self.url = start_ingest(workdir, self.env)
        self.client = redis.Redis.from_url(self.redis_url)

    def dsn(self, project: str = "7") -> str:
        return f"http://{KEY}@{self.url.removeprefix('http://')}/{project}"

    def restart(self) -> None:
        self.proc, self.url = start_ingest(self.workdir, self.env)

    def kill_9(self) -> None:
        os.killpg(self.proc.popen.pid, signal.SIGKILL)
        self.proc.popen.wait(10)

    def waiting(self) -> Any:
        return UpstreamQueue(self.client, 1).stats()

    def envelope(self, body: bytes, **headers: str) -> httpx.Response:
        return httpx.post(
            f"{self.url}/api/7/envelope/",
            content=body,
            headers={
                "X-Sentry-Auth": f"Sentry sentry_version=7, sentry_key={KEY}",
                "Content-Type": "application/x-sentry-envelope",
                **headers,
            },
            timeout=30,
        )

    def close(self) -> None:
        self.proc.stop()
        self.client.close()
        self.redis_proc.stop()


@pytest.fixture
def ingest(tmp_path: Path, upstream: Recorder) -> Iterator[Ingest]:
    s = Ingest(tmp_path, upstream.url)
    try:
        yield s
    finally:
        s.close()


# --- the real Python SDK ---------------------------------------------------------------------

SDK_APP = """
import base64, json, sys, time
import sentry_sdk
from sentry_sdk import transport

dsn, out, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
real = transport.HttpTransport._request


def recorded(self, method, endpoint_type, body, headers):
    started = time.perf_counter()
    response = real(self, method, endpoint_type, body, headers)
    with open(out, "a") as f:
        f.write(json.dumps({
            "body": base64.b64encode(body).decode(),
            "headers": {k.lower(): v for k, v in headers.items()},
            "status": response.status,
            "seconds": time.perf_counter() - started,
        }) + "\\n")
    return response


transport.HttpTransport._request = recorded
sentry_sdk.init(dsn=dsn, release="1.4.2", environment="staging")
for n in range(count):
    try:
        {"qty": "two"}["sku-%d" % n]
    except KeyError as exc:
        sentry_sdk.capture_exception(exc)
sentry_sdk.flush(20)
"""


@dataclass(frozen=True)
class Sent:
    body: bytes
    headers: dict[str, str]
    status: int
    seconds: float


def run_sdk(tmp_path: Path, dsn: str, count: int = 1) -> list[Sent]:
    """The real SDK captures ``count`` exceptions and sends them; what it sent and got."""
    pytest.importorskip("sentry_sdk", reason="sentry-sdk is in the dev extra")
    import subprocess

    app, out = tmp_path / "sdk_app.py", tmp_path / f"sent-{time.monotonic_ns()}.jsonl"
    app.write_text(SDK_APP)
    done = subprocess.run(
        [sys.executable, str(app), dsn, str(out), str(count)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    sent = [json.loads(line) for line in out.read_text().splitlines()]
    return [
        Sent(base64.b64decode(s["body"]), s["headers"], s["status"], s["seconds"]) for s in sent
    ]


def envelope_body(event_id: str, padding: int = 0) -> bytes:
    event = {"event_id": event_id, "level": "error", "message": "x" * padding or "boom"}
    header = json.dumps({"event_id": event_id})
    return f'{header}\n{{"type":"event"}}\n{json.dumps(event)}'.encode()


def wait_until(check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


# --- the tests -------------------------------------------------------------------------------


def test_the_real_sdk_reaches_tracehound_and_the_upstream_gets_the_same_bytes(
    ingest: Ingest, upstream: Recorder, tmp_path: Path
) -> None:
    sent = run_sdk(tmp_path, ingest.dsn(), count=2)
    events = [s for s in sent if b'"type":"event"' in _plain(s)]
    assert len(events) == 2 and all(s.status == 200 for s in sent)
    received = upstream.wait_for(len(sent))
    # Every request the SDK sent, once, body and the headers that matter byte for byte
    # (compressed as the SDK compressed it), at the same project.
    assert sorted(r.body for r in received) == sorted(s.body for s in sent)
    for r in received:
        [s] = [s for s in sent if s.body == r.body]
        assert r.path == "/api/7/envelope/"
        for name in ("x-sentry-auth", "user-agent", "content-type", "content-encoding"):
            assert r.headers.get(name) == s.headers.get(name), name
        assert r.headers["x-forwarded-for"] == "127.0.0.1"  # the SDK's address, as proxies add
    assert sent[0].headers.get("content-encoding") in ("br", "gzip")
    # tracehound took them too: their events wait for the intake worker (none runs here).
    assert ingest.client.llen(INTAKE_QUEUE) >= 1
    assert ingest.waiting().waiting == 0


def test_an_upstream_that_hangs_or_is_down_costs_the_sdk_nothing_and_gets_everything_later(
    ingest: Ingest, upstream: Recorder, tmp_path: Path
) -> None:
    upstream.hang.set()  # accepts, never answers: the forwarder times out and keeps the entry
    slow = run_sdk(tmp_path, ingest.dsn(), count=3)
    upstream.stop()  # connection refused
    down = run_sdk(tmp_path, ingest.dsn(), count=3)
    sent = slow + down
    assert all(s.status == 200 for s in sent)
    # The SDK's requests never wait for the upstream (its timeout here is 2 s).
    assert max(s.seconds for s in sent) < 1.0, [round(s.seconds, 3) for s in sent]
    assert ingest.waiting().waiting >= len(down)  # kept in Redis while the upstream is away
    upstream.hang.clear()
    upstream.start()
    received = upstream.wait_for(len(sent))
    # All delivered, none twice (at least once: a request the upstream took but never
    # answered may come again; this upstream never took one it did not answer).
    assert sorted(r.body for r in received) == sorted(s.body for s in sent)
    wait_until(lambda: ingest.waiting().waiting == 0)
    assert ingest.waiting().counts["delivered"] == len(sent)


def test_entries_waiting_when_ingest_is_killed_are_delivered_after_its_restart(
    ingest: Ingest, upstream: Recorder, tmp_path: Path
) -> None:
    upstream.stop()
    sent = run_sdk(tmp_path, ingest.dsn(), count=3)
    assert all(s.status == 200 for s in sent)
    assert ingest.waiting().waiting == len(sent)
    ingest.kill_9()
    upstream.start()
    time.sleep(1)
    assert upstream.received == []  # nobody forwards while ingest is dead
    ingest.restart()
    received = upstream.wait_for(len(sent))  # after the dead process's lease lapses (9 s)
    assert sorted(r.body for r in received) == sorted(s.body for s in sent)


def _children(pid: int) -> set[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return {int(c) for c in path.read_text().split()} if path.exists() else set()


def test_the_forwarder_process_ends_with_ingest_even_killed_alone(
    ingest: Ingest, upstream: Recorder, tmp_path: Path
) -> None:
    """The forwarder runs in a process of its own; ``kill -9`` of ingest's process alone
    (not its group) leaves it an orphan, which stops by itself: nothing goes on sending."""
    upstream.stop()
    assert all(s.status == 200 for s in run_sdk(tmp_path, ingest.dsn(), count=2))
    forwarders = _children(ingest.proc.popen.pid)
    assert forwarders, "no forwarder process beside ingest"
    os.kill(ingest.proc.popen.pid, signal.SIGKILL)
    ingest.proc.popen.wait(10)
    wait_until(lambda: not any(Path(f"/proc/{c}").exists() for c in forwarders), 10)
    upstream.start()
    time.sleep(1)
    assert upstream.received == []  # the entries wait in Redis for the next ingest
    assert ingest.waiting().waiting == 2


def test_a_429_is_honoured_for_as_long_as_retry_after_says(
    ingest: Ingest, upstream: Recorder
) -> None:
    upstream.answer = lambda n: (429, {"Retry-After": "3"}) if n == 1 else (200, {})
    body = envelope_body("a" * 32)
    assert ingest.envelope(body).status_code == 200
    [received] = upstream.wait_for(1)
    assert received.body == body
    first, second = upstream.attempts[:2]
    assert second - first >= 2.9  # not before Retry-After, though the backoff would be 1 s
    assert len(upstream.attempts) == 2


def test_the_longest_x_sentry_rate_limit_wins_over_retry_after(
    ingest: Ingest, upstream: Recorder
) -> None:
    limits = {"Retry-After": "1", "X-Sentry-Rate-Limits": "1:transaction:key, 3::organization"}
    upstream.answer = lambda n: (429, limits) if n == 1 else (200, {})
    assert ingest.envelope(envelope_body("b" * 32)).status_code == 200
    upstream.wait_for(1)
    assert upstream.attempts[1] - upstream.attempts[0] >= 2.9


def test_an_envelope_the_upstream_refuses_is_dropped_and_counted_not_retried(
    ingest: Ingest, upstream: Recorder
) -> None:
    upstream.answer = lambda n: (400, {}) if n == 1 else (200, {})
    assert ingest.envelope(envelope_body("c" * 32)).status_code == 200
    wait_until(lambda: ingest.waiting().counts.get("refused") == 1)
    assert ingest.waiting().waiting == 0
    time.sleep(1.5)
    assert len(upstream.attempts) == 1


def test_requests_tracehound_refuses_are_not_forwarded(ingest: Ingest, upstream: Recorder) -> None:
    body = envelope_body("d" * 32)
    assert httpx.post(f"{ingest.url}/api/7/envelope/", content=body).status_code == 401
    wrong = {"X-Sentry-Auth": "Sentry sentry_key=" + "f" * 32}
    assert ingest.envelope(body, **wrong).status_code == 403
    big = envelope_body("e" * 32, padding=MAX_BODY)
    assert ingest.envelope(big).status_code == 413
    assert ingest.envelope(b"not an envelope").status_code == 400
    time.sleep(1)
    assert upstream.attempts == [] and ingest.waiting().counts == {}


def test_past_the_byte_bound_the_oldest_are_dropped_counted_and_logged(
    tmp_path: Path, upstream: Recorder
) -> None:
    upstream.stop()
    s = Ingest(tmp_path, upstream.url, TRACEHOUND_SENTRY_UPSTREAM_MAX_BYTES="500000")
    try:
        bodies = [envelope_body(f"{n:032x}", padding=90_000) for n in range(8)]
        for body in bodies:  # about 90 kB each: five fit in 500 kB
            assert s.envelope(body).status_code == 200
        stats = s.waiting()
        assert stats.counts["dropped"] == 3 and stats.waiting == 5
        assert stats.waiting_bytes <= 500_000
        upstream.start()
        received = upstream.wait_for(5)
        assert sorted(r.body for r in received) == sorted(bodies[3:])  # the newest kept
        s.proc.stop()
        assert "upstream.dropped" in s.proc.log_path.read_text()
    finally:
        s.close()


def _plain(sent: Sent) -> bytes:
    """The SDK's body decompressed, to tell an event envelope from a session or report."""
    from producers.ingest.body import decoded

    return decoded(sent.body, sent.headers.get("content-encoding", ""), 10_000_000)
