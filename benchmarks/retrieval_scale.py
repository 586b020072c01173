"""Retrieval at ~100k chunks: warm and cold latency, worker memory, freshness under watch.

    python benchmarks/retrieval_scale.py [CORPORA_DIR] [--chunks 100000] [--runs 3]

Builds (first time) or reuses a ~100k-chunk repo in ``.tracehound/bench-scale``: the Python
sources of real sdists (astropy, scikit-learn, pytest, pylint, Sphinx, Flask, requests, then
older versions of the big ones, as ``../shared/bench/fetch_corpus.py`` unpacks them) copied
side by side into one tree, like a monorepo with vendored copies, indexed with
``tracehound index`` through real workers into a private redis-server (append-only, kept) and
chroma server, with the Ollama simulator's embeddings. The queries are 20 real bug reports on
those projects from the dev cases (tracebacks and error messages), as the retrieve task gets
them: ``build_query`` of the event, its embedding computed beforehand.

Per run it measures:
- warm: the retrieve stage (``hybrid_retrieve`` over Chroma, BM25, frames and symbols, exactly
  as the task calls it, the learned ranker included) in this process, p50 and p95 over the 20
  queries; and, on each query's own rankings, the learned ranker's share of it (features and
  scores of the fused first files) beside the fusion that runs before it;
- cold: a fresh Python process that imports the worker like a worker does, then its first
  retrieve (the keyword index loaded from Redis), and its RSS after the 20 queries;
- freshness: with ``tracehound watch`` running on the tree, a function with a new name is
  appended to a file (three edits, their median); the time until BM25 finds that file for
  the name and Chroma holds the new chunk (model time is the simulator's, ~0);
- and, in the same run, two references on the same data: the seed's approach (BM25Okapi over
  2,000 chunks fetched per query) and a full BM25Okapi rebuild over every chunk per query.

Prints the median of the runs with the range.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np
import redis

from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.devtools.simulators.ollama import OllamaSimulator
from shared.index.chunking import chunk_file, language_of
from shared.index.corpus import RedisCorpus
from shared.index.reindex import index_repository
from shared.index.tokens import tokenize
from shared.index.vectors import ChromaVectorIndex
from shared.intake.events import ErrorEvent, from_text
from shared.intake.trace import with_trace
from shared.intake.traces import parse_frames
from shared.models.embedder import OllamaEmbedder
from shared.retrieve.hybrid import Fusion, fuse, hybrid_retrieve
from shared.retrieve.keywords import BM25Index
from shared.retrieve.priors import PathPrior
from shared.retrieve.query import build_query
from shared.retrieve.ranker import LinearModel, learned_order, load_model
from shared.stack.children import Proc, spawn, wait_until
from shared.stack.localstack import (
    start_chroma,
    start_redis,
    start_worker,
    tracehound_executable,
    wait_for_consumers,
)

CASES = ROOT.parent / "shared" / "bench" / "cases-dev.jsonl"
DATA = ROOT / ".tracehound" / "bench-scale"
REPO = "scale"
PROJECTS = [  # until the target: distinct projects first, then older versions of the big ones
    "astropy-5.3",
    "scikit-learn-1.3.0",
    "pytest-8.0.0",
    "pylint-2.15.0",
    "Sphinx-3.1.0",
    "Flask-2.2.3",
    "requests-2.10.0",
    "astropy-4.3",
    "scikit-learn-0.22",
    "astropy-3.0.4",
    "scikit-learn-0.20.3",
    "pytest-6.2.5",
    "pylint-2.14.0",
    "astropy-1.3",
    "scikit-learn-0.19.1",
    "pytest-5.4.0",
    "astropy-5.0.8",
    "scikit-learn-1.2.1",
    "astropy-5.2",
]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def fmt(values: list[float], unit: str, digits: int = 0) -> str:
    med, lo, hi = statistics.median(values), min(values), max(values)
    if len(values) == 1 or lo == hi:
        return f"{med:,.{digits}f} {unit}"
    return f"{med:,.{digits}f} {unit} ({lo:,.{digits}f}–{hi:,.{digits}f})"


def build_tree(corpora: Path, tree: Path, target: int) -> int:
    """Copy whole projects' Python sources into ``tree`` until ``target`` chunks; returns the
    chunk count (as ``tracehound index`` will chunk them)."""
    marker = tree / ".chunks"
    if marker.exists():
        return int(marker.read_text())
    if tree.exists():
        shutil.rmtree(tree)
    total = 0
    for project in PROJECTS:
        src = corpora / project
        if not src.is_dir():
            continue
        for path in sorted(src.rglob("*.py")):
            if not path.is_file() or language_of(path.name) is None:
                continue
            rel = path.relative_to(corpora)
            text = path.read_bytes().decode("utf-8", errors="replace")
            total += len(chunk_file(REPO, str(rel), text))
            dest = tree / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
        if total >= target:
            break
    marker.write_text(str(total))
    return total


def queries(n: int) -> list[str]:
    names = {p.rsplit("-", 1)[0] for p in PROJECTS}
    cases = [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]
    chosen = [c for c in cases if c["pypi_name"] in names][:n]
    out = []
    for c in chosen:
        event = from_text(c["query"], origin="sent", service=REPO, repo=REPO, level="ERROR")
        assert isinstance(event, ErrorEvent)
        out.append(build_query(with_trace(event)))
    return out


@functools.cache
def settings() -> Settings:
    return Settings()


def retrieve(index: BM25Index, vectors: ChromaVectorIndex, query: str, vector: list[float]) -> Any:
    """What the retrieve task does (``workers/tasks/analysis.py``), minus the task: the frames
    are the query's, which the task has from intake and the probe reads back out of it."""
    return hybrid_retrieve(
        REPO,
        query,
        vector,
        frames=parse_frames(query),
        vectors=vectors,
        keywords=index.current(REPO),
        depth=settings().candidate_depth,
        rrf_k=settings().rrf_k,
        prior=PathPrior.from_settings(settings()),
        ranker=ranker(),
    )


