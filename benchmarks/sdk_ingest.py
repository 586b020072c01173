"""Sentry intake throughput: real Python SDK envelopes replayed at ``tracehound ingest``.

    python benchmarks/sdk_ingest.py [--events 2000] [--clients 16] [--runs 3]

The envelope is captured once from the real ``sentry-sdk`` (a chained exception, as the SDK
serializes it, breadcrumbs and local variables included) through a recording transport, then
replayed with a fresh ``event_id`` per request, compressed as the SDK sends it (brotli when it
is installed, else gzip), by ``--clients`` threads (an SDK sends one request at a time: a storm
is many SDKs at once). Starts a private redis-server and ingest per run; each run twice, with
ingest's linger off and at its default:

- **front door**: the envelopes posted while no worker runs; ingest checks each event item and
  queues it for the intake worker (answered 200 once in Redis). The queue only grows, so
  ingest's bounds on it are off. With the linger, a request waits up to 5 ms for others to
  share its message while messages wait (always, here).
- **intake worker**: a real ``celery worker`` on the ``intake`` queue (concurrency 2), started
  once they are queued; from its first task until the last message is counted
  (keys.INTAKE_TAKEN): the event model, redaction, grouping, counting. How many envelopes a
  message holds is printed beside it: the worker's consumer pays three Redis round trips a
  message, whatever it holds.
- **In-run reference**: ``/v1/events?wait=true`` with one event per request, the same error as
  a JSON record, taken in-process before the reply (what the Sentry route did itself before
  it queued).

Every event is checked to be counted once. No goal is set for these rates: the goal column
says "—".
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from producers.ingest.events import INTAKE_QUEUE
from shared.core import keys
from shared.stack.localstack import start_ingest, start_redis, start_worker

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


Request = tuple[str, bytes, dict[str, str]]  # path, body, headers
# Ingest's linger: off (ingest's own cost), and the default (5 ms), with which requests that
# come while messages wait share one (what the intake worker's consumer needs in a storm).
LINGERS = ("0", "0.005")


def run(url: str, requests: list[Request], clients: int) -> float:
    def send(chunk: list[Request]) -> None:
        with httpx.Client(timeout=60) as c:
            for path, body, headers in chunk:
                c.post(f"{url}{path}", content=body, headers=headers).raise_for_status()

    parts = [requests[i::clients] for i in range(clients)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(send, parts))
    return time.perf_counter() - t0


def drain(work: Path, redis_url: str, r: redis.Redis) -> float:
    """Seconds a real intake worker takes to take every queued message, from its first task
    to the last message counted (keys.INTAKE_TAKEN)."""
    env = {"TRACEHOUND_REDIS_URL": redis_url, "TRACEHOUND_DATA_DIR": str(work)}
    queued = r.llen(INTAKE_QUEUE)
    worker = start_worker("intake", ["intake"], 2, work, env)
    try:
        deadline = time.monotonic() + 120
        while r.llen(INTAKE_QUEUE) >= queued:
            assert time.monotonic() < deadline, "the intake worker took nothing in 120 s"
            time.sleep(0.01)
        t0 = time.perf_counter()
        while int(r.get(keys.INTAKE_TAKEN) or 0) < queued:
            assert time.monotonic() < deadline + 600, "the intake worker did not drain"
            time.sleep(0.01)
        return time.perf_counter() - t0
    finally:
        worker.stop()


def counted(r: redis.Redis) -> int:
    return sum(
        int(r.hget(k, "total") or 0)
        for k in r.scan_iter(match=keys.GROUP_PATTERN)
        if k.count(b":") == 3  # th:group:v1:<sha1>, not its :message / :update keys
    )


@dataclass
class Run:
    front: float  # seconds: every envelope posted and answered
    worker: float  # seconds: every queued message taken
    wait: float  # seconds: the reference, every /v1/events?wait=true request answered
    grouped: float  # envelopes per queued message


def one_run(
    sentry_requests: list[Request], events_requests: list[Request], clients: int, linger: str
) -> Run:
    """Every figure of one run with a fresh Redis and ingest, ``linger`` its
    TRACEHOUND_INGEST_LINGER."""
    with tempfile.TemporaryDirectory(prefix="th-sdk-ingest-") as tmp:
        work = Path(tmp)
        redis_proc, redis_url = start_redis(work)
        env = {
            "TRACEHOUND_REDIS_URL": redis_url,
            "TRACEHOUND_INGEST_TOKEN": TOKEN,
            "TRACEHOUND_SENTRY_KEYS": KEY,
            "TRACEHOUND_INGEST_MAX_BACKLOG": "1000000",
            "TRACEHOUND_INGEST_MAX_LAG": "0",
            "TRACEHOUND_INGEST_LINGER": linger,
        }
        ingest, url = start_ingest(work, env)
        r = redis.Redis.from_url(redis_url)
        try:
            front = run(url, sentry_requests, clients)
            messages = r.llen(INTAKE_QUEUE)
            worker = drain(work, redis_url, r)
            wait = run(url, events_requests, clients)
            n = len(sentry_requests) + len(events_requests)
            assert counted(r) == n, f"{counted(r)} events counted of {n}: not each once"
        finally:
            r.close()
            ingest.stop()
            redis_proc.stop()
    return Run(front, worker, wait, len(sentry_requests) / messages)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    envelope = capture_envelope()
    original_id = json.loads(envelope.split(b"\n", 1)[0])["event_id"].encode()
    sentry_headers = {
        "X-Sentry-Auth": f"Sentry sentry_version=7, sentry_key={KEY}",
        "Content-Type": "application/x-sentry-envelope",
    }
    event = json.loads(envelope.split(b"\n")[2])
    record = {"level": "error", "message": "cannot place order A-1", "service": "1"}
    record["stack"] = "".join(  # the same error as a shipper would send it
        f'  File "{f["abs_path"]}", line {f["lineno"]}, in {f["function"]}\n'
        for exc in event["exception"]["values"]
        for f in exc["stacktrace"]["frames"]
    )
    record["stack"] = "Traceback (most recent call last):\n" + record["stack"] + "CheckoutError: x"
    encoding = ""
    results: dict[str, list[Run]] = {linger: [] for linger in LINGERS}
    for _ in range(args.runs):
        for linger in LINGERS:
            sentry_requests = []
            for _ in range(args.events):  # fresh event ids every time
                body, encoding = compress(envelope.replace(original_id, uuid.uuid4().hex.encode()))
                sentry_requests.append(
                    ("/api/1/envelope/", body, {**sentry_headers, "Content-Encoding": encoding})
                )
            events_requests = [
                (
                    "/v1/events?wait=true",
                    json.dumps({**record, "id": uuid.uuid4().hex}).encode(),
                    {"Authorization": f"Bearer {TOKEN}"},
                )
                for _ in range(args.events)
            ]
            results[linger].append(one_run(sentry_requests, events_requests, args.clients, linger))
    print(
        f"\nSentry intake, {args.events:,} envelopes of one event ({len(envelope):,} B, "
        f"{encoding}) per run, {args.clients} client threads, one error (one group); client, "
        f"server, worker and Redis share the machine; events/s, median of {args.runs} runs "
        "(min–max); every event counted once in every run\n"
    )
    wait = [args.events / run.wait for run in results[LINGERS[0]]]
    print(
        "| figure | goal | measured | in-run reference: /v1/events?wait=true, 1 event / request |"
    )
    print("|---|---|---:|---:|")
    for linger, runs in results.items():
        how = "linger off" if linger == "0" else f"linger {float(linger) * 1000:g} ms (default)"
        front = [args.events / run.front for run in runs]
        worker = [args.events / run.worker for run in runs]
        grouped = [run.grouped for run in runs]
        print(f"| Sentry envelopes, front door, {how} | — | {cell(front)} | {cell(wait)} |")
        print(
            f"| Sentry envelopes, intake worker (concurrency 2), {how}: "
            f"{statistics.median(grouped):.1f} envelopes a message | — | {cell(worker)} "
            f"| {cell(wait)} |"
        )
    return 0


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})"


if __name__ == "__main__":
    raise SystemExit(main())
