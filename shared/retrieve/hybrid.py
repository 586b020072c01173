"""Hybrid retrieval: Chroma vectors, BM25 and stack frames over the whole corpus, fused per file."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from shared.core.domain import Candidate, ChunkHit, Frame
from shared.core.errors import TracehoundError, TransientError
from shared.intake.frames import PathMapper
from shared.retrieve.fusion import (
    FILE_DECAY,
    RRF_K,
    Ranking,
    group_by_file,
    reciprocal_rank_fusion,
)
from shared.retrieve.keywords import KeywordIndex
from shared.retrieve.query import named_symbols
from shared.retrieve.ranker import LinearModel, learned_order

log = logging.getLogger(__name__)
T = TypeVar("T")

SIGNALS = frozenset({"vector", "bm25", "frames", "symbols"})
# A frame names the failing code outright: its chunk outweighs either retriever's first place,
# so files on the trace come first and vectors and BM25 order them and fill in the rest.
FRAME_WEIGHT = 3.0
MAX_FRAMES = 12
# Vendored third-party code on the trace (requests/packages/urllib3, sklearn/externals) is
# rarely where the bug is; it still counts, after the project's own frames.
VENDORED_WEIGHT = 0.25
# Code defining a name the error mentions (``export_text``, ``LogisticRegressionCV``) counts as
# much as one retriever's vote: a name can be the caller's as well as the culprit's.
SYMBOL_WEIGHT = 1.0
# BM25 counts half the vectors' vote: the leave-one-repo-out rule's choice on 112 dev cases
# with all-MiniLM-L6-v2 (README, *Cross-validated*; with the hashed simulator's embeddings,
# which know no meaning, the folds choose BM25 at 2).
BM25_WEIGHT = 0.5
FRAME_SIGNALS = frozenset({"frames", "vendored"})


@dataclass(frozen=True)
class Fusion:
    """How the signals' rankings become ranked files: a weight per signal in the reciprocal
    rank fusion, its k, and the per-file decay of chunk scores (shared/retrieve/fusion.py).
    ``tracehound eval --cv repo`` chooses among such values by leave-one-repo-out."""

    vector: float = 1.0
    bm25: float = BM25_WEIGHT
    frames: float = FRAME_WEIGHT  # vendored frames count VENDORED_WEIGHT of it
    symbols: float = SYMBOL_WEIGHT
    rrf_k: int = RRF_K
    decay: float = FILE_DECAY
    # Frames only raise files another signal found (a boost), instead of adding their own: a
    # trace through the library's own files then cannot push them above the fixed one. The
    # leave-one-repo-out choice on 76 dev cases and again on 112 (README, *Cross-validated*).
    frames_boost: bool = True

    def weight(self, signal: str) -> float:
        if signal == "vendored":
            return self.frames * VENDORED_WEIGHT
        return float(getattr(self, signal))


def fuse(
    rankings: Sequence[Ranking], fusion: Fusion, prior: Callable[[str], float] | None = None
) -> list[Candidate]:
    """Files ranked from the signals' rankings (each weighted as ``fusion`` says)."""
    found = {h.path for signal, hits in rankings if signal not in FRAME_SIGNALS for h in hits}
    if fusion.frames_boost and found:  # with no other signal (they failed), frames rank alone
        rankings = [
            (signal, [h for h in hits if h.path in found] if signal in FRAME_SIGNALS else hits)
            for signal, hits in rankings
        ]
    fused = reciprocal_rank_fusion(
        [hits for _, hits in rankings],
        k=fusion.rrf_k,
        weights=[fusion.weight(signal) for signal, _ in rankings],
    )
    return group_by_file(fused, decay=fusion.decay, weight=prior)


class VectorSearch(Protocol):
    """The part of a vector index retrieval uses (Chroma's, or the eval's in-memory one)."""

    def query(self, repo: str, vector: Sequence[float], n: int) -> list[ChunkHit]: ...