@functools.cache
def ranker() -> LinearModel | None:
    """The task's ranker: the shipped model unless the settings say otherwise."""
    s = settings()
    return load_model(s.ranker_model) if s.ranker == "learned" else None


def ranker_cost(found: Any, query: str) -> tuple[float, float]:
    """Milliseconds of the retrieve's last step on its own rankings: (the fusion, the learned
    ranker after it). The ranker's is what it adds to a retrieve."""
    prior = PathPrior.from_settings(settings())
    t = time.perf_counter()
    fused = fuse(found.rankings, Fusion(rrf_k=settings().rrf_k), prior)
    fusing = time.perf_counter() - t
    t = time.perf_counter()
    learned_order(ranker() or load_model(None), found.rankings, fused, query, prior)
    return fusing * 1000, (time.perf_counter() - t) * 1000


def probe(args: argparse.Namespace) -> int:
    """The cold worker: imports like a worker, then its first retrieves; prints JSON."""
    import workers.app  # noqa: F401  (what a worker imports: celery, the tasks)
    from workers.context import Clients

    work = json.loads(Path(args.probe).read_text())
    clients = Clients(Settings())
    t = time.perf_counter()
    retrieve(clients.keywords, clients.vectors, work["queries"][0], work["vectors"][0])
    cold = time.perf_counter() - t
    for q, v in zip(work["queries"], work["vectors"], strict=True):
        retrieve(clients.keywords, clients.vectors, q, v)
    status = Path("/proc/self/status").read_text()

    def kb(field: str) -> float:
        line = next(x for x in status.splitlines() if x.startswith(field))
        return int(line.split()[1]) / 1024

    print(json.dumps({"cold": cold, "rss": kb("VmRSS"), "peak": kb("VmHWM")}))
    return 0


