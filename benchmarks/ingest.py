"""HTTP ingest throughput into a private Redis, beside a trivial endpoint; and one enqueue.

    python benchmarks/ingest.py [--events 20000] [--clients 4] [--runs 3]

Starts a private redis-server. No analysis runs: measured is taking events in, not analysing them.

- HTTP: ``tracehound ingest`` (one uvicorn process) receives the sample stack trace as events
  whose messages differ in a request id (one error group, as in a storm), as NDJSON batches of
  100 (what Vector and Fluent Bit send) and one event per request: by default (the batch's
  JSON checked and queued for the intake worker), and with ``?wait=true`` (the event model,
  redaction, fingerprinting, counting and starting chains before the reply). In the same run,
  the reference: a trivial Starlette endpoint in its own uvicorn process that LPUSHes each
  request body to Redis and answers 202 — the floor of HTTP + Redis on this machine. No worker
  takes the queue meanwhile, so ingest's bounds on it are off and so is its linger, but for one
  row: a second ``tracehound ingest`` with the default TRACEHOUND_INGEST_LINGER, whose batches
  wait up to 5 ms for others while batches wait (what four clients that each wait for their
  answer pay for the intake worker's sake).
- The intake worker: a real ``celery worker`` on the ``intake`` queue (concurrency 2, as the
  CPU worker runs), started once the NDJSON batches are queued; the rate at which it takes
  them (the event model, redaction, fingerprinting, counting, starting chains), from its first
  task until the last message is counted.
- One enqueue (in this process): starting one analysis chain with Celery's
  ``chain.apply_async``, with intake's compact message (``analysis_message`` + LPUSH, what
  intake does), and a bare LPUSH of the event's JSON.

The log tailer's throughput is benchmarks/tail_throughput.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.core import keys
from shared.stack.children import free_port, spawn, wait_until
from shared.stack.localstack import start_ingest, start_redis, start_worker

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


def post_all(url: str, bodies: list[str], clients: int, *, wait: bool = False) -> float:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    endpoint = f"{url}/v1/events" + ("?wait=true" if wait else "")

    def send(chunk: list[str]) -> None:
        with httpx.Client(headers=headers, timeout=60) as c:
            for body in chunk:
                c.post(endpoint, content=body).raise_for_status()

    parts = [bodies[i::clients] for i in range(clients)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(send, parts))
    return time.perf_counter() - t0


def drain(work: Path, redis_url: str) -> float:
    """Seconds an intake worker takes to take every message of the ``intake`` queue, from its
    first one to the last one counted (keys.INTAKE_TAKEN, which each message's last batch
    adds to). Not until the transport's ``unacked`` hash is empty: its last entry went some
    two seconds after the last message was counted (the deferred analysis's drain, held until
    its incident settles), and 20,000 events counted in about one second read as 6,600 a
    second (this benchmark's figure before 2026-12-07)."""
    r = redis.Redis.from_url(redis_url)
    env = {"TRACEHOUND_REDIS_URL": redis_url, "TRACEHOUND_DATA_DIR": str(work)}
    worker = start_worker("intake", ["intake"], 2, work, env)
    try:
        queued = r.llen("intake")
        wait_until(lambda: r.llen("intake") < queued, 120, "the intake worker's first task", 0.01)
        t0 = time.perf_counter()
        wait_until(
            lambda: int(r.get(keys.INTAKE_TAKEN) or 0) >= queued, 600, "intake drained", 0.01
        )
        seconds = time.perf_counter() - t0
        # Not timed: the storm's one analysis starts once its incident has settled (a task the
        # worker holds until then: the unacked entry that outlived the last message).
        wait_until(lambda: r.llen("embed") > 0, 60, "the storm's analysis chain", 0.05)
        return seconds
    finally:
        worker.stop()
        r.close()


def serve_trivial(port: int, redis_url: str) -> None:
    """The reference endpoint: LPUSH the body, answer 202 (no parsing, no grouping)."""
    import redis.asyncio as aioredis
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    client = aioredis.Redis.from_url(redis_url)

    async def events(request: Request) -> JSONResponse:
        await client.lpush("trivial", await request.body())
        return JSONResponse({"ok": True}, status_code=202)

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = Starlette(
        routes=[Route("/v1/events", events, methods=["POST"]), Route("/healthz", healthz)]
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start_trivial(workdir: Path, redis_url: str) -> tuple[object, str]:
    port = free_port()
    argv = [sys.executable, __file__, "--serve-trivial", str(port), redis_url]
    proc = spawn("trivial-endpoint", argv, workdir / "logs")
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: httpx.get(f"{url}/healthz", timeout=1).is_success, 30, "trivial endpoint")
    return proc, url


def per_call_ms(fn: Callable[[], object], n: int = 500) -> float:
    for _ in range(50):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1000


def one_enqueue(redis_url: str) -> dict[str, float]:
    from shared.core.pipeline import analysis_message, enqueue_error, sender_app
    from shared.core.settings import Settings
    from shared.intake.events import parse_event

    app = sender_app(Settings(redis_url=redis_url))
    r = redis.Redis.from_url(redis_url)
    event = parse_event(TRACE, service="shop-api", repo="bench")

    def compact() -> None:
        _, message, _ = analysis_message(app, event)
        r.lpush("compact", message)

    try:
        return {
            "celery_ms": per_call_ms(lambda: enqueue_error(app, event)),
            "compact_ms": per_call_ms(compact),
            "lpush_ms": per_call_ms(lambda: r.lpush("bare", event.model_dump_json())),
            "compact_bytes": len(analysis_message(app, event)[1]),
            "event_bytes": len(event.model_dump_json()),
        }
    finally:
        r.close()
        app.close()


def run_once(events: int, clients: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="th-ingest-") as tmp:
        work = Path(tmp)
        redis_proc, redis_url = start_redis(work)
        # No intake worker runs while the front door is measured: its queue only grows, so its
        # bounds are off (benchmarks/ingest_sustained.py measures them), and so is the linger
        # (a batch waits for others only while batches wait), but in the one row that shows it.
        env = {
            "TRACEHOUND_REDIS_URL": redis_url,
            "TRACEHOUND_INGEST_TOKEN": TOKEN,
            "TRACEHOUND_INGEST_MAX_BACKLOG": "1000000",
            "TRACEHOUND_INGEST_MAX_LAG": "0",
        }
        ingest, url = start_ingest(work, {**env, "TRACEHOUND_INGEST_LINGER": "0"})
        lingering, lingering_url = start_ingest(work, env)
        trivial, trivial_url = start_trivial(work, redis_url)
        try:
            batched = [
                "\n".join(record(i) for i in range(j, j + 100)) for j in range(0, events, 100)
            ]
            single = [record(i) for i in range(events, events + events // 10)]
            out = {"ndjson": len(batched) * 100 / post_all(url, batched, clients)}
            out["drain"] = len(batched) * 100 / drain(work, redis_url)
            out |= {
                "lingering": len(batched) * 100 / post_all(lingering_url, batched, clients),
                "trivial": len(batched) * 100 / post_all(trivial_url, batched, clients),
                "single": len(single) / post_all(url, single, clients),
                "trivial_single": len(single) / post_all(trivial_url, single, clients),
            }
            # The same records taken before each reply, in bodies a trailing newline makes
            # new: other ids, so they are taken in full instead of skipped as retries.
            waited = [f"{b}\n" for b in batched]
            out["ndjson_wait"] = len(waited) * 100 / post_all(url, waited, clients, wait=True)
            r = redis.Redis.from_url(redis_url)
            out["chains"] = r.llen("embed")
            r.close()
            out |= one_enqueue(redis_url)
        finally:
            trivial.stop()  # type: ignore[attr-defined]
            lingering.stop()
            ingest.stop()
            redis_proc.stop()
    return out


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve-trivial":
        serve_trivial(int(sys.argv[2]), sys.argv[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    runs = [run_once(args.events, args.clients) for _ in range(args.runs)]

    def cell(key: str, fmt: str, of: Callable[[dict[str, float]], float] | None = None) -> str:
        values = [of(r) if of else r[key] for r in runs]
        med, lo, hi = statistics.median(values), min(values), max(values)
        return f"{fmt.format(med)} ({fmt.format(lo)}–{fmt.format(hi)})"

    print(
        f"\nHTTP ingest → Redis, {args.events:,} events (NDJSON, 100 per request) and "
        f"{args.events // 10:,} single-event requests, sample trace ({len(TRACE):,} bytes) per "
        f"event, {args.clients} client threads; median of {args.runs} runs (min–max), 2 cores "
        "shared by clients, server and Redis\n"
    )
    print("| figure | goal | measured | in-run reference |")
    print("|---|---|---:|---:|")
    print(
        f"| NDJSON, 100 events / request (default: checked, queued) | ≥ 10,000 events/s | "
        f"{cell('ndjson', '{:,.0f}')} events/s | trivial endpoint (LPUSH the body): "
        f"{cell('trivial', '{:,.0f}')} events/s |"
    )
    print(
        f"| … as a share of the trivial endpoint | ≥ 50% | "
        f"{cell('', '{:.0%}', lambda r: r['ndjson'] / r['trivial'])} | — |"
    )
    print(
        f"| NDJSON, 100 events / request, while batches wait: the default "
        f"TRACEHOUND_INGEST_LINGER (5 ms) | — | {cell('lingering', '{:,.0f}')} events/s | — |"
    )
    print(
        f"| the intake worker taking what was queued (concurrency 2) | ≥ 10,000 events/s | "
        f"{cell('drain', '{:,.0f}')} events/s | — |"
    )
    print(
        f"| NDJSON, 100 events / request, `?wait=true` (taken before the reply) | — | "
        f"{cell('ndjson_wait', '{:,.0f}')} events/s | — |"
    )
    print(
        f"| 1 event / request | — | {cell('single', '{:,.0f}')} events/s | trivial endpoint: "
        f"{cell('trivial_single', '{:,.0f}')} events/s |"
    )
    print(
        f"| one enqueue: intake's compact chain message + LPUSH | within 3x of LPUSH | "
        f"{cell('compact_ms', '{:.3f}')} ms "
        f"({cell('', '{:.1f}', lambda r: r['compact_ms'] / r['lpush_ms'])}x) | "
        f"LPUSH of the event's JSON: {cell('lpush_ms', '{:.3f}')} ms |"
    )
    print(
        f"| one enqueue: Celery `chain.apply_async` (before) | — | "
        f"{cell('celery_ms', '{:.3f}')} ms | — |"
    )
    last = runs[-1]
    print(
        f"\nmessage size: {last['compact_bytes']:,.0f} B for a {last['event_bytes']:,.0f} B "
        f"event; chains waiting on the embed queue after each run: "
        f"{', '.join(str(int(r['chains'])) for r in runs)} (expected 1: every HTTP event is "
        "the same error, one group)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
