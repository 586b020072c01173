"""Model-host scheduling: a burst of errors and a re-index arriving together on one host.

    python benchmarks/host_scheduling.py [--errors 50] [--files 2000] [--scale 0.1]

The Ollama simulator plays the one small model host: one request at a time (``exclusive``),
loading a model takes 2 s and requests take embed 20 ms, rerank 200 ms, chat 3 s — all
multiplied by ``--scale`` (0.1 by default, so a run takes minutes, not an hour). The rerank
endpoint is on the same simulator, i.e. the same machine. Workload: ``--errors`` error events
and ``--files`` single-file index changes enqueued together. Two set-ups, each with the compose
worker topology on a private Redis and Chroma:

- naive: three independent model workers, no lease (TRACEHOUND_HOST_LEASES=false);
- tracehound: the host lease (drain the loaded model, fairness bound, priorities, unload).

Reported: makespan (until every error's Slack message and every index task is done), model
loads on the host, and p50/p95 error → notification latency.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.core.pipeline import enqueue_error, enqueue_file, sender_app
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


def run(leases: bool, n_errors: int, n_files: int, scale: float) -> dict[str, float]:
    latency = {"embed": 0.020 * scale, "rerank": 0.200 * scale, "chat": 3.0 * scale}
    with (
        tempfile.TemporaryDirectory(prefix="th-hosts-") as tmp,
        OllamaSimulator(latency=latency, load_seconds=2.0 * scale, exclusive=True) as ollama,
        SlackSimulator() as slack,
    ):
        env = simulator_env(ollama.url, slack.url, channel="C0BENCH", rerank_url=ollama.url) | {
            "TRACEHOUND_HOST_LEASES": "true" if leases else "false",
        }
        stack = LocalStack(Path(tmp), env)
        try:
            stack.start_services()
            stack.start_workers()
            app = sender_app(Settings(redis_url=stack.env["TRACEHOUND_REDIS_URL"]))
            index_repository(
                app, ROOT / "tests/data/sample-service", "bench", max_bytes=1_000_000, timeout=600
            )
            ollama.reset()  # count loads from here on
            t0 = time.time()
            changes = [
                enqueue_file(
                    app,
                    "bench",
                    f"generated/mod_{i}.py",
                    f"def handler_{i}(order):\n    return order.total / {i}\n",
                )
                for i in range(n_files)
            ]
            sent = []
            for _ in range(n_errors):
                sent.append(
                    (
                        time.time(),
                        enqueue_error(app, parse_event(TRACE, service="shop-api", repo="bench")),
                    )
                )
            latencies = []
            for at, result in sent:
                ts = result.get(timeout=3600)["ts"]
                received = next(m["t"] for m in slack.messages if m["ts"] == ts)
                latencies.append(received - at)
            for change in changes:
                change.get(timeout=3600)
            makespan = time.time() - t0
            app.close()
            return {
                "makespan": makespan,
                "loads": ollama.load_count,
                "p50": pct(latencies, 0.5),
                "p95": pct(latencies, 0.95),
            }
        finally:
            stack.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--errors", type=int, default=50)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--scale", type=float, default=0.1)
    args = ap.parse_args()
    rows = [
        ("naive (no lease)", run(False, args.errors, args.files, args.scale)),
        ("tracehound (host lease)", run(True, args.errors, args.files, args.scale)),
    ]
    print(
        f"\n{args.errors} errors + {args.files} file changes at once; model load "
        f"{2.0 * args.scale:g} s, embed {20 * args.scale:g} ms, rerank {200 * args.scale:g} "
        f"ms, chat {3.0 * args.scale:g} s (scale {args.scale:g})\n"
    )
    print("| set-up | makespan s | model loads | error→message p50 s | p95 s |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows:
        print(
            f"| {name} | {r['makespan']:.1f} | {r['loads']:.0f} | {r['p50']:.1f} | {r['p95']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
