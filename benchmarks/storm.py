"""Error storm through HTTP ingest with grouping: events/s, and what reached the queue.

    python benchmarks/storm.py [--events 20000] [--batch 1000] [--clients 2]

Starts a private redis-server and ``tracehound ingest``, then posts the sample stack trace as
``--events`` events whose messages differ only in request ids (one error group), NDJSON
batches of ``--batch``. Every event is redacted, fingerprinted and counted in Redis; only the
first starts an analysis chain. No workers run: the chains waiting on the embed queue are
counted afterwards, and the group's count is read back.
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

from shared.core import keys
from shared.devtools.localstack import start_ingest, start_redis

TRACE = (ROOT / "tests/data/sample-error.txt").read_text()
TOKEN = "storm"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=2)
    args = ap.parse_args()
    bodies = [
        "\n".join(
            json.dumps(
                {
                    "service": "shop-api",
                    "repo": "bench",
                    "level": "ERROR",
                    "message": f"ZeroDivisionError: division by zero (request {i})",
                    "stack": TRACE,
                }
            )
            for i in range(j, min(j + args.batch, args.events))
        )
        for j in range(0, args.events, args.batch)
    ]
    with tempfile.TemporaryDirectory(prefix="th-storm-") as tmp:
        redis_proc, redis_url = start_redis(Path(tmp))
        ingest, url = start_ingest(
            Path(tmp), {"TRACEHOUND_REDIS_URL": redis_url, "TRACEHOUND_INGEST_TOKEN": TOKEN}
        )
        try:

            def send(chunk: list[str]) -> None:
                with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=300) as c:
                    for body in chunk:
                        c.post(f"{url}/v1/events", content=body).raise_for_status()

            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as pool:
                list(pool.map(send, [bodies[i :: args.clients] for i in range(args.clients)]))
            secs = time.perf_counter() - t0
            r = redis.Redis.from_url(redis_url)
            chains = r.llen("embed")
            [group] = [
                k for k in r.scan_iter(match=keys.GROUP_PATTERN, count=1000) if k.count(b":") == 3
            ]  # not its :message / :update keys
            total = int(r.hget(group, "total") or 0)
        finally:
            ingest.stop()
            redis_proc.stop()
    print(
        f"\nStorm: {args.events:,} events of one error through HTTP ingest, NDJSON "
        f"{args.batch}/request, {args.clients} clients (2 cores shared)\n"
    )
    print("| events | seconds | events/s | chains enqueued | group count |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {args.events:,} | {secs:.1f} | {args.events / secs:,.0f} | {chains} | {total:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
