"""The keyword index of a 1M-chunk monorepo: Redis memory, worker memory, cold and warm query.

    python benchmarks/keyword_monorepo.py [--chunks 1000000] [--runs 3]

The corpus is synthetic but made of real code: the ~100k-chunk tree that
``benchmarks/retrieval_scale.py`` builds (run it first), chunked as ``tracehound index`` chunks
it, then copied under ``copy<k>/`` with every identifier renamed per copy (``compute_score`` ->
``compute_scorexqv``), so the vocabulary grows as a real monorepo's would instead of repeating.
The chunks go through ``RedisCorpus.add`` in index-sized batches into a private redis-server
(merges included), then one full compaction as at the end of ``tracehound index``.

Per run, a fresh Python process loads the index and answers the 20 dev-case queries the scale
benchmark uses (BM25, the trace's frames and the names it mentions: the keyword side of the
retrieve; vectors are Chroma's and are not part of this), reporting its first query, warm p50
and p95, and its RSS. Prints the median of the runs with the range.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import keyword
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis
from retrieval_scale import fmt, pct  # this folder: the scale benchmark's tree and table

from shared.core.domain import Chunk
from shared.index.chunking import chunk_file, language_of
from shared.index.corpus import RedisCorpus
from shared.intake.traces import parse_frames
from shared.retrieve.hybrid import frame_ranking
from shared.retrieve.keywords import BM25Index
from shared.retrieve.query import named_symbols
from shared.stack.localstack import start_redis

TREE = ROOT / ".tracehound" / "bench-scale" / "repo"
QUERIES = ROOT / ".tracehound" / "bench-scale" / "probe.json"
REPO = "mono"
BATCH = 2_000  # about one `tracehound index` batch of 64 files
IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{2,}\b")
KEEP = set(keyword.kwlist) | set(dir(__builtins__)) | {"self", "cls"}


def renamed(text: str, copy: int) -> str:
    if not copy:
        return text

    def sub(m: re.Match[str]) -> str:
        name = m.group(0)
        if name in KEEP:
            return name
        h = hashlib.blake2s(f"{name}:{copy}".encode(), digest_size=3).digest()
        return name + "".join(chr(97 + b % 26) for b in h)

    return IDENT.sub(sub, text)


def source_chunks() -> list[Chunk]:
    out: list[Chunk] = []
    for path in sorted(TREE.rglob("*.py")):
        if path.is_file() and language_of(path.name):
            text = path.read_bytes().decode("utf-8", errors="replace")
            out += chunk_file(REPO, str(path.relative_to(TREE)), text)
    return out


def fill(corpus: RedisCorpus, target: int) -> int:
    base = source_chunks()
    n = 0
    batch: list[Chunk] = []
    copy = 0
    while n < target:
        for c in base:
            if n >= target:
                break
            text = renamed(c.text, copy)
            path = f"copy{copy}/{c.path}"
            batch.append(
                c.model_copy(
                    update={
                        "id": hashlib.sha1(f"{path}:{c.start_line}:{text}".encode()).hexdigest(),
                        "path": path,
                        "text": text,
                        "symbol": renamed(c.symbol, copy),
                    }
                )
            )
            n += 1
            if len(batch) >= BATCH:
                corpus.add(REPO, batch)
                batch = []
        copy += 1
    if batch:
        corpus.add(REPO, batch)
    return n


def probe(url: str) -> int:
    """A fresh process: load the index, first query, then every query once more; JSON out."""
    work = json.loads(QUERIES.read_text())
    index = BM25Index(RedisCorpus(redis.Redis.from_url(url)))

    def keyword_side(text: str) -> None:
        view = index.current(REPO)
        view.search(REPO, text, 50)
        frame_ranking(REPO, parse_frames(text), view)
        view.defining(REPO, named_symbols(text))

    t = time.perf_counter()
    keyword_side(work["queries"][0])
    cold = time.perf_counter() - t
    times = []
    for q in work["queries"]:
        t = time.perf_counter()
        keyword_side(q)
        times.append(time.perf_counter() - t)
    status = Path("/proc/self/status").read_text()
    rss = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS")) / 1024
    print(json.dumps({"cold": cold, "times": times, "rss": rss}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe:
        return probe(args.probe)
    if not TREE.is_dir() or not QUERIES.exists():
        print("run benchmarks/retrieval_scale.py first: it builds the tree and the queries")
        return 2
    with tempfile.TemporaryDirectory(prefix="th-mono-") as tmp:
        proc, url = start_redis(Path(tmp))
        try:
            r = redis.Redis.from_url(url)
            corpus = RedisCorpus(r)
            t = time.perf_counter()
            n = fill(corpus, args.chunks)
            added = time.perf_counter() - t
            t = time.perf_counter()
            corpus.merge(REPO, everything=True)
            compacted = time.perf_counter() - t
            state = corpus.state(REPO)
            used = r.info("memory")["used_memory"] / 2**20
            seg_bytes = sum(
                r.memory_usage(f"th:corpus:{REPO}:seg:{s.sid}{part}", samples=0) or 0
                for s in state.segments
                for part in ("", ":docs", ":tfs")
            )
            text_bytes = r.memory_usage(f"th:corpus:{REPO}:text", samples=0) or 0
            where_bytes = r.memory_usage(f"th:corpus:{REPO}:where", samples=0) or 0
            print(
                f"{n:,} chunks added in {added:,.0f} s, compacted in {compacted:,.0f} s "
                f"into {len(state.segments)} segments",
                flush=True,
            )
            rows: dict[str, list[float]] = {"cold": [], "p50": [], "p95": [], "rss": []}
            for run in range(args.runs):
                out = subprocess.run(
                    [sys.executable, __file__, "--probe", url],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=dict(os.environ),
                )
                got = json.loads(out.stdout.strip().splitlines()[-1])
                rows["cold"].append(got["cold"] * 1000)
                rows["p50"].append(pct(got["times"], 0.5) * 1000)
                rows["p95"].append(pct(got["times"], 0.95) * 1000)
                rows["rss"].append(got["rss"])
                print(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rows.items()))
        finally:
            proc.stop()
    print()
    print(f"{n:,} chunks in {len(state.segments)} segments; median of {args.runs} runs (range)")
    print("| figure | measured |")
    print("|---|---|")
    print(f"| Redis used memory, whole instance | {used:,.0f} MiB |")
    print(
        f"| of which segments / chunk text (zlib) / chunk locations | {seg_bytes / 2**20:,.0f} / "
        f"{text_bytes / 2**20:,.0f} / {where_bytes / 2**20:,.0f} MiB |"
    )
    print(f"| first keyword query in a new process (index loaded) | {fmt(rows['cold'], 'ms')} |")
    print(f"| keyword side of a retrieve, warm p50 | {fmt(rows['p50'], 'ms')} |")
    print(f"| keyword side of a retrieve, warm p95 | {fmt(rows['p95'], 'ms')} |")
    print(f"| process RSS after the queries | {fmt(rows['rss'], 'MB')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
