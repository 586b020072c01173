"""Retrieval benchmark: the dev bug-localization cases end to end, per mode and cross-validated.

    python benchmarks/retrieval.py [CORPORA_DIR] [--json OUT] [--limit N] [--embedder NAME]

The cases are the bench's (../shared/bench/cases-dev.jsonl) and the mined ones
(benchmarks/cases/cases-mined.jsonl); CORPORA_DIR defaults to ~/tracehound-corpora (built
for both files by ../shared/bench/fetch_corpus.py). It prints every mode's table, then the
leave-one-repo-out tables of the fusion and of the follow-up mode (``--no-cv``: only the
first). The real local model (the ``eval`` extra: all-MiniLM-L6-v2) is used when installed,
else the simulator's hashed embeddings; the table's title says which. Chunk vectors are
cached (``--cache-dir``, default .tracehound/eval-cache), so a second run only embeds the
queries.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = [
    HERE.parent.parent / "shared" / "bench" / "cases-dev.jsonl",
    HERE / "cases" / "cases-mined.jsonl",
]
MODES = "vector,bm25,frames,symbols,hybrid,hybrid+frames,all,all+followup"


def main() -> int:
    from shared.devtools.st_embedder import available

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpora", nargs="?", default=str(Path.home() / "tracehound-corpora"))
    parser.add_argument("--cases", action="append", help="repeat for more (default: both sets)")
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
    args = parser.parse_args()
    print(
        f"embedder: {args.embedder}"
        + ("" if args.embedder == "simulator" else f" (max {args.max_seq_length} tokens)")
        + ("" if available() else " — the eval extra is not installed"),
        file=sys.stderr,
    )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    argv = ["eval"]
    for cases in args.cases or [str(c) for c in CASES]:
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
    from producers.cli import cli

    cli(argv, standalone_mode=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
