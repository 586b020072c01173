"""Secret redaction: how many secrets of the corpus survive, how many identifiers of secret-free
texts change, and what it costs.

    python benchmarks/redaction.py [--reference CHECKOUT] [--rounds 3]

The corpus is ``tests/data/secret_corpus.py`` (seeds 0–2: every format in its natural context
plus a rotating dozen per context), generated at run time by this checkout and handed to each
rule set. "Left" counts samples whose secret part is still in the redacted text; "unnamed" are
those of a keyword-anchored format written with no name beside it (``unnamed()``), which no
rule set can tell from an identifier. "Identifiers changed" is the share of 6+-character words
of ``clean_texts()`` (traces, the sample service, look-alike log lines) that redaction altered;
"in held-out code" the same over the source of installed packages no rule was tuned on
(``HELD_OUT``, up to 1 MB each), whose docs hold a few example credentials of their own.
Times are the median over repetitions of redacting the sample trace (1 kB) and a 64 kB trace
(the most an event keeps), each repetition a text the redactor has not seen (its memo would
otherwise answer). ``--reference`` runs the same measurement with the rules of another
tracehound checkout in the same run, e.g. ``git worktree add /tmp/ref bb4d693`` (the rules
before the corpus). Each figure is the median of ``--rounds`` rounds, with the range.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (0, 1, 2)
HELD_OUT = ("kombu", "httpx", "billiard", "redis")
GOAL = "0 left but unnamed; <= 1% identifiers changed"


def cases() -> dict[str, Any]:
    """The corpus samples, the clean texts and the texts to time, from this checkout."""
    sys.path.insert(0, str(ROOT))
    from tests.data.secret_corpus import clean_texts, corpus, unnamed

    samples = [s for seed in SEEDS for s in corpus(seed=seed)]
    trace = (ROOT / "tests/data/sample-error.txt").read_text()
    big = (trace * (64_000 // len(trace) + 1))[:64_000]
    code = []
    for package in HELD_OUT:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.origin is not None, package
        files = sorted(Path(spec.origin).parent.rglob("*.py"))
        code.append("".join(p.read_text(errors="replace") for p in files)[:1_000_000])
    return {
        "samples": [[s.format, s.context, s.text, s.value, unnamed(s)] for s in samples],
        "clean": clean_texts(),
        "code": code,
        "texts": {"1 kB trace": trace, "64 kB trace": big},
    }


_IDENTIFIER = re.compile(r"[A-Za-z0-9_./-]{6,}")


def measure(data: dict[str, Any]) -> dict[str, Any]:
    """Runs with whichever ``shared`` package is first on sys.path."""
    from shared.intake.redact import Redactor

    redactor = Redactor()
    left = [
        [fmt, ctx, bare]
        for fmt, ctx, text, value, bare in data["samples"]
        if value in redactor.redact(text)
    ]
    timings = {}
    for name, text in data["texts"].items():
        reps = max(20, 2_000_000 // len(text))
        runs = []
        for i in range(reps):
            fresh = f"{text}\n#{i}"  # not in the memo
            t0 = time.perf_counter()
            redactor.redact(fresh)
            runs.append(time.perf_counter() - t0)
        timings[name] = statistics.median(runs) * 1000
    return {
        "left": left,
        "changed": _changed(redactor, data["clean"]),
        "code_changed": _changed(redactor, data["code"]),
        "ms": timings,
    }


def _changed(redactor: Any, texts: list[str]) -> float:
    """The share of identifiers of ``texts`` that redaction altered."""
    changed = total = 0
    for text in texts:
        before = _IDENTIFIER.findall(text)
        after = set(_IDENTIFIER.findall(redactor.redact(text)))
        total += len(before)
        changed += sum(1 for word in before if word not in after)
    return changed / total


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


def _cell(values: list[float], fmt: str) -> str:
    mid = statistics.median(values)
    return f"{mid:{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", type=Path, help="another tracehound checkout's rules")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure_only:
        print(json.dumps(measure(json.load(sys.stdin))))
        return 0
    data = cases()
    checkouts = [("tracehound (this checkout)", ROOT)]
    if args.reference:
        checkouts.append((f"reference ({args.reference})", args.reference))
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in checkouts}
    for _ in range(args.rounds):
        for name, path in checkouts:  # interleaved: both see the same machine load
            results[name].append(measure_in(path, data))
    samples = data["samples"]
    n_formats = len({s[0] for s in samples})
    n_contexts = len({s[1] for s in samples})
    names = list(data["texts"])
    print(
        f"\nRedaction: {len(samples)} samples of {n_formats} formats in {n_contexts} contexts "
        f"(seeds {', '.join(map(str, SEEDS))}); goal: {GOAL}\n"
    )
    print(
        "| rules | left | of them unnamed | formats left | identifiers changed "
        "| in held-out code | " + " | ".join(f"{t} ms" for t in names) + " |"
    )
    print("|---|---:|---:|---:|---:|---:|" + "---:|" * len(names))
    for name, _ in checkouts:
        runs = results[name]
        left = runs[0]["left"]  # deterministic: the same every round
        unnamed = sum(1 for _, _, bare in left if bare)
        formats = len({fmt for fmt, _, _ in left})
        ms = " | ".join(_cell([r["ms"][t] for r in runs], ".2f") for t in names)
        changed, code = runs[0]["changed"], runs[0]["code_changed"]
        print(
            f"| {name} | {len(left)} | {unnamed} | {formats} | {changed:.2%} | {code:.3%} | {ms} |"
        )
    for name, _ in checkouts:
        left = results[name][0]["left"]
        named = sorted({f"{fmt} in {ctx}" for fmt, ctx, bare in left if not bare})
        if named:
            print(f"\n{name}, left though named ({len(named)}): {', '.join(named[:60])}")
    print_summary([results[name] for name, _ in checkouts], names)
    return 0


def print_summary(runs_by_checkout: list[list[dict[str, Any]]], names: list[str]) -> None:
    """The house table: this checkout measured, ``--reference``'s rules beside it (a dash
    without one: no other rule set is at hand by default)."""

    def figures(runs: list[dict[str, Any]]) -> list[str]:
        left = runs[0]["left"]
        return [
            str(sum(1 for _, _, bare in left if not bare)),
            f"{runs[0]['changed']:.2%}",
            f"{runs[0]['code_changed']:.3%}",
            *(_cell([r["ms"][t] for r in runs], ".2f") for t in names),
        ]

    ours = figures(runs_by_checkout[0])
    ref = figures(runs_by_checkout[1]) if len(runs_by_checkout) > 1 else ["—"] * len(ours)
    rows = [
        ("secrets left though named", "0"),
        ("identifiers changed", "≤ 1%"),
        ("identifiers changed in held-out code", "—"),
        *((f"{t}, ms", "—") for t in names),
    ]
    print("\n| figure | goal | measured | in-run reference: --reference |")
    print("|---|---|---:|---:|")
    for (figure, goal), a, b in zip(rows, ours, ref, strict=True):
        print(f"| {figure} | {goal} | {a} | {b} |")


if __name__ == "__main__":
    raise SystemExit(main())