@runtime_checkable
class ChunkTexts(Protocol):
    """Where chunk texts are kept (the keyword corpus): a vector store may keep none."""

    def texts(self, repo: str, ids: Sequence[str]) -> list[str]: ...


def with_texts(repo: str, hits: list[ChunkHit], source: object) -> list[ChunkHit]:
    """``hits`` with the texts the vector store did not keep read from ``source``; a hit whose
    text is nowhere (its chunk was removed from the corpus, or is not in it yet) is left out:
    there is no code to show for it."""
    missing = [h.chunk_id for h in hits if not h.text]
    if not missing:
        return hits
    texts = source.texts(repo, missing) if isinstance(source, ChunkTexts) else [""] * len(missing)
    found = dict(zip(missing, texts, strict=True))
    kept = [
        h if h.text else h.model_copy(update={"text": found[h.chunk_id]})
        for h in hits
        if h.text or found.get(h.chunk_id)
    ]
    if len(kept) < len(hits):
        left_out = len(hits) - len(kept)
        log.info("retrieve.vector_hits_without_text", extra={"repo": repo, "left_out": left_out})
    return kept


@runtime_checkable
class ChunkLocator(Protocol):
    """What frames need from an index: its paths as a frame mapper (built once per version of
    the index, not per query) and the chunk holding a line."""

    def path_mapper(self, repo: str) -> PathMapper: ...
    def chunks_at(self, repo: str, path: str, line: int | None) -> list[ChunkHit]: ...


def frame_ranking(
    repo: str, frames: Sequence[Frame], locator: ChunkLocator, *, max_frames: int = MAX_FRAMES
) -> tuple[list[ChunkHit], list[ChunkHit]]:
    """Chunks holding the lines of the trace's frames that fall in the repo, nearest the raise
    first: (the project's own frames, vendored frames). Frames outside the repo are ignored."""
    if not frames:
        return [], []
    mapped = locator.path_mapper(repo).map_frames(frames)
    own: list[ChunkHit] = []
    vendored: list[ChunkHit] = []
    seen: set[str] = set()
    for frame in mapped[: max_frames * 2]:
        bucket = vendored if frame.vendored else own
        if len(bucket) >= max_frames:
            continue
        for hit in locator.chunks_at(repo, frame.path, frame.line):
            if hit.chunk_id not in seen:
                seen.add(hit.chunk_id)
                bucket.append(hit)
    return own, vendored


@runtime_checkable
class SymbolLocator(Protocol):
    """What the symbols signal needs: the chunks defining some names."""

    def defining(self, repo: str, names: Sequence[str]) -> list[ChunkHit]: ...


@dataclass
class Retrieved:
    candidates: list[Candidate]
    notes: list[str] = field(default_factory=list)
    own_frames: int = 0  # chunks at frames of the trace in the repo's own (not vendored) code
    rankings: list[Ranking] = field(default_factory=list)  # what was fused (the eval refuses)
    ranked_by: Literal["fusion", "learned"] = "fusion"  # learned: the model ordered them


Run = Callable[[str, str, Callable[[], Any]], Any]


def _located(
    repo: str,
    text: str,
    frames: Sequence[Frame] | None,
    locator: ChunkLocator,
    signals: Collection[str],
    run: Run,
) -> tuple[list[Ranking], int]:
    """Rankings found by location: the chunks at the trace's frames (the repo's own code, then
    vendored copies) and the code defining names the text mentions; and how many chunks the
    repo's own frames hit."""
    out: list[Ranking] = []
    own_frames = 0
    if "frames" in signals and frames is not None:
        ranked = run(
            "frames", "stack frames not used", lambda: frame_ranking(repo, frames, locator)
        )
        if ranked is not None:
            own, vendored = ranked
            own_frames = len(own)
            out += [
                (name, hits) for name, hits in (("frames", own), ("vendored", vendored)) if hits
            ]
    if "symbols" in signals and isinstance(locator, SymbolLocator):
        names = named_symbols(text)
        if names:
            hits = run("symbols", "named symbols not used", lambda: locator.defining(repo, names))
            if hits:
                out.append(("symbols", hits))
    return out, own_frames


