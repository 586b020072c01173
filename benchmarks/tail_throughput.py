"""Tailer throughput: read + group (+ enqueue) MB/s on logs with 0.1%, 1% and 10% tracebacks.

    python benchmarks/tail_throughput.py [--mb 256] [--runs 3] [--enqueue-mb 16] [--ref-mb 32]

For each share of tracebacks, a log of ``--mb`` MB of INFO lines in which that share of the
records are 5-line Python tracebacks (an ERROR header line, then the traceback) is read from
the start by the tailer:

- **read + group**: a no-op hand-over (reading, scanning, grouping and building events);
- **+ enqueue**: into a private redis-server through ``Intake`` (redact, fingerprint, count,
  the analysis chain of the group's first event), the Redis database emptied before each run,
  on the first ``--enqueue-mb`` MB of the same log (a rate does not depend on the length). The
  hand-over is the tailer's: ``Intake.submit_many`` with a read round's events;
- references measured in the same run on the first ``--ref-mb`` MB: the skim's scan alone
  (``candidate_starts`` over 4 MB buffers: the ceiling of this design), a plain scan of 4 MB
  buffers with ``re.finditer`` of the same marker set written as one regex, and the old
  per-line path (every line through the Grouper, every record through ``from_input``: the
  tailer's ``skim=False``, which the fast path is tested against).

Every cell is the median of ``--runs`` runs with the range (min–max). No workers run. The goal
is 50 MB/s with the enqueue.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis

from producers.skim import candidate_starts
from producers.tailer import EnqueueMany, Tailer
from shared.core.domain import ErrorEvent
from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.groups.submit import Intake
from shared.stack.localstack import start_redis

GOAL_MB_S = 50.0
SHARES = (0.001, 0.01, 0.1)
BUFFER = 4 << 20

INFO = "2026-11-30 10:00:00,123 INFO [shop.api] GET /orders/12345 200 in 12ms user=4711 ok\n"
# Each traceback's header line has its own time and order number, as a real log's would: a
# record's text is never the same twice, so nothing remembered for an earlier record's text
# (redaction, trace reading, fingerprints) is reused, and the rate is a storm's worst case.
ERROR = (
    "2026-11-30 {h:02d}:{m:02d}:{s:02d},{ms:03d} ERROR [shop.api] unhandled exception on "
    "POST /orders/{order}\n"
    "Traceback (most recent call last):\n"
    '  File "/srv/app/shopapp/services/pricing.py", line 91, in _allocate_discount\n'
    "    line.unit_discount_cents = round_half_up(share / line.quantity)\n"
    "ZeroDivisionError: division by zero\n"
)


def error_at(n: int) -> str:
    """The ``n``-th traceback's text: a millisecond later and another order than the last."""
    s, ms = divmod(n, 1000)
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    return ERROR.format(h=h % 24, m=m, s=s, ms=ms, order=100_000 + n)


# producers/skim.py's markers as a single regex: what a plain regex scan would search for.
MARKERS = re.compile(
    rb"(?i:err|eror|fatal|crit|severe|panic|emerg|alert|assert)"
    rb"|Exception|Throwable|Traceback|[EFA]/| [EFA] "
    rb"|^(?:[^\x21-\x7e]|[{/]|[EF][0-9\x80-\xff]|goroutine |Caused by: |Wrapped by: "
    rb"|Stack trace:|Unhandled|node:|file:|[A-Za-z]:\\|(?:WARNING|INFO|CONFIG|FINE\w*): )",
    re.MULTILINE,
)


def make_log(path: Path, megabytes: float, share: float) -> int:
    """A log of about ``megabytes`` MB where ``share`` of the records are tracebacks; returns
    the number of tracebacks."""
    per_block = round(1 / share)
    infos = INFO * (per_block - 1)
    block_bytes = len((infos + error_at(0)).encode())
    blocks = max(1, int(megabytes * (1 << 20)) // block_bytes)
    batch = max(1, (8 << 20) // block_bytes)
    with open(path, "wb") as f:
        for start in range(0, blocks, batch):
            end = min(blocks, start + batch)
            f.write("".join(infos + error_at(n) for n in range(start, end)).encode())
    return blocks


def tail(path: Path, state: Path, enqueue_many: EnqueueMany, *, skim: bool = True) -> float:
    """Seconds to read ``path`` from its start and hand over every error in it."""
    tailer = Tailer(
        [str(path)],
        service="shop-api",
        repo="bench",
        enqueue_many=enqueue_many,
        state_path=state,
        from_start=True,
        inotify=False,
        skim=skim,
    )
    size = path.stat().st_size
    try:
        t0 = time.perf_counter()
        while True:
            tailer.poll_once(0.0)
            [followed] = tailer.files.values()
            if followed.offset >= size:
                break
        tailer.poll_once(60.0)  # a quiet minute later: the last record is complete
        seconds = time.perf_counter() - t0
    finally:
        tailer.close()
        state.unlink(missing_ok=True)
    return seconds


def regex_scan(path: Path) -> float:
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        while buf := f.read(BUFFER):
            for _ in MARKERS.finditer(buf):
                pass
    return time.perf_counter() - t0


def skim_scan(path: Path) -> float:
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        rest = b""
        while chunk := f.read(BUFFER):
            buf = rest + chunk
            end = buf.rfind(b"\n") + 1
            candidate_starts(buf, 0, end)
            rest = buf[end:]
    return time.perf_counter() - t0


def rates(mb: float, runs: int, measure: Callable[[], float]) -> list[float]:
    return [mb / measure() for _ in range(runs)]


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}–{max(values):,.1f})"


