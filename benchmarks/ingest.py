"""Ingest throughput: HTTP ingest into a private Redis (the log tailer's is measured by
benchmarks/tail_throughput.py).

    python benchmarks/ingest.py [--events 5000]

Starts a private redis-server. No workers run, so this measures receiving and enqueueing only;
the queued chains are counted in Redis afterwards. ``tracehound ingest`` (one uvicorn process)
receives the sample stack trace as events, one per request and as NDJSON batches of 100 (what
Vector and Fluent Bit send).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--clients", type=int, default=4)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="th-ingest-") as tmp:
        redis_proc, redis_url = start_redis(Path(tmp))
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
        f"\nHTTP ingest → Redis, {args.clients} client threads, sample trace "
        f"({len(TRACE)} bytes) per event, 2 cores shared by client, server and Redis\n"
    )
    print("| request shape | events | seconds | events/s |")
    print("|---|---:|---:|---:|")
    for name, n, secs in rows:
        print(f"| {name} | {n} | {secs:.2f} | {n / secs:,.0f} |")
    print(
        f"\nchains waiting on the embed queue afterwards: {queued} (expected 1: all the HTTP "
        "events are the same error and so one group)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
