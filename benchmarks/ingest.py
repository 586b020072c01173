"""Ingest throughput: the log tailer on a big log, and HTTP ingest, into a private Redis.

    python benchmarks/ingest.py [--tail-mb 1024] [--events 5000]

Starts a private redis-server. No workers run, so this measures reading, grouping and
enqueueing only; the queued chains are counted in Redis afterwards.

- tailer: a generated log of ``--tail-mb`` MB of ordinary lines in which 1% of the records are
  Python tracebacks (5 lines each) is read from the start by the tailer, once with a no-op
  enqueue (reading and grouping alone) and once enqueueing into Redis;
- HTTP: ``tracehound ingest`` (one uvicorn process) receives the sample stack trace as events,
  one per request and as NDJSON batches of 100 (what Vector and Fluent Bit send).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.devtools.localstack import start_ingest, start_redis

TRACE = (ROOT / "tests/data/sample-error.txt").read_text()
TOKEN = "bench"


def record(i: int) -> str:
    return json.dumps(
        {
            "service": "shop-api",
            "repo": "bench",
            "level": "ERROR",
            "message": f"ZeroDivisionError: division by zero (request {i})",
            "stack": TRACE,
        }
    )


def run(url: str, bodies: list[str], clients: int) -> float:
    headers = {"Authorization": f"Bearer {TOKEN}"}

    def send(chunk: list[str]) -> None:
        with httpx.Client(headers=headers, timeout=60) as c:
            for body in chunk:
                r = c.post(f"{url}/v1/events", content=body)
                r.raise_for_status()

    parts = [bodies[i::clients] for i in range(clients)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(send, parts))
    return time.perf_counter() - t0


INFO = "2026-11-30 10:00:00,123 INFO [shop.api] GET /orders/12345 200 in 12ms user=4711 ok\n"
ERROR = (
    "2026-11-30 10:00:00,456 ERROR [shop.api] unhandled exception on POST /orders\n"
    "Traceback (most recent call last):\n"
    '  File "/srv/app/shopapp/services/pricing.py", line 91, in _allocate_discount\n'
    "    line.unit_discount_cents = round_half_up(share / line.quantity)\n"
    "ZeroDivisionError: division by zero\n"
)


def make_log(path: Path, megabytes: int) -> tuple[int, int]:
    """A log of about ``megabytes`` MB where 1 record in 100 is a traceback: (lines, errors)."""
    block = (INFO * 99 + ERROR).encode()
    lines_per_block = 99 + ERROR.count("\n")
    blocks = max(1, megabytes * (1 << 20) // len(block))
    chunk = block * 100
    with open(path, "wb") as f:
        for _ in range(blocks // 100):
            f.write(chunk)
        f.write(block * (blocks % 100))
    return blocks * lines_per_block, blocks


def tail_file(path: Path, state: Path, enqueue: Callable[[Any], None]) -> tuple[float, int]:
    from producers.tailer import Tailer

    tailer = Tailer(
        [str(path)],
        service="shop-api",
        repo="bench",
        enqueue=enqueue,
        state_path=state,
        from_start=True,
        flush_after=0.2,
    )
    size = path.stat().st_size
    t0 = time.perf_counter()
    try:
        while True:
            tailer.poll_once()
            [followed] = tailer.files.values()
            if followed.offset >= size and followed.grouper.safe_offset() is None:
                break
    finally:
        tailer.close()
    return time.perf_counter() - t0, tailer.events


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--tail-mb", type=int, default=1024)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="th-ingest-") as tmp:
        redis_proc, redis_url = start_redis(Path(tmp))
        log = Path(tmp) / "app.log"
        n_lines, n_errors = make_log(log, args.tail_mb)
        mb = log.stat().st_size / (1 << 20)
        secs_parse, events_parse = tail_file(log, Path(tmp) / "s1.json", lambda e: None)
        from shared.core.pipeline import enqueue_error, sender_app
        from shared.core.settings import Settings

        app = sender_app(Settings(redis_url=redis_url))
        secs_full, events_full = tail_file(
            log, Path(tmp) / "s2.json", lambda e: enqueue_error(app, e)
        )
        app.close()
        tail_rows = [
            ("read + group (no-op enqueue)", secs_parse, events_parse),
            ("read + group + enqueue to Redis", secs_full, events_full),
        ]
        ingest, url = start_ingest(
            Path(tmp), {"TRACEHOUND_REDIS_URL": redis_url, "TRACEHOUND_INGEST_TOKEN": TOKEN}
        )
        try:
            single = [record(i) for i in range(args.events // 5)]
            rows.append(("1 event / request", len(single), run(url, single, args.clients)))
            batched = [
                "\n".join(record(i) for i in range(j, j + 100)) for j in range(0, args.events, 100)
            ]
            rows.append(
                ("NDJSON, 100 / request", len(batched) * 100, run(url, batched, args.clients))
            )
            queued = redis.Redis.from_url(redis_url).llen("embed")
        finally:
            ingest.stop()
            redis_proc.stop()
    print(
        f"\nLog tailer, {mb:,.0f} MB log, {n_lines:,} lines, {n_errors:,} tracebacks (1% of "
        "records), read from the start\n"
    )
    print("| tailer | seconds | MB/s | lines/s | events/s | events |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, secs, events in tail_rows:
        print(
            f"| {name} | {secs:.1f} | {mb / secs:,.1f} | {n_lines / secs:,.0f} | "
            f"{events / secs:,.0f} | {events:,} |"
        )
    print(
        f"\nHTTP ingest → Redis, {args.clients} client threads, sample trace "
        f"({len(TRACE)} bytes) per event, 2 cores shared by client, server and Redis\n"
    )
    print("| request shape | events | seconds | events/s |")
    print("|---|---:|---:|---:|")
    for name, n, secs in rows:
        print(f"| {name} | {n} | {secs:.2f} | {n / secs:,.0f} |")
    print(
        f"\nchains waiting on the embed queue afterwards: {queued} (expected "
        f"{events_full + 1}: one per tailed event, and one for all the HTTP events: the same "
        "error and so one group)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
