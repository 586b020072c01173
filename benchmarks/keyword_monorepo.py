"""The keyword index of a 1M-chunk monorepo: Redis memory, worker memory, cold and warm query.

    python benchmarks/keyword_monorepo.py [CORPORA_DIR] [--chunks 1000000] [--runs 3]

The corpus is synthetic but made of real code: the ~100k-chunk tree of
``benchmarks/retrieval_scale.py`` (built here from the sdists ``../shared/bench/fetch_corpus.py``
unpacks, if that benchmark has not built it), chunked as ``tracehound index`` chunks it, then
copied under ``copy<k>/`` with every identifier renamed per copy (``compute_score`` ->
``compute_scorexqv``), so the vocabulary grows as a real monorepo's would instead of repeating.
The chunks go through ``RedisCorpus.add`` in index-sized batches into a private redis-server
(merges included), then one full compaction as at the end of ``tracehound index``; the Redis
data is kept in ``.tracehound/bench-mono`` for the next run.

Per run, fresh Python processes load the index and answer the 20 dev-case queries the scale
benchmark uses (BM25, the trace's frames and the names it mentions: the keyword side of the
retrieve; vectors are Chroma's and are not part of this), reporting their first query, warm
p50 and p95, and their memory from /proc/PID/smaps_rollup (USS: pages only this process holds;
PSS: its share of the pages it shares):
- a new machine: an empty segment cache, one process (it reads the segments from Redis and
  writes the cache files);
- warm: then two processes at once, as a ``cpu`` worker's two prefork children (they map the
  files the first wrote);
- in-run reference: two processes at once with the cache off (``TRACEHOUND_KEYWORD_CACHE=false``:
  each holds its own copy of the same arrays).
Prints the median of the runs with the range.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import keyword
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis
from retrieval_scale import build_tree, fmt, pct, queries  # this folder: its tree and table

from shared.core.domain import Chunk
from shared.index.chunking import chunk_file, language_of
from shared.index.corpus import RETIRED_TTL, RedisCorpus
from shared.index.segment_cache import SegmentCache
from shared.intake.traces import parse_frames
from shared.retrieve.hybrid import frame_ranking
from shared.retrieve.keywords import BM25Index
from shared.retrieve.query import named_symbols
from shared.stack.localstack import start_redis

TREE = ROOT / ".tracehound" / "bench-scale" / "repo"
QUERIES = ROOT / ".tracehound" / "bench-scale" / "probe.json"
DATA = ROOT / ".tracehound" / "bench-mono"
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


def memory() -> dict[str, float]:
    """RSS, PSS and USS of this process in MB (smaps_rollup)."""
    kb: dict[str, int] = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        name, value, *_ = line.split()
        kb[name.rstrip(":")] = int(value)
    return {
        "rss": kb["Rss"] / 1024,
        "pss": kb["Pss"] / 1024,
        "uss": (kb["Private_Clean"] + kb["Private_Dirty"]) / 1024,
    }


def probe(url: str, cache: str) -> int:
    """A fresh process: load the index, first query, then every query once more; one JSON
    line; then, when told (a line on stdin), its memory while its siblings still run."""
    work = json.loads(QUERIES.read_text())
    index = BM25Index(
        RedisCorpus(redis.Redis.from_url(url)), SegmentCache(Path(cache) if cache else None)
    )

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
    print(json.dumps({"cold": cold, "times": times}), flush=True)
    sys.stdin.readline()
    print(json.dumps(memory()), flush=True)
    sys.stdin.readline()  # exit only once every sibling has measured: pages shared until then
    return 0


def probes(url: str, cache: Path | None, n: int) -> list[dict[str, Any]]:
    """``n`` probe processes at once; each one's figures, memory taken while all are alive."""
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--probe", url, "--cache", str(cache or "")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    out = []
    try:
        for p in procs:
            assert p.stdout is not None
            out.append(json.loads(p.stdout.readline()))
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("\n")
            p.stdin.flush()
        for p, got in zip(procs, out, strict=True):
            assert p.stdout is not None
            got.update(json.loads(p.stdout.readline()))
    finally:
        for p in procs:
            p.communicate("\n", timeout=60)
    return out


def ensure_inputs(corpora: Path) -> bool:
    if not TREE.is_dir():
        if not corpora.is_dir():
            print(f"no corpora at {corpora}: ../shared/bench/fetch_corpus.py unpacks them")
            return False
        build_tree(corpora, TREE, 100_000)
    if not QUERIES.exists():
        QUERIES.write_text(json.dumps({"queries": queries(20)}))
    return True


