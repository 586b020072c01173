"""Choosing ``TRACEHOUND_MIN_RELEVANCE`` from labelled cases instead of guessing it.

A message says "no strongly relevant code was found" when the best rerank score is below
the threshold. Set too low, weak files are presented as the cause; too high, good findings
are hidden. On labelled cases (``tracehound eval`` with a rerank backend) each case gives its
best rerank score and whether the files the message would show hold the fix; the threshold
that best separates the two — most misses flagged, fewest hits flagged (Youden's J) — is the
one suggested. Scores depend on the reranking model, so this is run per model.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Calibration:
    threshold: float
    misses_flagged: float  # share of cases whose shown files miss the fix, flagged weak
    hits_flagged: float  # share of cases whose shown files hold the fix, flagged weak (cost)
    hits: int
    misses: int

    def to_json(self) -> dict[str, float | int]:
        return {
            "threshold": round(self.threshold, 4),
            "misses_flagged": round(self.misses_flagged, 4),
            "hits_flagged": round(self.hits_flagged, 4),
            "hits": self.hits,
            "misses": self.misses,
        }


def flagged_shares(points: Sequence[tuple[float, bool]], threshold: float) -> tuple[float, float]:
    """(share of misses, share of hits) whose best score is below ``threshold``."""

    def share(scores: list[float]) -> float:
        return sum(s < threshold for s in scores) / len(scores) if scores else 0.0

    return share([s for s, hit in points if not hit]), share([s for s, hit in points if hit])


def suggest_threshold(points: Sequence[tuple[float, bool]]) -> Calibration | None:
    """The threshold maximizing misses flagged minus hits flagged; None without both kinds.

    ``points`` are (best relevance in 0..1, whether the shown files held the fix). Candidate
    thresholds lie midway between neighbouring scores, so the choice does not sit on a case.
    """
    hits = sum(1 for _, hit in points if hit)
    misses = len(points) - hits
    if not hits or not misses:
        return None
    scores = sorted({s for s, _ in points})
    candidates = [(a + b) / 2 for a, b in itertools.pairwise(scores)]
    best: Calibration | None = None
    for t in candidates:
        m, h = flagged_shares(points, t)
        if best is None or m - h > best.misses_flagged - best.hits_flagged:
            best = Calibration(t, m, h, hits, misses)
    return best or Calibration(0.0, 0.0, 0.0, hits, misses)
