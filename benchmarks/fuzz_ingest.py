"""Generated requests against every ingest endpoint: how many, how many 5xx, the server's peak
memory.

    python benchmarks/fuzz_ingest.py [--requests 10000] [--seed 0]

A real ``tracehound ingest`` (token, DSN key, project map and Slack signing secret set, default
limits) on a private redis-server receives ``--requests`` requests drawn by the Hypothesis
strategies of ``shared/devtools/fuzz.py``: JSON/NDJSON records, Sentry envelopes and store
bodies, OTLP logs and traces as (mutated) protobuf and JSON, signed Slack interaction payloads,
health probes; compressed or not, with right and wrong credentials. Prints the answers per
endpoint, every 5xx with what was sent, and the ingest process's peak resident memory (VmHWM).
Goal: 0 answers of 5xx, peak RSS under 250 MB.
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
    print(
        f"\n| goal | measured |\n|---|---|\n"
        f"| 0 answers of 5xx | {len(tally.server_errors)} |\n"
        f"| peak RSS < {GOAL_RSS_MB} MB | {rss:.0f} MB |\n"
        f"| server alive at the end | {'yes' if alive else 'NO'} |"
    )
    if args.save and tally.failed:
        with args.save.open("w") as out:
            for req in tally.failed:
                line = {**asdict(req), "body": base64.b64encode(req.body).decode()}
                out.write(json.dumps(line) + "\n")
        print(f"\n{len(tally.failed)} requests that got a 5xx: {args.save}")
    for error in tally.server_errors[:20]:
        print(f"\n5xx: {error}")
    return 0 if not tally.server_errors and rss < GOAL_RSS_MB and alive else 1


if __name__ == "__main__":
    raise SystemExit(main())
