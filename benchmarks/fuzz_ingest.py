"""Generated requests against every ingest endpoint: how many, how many 5xx, the server's peak
memory.

    python benchmarks/fuzz_ingest.py [--requests 10000] [--seed 0]

A real ``tracehound ingest`` (token, DSN key, project map and Slack signing secret set, default
limits) on a private redis-server receives ``--requests`` requests drawn by the Hypothesis
strategies of ``shared/devtools/fuzz.py``: JSON/NDJSON records, Sentry envelopes and store
bodies, OTLP logs and traces as (mutated) protobuf and JSON, signed Slack interaction payloads,
health probes; compressed or not, with right and wrong credentials. Prints the answers per
endpoint, every 5xx with what was sent, and the ingest process's peak resident memory (VmHWM).
Goal: 0 answers of 5xx, peak RSS under 250 MB; at least 10,000 requests (issue 31). No
reference is measured in the same run (see ``print_summary``).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.devtools.fuzz import ENV, fuzz
from shared.stack.localstack import start_ingest, start_redis

GOAL_RSS_MB = 250
GOAL_REQUESTS = 10_000  # issue 31: at least 10,000 generated requests


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", type=Path, help="write each request that got a 5xx here (JSONL)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        redis_proc, redis_url = start_redis(work)
        env = {"TRACEHOUND_REDIS_URL": redis_url, **ENV}
        ingest, url = start_ingest(work, env)
        try:
            tally = fuzz(url, args.requests, seed=args.seed)
            rss = peak_rss_mb(ingest.popen.pid)
            alive = ingest.alive()
        finally:
            ingest.stop()
            redis_proc.stop()
    print(
        f"\nIngest fuzzing: {tally.requests:,} requests in {tally.seconds:.0f} s "
        f"(seed {args.seed})\n"
    )
    print("| endpoint | requests | answers |")
    print("|---|---:|---|")
    for endpoint, statuses in sorted(tally.by_endpoint().items()):
        answers = ", ".join(f"{code}: {n}" for code, n in sorted(statuses.items()))
        print(f"| `{endpoint}` | {sum(statuses.values()):,} | {answers} |")
    print_summary(tally.requests, len(tally.server_errors), rss, alive)
    if args.save and tally.failed:
        with args.save.open("w") as out:
            for req in tally.failed:
                line = {**asdict(req), "body": base64.b64encode(req.body).decode()}
                out.write(json.dumps(line) + "\n")
        print(f"\n{len(tally.failed)} requests that got a 5xx: {args.save}")
    for error in tally.server_errors[:20]:
        print(f"\n5xx: {error}")
    return 0 if not tally.server_errors and rss < GOAL_RSS_MB and alive else 1


def print_summary(requests: int, server_errors: int, rss: float, alive: bool) -> None:
    """Goal, measured and in-run reference. No reference runs beside the fuzzing: the one
    that would fit is the same ingest process's idle RSS, read before the first request (as
    benchmarks/ingest_limits.py reads it), beside its peak."""
    print("\n| figure | goal | measured | in-run reference |\n|---|---|---:|---:|")
    print(f"| requests sent | ≥ {GOAL_REQUESTS:,} | {requests:,} | — |")
    print(f"| answers of 5xx | 0 | {server_errors} | — |")
    print(f"| peak RSS of the ingest process | < {GOAL_RSS_MB} MB | {rss:.0f} MB | — |")
    print(f"| server alive at the end | yes | {'yes' if alive else 'NO'} | — |")


if __name__ == "__main__":
    raise SystemExit(main())
