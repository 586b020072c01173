"""Hostile bodies against ``tracehound ingest``: the answer, the time, and the server's peak
memory for each.

    python benchmarks/ingest_limits.py [--runs 3]

Each body goes to a fresh ``tracehound ingest`` process (so its peak resident memory, VmHWM,
is that body's), on a private redis-server, with the default limits (10 MB body, 10,000
records, 30 s to read the body). Prints the median of the runs with the range.

Goals: each body's answer as docs/shippers-and-sdks.md states the limits (over 10 MB, also after
decompression, or over 10,000 records: 413, decided before the records are decoded; nested
deeper than 64 levels: 400; issue 11), and peak RSS under 200 MB (issue 11). No goal is set for
the seconds. The in-run reference is each fresh server's idle RSS, read before the body.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.stack.children import Proc
from shared.stack.localstack import start_ingest, start_redis

MB = 1_000_000
TRACE = 'Traceback (most recent call last):\n  File "/srv/app/x.py", line 1, in f\nKeyError: "k"'
GOAL_RSS_MB = 200  # issue 11: RSS stays under 200 MB for any request the limits admit
TOO_LARGE = "413"  # over TRACEHOUND_INGEST_MAX_BODY_BYTES or TRACEHOUND_INGEST_MAX_RECORDS


def bodies() -> dict[str, tuple[bytes, dict[str, str], str]]:
    """Each body: its bytes, its headers and the answer the documented limits give it."""
    minimal = json.dumps({"level": "error", "message": "x"})
    valid = json.dumps({"level": "error", "message": "payment failed", "stack": TRACE})
    n_valid = 9_000
    return {
        "10 MB NDJSON of `{}` (3.3 M records)": (
            ("{}\n" * (10 * MB // 3)).encode(),
            {},
            TOO_LARGE,
        ),
        "10 MB JSON array of `{}`": (
            b"[" + b",".join([b"{}"] * (10 * MB // 3 - 1)) + b"]",
            {},
            TOO_LARGE,
        ),
        "10 MB NDJSON of minimal events": (
            "\n".join([minimal] * (10 * MB // (len(minimal) + 1))).encode(),
            {},
            TOO_LARGE,
        ),
        "JSON nested 100k levels": (("[" * 100_000 + "]" * 100_000).encode(), {}, "400"),
        "gzip bomb: 1 GB of zeros in 1 MB": (
            gzip.compress(b"0" * 1000 * MB, compresslevel=9),
            {"Content-Encoding": "gzip"},
            TOO_LARGE,
        ),
        f"{n_valid:,} valid error events with traces (1 request)": (
            "\n".join([valid] * n_valid).encode(),
            {},
            "202",  # under both limits: taken
        ),
    }


def peak_rss_mb(proc: Proc) -> float:
    for line in Path(f"/proc/{proc.popen.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1000
    return float("nan")


def one(workdir: Path, redis_url: str, body: bytes, headers: dict[str, str]) -> tuple:
    proc, url = start_ingest(workdir, {"TRACEHOUND_REDIS_URL": redis_url})
    try:
        base = peak_rss_mb(proc)
        t0 = time.perf_counter()
        r = httpx.post(
            f"{url}/v1/events",
            params={"service": "shop-api"},
            content=body,
            headers=headers,
            timeout=120,
        )
        seconds = time.perf_counter() - t0
        return r.status_code, seconds, peak_rss_mb(proc), base
    finally:
        proc.stop()


def fmt(values: list[float], unit: Callable[[float], str]) -> str:
    med = statistics.median(values)
    return (
        unit(med)
        if min(values) == max(values)
        else (f"{unit(med)} ({unit(min(values))}–{unit(max(values))})")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ingest-limits-") as tmp:
        redis_proc, redis_url = start_redis(Path(tmp))
        try:
            for name, (body, headers, answer) in bodies().items():
                runs = [one(Path(tmp), redis_url, body, headers) for _ in range(args.runs)]
                statuses = sorted({r[0] for r in runs})
                print(f"{name}: {runs}", file=sys.stderr)
                rows.append((name, len(body), answer, statuses, runs))
        finally:
            redis_proc.stop()
    print(f"\nHostile bodies, a fresh server each, median of {args.runs} runs (range)\n")
    print("| figure | goal | measured | in-run reference |")
    print("|---|---|---:|---:|")
    for name, size, answer, statuses, runs in rows:
        seconds = fmt([r[1] for r in runs], lambda v: f"{v:.2f}")
        print(
            f"| {name}, {size:,} B sent: answer | {answer} "
            f"| {'/'.join(map(str, statuses))} in {seconds} s | — |"
        )
        print(
            f"| {name}: peak RSS | < {GOAL_RSS_MB} MB "
            f"| {fmt([r[2] for r in runs], lambda v: f'{v:.0f}')} MB "
            f"| idle: {fmt([r[3] for r in runs], lambda v: f'{v:.0f}')} MB |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
