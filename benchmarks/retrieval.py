"""Retrieval benchmark: the dev bug-localization cases end to end, one table per run.

    python benchmarks/retrieval.py [CORPORA_DIR] [--json OUT] [--limit N] [--embedder NAME]

CORPORA_DIR defaults to ~/tracehound-corpora (built by ../shared/bench/fetch_corpus.py). The
real local model (the ``eval`` extra: all-MiniLM-L6-v2) is used when installed, else the
simulator's hashed embeddings; the table's title says which. Chunk vectors are cached under
.tracehound/eval-cache, so a second run only embeds the queries.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = HERE.parent.parent / "shared" / "bench" / "cases-dev.jsonl"


def main() -> int:
    from shared.devtools.st_embedder import available

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpora", nargs="?", default=str(Path.home() / "tracehound-corpora"))
    parser.add_argument("--cases", default=str(CASES))
    parser.add_argument("--json", default=str(HERE / "results" / "retrieval.json"))
    parser.add_argument("--limit", type=int)
    parser.add_argument(
        "--embedder",
        choices=["sentence-transformers", "simulator"],
        default="sentence-transformers" if available() else "simulator",
    )
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--modes", default="")
    args = parser.parse_args()
    print(
        f"embedder: {args.embedder}"
        + ("" if args.embedder == "simulator" else f" (max {args.max_seq_length} tokens)")
        + ("" if available() else " — the eval extra is not installed"),
        file=sys.stderr,
    )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    argv = [
        "eval",
        "--cases",
        args.cases,
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
    from producers.cli import cli

    cli(argv, standalone_mode=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
