"""Retrieval benchmark: the dev bug-localization cases end to end, per mode and cross-validated.

    python benchmarks/retrieval.py [CORPORA_DIR] [--json OUT] [--limit N] [--embedder NAME]

The cases are the bench's (../shared/bench/cases-dev.jsonl) and the mined ones
(benchmarks/cases/cases-mined.jsonl, cases-mined-2.jsonl and the third batch,
cases-mined-3-web.jsonl and cases-mined-3-data.jsonl); CORPORA_DIR defaults to
~/tracehound-corpora (built for each file by ../shared/bench/fetch_corpus.py). It prints
every mode's table, then the leave-one-repo-out tables of the fusion and of the follow-up mode
(``--no-cv``: only the first). ``--fresh FILE`` adds a batch of cases nobody has tuned on and
then prints how each choice rule's held-out folds score on that batch alone
(benchmarks/cases/README.md). The real local model (the ``eval`` extra: all-MiniLM-L6-v2) is
used when installed, else the simulator's hashed embeddings; the table's title says which.
Chunk vectors are cached (``--cache-dir``, default .tracehound/eval-cache), so a second run
only embeds the queries.

Last, a table of the pipeline's modes (``learned``, the default, and ``all``, the fusion it falls
back to) with their goals (issue 37, for all-MiniLM-L6-v2: cross-validated R@1 ≥ 0.70 with R@5
not below 0.860) and, as the in-run reference, the best signal alone on the same cases (vector,
BM25, frames or symbols), read from ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = [
    HERE.parent.parent / "shared" / "bench" / "cases-dev.jsonl",
    HERE / "cases" / "cases-mined.jsonl",
    HERE / "cases" / "cases-mined-2.jsonl",
    # joined after it was scored fresh (benchmarks/cases/README.md, *Third batch*, step 3)
    HERE / "cases" / "cases-mined-3-web.jsonl",
    HERE / "cases" / "cases-mined-3-data.jsonl",
]
MODES = "vector,bm25,frames,symbols,hybrid,hybrid+frames,all,learned,all+followup"
SIGNALS = ("vector", "bm25", "frames", "symbols")
# (metric in --json, label, goal held out) — issue 37, with all-MiniLM-L6-v2
GOALS = (("recall@1", "R@1", "≥ 0.70"), ("recall@5", "R@5", "≥ 0.860"), ("mrr", "MRR", "—"))


def main() -> int:
    from shared.devtools.st_embedder import available

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpora", nargs="?", default=str(Path.home() / "tracehound-corpora"))
    parser.add_argument("--cases", action="append", help="repeat for more (default: every set)")
    parser.add_argument("--json", default=str(HERE / "results" / "retrieval.json"))
    parser.add_argument("--limit", type=int)
    parser.add_argument(
        "--embedder",
        choices=["sentence-transformers", "simulator"],
        default="sentence-transformers" if available() else "simulator",
    )
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--modes", default=MODES)
    parser.add_argument("--no-cv", action="store_true", help="skip leave-one-repo-out")
    parser.add_argument("--cache-dir", help="chunk-embedding cache")
    parser.add_argument("--fresh", help="a batch of unseen cases: join it, score the rules on it")
    parser.add_argument("--save-ranker", help="write the learned ranker fit on every case here")
    args = parser.parse_args()
    print(
        f"embedder: {args.embedder}"
        + ("" if args.embedder == "simulator" else f" (max {args.max_seq_length} tokens)")
        + ("" if available() else " — the eval extra is not installed"),
        file=sys.stderr,
    )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    argv = ["eval"]
    for cases in [*(args.cases or [str(c) for c in CASES]), *([args.fresh] if args.fresh else [])]:
        argv += ["--cases", cases]
    argv += [
        "--corpora",
        args.corpora,
        "--json",
        args.json,
        "--embedder",
        args.embedder,
    ]
    if args.embedder == "sentence-transformers":
        argv += ["--max-seq-length", str(args.max_seq_length)]
    if args.limit:
        argv += ["--limit", str(args.limit)]
    if args.modes:
        argv += ["--modes", args.modes]
    if not args.no_cv:
        argv += ["--cv", "repo"]
    if args.cache_dir:
        argv += ["--cache-dir", args.cache_dir]
    if args.save_ranker:
        argv += ["--save-ranker", args.save_ranker]
    from producers.cli import cli

    cli(argv, standalone_mode=False)
    if args.fresh:
        print_fresh(Path(args.json), Path(args.fresh))
    print_goals(Path(args.json))
    return 0


def best_alone(scores: dict[str, dict[str, float]], metric: str) -> str:
    """The best single signal on ``metric``, e.g. ``bm25 alone: 0.478``."""
    name, best = max(((n, s[metric]) for n, s in scores.items()), key=lambda p: p[1])
    return f"{name} alone: {best:.3f}"


def print_goals(results: Path) -> None:
    """The pipeline's mode held out (and in-sample) beside its goals and the best signal alone
    in the same run."""
    if not results.is_file():
        return
    got = json.loads(results.read_text("utf-8"))
    rows: list[tuple[str, dict[str, float], dict[str, dict[str, float]], bool]] = []
    if "cv" in got:
        cv = got["cv"]["rows"]
        alone = {n: cv[f"{n} alone"] for n in SIGNALS if f"{n} alone" in cv}
        learned = cv.get("learned ranker, cross-validated: leave one repo out")
        if learned:
            rows.append(("learned (pointwise), leave one repo out", learned, alone, True))
        pairwise = cv.get("pairwise ranker, cross-validated: leave one repo out")
        if pairwise:
            rows.append(("learned (pairwise), leave one repo out", pairwise, alone, True))
        held = cv["cross-validated: leave one repo out"]
        rows.append(("all (the fusion), leave one repo out", held, alone, True))
    summary = got["summary"]
    alone = {n: summary[n] for n in SIGNALS if n in summary}
    # in-sample where the cases are those the model and the defaults were chosen on
    for mode, label in (("learned", "learned, the model as shipped"),
                        ("all", "all, the fusion's defaults")):  # fmt: skip
        if mode in summary:
            rows.append((label, summary[mode], alone, False))
    cases = int(max((m.get("cases", 0) for m in summary.values()), default=0))
    print(
        f"\nThe pipeline's mode, {cases} cases, embedder {got['embedder']} (the goals are for "
        "all-MiniLM-L6-v2); in-run reference: the best signal alone\n"
    )
    print("| figure | goal | measured | in-run reference |")
    print("|---|---|---:|---:|")
    for label, scores, alone, held_out in rows:
        for metric, name, goal in GOALS:
            ref = best_alone(alone, metric) if alone else "—"
            print(
                f"| {label}: {name} | {goal if held_out else '—'} | {scores[metric]:.3f} | {ref} |"
            )


def print_fresh(results: Path, fresh: Path) -> None:
    """The fresh batch's cases alone: every mode with the defaults (all cases, then each
    ``query_kind``), then, with the cross-validation, each choice rule's held-out scores beside
    the default's."""
    import json

    from rich.console import Console
    from rich.table import Table

    from shared.devtools.eval import KS, recall_at

    ids = {json.loads(line)["id"] for line in fresh.read_text("utf-8").splitlines() if line}
    results_json = json.loads(results.read_text("utf-8"))
    every = [c for c in results_json["cases"] if c["id"] in ids]
    kinds = sorted({c["kind"] for c in every})
    for kind, cases in [("", every), *((k, [c for c in every if c["kind"] == k]) for k in kinds)]:
        what = f", {kind} only" if kind else ""
        by_mode = Table(title=f"the fresh batch{what} ({len(cases)} cases), with the defaults")
        by_mode.add_column("mode")
        for k in KS:
            by_mode.add_column(f"R@{k}", justify="right")
        by_mode.add_column("MRR", justify="right")
        for mode in results_json["modes"]:
            ranked = [(c["modes"][mode], c["gold"]) for c in cases if mode in c["modes"]]
            if not ranked:
                continue
            cells = [sum(recall_at(m["files"], g, k) for m, g in ranked) / len(ranked) for k in KS]
            cells.append(sum(m["rr"] for m, _ in ranked) / len(ranked))
            by_mode.add_row(mode, *(f"{v:.3f}" for v in cells))
        Console().print(by_mode)
    if "cv" not in results_json:
        return
    cv = results_json["cv"]
    rows = [c for c in cv["cases"] if c["id"] in ids]
    names = list(rows[0]["default"]) if rows else []
    table = Table(title=f"the fresh batch ({len(rows)} cases), each in the fold holding it out")
    table.add_column("choice rule")
    for name in names:
        table.add_column(name.replace("recall", "R"), justify="right")

    def mean(scores: list[dict[str, float]]) -> list[str]:
        return [f"{sum(s[n] for s in scores) / len(scores):.3f}" for n in names]

    for rule in rows[0]["held_out"] if rows else []:
        table.add_row(rule, *mean([c["held_out"][rule] for c in rows]))
    if rows:
        table.add_row("default (chosen before the batch)", *mean([c["default"] for c in rows]))
    for name in ("learned", "pairwise"):
        if rows and all(f"{name}_held_out" in c for c in rows):
            held = [c[f"{name}_held_out"] for c in rows]
            table.add_row(f"{name} ranker, held out", *mean(held))
    Console().print(table)


if __name__ == "__main__":
    sys.exit(main())
