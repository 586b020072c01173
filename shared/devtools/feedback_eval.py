"""``tracehound eval --feedback``: retrieval measured on the team's own incidents, live.

The cases are the on-call's Right file / Wrong file answers (shared/notify/feedback.py). Each
is searched exactly as the retrieve stage searches: the query built from the event, embedded
by the deployed embedding model, ``hybrid_retrieve`` over the deployed Chroma collection and
the repo's BM25 corpus in Redis, the same path prior, then the reranker when one is set.
Recall@k and MRR are reported per service; the thresholds that separate the cases whose shown
files held the confirmed file from those that did not are suggested as
``TRACEHOUND_MIN_RELEVANCE`` (with a reranker) and ``TRACEHOUND_MIN_OVERLAP`` (without),
through the same calibration as the benchmark eval (shared/devtools/calibration.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from shared.core.domain import ErrorEvent
from shared.core.errors import TracehoundError
from shared.devtools.calibration import suggest_threshold
from shared.devtools.eval import EvalReport, recall_at, reciprocal_rank, summarize
from shared.intake.events import from_text
from shared.intake.trace import with_trace
from shared.models.embedder import Embedder
from shared.models.reranker import Reranker, rerank_candidates
from shared.retrieve.evidence import lexical_overlap
from shared.retrieve.hybrid import VectorSearch, hybrid_retrieve
from shared.retrieve.keywords import KeywordIndex
from shared.retrieve.query import compose_query

log = logging.getLogger(__name__)

ALL = "all"  # the row over every service (and the key the suggestions are printed under)


def run_feedback_eval(
    cases: Sequence[dict[str, Any]],
    *,
    vectors: VectorSearch,
    keywords: Callable[[str], KeywordIndex],  # repo -> its live keyword index
    embedder: Embedder | None,
    query_prefix: str = "",
    reranker: Reranker | None = None,
    depth: int = 50,
    rrf_k: int = 60,
    prior: Callable[[str], float] | None = None,
    shown: int = 5,
) -> EvalReport:
    """Every labelled case ranked on the live index; one summary row per service and ``all``."""
    rows: dict[str, list[tuple[list[str], tuple[str, ...]]]] = {}
    relevance_points: list[tuple[float, bool]] = []
    overlap_points: list[tuple[float, bool]] = []
    report = EvalReport(embedder=getattr(embedder, "model", "none"), modes=[])
    for case in cases:
        repo = str(case.get("repo") or case["pypi_name"])
        service = str(case.get("service") or repo)
        gold = tuple(case["gold_files"])
        event = from_text(
            str(case["query"]), origin="sent", service=service, repo=repo, level="ERROR"
        )
        if not isinstance(event, ErrorEvent):
            report.skipped.append({"id": str(case["id"]), "reason": "query is not an error"})
            continue
        composed = compose_query(with_trace(event))  # the trace read as intake reads it
        query = composed.text
        vector = None
        if embedder is not None:
            try:
                [vector] = embedder.embed([query_prefix + query])
            except TracehoundError as exc:  # keyword and frame signals still answer
                log.warning("eval.embed_failed", extra={"reason": str(exc)})
        found = hybrid_retrieve(
            repo,
            query,
            vector,
            vectors=vectors,
            keywords=keywords(repo),
            depth=depth,
            rrf_k=rrf_k,
            prior=prior,
            frames=composed.frames,
        )
        candidates = found.candidates
        if candidates and not found.own_frames:
            held = recall_at([c.path for c in candidates], gold, shown) > 0
            overlap_points.append((lexical_overlap(query, candidates[0]), held))
        if reranker is not None and candidates:
            candidates = rerank_candidates(query, candidates, reranker, top_k=len(candidates))
        ranked = [c.path for c in candidates]
        held = recall_at(ranked, gold, shown) > 0
        best = candidates[0].rerank_score if candidates else None
        if best is not None:
            relevance_points.append((best, held))
        for key in (service, ALL):
            rows.setdefault(key, []).append((ranked, gold))
        report.cases.append(
            {
                "id": case["id"],
                "service": service,
                "repo": repo,
                "gold": list(gold),
                "files": ranked[:10],
                "recall@5": recall_at(ranked, gold, 5),
                "rr": reciprocal_rank(ranked, gold),
                "own_frames": found.own_frames,
                "notes": found.notes,
            }
        )
    report.modes = sorted(k for k in rows if k != ALL) + ([ALL] if rows else [])
    report.summary = {k: summarize(rows[k]) for k in report.modes}
    if reranker is not None:
        suggested = suggest_threshold(relevance_points)
        report.calibration[ALL] = suggested.to_json() if suggested else None
    else:
        suggested = suggest_threshold(overlap_points)
        report.overlap_calibration[ALL] = suggested.to_json() if suggested else None
    return report