def filled(r: redis.Redis, target: int) -> int:
    """Chunks in the kept index, filling it first when it does not hold ``target``."""
    marker = DATA / "filled.json"
    if marker.exists() and json.loads(marker.read_text()).get("chunks") == target:
        return target
    r.flushall()
    corpus = RedisCorpus(r)
    t = time.perf_counter()
    n = fill(corpus, target)
    added = time.perf_counter() - t
    t = time.perf_counter()
    corpus.merge(REPO, everything=True)
    print(
        f"{n:,} chunks added in {added:,.0f} s, compacted in {time.perf_counter() - t:,.0f} s",
        flush=True,
    )
    # Segments a merge replaced stay readable RETIRED_TTL seconds: not part of the index.
    time.sleep(RETIRED_TTL + 1)
    for _ in r.scan_iter(count=10_000):  # a key past its expiry goes when it is looked at
        pass
    before = r.lastsave()
    r.bgsave()
    while r.lastsave() == before or r.info("persistence")["rdb_bgsave_in_progress"]:
        time.sleep(1)
    marker.write_text(json.dumps({"chunks": target}))
    return n


GOALS = {"uss": 400.0, "cold": 1000.0, "p50": 50.0, "redis": 1.2 * 1024}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpora", nargs="?", default=str(Path.home() / "tracehound-corpora"))
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe:
        return probe(args.probe, args.cache)
    if not ensure_inputs(Path(args.corpora)):
        return 2
    # Killed with SIGTERM, still stop the private server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    DATA.mkdir(parents=True, exist_ok=True)
    cache = DATA / "keyword-cache"
    proc, url = start_redis(DATA)
    rows: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    try:
        r = redis.Redis.from_url(url)
        n = filled(r, args.chunks)
        state = RedisCorpus(r).state(REPO)
        used = r.info("memory")["used_memory"] / 2**20
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
        for run in range(args.runs):
            shutil.rmtree(cache, ignore_errors=True)
            (first,) = probes(url, cache, 1)
            warm = probes(url, cache, 2)
            ref = probes(url, None, 2)
            add("new_cold", first["cold"] * 1000)
            add("new_uss", first["uss"])
            for key, group in (("warm", warm), ("ref", ref)):
                add(f"{key}_cold", max(g["cold"] for g in group) * 1000)
                add(f"{key}_p50", pct([t for g in group for t in g["times"]], 0.5) * 1000)
                add(f"{key}_p95", pct([t for g in group for t in g["times"]], 0.95) * 1000)
                for m in ("uss", "pss", "rss"):
                    add(f"{key}_{m}", max(g[m] for g in group))
            print(
                f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rows.items()),
                flush=True,
            )
        files = sum(f.stat().st_size for f in cache.glob("*.seg")) / 2**20
    finally:
        proc.stop()

    def row(label: str, goal: str, measured: str, reference: str) -> None:
        print(f"| {label} | {goal} | {measured} | {reference} |")

    if not args.runs:
        return 0
    print()
    print(
        f"{n:,} chunks in {len(state.segments)} segments; median of {args.runs} runs (range); "
        "reference: the same processes with the segment cache off"
    )
    row("figure", "goal", "measured", "in-run reference")
    row("---", "---", "---", "---")
    seg, text, where = (sizes[k] / 2**20 for k in ("segments", "text", "where"))
    row("Redis used memory, whole instance", f"≤ {GOALS['redis']:,.0f} MiB", f"{used:,.0f} MiB", "")
    row(
        "of which segments / chunk text / chunk locations",
        "",
        f"{seg:,.0f} / {text:,.0f} / {where:,.0f} MiB",
        "",
    )
    row("segment cache files on disk", "", f"{files:,.0f} MiB", "")
    row(
        "USS per process, two at once",
        f"≤ {GOALS['uss']:,.0f} MB",
        fmt(rows["warm_uss"], "MB"),
        fmt(rows["ref_uss"], "MB"),
    )
    row("PSS per process, two at once", "", fmt(rows["warm_pss"], "MB"), fmt(rows["ref_pss"], "MB"))
    row("RSS per process, two at once", "", fmt(rows["warm_rss"], "MB"), fmt(rows["ref_rss"], "MB"))
    row(
        "first keyword query in a new process",
        f"≤ {GOALS['cold']:,.0f} ms",
        fmt(rows["warm_cold"], "ms"),
        fmt(rows["ref_cold"], "ms"),
    )
    row("first query on a new machine (cache written)", "", fmt(rows["new_cold"], "ms"), "")
    row("USS of that first process", "", fmt(rows["new_uss"], "MB"), "")
    row(
        "keyword side of a retrieve, warm p50",
        f"≤ {GOALS['p50']:,.0f} ms",
        fmt(rows["warm_p50"], "ms"),
        fmt(rows["ref_p50"], "ms"),
    )
    row(
        "keyword side of a retrieve, warm p95",
        "",
        fmt(rows["warm_p95"], "ms"),
        fmt(rows["ref_p95"], "ms"),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