def hybrid_retrieve(
    repo: str,
    text: str,
    vector: Sequence[float] | None,
    *,
    vectors: VectorSearch,
    keywords: KeywordIndex,
    depth: int = 50,
    rrf_k: int = 60,
    degrade: bool = False,
    frames: Sequence[Frame] | None = None,
    locator: ChunkLocator | None = None,
    signals: Collection[str] = SIGNALS,
    frame_weight: float = FRAME_WEIGHT,
    prior: Callable[[str], float] | None = None,
    fusion: Fusion | None = None,
    ranker: LinearModel | None = None,
    error_text: str | None = None,
) -> Retrieved:
    """Dense, BM25, stack-frame and named-symbol candidates fused by reciprocal rank, then
    grouped per file (weighted by ``prior``, e.g. :class:`shared.retrieve.priors.PathPrior`).

    ``frames``: the trace's, as intake read them (none: no frame signal; the text is never
    parsed for them); they and the code defining names the text mentions are located through
    ``locator``, by default
    the keyword index when it can. ``signals`` picks which of vector, bm25, frames and symbols
    take part (the eval compares them).

    ``ranker``: a learned model (shared/retrieve/ranker.py) puts the fused first files in its
    order, reading ``error_text`` (shared/retrieve/features.py ``error_text``; default: the
    query) for the files' names; without one, or when it cannot score, the fusion's order
    stands (``ranked_by`` says which).

    A retriever failing for good (PermanentError) is left out and noted; a transient failure is
    raised for the task to retry, except with ``degrade`` (the last attempt), where it is noted
    too, so the error still reaches the on-call engineer with whatever could be found.
    """
    rankings: list[Ranking] = []
    notes: list[str] = []
    own_frames = 0

    def run(signal: str, failed: str, fn: Callable[[], T]) -> T | None:
        """One retriever; a failure it cannot wait out is noted and the others go on."""
        try:
            return fn()
        except TracehoundError as exc:
            if isinstance(exc, TransientError) and not degrade:
                raise
            log.warning(f"retrieve.{signal}_failed", extra={"repo": repo, "reason": str(exc)})
            notes.append(f"retrieval: {failed} ({exc})")
            return None

    if locator is None and isinstance(keywords, ChunkLocator):
        locator = keywords
    if locator is not None:
        located, own_frames = _located(repo, text, frames, locator, signals, run)
        rankings += located
    if vector is not None and "vector" in signals:
        hits = run(
            "vector",
            "vector search failed",
            lambda: with_texts(repo, vectors.query(repo, vector, depth), keywords),
        )
        if hits is not None:
            rankings.append(("vector", hits))
    if "bm25" in signals:
        hits = run("keyword", "keyword search failed", lambda: keywords.search(repo, text, depth))
        if hits is not None:
            rankings.append(("bm25", hits))
    if not rankings:
        notes.append("retrieval: failed, no code context was found")
        return Retrieved([], notes)
    fusion = fusion or Fusion(frames=frame_weight, rrf_k=rrf_k)
    fused = fuse(rankings, fusion, prior)
    if ranker is None:
        return Retrieved(fused, notes, own_frames, rankings)
    try:
        ordered = learned_order(ranker, rankings, fused, error_text or text, prior)
    except ValueError as exc:  # a model that cannot score these files: the fusion's order
        log.warning("retrieve.ranker_failed", extra={"repo": repo, "reason": str(exc)[:300]})
        return Retrieved(fused, notes, own_frames, rankings)
    return Retrieved(ordered, notes, own_frames, rankings, ranked_by="learned")
