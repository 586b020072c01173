"""Pipeline overhead: error enqueued → Slack message received, with zero-latency simulators.

    python benchmarks/pipeline.py [--errors 100]

Starts a private redis-server, a chroma server and the four worker processes of the compose
topology, indexes the bundled sample service, then measures two things with the Ollama,
rerank and Slack simulators answering instantly, so what is left is tracehound's own cost
(Celery hops, Redis, Chroma, BM25, prompt building, Slack formatting):

- sequential: one error at a time, enqueue → the Slack simulator receives the message;
- burst: all errors enqueued at once (queueing included), latency per error and makespan;
- and first, the first error after the workers (re)start, once their consumers are ready.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.core.pipeline import enqueue_error, sender_app
from shared.core.settings import Settings
from shared.devtools.localstack import LocalStack, simulator_env
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.devtools.simulators.slack import SlackSimulator
from shared.index.reindex import index_repository
from shared.intake.events import parse_event

TRACE = (ROOT / "tests/data/sample-error.txt").read_text()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--errors", type=int, default=100)
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="th-bench-") as tmp,
        OllamaSimulator() as ollama,
        SlackSimulator() as slack,
    ):
        env = simulator_env(ollama.url, slack.url, channel="C0BENCH", rerank_url=ollama.url) | {
            # Slack's ~1 message/s per channel would cap this at 1/s; measure tracehound.
            "TRACEHOUND_SLACK_PACE": "0",
        }
        stack = LocalStack(Path(tmp), env)
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

            def received_at(ts: str) -> float:
                return next(m["t"] for m in slack.messages if m["ts"] == ts)

            t0 = time.time()
            result = enqueue_error(app, event()).get(timeout=120)  # also warms up the rest
            first = received_at(result["ts"]) - t0
            sequential = []
            for _ in range(args.errors):
                t0 = time.time()
                result = enqueue_error(app, event()).get(timeout=120)
                sequential.append(received_at(result["ts"]) - t0)

            t0 = time.time()
            pending = [(time.time(), enqueue_error(app, event())) for _ in range(args.errors)]
            burst = []
            for sent, res in pending:
                burst.append(received_at(res.get(timeout=600)["ts"]) - sent)
            makespan = max(received_at(r.get()["ts"]) for _, r in pending) - t0
            app.close()
        finally:
            stack.stop()

    ms = 1000.0
    print(
        f"\nPipeline overhead, {args.errors} errors, zero-latency simulators "
        f"(2 cores; workers: embed, rerank, llm at -c 1, cpu at -c 2)\n"
    )
    print("| mode       | p50 ms | p95 ms | max ms | mean ms | throughput |")
    print("|------------|-------:|-------:|-------:|--------:|-----------:|")
    print(
        f"| sequential | {pct(sequential, 0.5) * ms:6.0f} | {pct(sequential, 0.95) * ms:6.0f} | "
        f"{max(sequential) * ms:6.0f} | {statistics.mean(sequential) * ms:7.0f} | "
        f"{len(sequential) / sum(sequential):6.1f} / s |"
    )
    print(
        f"| burst      | {pct(burst, 0.5) * ms:6.0f} | {pct(burst, 0.95) * ms:6.0f} | "
        f"{max(burst) * ms:6.0f} | {statistics.mean(burst) * ms:7.0f} | "
        f"{args.errors / makespan:6.1f} / s |"
    )
    print(f"\nfirst error after the workers start (consumers ready): {first * ms:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
