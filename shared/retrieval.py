"""Hybrid retrieval: Chroma vectors and BM25 over the whole corpus, fused, grouped per file."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from shared.domain import Candidate, ChunkHit
from shared.errors import TracehoundError, TransientError
from shared.fusion import group_by_file, reciprocal_rank_fusion
from shared.keywords import KeywordIndex
from shared.vectors import VectorIndex

log = logging.getLogger(__name__)


@dataclass
class Retrieved:
    candidates: list[Candidate]
    notes: list[str] = field(default_factory=list)


def hybrid_retrieve(
    repo: str,
    text: str,
    vector: Sequence[float] | None,
    *,
    vectors: VectorIndex,
    keywords: KeywordIndex,
    depth: int = 50,
    rrf_k: int = 60,
    degrade: bool = False,
) -> Retrieved:
    """Dense and BM25 candidates fused by reciprocal rank, then one candidate per file.

    A retriever failing for good (PermanentError) is left out and noted; a transient failure is
    raised for the task to retry, except with ``degrade`` (the last attempt), where it is noted
    too, so the error still reaches the on-call engineer with whatever could be found.
    """
    rankings: list[list[ChunkHit]] = []
    notes: list[str] = []
    if vector is not None:
        try:
            rankings.append(vectors.query(repo, vector, depth))
        except TracehoundError as exc:
            if isinstance(exc, TransientError) and not degrade:
                raise
            log.warning("retrieve.vector_failed", extra={"repo": repo, "reason": str(exc)})
            notes.append(f"retrieval: vector search failed ({exc})")
    try:
        rankings.append(keywords.search(repo, text, depth))
    except TracehoundError as exc:
        if isinstance(exc, TransientError) and not degrade:
            raise
        log.warning("retrieve.keyword_failed", extra={"repo": repo, "reason": str(exc)})
        notes.append(f"retrieval: keyword search failed ({exc})")
    if not rankings:
        notes.append("retrieval: failed, no code context was found")
        return Retrieved([], notes)
    fused = reciprocal_rank_fusion(rankings, k=rrf_k)
    return Retrieved(group_by_file(fused), notes)
