"""Retrieval evaluation: bug-localization cases against their projects' source, per mode.

``tracehound eval`` and ``benchmarks/retrieval.py`` run this. Each case pairs an error report
with the files its fix changed; the case's corpus is indexed in process through the pipeline's
own chunking, tokenizing, query building, frame mapping and fusion (only the stores differ: a
numpy matrix instead of Chroma, an in-memory BM25Okapi instead of the Redis corpus), then every
mode ranks files and file-level Recall@k and MRR are computed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi

from shared.core.domain import Candidate, Chunk, ChunkHit, ErrorEvent
from shared.core.errors import PermanentError
from shared.devtools.calibration import suggest_threshold
from shared.devtools.followup import LOOKUP_WEIGHT, Lookups, run_lookups, with_lookups
from shared.index.chunking import CHUNKER_VERSION, chunk_file, defined_names, embedding_text
from shared.index.reindex import IndexReport, collect
from shared.index.tokens import tokenize
from shared.index.vectors import VectorStore
from shared.intake.events import from_text
from shared.intake.frames import PathMapper
from shared.intake.trace import with_trace
from shared.models.embedder import Embedder
from shared.models.reranker import Reranker, rerank_candidates
from shared.retrieve.evidence import lexical_overlap
from shared.retrieve.features import error_text
from shared.retrieve.fusion import Ranking
from shared.retrieve.hybrid import Retrieved, VectorSearch, hybrid_retrieve
from shared.retrieve.keywords import MAX_DEFINITIONS, chunks_covering, defining, symbol_table
from shared.retrieve.query import compose_query, named_symbols
from shared.retrieve.ranker import LinearModel

log = logging.getLogger(__name__)

KS = (1, 3, 5, 10)
BASE_MODES = ("vector", "bm25", "frames", "symbols", "hybrid", "hybrid+frames", "all", "learned")
MODE_SIGNALS: dict[str, frozenset[str]] = {
    "vector": frozenset({"vector"}),
    "bm25": frozenset({"bm25"}),
    "frames": frozenset({"frames"}),
    "symbols": frozenset({"symbols"}),
    "hybrid": frozenset({"vector", "bm25"}),
    "hybrid+frames": frozenset({"vector", "bm25", "frames"}),
    "all": frozenset({"vector", "bm25", "frames", "symbols"}),  # fused: the reference
    # the same signals, the fused first files reordered by the learned ranker: what the
    # pipeline runs with TRACEHOUND_RANKER=learned (the default)
    "learned": frozenset({"vector", "bm25", "frames", "symbols"}),
}
LEARNED_MODE = "learned"
RERANK_SUFFIX = "+rerank"
# A mode followed by the stand-in model's lookups (shared/devtools/followup.py): "all+followup".
FOLLOWUP_SUFFIX = "+followup"


def base_mode(mode: str) -> str:
    return mode.removesuffix(RERANK_SUFFIX).removesuffix(FOLLOWUP_SUFFIX)


@dataclass(frozen=True)
class Case:
    id: str
    corpus: str  # <pypi_name>-<pypi_version>, or <owner>__<name>@<commit[:12]> (a git artifact)
    query: str
    gold: tuple[str, ...]
    kind: str = ""
    language: str = "python"


def corpus_of(raw: dict[str, Any]) -> str:
    """Where a case's corpus is unpacked: its sdist's name and version (the Python cases), or
    its repository at the fix's parent commit (benchmarks/cases/fetch_git_corpus.py)."""
    artifact = raw.get("artifact")
    if isinstance(artifact, dict) and artifact.get("type") == "git":
        return f"{str(artifact['repo']).replace('/', '__')}@{str(artifact['commit'])[:12]}"
    return f"{raw['pypi_name']}-{raw['pypi_version']}"