def tree_rss(pid: int) -> float:
    """RSS in MB of a process and its children."""
    total = 0.0
    pids = [pid]
    while pids:
        p = pids.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        total += next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS"))
        pids += [int(c) for c in children]
    return total / 1024


def seed_approach(vectors: ChromaVectorIndex, query: str) -> None:
    """The seed's BM25: 2,000 chunks fetched from Chroma, BM25Okapi built over them per query."""
    from rank_bm25 import BM25Okapi

    col = vectors._collection(REPO)
    got = col.get(limit=2000, include=["documents", "metadatas"])
    docs = [
        tokenize(f"{m['path']}\n{d}")
        for d, m in zip(got["documents"], got["metadatas"], strict=True)
    ]
    BM25Okapi(docs).get_scores(tokenize(query))


def full_rebuild(corpus: RedisCorpus, query: str) -> None:
    """BM25Okapi rebuilt over every chunk for one query (the arithmetic the index keeps)."""
    from rank_bm25 import BM25Okapi

    state = corpus.state(REPO)
    docs: list[list[str]] = []
    for info in state.segments:
        seg = corpus.segment(REPO, info.sid)
        assert seg is not None
        p = seg.postings
        per_doc: list[list[str]] = [[] for _ in range(len(seg))]
        terms = seg.term_of_postings()
        for t, d, tf in zip(terms.tolist(), p.docs.tolist(), p.tfs.tolist(), strict=True):
            per_doc[d].extend([p.vocab[t]] * tf)
        dead = set(state.dead.get(info.sid, np.zeros(0)).tolist())
        docs += [doc for i, doc in enumerate(per_doc) if i not in dead]
    BM25Okapi(docs).get_scores(tokenize(query))


