"""Chroma and PostgreSQL + pgvector side by side at 100k chunks, in one run.

    python benchmarks/vector_stores.py [--chunks 100000] [--dims 384] [--runs 3]

Per run, each store gets a private server (``chroma run``; PostgreSQL 16 + pgvector 0.6 from
the pgserver wheel) on a fresh directory, and the same chunks: 100k chunks of 384-dimension
unit vectors (all-MiniLM-L6-v2's size) drawn around 2,000 centres, as code chunks cluster by
topic. Measured through tracehound's own store classes (ChromaVectorIndex, PgVectorIndex):

- load: chunks/s of the whole first load (``bulk_load``: pgvector's COPY and one HNSW build,
  Chroma's batched upsert, its only path);
- drain: chunks/s of 1,280 more chunks into the loaded index in upserts of 128 (an index
  drain's size, TRACEHOUND_BULK_EMBED_CHUNKS: what a watcher's changes cost);
- query: p50 and p95 of 200 queries for the 50 nearest (TRACEHOUND_CANDIDATE_DEPTH), each a
  perturbed chunk vector;
- recall@10 against the exact neighbours (brute force in numpy): what HNSW's approximation
  costs, with both indexes built with the same parameters (m 16, ef_construction 100,
  ef_search 100; shared/index/pgvectors.py);
- server memory after the queries, as PSS (proportional set size: shared pages divided among
  the processes sharing them, so PostgreSQL's shared buffers count once across its backends)
  summed over the server's process tree, and its data directory's size on disk.

The in-run reference is the exact search in numpy over the same vectors (what `tracehound
eval` uses by default). Prints the median of the runs with the range. No goal is set by the
issue beyond "side by side"; the goal column says what each figure is for.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np

from shared.core.domain import Chunk
from shared.index.pgvectors import PgVectorIndex
from shared.index.vectors import ChromaVectorIndex
from shared.stack.children import Proc
from shared.stack.localstack import start_chroma
from shared.stack.postgres import start_postgres

REPO = "bench"
LOAD_BATCH = 5000  # Chroma's largest upsert is 5,461 here (get_max_batch_size)
DRAIN, DRAINS = 128, 10
QUERIES = 200
DEPTH = 50


def make_data(n: int, dims: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((2000, dims)).astype(np.float32)
    vectors = centres[rng.integers(0, len(centres), n)] + 0.6 * rng.standard_normal(
        (n, dims)
    ).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    picks = vectors[rng.integers(0, n, QUERIES)] + 0.3 * rng.standard_normal(
        (QUERIES, dims)
    ).astype(np.float32)
    picks /= np.linalg.norm(picks, axis=1, keepdims=True)
    return vectors, picks


def chunks_of(n: int) -> list[Chunk]:
    return [
        Chunk(
            id=f"c{i:07d}",
            repo=REPO,
            path=f"pkg{i % 300}/mod{i % 4000}.py",
            start_line=(i % 40) * 25 + 1,
            end_line=(i % 40) * 25 + 25,
            language="python",
            content_hash=f"{i:x}",
            text=f"def handler_{i}(order):\n    return order.total * {i % 97}\n",
        )
        for i in range(n)
    ]


def pss_kb(pid: int) -> int:
    """PSS of ``pid`` and its descendants (kB, from /proc/PID/smaps_rollup)."""
    total = 0
    for p in [pid, *_descendants(pid)]:
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int(Path(entry, "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def measure(store: Any, proc: Proc, data_dir: Path, chunks: list[Chunk], vectors: np.ndarray,
            queries: np.ndarray, exact: list[list[int]]) -> dict[str, float]:  # fmt: skip
    index = {c.id: i for i, c in enumerate(chunks)}
    loaded = len(chunks) - DRAIN * DRAINS
    start = time.perf_counter()
    if isinstance(store, PgVectorIndex):
        store.bulk_load(REPO, chunks[:loaded], vectors[:loaded].tolist())
    else:
        for at in range(0, loaded, LOAD_BATCH):
            end = min(at + LOAD_BATCH, loaded)
            store.upsert(REPO, chunks[at:end], vectors[at:end].tolist())
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    for at in range(loaded, len(chunks), DRAIN):
        store.upsert(REPO, chunks[at : at + DRAIN], vectors[at : at + DRAIN].tolist())
    drain_s = time.perf_counter() - start
    store.query(REPO, queries[0].tolist(), DEPTH)  # warm
    latencies, found = [], 0
    for q, truth in zip(queries, exact, strict=True):
        t = time.perf_counter()
        hits = store.query(REPO, q.tolist(), DEPTH)
        latencies.append(time.perf_counter() - t)
        found += len({index[h.chunk_id] for h in hits[:10]} & set(truth))
    latencies.sort()
    return {
        "load_per_s": loaded / load_s,
        "drain_per_s": (len(chunks) - loaded) / drain_s,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p95_ms": 1000 * latencies[int(len(latencies) * 0.95)],
        "recall10": found / (10 * len(queries)),
        "pss_mb": pss_kb(proc.popen.pid) / 1024,
        "disk_mb": disk_mb(data_dir),
    }


def exact_search(vectors: np.ndarray, queries: np.ndarray) -> tuple[list[list[int]], float, float]:
    """The exact top 10 per query, and the exact search's p50 / p95 (ms) at depth 50."""
    truth, times = [], []
    for q in queries:
        t = time.perf_counter()
        scores = vectors @ q
        top = np.argpartition(-scores, DEPTH)[:DEPTH]
        top = top[np.argsort(-scores[top])]
        times.append(time.perf_counter() - t)
        truth.append([int(i) for i in top[:10]])
    times.sort()
    return truth, 1000 * times[len(times) // 2], 1000 * times[int(len(times) * 0.95)]


def one_run(n: int, dims: int, seed: int) -> dict[str, dict[str, float]]:
    vectors, queries = make_data(n, dims, seed)
    chunks = chunks_of(n)
    exact, ref_p50, ref_p95 = exact_search(vectors, queries)
    out: dict[str, dict[str, float]] = {"exact": {"p50_ms": ref_p50, "p95_ms": ref_p95}}
    with tempfile.TemporaryDirectory(prefix="th-bench-vs-") as tmp:
        work = Path(tmp)
        proc, url = start_chroma(work / "c")
        try:
            chroma = ChromaVectorIndex(url=url, timeout=300)
            out["chroma"] = measure(
                chroma, proc, work / "c" / "chroma", chunks, vectors, queries, exact
            )
        finally:
            proc.stop()
        proc, url = start_postgres(work / "p")
        try:
            pg = PgVectorIndex(url=url, timeout=300)
            out["pgvector"] = measure(
                pg, proc, work / "p" / "postgres", chunks, vectors, queries, exact
            )
            pg.close()
        finally:
            proc.stop()
    return out


def cell(runs: list[dict[str, dict[str, float]]], store: str, key: str, fmt: str) -> str:
    values = [r[store][key] for r in runs]
    med = statistics.median(values)
    return f"{med:{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for i in range(args.runs):
        print(f"run {i + 1}/{args.runs} …", file=sys.stderr, flush=True)
        runs.append(one_run(args.chunks, args.dims, seed=i))
    print(
        f"\n{args.chunks:,} chunks of {args.dims} dims, {QUERIES} queries for the {DEPTH} nearest;"
        f" median of {args.runs} runs (range)\n"
    )
    print("| figure | goal | chroma | pgvector | in-run reference: exact (numpy) |")
    print("|---|---|---:|---:|---:|")
    rows = [
        ("query p50 (ms)", "side by side", "p50_ms", ".1f", True),
        ("query p95 (ms)", "side by side", "p95_ms", ".1f", True),
        ("recall@10 vs exact", "explains eval gaps", "recall10", ".3f", False),
        ("first load (chunks/s)", "side by side", "load_per_s", ",.0f", False),
        ("drain-sized upserts into it (chunks/s)", "side by side", "drain_per_s", ",.0f", False),
        ("server PSS after queries (MB)", "side by side", "pss_mb", ",.0f", False),
        ("data on disk (MB)", "side by side", "disk_mb", ",.0f", False),
    ]
    for label, goal, key, fmt, has_ref in rows:
        ref = cell(runs, "exact", key, fmt) if has_ref else ("1.000" if key == "recall10" else "-")
        print(f"| {label} | {goal} | {cell(runs, 'chroma', key, fmt)} | "
              f"{cell(runs, 'pgvector', key, fmt)} | {ref} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