@dataclass
class Row:
    share: float
    mb: float
    events: int
    group: list[float]
    full: list[float]
    skimmed: list[float]
    scan: list[float]
    old: list[float]


def measure(share: float, work: Path, args: argparse.Namespace, intake: Intake) -> Row:
    """Every column for one share of tracebacks."""
    log, part, ref = work / "app.log", work / "part.log", work / "ref.log"
    state = work / "state.json"
    errors = make_log(log, args.mb, share)
    make_log(part, min(args.enqueue_mb, args.mb), share)
    make_log(ref, min(args.ref_mb, args.mb), share)
    mb, part_mb, ref_mb = (p.stat().st_size / (1 << 20) for p in (log, part, ref))
    handed: list[int] = []

    def count(events: list[ErrorEvent]) -> None:
        handed.append(len(events))

    def submit(events: list[ErrorEvent]) -> None:
        intake.submit_many(events)

    def fresh_redis_then_tail() -> float:
        intake.groups.r.flushdb()  # the same ids again would only be counted as replays
        return tail(part, state, submit)

    row = Row(
        share=share,
        mb=mb,
        events=errors,
        group=rates(mb, args.runs, lambda: tail(log, state, count)),
        full=rates(part_mb, args.runs, fresh_redis_then_tail),
        skimmed=rates(ref_mb, args.runs, lambda: skim_scan(ref)),
        scan=rates(ref_mb, args.runs, lambda: regex_scan(ref)),
        old=rates(ref_mb, args.runs, lambda: tail(ref, state, len, skim=False)),
    )
    assert sum(handed) == errors * args.runs, (sum(handed), errors)
    for path in (log, part, ref):
        path.unlink()
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--mb", type=float, default=256)
    ap.add_argument("--enqueue-mb", type=float, default=16)
    ap.add_argument("--ref-mb", type=float, default=32)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="th-tail-") as tmp:
        work = Path(tmp)
        redis_proc, redis_url = start_redis(work)
        settings = Settings(redis_url=redis_url, data_dir=work / "data")
        app = sender_app(settings)
        client = redis.Redis.from_url(redis_url)
        try:
            intake = Intake(app, client, settings)
            rows = [measure(share, work, args, intake) for share in SHARES]
        finally:
            client.close()
            app.close()
            redis_proc.stop()

    print(
        f"\nTailer throughput, MB/s, median of {args.runs} runs (min–max); a log of INFO lines "
        "and 5-line tracebacks; enqueue on the first "
        f"{min(args.enqueue_mb, args.mb):g} MB, references on the first "
        f"{min(args.ref_mb, args.mb):g} MB\n"
    )
    print(
        "| tracebacks | log MB | events | read + group | read + group + enqueue (Redis, "
        "submit_many per round) | goal | ref: skim scan alone | ref: one-regex scan, 4 MB buffers "
        "| ref: old per-line path |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.share:.1%} | {r.mb:,.0f} | {r.events:,} | {cell(r.group)} | {cell(r.full)} "
            f"| ≥ {GOAL_MB_S:g} | {cell(r.skimmed)} | {cell(r.scan)} | {cell(r.old)} |"
        )
    print(
        "\nmeasured: the tailer (skim); in-run reference: the per-line path (skim=False), "
        "read + group only\n"
    )
    print("| figure | goal | measured | in-run reference |")
    print("|---|---|---:|---:|")
    for r in rows:
        print(
            f"| read + group, {r.share:.1%} tracebacks, MB/s | — | {cell(r.group)} "
            f"| {cell(r.old)} |"
        )
        print(
            f"| read + group + enqueue, {r.share:.1%} tracebacks, MB/s | ≥ {GOAL_MB_S:g} "
            f"| {cell(r.full)} | — |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