def freshness(
    tree: Path, index: BM25Index, vectors: ChromaVectorIndex, rng: random.Random
) -> float:
    """Seconds from saving a new function to BM25 ranking its file first for the function's
    name and Chroma holding its chunk."""
    files = sorted(p for p in (tree / PROJECTS[0]).rglob("*.py") if p.stat().st_size > 2000)
    target = rng.choice(files)
    rel = str(target.relative_to(tree))
    name = f"reconcile_ledger_{uuid.uuid4().hex[:12]}"  # never in the tree before this edit
    body = f"\n\ndef {name}(entries):\n    return sum(e.amount for e in entries)\n"
    t0 = time.monotonic()
    with target.open("a") as f:
        f.write(body)
    bm25_at = vector_at = None
    col = vectors._collection(REPO)
    while time.monotonic() - t0 < 120 and (bm25_at is None or vector_at is None):
        if bm25_at is None:
            hits = index.search(REPO, name, 3)
            if hits and hits[0].path == rel and name in hits[0].text:
                bm25_at = time.monotonic() - t0
        if vector_at is None:
            # Chroma keeps no texts: a chunk id of the file in Chroma whose text (the corpus's,
            # written just after the vector) holds the new name.
            ids = col.get(where={"path": rel}, include=[])["ids"]
            if any(name in t for t in index.corpus.texts(REPO, ids)):
                vector_at = time.monotonic() - t0
        time.sleep(0.02)
    if bm25_at is None or vector_at is None:
        raise TimeoutError(
            f"{rel}: not searchable after 120 s (bm25 {bm25_at}, vector {vector_at})"
        )
    return max(bm25_at, vector_at)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpora", nargs="?", default=str(Path.home() / "tracehound-corpora"))
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rebuild-queries", type=int, default=2)
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe:
        return probe(args)
    # Killed with SIGTERM, still stop the private servers: two Redis on one data dir corrupt it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    corpora = Path(args.corpora)
    if not corpora.is_dir():
        print(f"no corpora at {corpora}: build them with {CASES.parent}/fetch_corpus.py")
        return 2
    DATA.mkdir(parents=True, exist_ok=True)
    tree = DATA / "repo"
    chunks = build_tree(corpora, tree, args.chunks)
    print(f"tree: {tree} ({chunks:,} chunks by the chunker)")
    procs: list[Proc] = []
    rng = random.Random(13)
    with OllamaSimulator() as ollama:
        try:
            # Fixed ports per data dir would collide across runs; the data itself is kept.
            redis_proc, redis_url = start_redis(DATA, appendonly=True)
            procs.append(redis_proc)
            chroma_proc, chroma_url = start_chroma(DATA)
            procs.append(chroma_proc)
            env = {
                "TRACEHOUND_REDIS_URL": redis_url,
                "TRACEHOUND_CHROMA_URL": chroma_url,
                "TRACEHOUND_OLLAMA_URL": ollama.url,
                "TRACEHOUND_DATA_DIR": str(DATA),
            }
            os.environ.update(env)
            for name, qs, c in (("embed", ("embed",), 1), ("cpu", ("index", "retrieve"), 2)):
                procs.append(start_worker(name, qs, c, DATA, env))
            wait_for_consumers(redis_url, ["embed", "index"])
            r = redis.Redis.from_url(redis_url)
            corpus = RedisCorpus(r)
            state = corpus.state(REPO)
            indexed = sum(s.size - s.dead for s in state.segments)
            if indexed < chunks * 0.95:
                app = sender_app(settings())
                t = time.perf_counter()
                report = index_repository(
                    app, tree, REPO, max_bytes=settings().max_file_bytes, timeout=7200
                )
                print(
                    f"indexed {report.files:,} files, {report.chunks:,} chunks in "
                    f"{time.perf_counter() - t:,.0f} s"
                )
                state = corpus.state(REPO)
                indexed = sum(s.size - s.dead for s in state.segments)
            print(f"keyword index: {indexed:,} live chunks in {len(state.segments)} segment(s)")
            sizes = {
                "segments": sum(
                    r.memory_usage(f"th:corpus:{REPO}:seg:{s.sid}{part}", samples=0) or 0
                    for s in state.segments
                    for part in ("", ":docs", ":tfs")
                ),
                **{
                    part: r.memory_usage(f"th:corpus:{REPO}:{part}", samples=0) or 0
                    for part in ("text", "where", "files")
                },
            }
            print(
                "keyword corpus in Redis: "
                + ", ".join(f"{k} {v / 2**20:,.1f} MiB" for k, v in sizes.items())
            )

            texts = queries(args.queries)
            embedder = OllamaEmbedder(settings().ollama_url, settings().embed_model)
            vecs = embedder.embed([settings().embed_query_prefix + q for q in texts])
            work = DATA / "probe.json"
            work.write_text(json.dumps({"queries": texts, "vectors": vecs}))
            vectors = ChromaVectorIndex(url=chroma_url)
            index = BM25Index(corpus)

            log = DATA / "logs" / "watch.log"
            # the log is appended to run after run: this run's watch.start is after its end
            before = log.stat().st_size if log.exists() else 0
            watch = spawn(
                "watch",
                [tracehound_executable(), "watch", str(tree), "--repo", REPO],
                DATA / "logs",
                env={**env, "TRACEHOUND_LOG_LEVEL": "INFO"},  # to see watch.start
            )
            procs.append(watch)

            def started() -> bool:
                with watch.log_path.open("rb") as f:
                    f.seek(before)
                    return b"watch.start" in f.read()

            wait_until(started, 600, "watch")

            rows: dict[str, list[float]] = {
                k: []
                for k in (
                    "p50", "p95", "rank50", "rank95", "fuse50",
                    "cold", "rss", "peak", "fresh", "seed", "rebuild",
                )
            }  # fmt: skip
            for run in range(args.runs):
                retrieve(index, vectors, texts[0], vecs[0])  # warm
                times, ranking, fusing = [], [], []
                for q, v in zip(texts, vecs, strict=True):
                    t = time.perf_counter()
                    found = retrieve(index, vectors, q, v)
                    times.append((time.perf_counter() - t) * 1000)
                    fused_ms, ranked_ms = ranker_cost(found, q)
                    fusing.append(fused_ms)
                    ranking.append(ranked_ms)
                rows["p50"].append(pct(times, 0.5))
                rows["p95"].append(pct(times, 0.95))
                rows["rank50"].append(pct(ranking, 0.5))
                rows["rank95"].append(pct(ranking, 0.95))
                rows["fuse50"].append(pct(fusing, 0.5))
                out = subprocess.run(
                    [sys.executable, __file__, "--probe", str(work)],
                    capture_output=True,
                    text=True,
                    env={**os.environ, **env},
                    check=True,
                )
                probed = json.loads(out.stdout.strip().splitlines()[-1])
                rows["cold"].append(probed["cold"] * 1000)
                rows["rss"].append(probed["rss"])
                rows["peak"].append(probed["peak"])
                edits = [freshness(tree, index, vectors, rng) for _ in range(3)]
                rows["fresh"].append(statistics.median(edits))
                seed = []
                for q in texts:
                    t = time.perf_counter()
                    seed_approach(vectors, q)
                    seed.append((time.perf_counter() - t) * 1000)
                rows["seed"].append(pct(seed, 0.5))
                rebuild = []
                for q in texts[: args.rebuild_queries]:
                    t = time.perf_counter()
                    full_rebuild(corpus, q)
                    rebuild.append((time.perf_counter() - t) * 1000)
                rows["rebuild"].append(statistics.median(rebuild))
                print(
                    f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rows.items()),
                    flush=True,
                )
        finally:
            chroma_rss = tree_rss(chroma_proc.popen.pid)
            for p in reversed(procs):
                p.stop()
    chroma_disk = sum(f.stat().st_size for f in (DATA / "chroma").rglob("*") if f.is_file())
    print(
        f"chroma server: {chroma_rss:,.0f} MB RSS after the runs, "
        f"{chroma_disk / 2**20:,.0f} MiB on disk"
    )
    print()
    print(f"{indexed:,} chunks, {len(texts)} queries, median of {args.runs} runs (range)")
    print_summary(rows)
    return 0


