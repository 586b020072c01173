"""Sentry intake throughput: real Python SDK envelopes replayed at ``tracehound ingest``.

    python benchmarks/sdk_ingest.py [--events 2000] [--clients 4]

The envelope is captured once from the real ``sentry-sdk`` (a chained exception, as the SDK
serializes it, breadcrumbs and local variables included) through a recording transport, then
replayed with a fresh ``event_id`` per request, compressed as the SDK sends it (brotli when it
is installed, else gzip). Beside it, ``/v1/events?wait=true`` with one event per request, the
same error as a JSON record taken before the reply, for comparison (by default ``/v1/events``
only checks and queues a batch for the intake worker). Starts a private redis-server; no
workers run, so this measures decoding, redaction, grouping and counting.

No goal is set for this rate (issue 15 asks for it beside the existing ingest numbers): the
goal column says "—". The in-run reference is ``/v1/events?wait=true`` with the same error.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.core import keys
from shared.stack.localstack import start_ingest, start_redis

KEY = "0123456789abcdef0123456789abcdef"
TOKEN = "bench"


class CheckoutError(Exception):
    pass


def _parse_quantity(order: dict[str, Any]) -> int:
    return int(order["qty"])


def _place_order(order: dict[str, Any]) -> int:
    try:
        return _parse_quantity(order)
    except ValueError as exc:
        raise CheckoutError("cannot place order A-1") from exc


def capture_envelope() -> bytes:
    """One envelope as the real Python SDK serializes it for a chained exception."""
    import sentry_sdk
    from sentry_sdk.transport import Transport

    captured: list[bytes] = []

    class Recorder(Transport):
        def capture_envelope(self, envelope: Any) -> None:
            captured.append(envelope.serialize())

    sentry_sdk.init(
        dsn=f"http://{KEY}@127.0.0.1:9/1",
        transport=Recorder,
        release="1.4.2",
        environment="bench",
        default_integrations=False,
    )
    sentry_sdk.add_breadcrumb(category="http", message="GET /cart/42")
    try:
        _place_order({"sku": "A-1", "qty": "two"})
    except CheckoutError as exc:
        sentry_sdk.capture_exception(exc)
    sentry_sdk.flush()
    [body] = [b for b in captured if b'"type":"event"' in b]
    return body


def compress(body: bytes) -> tuple[bytes, str]:
    try:
        import brotli
    except ImportError:
        return gzip.compress(body), "gzip"
    return brotli.compress(body), "br"


def run(url: str, requests: list[tuple[str, bytes, dict[str, str]]], clients: int) -> float:
    def send(chunk: list[tuple[str, bytes, dict[str, str]]]) -> None:
        with httpx.Client(timeout=60) as c:
            for path, body, headers in chunk:
                c.post(f"{url}{path}", content=body, headers=headers).raise_for_status()

    parts = [requests[i::clients] for i in range(clients)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(send, parts))
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=4)
    args = ap.parse_args()
    envelope = capture_envelope()
    original_id = json.loads(envelope.split(b"\n", 1)[0])["event_id"].encode()
    sentry_headers = {
        "X-Sentry-Auth": f"Sentry sentry_version=7, sentry_key={KEY}",
        "Content-Type": "application/x-sentry-envelope",
    }
    sentry_requests = []
    encoding = ""
    for _ in range(args.events):
        body, encoding = compress(envelope.replace(original_id, uuid.uuid4().hex.encode()))
        sentry_requests.append(
            ("/api/1/envelope/", body, {**sentry_headers, "Content-Encoding": encoding})
        )
    event = json.loads(envelope.split(b"\n")[2])
    record = {"level": "error", "message": "cannot place order A-1", "service": "1"}
    record["stack"] = "".join(  # the same error as a shipper would send it
        f'  File "{f["abs_path"]}", line {f["lineno"]}, in {f["function"]}\n'
        for exc in event["exception"]["values"]
        for f in exc["stacktrace"]["frames"]
    )
    record["stack"] = "Traceback (most recent call last):\n" + record["stack"] + "CheckoutError: x"
    events_requests = [
        (
            "/v1/events?wait=true",
            json.dumps({**record, "id": uuid.uuid4().hex}).encode(),
            {"Authorization": f"Bearer {TOKEN}"},
        )
        for _ in range(args.events)
    ]
    with tempfile.TemporaryDirectory(prefix="th-sdk-ingest-") as tmp:
        redis_proc, redis_url = start_redis(Path(tmp))
        # No intake worker runs: the queue only grows, so ingest's bounds on it are off (as in
        # benchmarks/ingest.py), and so is the linger that groups batches while they wait.
        env = {
            "TRACEHOUND_REDIS_URL": redis_url,
            "TRACEHOUND_INGEST_TOKEN": TOKEN,
            "TRACEHOUND_SENTRY_KEYS": KEY,
            "TRACEHOUND_INGEST_MAX_BACKLOG": "1000000",
            "TRACEHOUND_INGEST_MAX_LAG": "0",
            "TRACEHOUND_INGEST_LINGER": "0",
        }
        ingest, url = start_ingest(Path(tmp), env)
        try:
            rows = [
                (
                    f"Sentry envelope, 1 event ({len(envelope):,} B, {encoding})",
                    run(url, sentry_requests, args.clients),
                ),
                (
                    "/v1/events?wait=true, 1 event / request (JSON)",
                    run(url, events_requests, args.clients),
                ),
            ]
            r = redis.Redis.from_url(redis_url)
            totals = [
                int(r.hget(k, "total") or 0)
                for k in r.scan_iter(match=keys.GROUP_PATTERN)
                if k.count(b":") == 3  # th:group:v1:<sha1>, not its :message / :update keys
            ]
            groups, counted = len(totals), sum(totals)
            r.close()
        finally:
            ingest.stop()
            redis_proc.stop()
    print(
        f"\nSDK intake → Redis, {args.events} events per shape, {args.clients} client threads, "
        "one error (one group); client, server and Redis share the machine\n"
    )
    print("| figure | goal | measured | in-run reference |")
    print("|---|---|---:|---:|")
    (name, secs), (ref_name, ref_secs) = rows
    print(f"| {name} | — | {rate(args.events, secs)} | {ref_name}: {rate(args.events, ref_secs)} |")
    print(
        f"\nerror groups afterwards: {groups}, {counted:,} events counted in them "
        f"(expected {2 * args.events:,}: every event is counted once)"
    )
    return 0


def rate(events: int, seconds: float) -> str:
    return f"{events / seconds:,.0f} events/s ({seconds:.2f} s)"


if __name__ == "__main__":
    raise SystemExit(main())