def load_cases(path: Path, *, limit: int | None = None) -> list[Case]:
    cases: list[Case] = []
    for n, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            cases.append(
                Case(
                    id=str(raw["id"]),
                    corpus=corpus_of(raw),
                    query=str(raw["query"]),
                    gold=tuple(raw["gold_files"]),
                    kind=str(raw.get("query_kind", "")),
                    language=str(raw.get("language", "python")),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{n}: not a case ({exc})") from exc
        if limit is not None and len(cases) >= limit:
            break
    return cases


# ---------------------------------------------------------------------------------------------
# Metrics


def recall_at(ranked: Sequence[str], gold: Collection[str], k: int) -> float:
    """|gold ∩ top-k| / |gold|."""
    if not gold:
        return 0.0
    return len(set(ranked[:k]) & set(gold)) / len(set(gold))


def reciprocal_rank(ranked: Sequence[str], gold: Collection[str]) -> float:
    """1 / rank of the first gold file; 0 when none was ranked."""
    for rank, path in enumerate(ranked, start=1):
        if path in gold:
            return 1.0 / rank
    return 0.0


def summarize(per_case: Iterable[tuple[Sequence[str], Collection[str]]]) -> dict[str, float]:
    rows = list(per_case)
    out: dict[str, float] = {"cases": float(len(rows))}
    for k in KS:
        out[f"recall@{k}"] = sum(recall_at(r, g, k) for r, g in rows) / len(rows) if rows else 0.0
    out["mrr"] = sum(reciprocal_rank(r, g) for r, g in rows) / len(rows) if rows else 0.0
    return out


# ---------------------------------------------------------------------------------------------
# Embedding cache


class EmbeddingCache:
    """Chunk vectors on disk, keyed by model, chunker version and the embedded text.

    The text holds the chunk's path, so a file unchanged between two releases costs nothing the
    second time, and a chunker or model change never reuses stale vectors.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path)
        self._db.execute("CREATE TABLE IF NOT EXISTS vec (key TEXT PRIMARY KEY, v BLOB)")

    @staticmethod
    def key(model: str, text: str) -> str:
        raw = f"{model}\0{CHUNKER_VERSION}\0{text}".encode("utf-8", errors="replace")
        return hashlib.sha1(raw).hexdigest()

    def get(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        for i in range(0, len(keys), 900):  # SQLite's bound-parameter limit
            part = keys[i : i + 900]
            marks = ",".join("?" * len(part))
            for key, blob in self._db.execute(
                f"SELECT key, v FROM vec WHERE key IN ({marks})", part
            ):
                found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put(self, items: Iterable[tuple[str, np.ndarray]]) -> None:
        self._db.executemany(
            "INSERT OR REPLACE INTO vec VALUES (?, ?)",
            ((k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items),
        )
        self._db.commit()

    def close(self) -> None:
        self._db.close()


def embed_chunks(
    chunks: Sequence[Chunk],
    embedder: Embedder,
    cache: EmbeddingCache | None,
    *,
    batch: int = 256,
    on_progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """A (n, dim) float32 matrix of L2-normalised chunk vectors, cached ones reused."""
    texts = [embedding_text(c) for c in chunks]
    keys = [EmbeddingCache.key(embedder.model, t) for t in texts]
    have = cache.get(keys) if cache else {}
    todo = sorted({k: i for i, k in enumerate(keys) if k not in have}.values())
    for n in range(0, len(todo), batch):
        part = todo[n : n + batch]
        vectors = embedder.embed([texts[i] for i in part])
        fresh = [
            (keys[i], np.asarray(v, dtype=np.float32)) for i, v in zip(part, vectors, strict=True)
        ]
        have.update(fresh)
        if cache:
            cache.put(fresh)
        if on_progress:
            on_progress(min(n + batch, len(todo)), len(todo))
    if not chunks:
        return np.zeros((0, 1), dtype=np.float32)
    matrix = np.vstack([have[k] for k in keys]).astype(np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


# ---------------------------------------------------------------------------------------------
# In-process index over one corpus


class MemoryIndex:
    """Vector, keyword and chunk-locating index of one corpus, held in memory.

    Implements the ``VectorIndex.query``, ``KeywordIndex.search`` and ``ChunkLocator`` parts the
    retrieval stage calls; BM25 documents are tokenized exactly as the Redis corpus does.
    """

    def __init__(self, chunks: Sequence[Chunk], vectors: np.ndarray | None) -> None:
        self.chunks = list(chunks)
        self.vectors = vectors
        tokens = [tokenize(f"{c.path}\n{c.text}") for c in self.chunks]
        self.bm25 = BM25Okapi(tokens) if tokens else None
        self.by_path: dict[str, list[int]] = {}
        for i, c in enumerate(self.chunks):
            self.by_path.setdefault(c.path, []).append(i)
        self.symbols = symbol_table([defined_names(c) for c in self.chunks])
        self._memo: dict[tuple[str, str, int], list[ChunkHit]] = {}
        self._mapper: PathMapper | None = None
        self._texts: dict[str, str] | None = None

    def texts(self, repo: str, ids: Sequence[str]) -> list[str]:
        """As the Redis corpus answers (the texts a vector store did not keep)."""
        if self._texts is None:
            self._texts = {c.id: c.text for c in self.chunks}
        return [self._texts.get(i, "") for i in ids]

    def _hit(self, i: int, score: float) -> ChunkHit:
        c = self.chunks[i]
        return ChunkHit(
            chunk_id=c.id,
            path=c.path,
            start_line=c.start_line,
            end_line=c.end_line,
            text=c.text,
            score=score,
        )

    @staticmethod
    def _top(scores: np.ndarray, n: int, *, positive: bool) -> list[tuple[int, float]]:
        n = min(n, len(scores))
        if n <= 0:
            return []
        top = np.argpartition(-scores, n - 1)[:n]
        ranked = sorted(((int(i), float(scores[i])) for i in top), key=lambda p: (-p[1], p[0]))
        return [(i, s) for i, s in ranked if s > 0 or not positive]

    def query(self, repo: str, vector: Sequence[float], n: int) -> list[ChunkHit]:
        if self.vectors is None or not len(self.chunks):
            return []
        key = ("v", hashlib.sha1(np.asarray(vector, np.float32).tobytes()).hexdigest(), n)
        if key not in self._memo:
            scores = self.vectors @ np.asarray(vector, dtype=np.float32)
            self._memo[key] = [self._hit(i, s) for i, s in self._top(scores, n, positive=False)]
        return self._memo[key]

    def search(self, repo: str, text: str, n: int) -> list[ChunkHit]:
        key = ("k", text, n)
        if key not in self._memo:
            query = tokenize(text)
            if self.bm25 is None or not query:
                return []
            scores = np.asarray(self.bm25.get_scores(query))
            self._memo[key] = [self._hit(i, s) for i, s in self._top(scores, n, positive=True)]
        return self._memo[key]

    def path_mapper(self, repo: str) -> PathMapper:
        if self._mapper is None:
            self._mapper = PathMapper(self.by_path.keys())
        return self._mapper

    def chunks_at(self, repo: str, path: str, line: int | None) -> list[ChunkHit]:
        spans = [
            (self.chunks[i].start_line, self.chunks[i].end_line, i)
            for i in self.by_path.get(path, [])
        ]
        return [self._hit(i, 0.0) for i in chunks_covering(spans, line)]

    def defining(
        self, repo: str, names: Sequence[str], *, max_definitions: int = MAX_DEFINITIONS
    ) -> list[ChunkHit]:
        found = defining(self.symbols, names, max_definitions=max_definitions)
        return [self._hit(i, 0.0) for i in found]

    def chunks_of(self, repo: str, path: str) -> list[ChunkHit]:
        ordered = sorted(self.by_path.get(path, []), key=lambda i: self.chunks[i].start_line)
        return [self._hit(i, 0.0) for i in ordered]


def load_corpus(
    root: Path,
    *,
    size: int = 60,
    overlap: int = 10,
    max_chars: int = 6000,
    max_bytes: int = 1_000_000,
) -> list[Chunk]:
    """Every indexable file under ``root`` chunked as the indexer chunks it."""
    report = IndexReport(repo=root.name)
    chunks: list[Chunk] = []
    for f in collect(root, max_bytes=max_bytes, report=report):
        chunks.extend(
            chunk_file(root.name, f.path, f.text, size=size, overlap=overlap, max_chars=max_chars)
        )
    return chunks


# ---------------------------------------------------------------------------------------------
# Running


# A case's signals as mode ``all`` retrieved them, and the symbols signal per symbol cap.
# A case's lookups by the stand-in model (followup.py), given retrieval's candidates and a prior.
Follow = Callable[[Sequence[Candidate], Callable[[str], float] | None], Lookups]
# (the case, its rankings, the symbols signal per cap, its lookups, the error's text as the
# ranker's features read it)
OnCase = Callable[[Case, Sequence[Ranking], dict[int, list[ChunkHit]], Follow, str], None]


@dataclass
class EvalReport:
    embedder: str
    modes: list[str]
    summary: dict[str, dict[str, float]] = field(default_factory=dict)
    cases: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    # +rerank modes: the TRACEHOUND_MIN_RELEVANCE these cases suggest (shared.devtools.calibration)
    calibration: dict[str, dict[str, float | int] | None] = field(default_factory=dict)
    # Modes without a reranker: the TRACEHOUND_MIN_OVERLAP suggested by the cases none of whose
    # frames fall in the repo's own code (the only ones the overlap decides for)
    overlap_calibration: dict[str, dict[str, float | int] | None] = field(default_factory=dict)
    # language -> mode -> the summary of that language's cases alone
    by_language: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "embedder": self.embedder,
            "chunker": CHUNKER_VERSION,
            "modes": self.modes,
            "summary": self.summary,
            "by_language": self.by_language,
            "calibration": self.calibration,
            "overlap_calibration": self.overlap_calibration,
            "skipped": self.skipped,
            "cases": self.cases,
        }


@dataclass(frozen=True)
class Stages:
    """What ranking one case after retrieval needs: its corpus, event and query, the index,
    and the reranker of +rerank modes."""

    corpus: str
    event: ErrorEvent
    query: str
    index: MemoryIndex
    reranker: Reranker | None
    prior: Callable[[str], float] | None = None


def _ranked(
    mode: str,
    candidates: list[Candidate],
    gold: Sequence[str],
    at: Stages,
    *,
    shown: int,
    rounds: int,
    budget: int,
    rrf_k: int,
    weight: float,
) -> tuple[list[Candidate], list[str], dict[str, Any], float | None]:
    """(candidates, ranked files, row fields, recall over the files seen) after a mode's
    rerank or simulated follow-up."""
    if mode.endswith(RERANK_SUFFIX) and at.reranker is not None and candidates:
        candidates = rerank_candidates(at.query, candidates, at.reranker, top_k=len(candidates))
    ranked = [c.path for c in candidates]
    if not mode.endswith(FOLLOWUP_SUFFIX):
        return candidates, ranked, {}, None
    got = run_lookups(
        at.corpus, at.event, at.query, candidates, at.index,
        shown=shown, rounds=rounds, budget=budget, prior=at.prior,
    )  # fmt: skip
    seen = [*ranked[:shown], *got.found]
    extra = {"lookups": got.calls, "looked_up_files": got.found[:20]}
    followed = with_lookups(ranked, got.specific, weight=weight, rrf_k=rrf_k)
    return candidates, followed, extra, recall_at(seen, gold, len(seen))


def _add_seen(report: EvalReport, seen_by_mode: dict[str, list[float | None]]) -> None:
    """+followup modes: recall over the shown files plus everything the lookups returned."""
    for mode, seen_recalls in seen_by_mode.items():
        known = [r for r in seen_recalls if r is not None]
        if known:
            report.summary[mode]["recall@seen"] = sum(known) / len(known)


def _need_ranker(modes: Sequence[str], ranker: LinearModel | None) -> None:
    if ranker is None and any(base_mode(m) == LEARNED_MODE for m in modes):
        raise ValueError("the learned mode needs a ranker model")


def run_eval(
    cases: Sequence[Case],
    corpora: Path,
    *,
    embedder: Embedder,
    modes: Sequence[str] = BASE_MODES,
    reranker: Reranker | None = None,
    cache: EmbeddingCache | None = None,
    depth: int = 50,
    rrf_k: int = 60,
    query_prefix: str = "",
    prior: Callable[[str], float] | None = None,
    shown: int = 5,
    keep_files: int = 20,
    on_event: Callable[[str], None] | None = None,
    on_case: OnCase | None = None,
    collect_depth: int | None = None,
    collect_caps: Sequence[int] = (),
    followup_rounds: int = 3,
    followup_budget: int = 6000,
    followup_weight: float = LOOKUP_WEIGHT,
    vector_store: VectorStore | None = None,
    ranker: LinearModel | None = None,
) -> EvalReport:
    """Every case's ranked files per mode; cases are grouped so each corpus is indexed once.

    ``ranker``: the model the ``learned`` mode orders with (that mode needs one).

    ``on_case`` receives each case's signals as mode ``all`` retrieves them (crossval.py),
    retrieved ``collect_depth`` deep (default: ``depth``), and the symbols signal's chunks
    under each symbol cap of ``collect_caps``.

    ``vector_store``: the vector signal asks this store (Chroma, pgvector; each corpus written
    to it under the corpus's name, once) instead of the exact in-memory search, so the stores'
    approximate indexes can be compared on the same cases and the same embeddings.

    With a reranker, each +rerank mode also suggests a minimum relevance: the best rerank
    score that separates cases whose first ``shown`` files hold the fix from those that do not.
    """
    say = on_event or (lambda _msg: None)
    _need_ranker(modes, ranker)
    report = EvalReport(embedder=embedder.model, modes=list(modes))
    ranked_by_mode: dict[str, list[tuple[list[str], tuple[str, ...]]]] = {m: [] for m in modes}
    relevance_by_mode: dict[str, list[tuple[float, bool]]] = {}
    overlap_by_mode: dict[str, list[tuple[float, bool]]] = {}
    seen_by_mode: dict[str, list[float | None]] = {}
    by_corpus: dict[str, list[Case]] = {}
    for case in cases:
        by_corpus.setdefault(case.corpus, []).append(case)
    for corpus_name, group in by_corpus.items():
        root = corpora / corpus_name
        if not root.is_dir():
            for case in group:
                report.skipped.append({"id": case.id, "reason": f"corpus missing: {root}"})
            say(f"skip {corpus_name}: corpus missing ({len(group)} cases)")
            continue
        chunks = load_corpus(root)
        needs_vectors = any("vector" in MODE_SIGNALS[base_mode(m)] for m in modes)
        vectors = None
        if needs_vectors:

            def progress(done: int, total: int, name: str = corpus_name) -> None:
                say(f"embedding {name}: {done}/{total}")

            vectors = embed_chunks(chunks, embedder, cache, on_progress=progress)
        index = MemoryIndex(chunks, vectors)
        say(f"indexed {corpus_name}: {len(index.by_path)} files, {len(chunks)} chunks")
        searcher: VectorSearch = index
        if vector_store is not None and vectors is not None:
            # The store's repo names the model too: another embedder's vectors of the same
            # chunks (same ids) must never answer this one's queries.
            stored = store_repo(corpus_name, embedder.model)
            fill_store(vector_store, stored, chunks, vectors)
            searcher = StoreSearch(vector_store, stored)
        mapper = index.path_mapper(corpus_name)
        for case in group:
            # A bug report is an error by definition, whatever words its first line holds.
            event = from_text(
                case.query, origin="sent", service=corpus_name, repo=corpus_name, level="ERROR"
            )
            assert isinstance(event, ErrorEvent)
            event = with_trace(event)  # what intake does before the chain
            composed = compose_query(event)
            query = composed.text
            vector = embedder.embed([query_prefix + query])[0] if needs_vectors else None
            frames = mapper.map_frames(composed.frames)
            row: dict[str, Any] = {
                "id": case.id,
                "corpus": corpus_name,
                "kind": case.kind,
                "language": case.language,
                "gold": list(case.gold),
                "missing_gold": [g for g in case.gold if g not in index.by_path],
                "query": query,
                "frames": [f"{f.path}:{f.line} {f.function}" for f in frames],
                "modes": {},
            }
            for mode in modes:
                base = base_mode(mode)
                found = hybrid_retrieve(
                    corpus_name,
                    query,
                    vector,
                    vectors=searcher,
                    keywords=index,
                    locator=index,
                    depth=depth,
                    rrf_k=rrf_k,
                    signals=MODE_SIGNALS[base],
                    prior=prior,
                    frames=composed.frames,
                    ranker=ranker if base == LEARNED_MODE else None,
                    error_text=error_text(event),
                )
                again = partial(
                    hybrid_retrieve, corpus_name, query, vector, vectors=searcher, keywords=index,
                    locator=index, rrf_k=rrf_k, signals=MODE_SIGNALS[base], prior=prior,
                    frames=composed.frames,
                )  # fmt: skip
                follow = partial(
                    _follow, corpus_name, event, query, index, shown,
                    followup_rounds, followup_budget,
                )  # fmt: skip
                _hand_signals(
                    on_case, mode, case, found.rankings, again, depth, collect_depth,
                    partial(_by_cap, index, query, collect_caps), follow, error_text(event),
                )  # fmt: skip
                candidates, ranked, extra, seen_recall = _ranked(
                    mode,
                    found.candidates,
                    case.gold,
                    Stages(corpus_name, event, query, index, reranker, prior),
                    shown=shown,
                    rounds=followup_rounds,
                    budget=followup_budget,
                    rrf_k=rrf_k,
                    weight=followup_weight,
                )
                seen_by_mode.setdefault(mode, []).append(seen_recall)
                ranked_by_mode[mode].append((ranked, case.gold))
                row["modes"][mode] = {
                    "files": ranked[:keep_files],
                    "recall@5": recall_at(ranked, case.gold, 5),
                    "rr": reciprocal_rank(ranked, case.gold),
                    "own_frames": found.own_frames,
                    **extra,
                    **_fell_back(base, found, case.id, say),
                }
                if candidates and not mode.endswith(RERANK_SUFFIX):
                    overlap = lexical_overlap(query, candidates[0])
                    row["modes"][mode]["overlap"] = round(overlap, 4)
                    if not found.own_frames:
                        held = recall_at(ranked, case.gold, shown) > 0
                        overlap_by_mode.setdefault(mode, []).append((overlap, held))
                best = candidates[0].rerank_score if candidates else None
                if best is not None:
                    held = recall_at(ranked, case.gold, shown) > 0
                    score = best  # a relevance in 0..1 (shared/models/reranker.py)
                    relevance_by_mode.setdefault(mode, []).append((score, held))
                    row["modes"][mode]["best_relevance"] = score
            report.cases.append(row)
    report.summary = {m: summarize(ranked_by_mode[m]) for m in modes}
    report.by_language = language_summaries(report.cases, modes)
    _add_seen(report, seen_by_mode)
    for mode, points in relevance_by_mode.items():
        suggested = suggest_threshold(points)
        report.calibration[mode] = suggested.to_json() if suggested else None
    for mode, points in overlap_by_mode.items():
        suggested = suggest_threshold(points)
        report.overlap_calibration[mode] = suggested.to_json() if suggested else None
    return report


def store_repo(corpus: str, model: str) -> str:
    """The repo a corpus's vectors by ``model`` are written to in a vector store."""
    return f"{corpus}@{model}"


@dataclass(frozen=True)
class StoreSearch:
    """A vector store searched for one stored repo, whatever repo retrieval asks for."""

    store: VectorStore
    repo: str

    def query(self, repo: str, vector: Sequence[float], n: int) -> list[ChunkHit]:
        return self.store.query(self.repo, vector, n)


def fill_store(
    store: VectorStore, corpus: str, chunks: Sequence[Chunk], vectors: np.ndarray
) -> int:
    """Write the corpus's chunks that ``store`` lacks (by id); returns how many. A store that
    holds more than the corpus (another chunker's chunks) is refused: it would be measured."""
    held = store.existing_ids(corpus, [c.id for c in chunks])
    missing = [i for i, c in enumerate(chunks) if c.id not in held]
    if missing:
        store.bulk_load(corpus, [chunks[i] for i in missing], vectors[missing].tolist())
    if store.count(corpus) != len(chunks):
        raise PermanentError(
            f"the vector store holds {store.count(corpus)} chunks of {corpus}, the corpus "
            f"{len(chunks)}: measure on an empty store (another chunker's chunks are there)"
        )
    return len(missing)


def _fell_back(
    base: str, found: Retrieved, case_id: str, say: Callable[[str], None]
) -> dict[str, str]:
    """The learned mode's case the ranker could not score (the fusion's order is counted):
    said, and marked in the report."""
    if base != LEARNED_MODE or not found.candidates or found.ranked_by == "learned":
        return {}
    say(f"{case_id}: the ranker could not score; counted in the fusion's order")
    return {"ranked_by": found.ranked_by}


def _hand_signals(
    on_case: OnCase | None,
    mode: str,
    case: Case,
    rankings: Sequence[Ranking],
    again: Callable[..., Any],
    depth: int,
    collect_depth: int | None,
    by_cap: Callable[[], dict[int, list[ChunkHit]]],
    follow: Follow,
    text: str,
) -> None:
    """The signals the pipeline fuses (mode ``all``) for crossval.py: as retrieved, or
    retrieved ``again`` ``collect_depth`` deep; how to run the case's lookups; the error's
    text as the ranker reads it."""
    if on_case is None or mode != "all":
        return
    if collect_depth is not None and collect_depth != depth:
        rankings = again(depth=collect_depth).rankings
    on_case(case, rankings, by_cap(), follow, text)


def _follow(
    repo: str,
    event: ErrorEvent,
    query: str,
    index: MemoryIndex,
    shown: int,
    rounds: int,
    budget: int,
    candidates: Sequence[Candidate],
    prior: Callable[[str], float] | None,
) -> Lookups:
    return run_lookups(
        repo, event, query, candidates, index, shown=shown, rounds=rounds, budget=budget,
        prior=prior,
    )  # fmt: skip


def _by_cap(index: MemoryIndex, query: str, caps: Sequence[int]) -> dict[int, list[ChunkHit]]:
    """The symbols signal's chunks under each symbol cap (for crossval.py)."""
    names = named_symbols(query)
    return {cap: index.defining("", names, max_definitions=cap) for cap in caps}


class SimulatorEmbedder:
    """The Ollama simulator's hashed token embedding, in process: no model, no server (CI)."""

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.model = f"simulator-hashed-{dim}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        from shared.devtools.simulators.ollama import hashed_embedding

        return [hashed_embedding(t, self.dim) for t in texts]


def make_embedder(name: str, *, max_seq_length: int | None = None) -> Embedder:
    """``simulator`` or ``sentence-transformers`` (the eval extra, all-MiniLM-L6-v2, offline)."""
    if name == "simulator":
        return SimulatorEmbedder()
    if name == "sentence-transformers":
        from shared.devtools.st_embedder import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(max_seq_length=max_seq_length)
    raise ValueError(f"unknown embedder {name!r}: simulator or sentence-transformers")


def render_table(report: EvalReport) -> Any:
    """A rich table: one row per mode, Recall@k and MRR columns."""
    from rich.table import Table

    n = int(max((s.get("cases", 0) for s in report.summary.values()), default=0))
    table = Table(title=f"retrieval on {n} cases (embedder {report.embedder})")
    table.add_column("mode")
    for k in KS:
        table.add_column(f"R@{k}", justify="right")
    table.add_column("MRR", justify="right")
    for mode in report.modes:
        s = report.summary.get(mode, {})
        table.add_row(
            mode, *(f"{s.get(f'recall@{k}', 0.0):.3f}" for k in KS), f"{s.get('mrr', 0.0):.3f}"
        )
    return table


def language_summaries(
    rows: Sequence[dict[str, Any]], modes: Sequence[str]
) -> dict[str, dict[str, dict[str, float]]]:
    """Each language's cases summarized apart (the per-case rows of a report)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for language in sorted({str(r.get("language", "python")) for r in rows}):
        mine = [r for r in rows if str(r.get("language", "python")) == language]
        out[language] = {
            m: summarize((r["modes"][m]["files"], r["gold"]) for r in mine if m in r["modes"])
            for m in modes
        }
    return out


def language_table(report: EvalReport, mode: str = "all") -> Any:
    """A rich table: one row per language (``mode``'s R@1, R@5, MRR and the case count)."""
    from rich.table import Table

    table = Table(title=f"mode {mode} per language (embedder {report.embedder})")
    for name in ("language", "cases", "R@1", "R@5", "MRR"):
        table.add_column(name, justify="left" if name == "language" else "right")
    for language, by_mode in report.by_language.items():
        s = by_mode.get(mode, {})
        table.add_row(
            language,
            str(int(s.get("cases", 0))),
            f"{s.get('recall@1', 0.0):.3f}",
            f"{s.get('recall@5', 0.0):.3f}",
            f"{s.get('mrr', 0.0):.3f}",
        )
    return table


def calibration_lines(report: EvalReport) -> list[str]:
    """One line per +rerank mode: the TRACEHOUND_MIN_RELEVANCE its cases suggest."""
    lines = []
    for mode, c in report.calibration.items():
        if c is None:
            lines.append(f"{mode}: no threshold suggested (every case hit, or every case missed)")
            continue
        lines.append(
            f"{mode}: TRACEHOUND_MIN_RELEVANCE={c['threshold']:.3f} flags "
            f"{c['misses_flagged']:.0%} of the {c['misses']} cases whose shown files miss the "
            f"fix and {c['hits_flagged']:.0%} of the {c['hits']} that hold it"
        )
    for mode, c in report.overlap_calibration.items():
        if mode != "all" and "all" in report.overlap_calibration:
            continue  # the pipeline runs "all"; other modes are in the JSON report
        if c is None:
            lines.append(f"{mode}: no TRACEHOUND_MIN_OVERLAP suggested (too few kinds of case)")
            continue
        lines.append(
            f"{mode}: TRACEHOUND_MIN_OVERLAP={c['threshold']:.3f} flags "
            f"{c['misses_flagged']:.0%} of the {c['misses']} cases without an in-repo frame "
            f"whose shown files miss the fix and {c['hits_flagged']:.0%} of the {c['hits']} "
            "that hold it"
        )
    return lines
