"""Pipeline overhead: error enqueued → Slack message received, with zero-latency simulators.

    python benchmarks/pipeline.py [--errors 100] [--runs 3]

Starts a private redis-server, a chroma server and the four worker processes of the compose
topology, indexes the bundled sample service, then measures three things with the Ollama,
rerank and Slack simulators answering instantly — each simulator in a process of its own, so
its CPU is not charged to the benchmark — and what is left is tracehound's own cost (Celery
hops, Redis, Chroma, BM25, prompt building, Slack formatting):

- sequential: one error at a time, enqueue → the Slack simulator receives the message;
- burst: all errors enqueued at once (queueing included), latency per error and makespan;
- and first, the first error after the workers (re)start, once their consumers are ready.

Goals (issue 14): one at a time p50 ≤ 50 ms, p95 ≤ 150 ms; the first error ≤ 500 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.core.pipeline import enqueue_error, sender_app
from shared.core.settings import Settings
from shared.index.reindex import index_repository
from shared.intake.events import parse_event
from shared.stack.localstack import LocalStack, simulator_env, start_simulator

TRACE = (ROOT / "tests/data/sample-error.txt").read_text()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_once(errors: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="th-bench-") as tmp:
        work = Path(tmp)
        ollama, ollama_url = start_simulator("ollama", work)
        slack, slack_url = start_simulator("slack", work)
        env = simulator_env(ollama_url, slack_url, channel="C0BENCH", rerank_url=ollama_url) | {
            # Slack's ~1 message/s per channel would cap this at 1/s; measure tracehound.
            "TRACEHOUND_SLACK_PACE": "0",
        }
        stack = LocalStack(work, env)
        try:
            stack.start_services()
            indexers = stack.start_workers()
            app = sender_app(Settings(redis_url=stack.env["TRACEHOUND_REDIS_URL"]))
            index_repository(
                app, ROOT / "tests/data/sample-service", "bench", max_bytes=1_000_000, timeout=300
            )
            for proc in indexers.values():  # the first error goes to workers fresh from start
                proc.stop()
                stack.procs.remove(proc)
            stack.start_workers()

            def event():  # type: ignore[no-untyped-def]
                return parse_event(TRACE, service="shop-api", repo="bench")

            t0 = time.time()
            first_ts = enqueue_error(app, event()).get(timeout=120)["ts"]
            sequential = []
            for _ in range(errors):
                sent = time.time()
                sequential.append((sent, enqueue_error(app, event()).get(timeout=120)["ts"]))
            burst_t0 = time.time()
            pending = [(time.time(), enqueue_error(app, event())) for _ in range(errors)]
            burst = [(sent, res.get(timeout=600)["ts"]) for sent, res in pending]
            app.close()
            # When the Slack simulator received each message (its own clock: this machine's).
            received = {m["ts"]: m["t"] for m in httpx.get(f"{slack_url}/_sim/messages").json()}
        finally:
            stack.stop()
            slack.stop()
            ollama.stop()
    seq = [received[ts] - sent for sent, ts in sequential]
    lat = [received[ts] - sent for sent, ts in burst]
    makespan = max(received[ts] for _, ts in burst) - burst_t0
    return {
        "first": received[first_ts] - t0,
        "seq_p50": pct(seq, 0.5),
        "seq_p95": pct(seq, 0.95),
        "seq_mean": statistics.mean(seq),
        "seq_rate": len(seq) / sum(seq),
        "burst_p50": pct(lat, 0.5),
        "burst_p95": pct(lat, 0.95),
        "burst_rate": errors / makespan,
    }


ROWS = [  # (key, label, goal, unit scale, format)
    ("seq_p50", "one at a time: p50", "≤ 50 ms", 1000, "{:,.0f} ms"),
    ("seq_p95", "one at a time: p95", "≤ 150 ms", 1000, "{:,.0f} ms"),
    ("seq_rate", "one at a time: throughput", "—", 1, "{:,.1f} /s"),
    ("burst_p50", "burst: p50 (queueing included)", "—", 1000, "{:,.0f} ms"),
    ("burst_p95", "burst: p95", "—", 1000, "{:,.0f} ms"),
    ("burst_rate", "burst: throughput", "—", 1, "{:,.1f} /s"),
    ("first", "first error after the workers start", "≤ 500 ms", 1000, "{:,.0f} ms"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--errors", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    runs = [run_once(args.errors) for _ in range(args.runs)]
    print(
        f"\nPipeline overhead, {args.errors} errors per mode, zero-latency simulators in their own "
        f"processes (2 cores; workers: embed, rerank, llm at -c 1, cpu at -c 2); median of "
        f"{args.runs} runs (min–max)\n"
    )
    # No reference runs in the same run, hence "—". What would fit: the same benchmark on an
    # earlier commit's worktree, back to back on this machine (as docs/benchmarks.md's table
    # was taken by hand), or a chain of no-op Celery tasks over the same queues and hops.
    print("| figure | goal | measured | in-run reference |")
    print("|---|---|---:|---:|")
    for key, label, goal, scale, fmt in ROWS:
        values = [r[key] * scale for r in runs]
        med = fmt.format(statistics.median(values))
        spread = f"{fmt.format(min(values)).split()[0]}–{fmt.format(max(values)).split()[0]}"
        print(f"| {label} | {goal} | {med} ({spread}) | — |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