def print_summary(rows: dict[str, list[float]]) -> None:
    """The house table: figure, goal, measured, and the references run on the same index."""
    seed, rebuild = fmt(rows["seed"], "ms"), fmt(rows["rebuild"], "ms")
    table = [
        (
            "retrieve warm, p50",
            "≤ 100 ms",
            fmt(rows["p50"], "ms"),
            f"seed approach (BM25Okapi over 2,000 chunks): {seed}; BM25Okapi rebuilt: {rebuild}",
        ),
        ("retrieve warm, p95", "≤ 250 ms", fmt(rows["p95"], "ms"), "—"),
        (
            "learned ranker's share of a retrieve, p50",
            "≤ 5 ms",
            fmt(rows["rank50"], "ms", 2),
            f"the fusion before it: {fmt(rows['fuse50'], 'ms', 2)}",
        ),
        ("learned ranker's share of a retrieve, p95", "≤ 5 ms", fmt(rows["rank95"], "ms", 2), "—"),
        ("first retrieve in a new worker process", "≤ 2 s", fmt(rows["cold"], "ms"), "—"),
        (
            "worker process RSS after the queries (peak)",
            "≤ 300 MB",
            f"{fmt(rows['rss'], 'MB')}; peak {fmt(rows['peak'], 'MB')}",
            "—",
        ),
        ("file saved → found by BM25 and in Chroma", "≤ 2 s", fmt(rows["fresh"], "s", 2), "—"),
    ]
    print("| figure | goal | measured | in-run reference |")
    print("|---|---|---:|---:|")
    for row in table:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
