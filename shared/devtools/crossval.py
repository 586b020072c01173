"""Retrieval constants chosen by leave-one-repo-out, not by the dev set they are scored on.

``tracehound eval --cv repo`` runs this. Each case's signals (vector, BM25, frames, symbols)
are retrieved once; every candidate value of the fusion constants (signal weights, RRF k, the
per-file chunk decay, the path-prior weight) is then only a re-fusion of those rankings, which
is cheap. For each repository, the constants are chosen on the *other* repositories' cases
(best mean Recall@5, then MRR) and its own cases are scored with them; the cross-validated
figures pool those held-out scores. The in-sample figures choose on every case and score on
the same ones: the gap between the two is how much tuning on the dev set flatters it.

Not varied here: candidate depth and the symbol cap, which change the rankings themselves.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from shared.devtools.eval import KS, Case, recall_at, reciprocal_rank
from shared.retrieve.hybrid import Fusion, Ranking, fuse
from shared.retrieve.priors import PathPrior

# The values tried (the current defaults among them).
GRID: dict[str, tuple[float, ...]] = {
    "frames": (1.0, 2.0, 3.0, 5.0),
    "symbols": (0.5, 1.0, 2.0),
    "bm25": (0.5, 1.0, 2.0),
    "rrf_k": (10, 30, 60),
    "decay": (0.3, 0.5, 0.7),
}
PRIOR_WEIGHTS = (0.15, 0.3, 0.6, 1.0)  # 1.0: no prior
SINGLE_SIGNALS = ("vector", "bm25", "frames", "symbols")


@dataclass(frozen=True)
class Setting:
    """One point of the grid: fusion constants and the path-prior weight."""

    fusion: Fusion
    prior_weight: float

    def label(self) -> str:
        f = self.fusion
        return (
            f"frames {f.frames:g}, symbols {f.symbols:g}, bm25 {f.bm25:g}, k {f.rrf_k}, "
            f"decay {f.decay:g}, prior {self.prior_weight:g}"
        )


def grid(base: Fusion) -> list[Setting]:
    keys = list(GRID)
    out: list[Setting] = []
    for values in itertools.product(*(GRID[k] for k in keys)):
        changes = dict(zip(keys, values, strict=True))
        changes["rrf_k"] = int(changes["rrf_k"])
        fusion = replace(base, **changes)  # type: ignore[arg-type]
        out.extend(Setting(fusion, w) for w in PRIOR_WEIGHTS)
    return out


@dataclass
class Retrieved1:
    """One case's signals as retrieved once (what every setting re-fuses)."""

    case: Case
    repo: str
    rankings: list[Ranking]


@dataclass
class Collector:
    """What ``run_eval``'s ``on_case`` hands over, per case."""

    cases: list[Retrieved1] = field(default_factory=list)

    def __call__(self, case: Case, rankings: Sequence[Ranking]) -> None:
        repo = case.corpus.rsplit("-", 1)[0]  # <pypi_name>-<version>
        self.cases.append(Retrieved1(case, repo, list(rankings)))


Metrics = tuple[float, ...]  # recall@k for KS, then reciprocal rank


def _metrics(ranked: Sequence[str], gold: Sequence[str]) -> Metrics:
    return (*(recall_at(ranked, gold, k) for k in KS), reciprocal_rank(ranked, gold))


def score(
    cases: Sequence[Retrieved1],
    settings: Sequence[Setting],
    demote_paths: Sequence[str],
    *,
    only: Callable[[str], bool] | None = None,
) -> list[list[Metrics]]:
    """metrics[setting][case]; ``only`` keeps the rankings of some signals."""
    priors = {w: PathPrior(demote_paths, w) for w in {s.prior_weight for s in settings}}
    out = []
    for s in settings:
        row = []
        for c in cases:
            rankings = [r for r in c.rankings if only is None or only(r[0])]
            ranked = [cand.path for cand in fuse(rankings, s.fusion, priors[s.prior_weight])]
            row.append(_metrics(ranked, c.case.gold))
        out.append(row)
    return out


def _mean(rows: Sequence[Metrics]) -> Metrics:
    n = len(rows) or 1
    return tuple(sum(r[i] for r in rows) / n for i in range(len(KS) + 1))


def _best(metrics: list[list[Metrics]], picked: Sequence[int]) -> int:
    """The setting with the best mean Recall@5 over the ``picked`` cases, then MRR."""
    r5 = KS.index(5)

    def key(i: int) -> tuple[float, float]:
        m = _mean([metrics[i][j] for j in picked])
        return (round(m[r5], 9), round(m[-1], 9))

    return max(range(len(metrics)), key=key)


@dataclass
class CvReport:
    rows: list[tuple[str, Metrics]]  # label, mean metrics over every case
    chosen: dict[str, str]  # held-out repo -> the setting chosen on the others
    in_sample: str  # the setting chosen on every case
    cases: int
    repos: dict[str, int]


def leave_one_repo_out(
    cases: Sequence[Retrieved1], base: Fusion, demote_paths: Sequence[str], prior_weight: float
) -> CvReport:
    settings = grid(base)
    default = Setting(base, prior_weight)
    if default not in settings:
        settings.append(default)
    metrics = score(cases, settings, demote_paths)
    everyone = list(range(len(cases)))
    repos: dict[str, list[int]] = {}
    for j, c in enumerate(cases):
        repos.setdefault(c.repo, []).append(j)
    held_out: list[Metrics] = [()] * len(cases)
    chosen = {}
    for repo, own in repos.items():
        others = [j for j in everyone if j not in set(own)]
        best = _best(metrics, others)
        chosen[repo] = settings[best].label()
        for j in own:
            held_out[j] = metrics[best][j]
    best_all = _best(metrics, everyone)
    rows = [
        ("default (what the pipeline runs)", _mean(metrics[settings.index(default)])),
        ("in-sample: chosen on every case", _mean(metrics[best_all])),
        ("cross-validated: leave one repo out", _mean(held_out)),
    ]
    for signal in SINGLE_SIGNALS:
        alone = score(cases, [default], demote_paths, only=signal.__eq__)
        rows.append((f"{signal} alone", _mean(alone[0])))
    return CvReport(
        rows=rows,
        chosen=chosen,
        in_sample=settings[best_all].label(),
        cases=len(cases),
        repos={r: len(js) for r, js in repos.items()},
    )


def render(report: CvReport) -> object:
    from rich.table import Table

    table = Table(
        title=f"leave-one-repo-out on {report.cases} cases from {len(report.repos)} repositories"
    )
    table.add_column("fusion")
    for k in KS:
        table.add_column(f"R@{k}", justify="right")
    table.add_column("MRR", justify="right")
    for label, m in report.rows:
        table.add_row(label, *(f"{v:.3f}" for v in m))
    return table


__all__ = ["Collector", "CvReport", "grid", "leave_one_repo_out", "render"]
