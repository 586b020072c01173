"""Secret redaction: how many planted secrets of real formats survive, and what it costs.

    python benchmarks/redaction.py [--reference CHECKOUT]

Plants the fake secrets of ``tests/data/planted_secrets.py`` (generated at run time) each in a
log line and counts those whose secret part is still in the redacted text; times the redaction
of the sample trace (1 kB) and of a 64 kB trace (the most an event keeps). ``--reference`` runs
the same measurement with the redaction rules of another tracehound checkout, beside this
one's — e.g. ``git worktree add /tmp/ref 8390b9d`` for the rules before detect-secrets.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def cases() -> dict[str, Any]:
    """The planted secrets and the texts to time, from this checkout."""
    sys.path.insert(0, str(ROOT))
    from tests.data.planted_secrets import planted

    trace = (ROOT / "tests/data/sample-error.txt").read_text()
    lines = [f"2026-11-30 10:00:00 ERROR checkout failed: {p.text}" for p in planted()]
    big = (trace * (64_000 // len(trace) + 1))[:64_000]
    return {
        "planted": [[p.kind, line, p.value] for p, line in zip(planted(), lines, strict=True)],
        "texts": {"sample trace, 1 kB": trace, "trace, 64 kB": big},
    }


def measure(data: dict[str, Any]) -> dict[str, Any]:
    """Runs with whichever ``shared`` package is first on sys.path."""
    from shared.intake.redact import Redactor

    redactor = Redactor()
    survived = [kind for kind, line, value in data["planted"] if value in redactor.redact(line)]
    timings = {}
    for name, text in data["texts"].items():
        reps = max(20, 200_000 // len(text))
        runs = []
        for _ in range(reps):
            t0 = time.perf_counter()
            redactor.redact(text)
            runs.append(time.perf_counter() - t0)
        timings[name] = statistics.median(runs) * 1000
    return {"survived": survived, "ms": timings}


def measure_in(checkout: Path, data: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, __file__, "--measure-only"],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        env=env,
        cwd=checkout,
        check=True,
    )
    return json.loads(done.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", type=Path, help="another tracehound checkout's rules")
    ap.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure_only:
        print(json.dumps(measure(json.load(sys.stdin))))
        return 0
    data = cases()
    rows = [("tracehound (this checkout)", measure_in(ROOT, data))]
    if args.reference:
        rows.append((f"reference ({args.reference})", measure_in(args.reference, data)))
    n = len(data["planted"])
    kinds = len({kind for kind, _, _ in data["planted"]})
    names = list(data["texts"])
    print(f"\nRedaction: {n} planted secrets of {kinds} formats, each in a log line\n")
    print("| rules | secrets left | formats left | " + " | ".join(f"{t} ms" for t in names) + " |")
    print("|---|---:|---:|" + "---:|" * len(names))
    for name, r in rows:
        left = r["survived"]
        ms = " | ".join(f"{r['ms'][t]:.2f}" for t in names)
        print(f"| {name} | {len(left)} | {len(set(left))} | {ms} |")
    for name, r in rows:
        if r["survived"]:
            print(f"\n{name} left: {', '.join(sorted(set(r['survived'])))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
