"""A learned ranker over every signal (shared/retrieve/features.py), measured by
leave-one-repo-out beside today's rank fusion.

The plan, fixed before any of its figures was seen (benchmarks/cases/README.md, *Learned
ranker*):

- Candidates: the fusion's first ``TOP`` files of each case, with the default constants
  (``TRACEHOUND_CANDIDATE_DEPTH``, the symbol cap, the path prior); the ranker reorders them
  and the files past ``TOP`` keep the fusion's order after them.
- Model: scikit-learn's ``LogisticRegression`` (``C``, ``class_weight="balanced"``) on
  standardised features; a file's score is the model's log-odds that the fix changed it.
- Each fold holds out one repository: fit on the other repositories' cases, rank its own.
- Beside it, in the same table: the fusion with the defaults (in-sample), the fusion
  cross-validated (crossval.py), and each signal alone.
- Decision: it may become the default only if, held out, it beats the cross-validated fusion on
  the mean of Recall@1/3/5/10 and MRR (crossval's ``RULE``) with Recall@5 not below it.

Beside it, a second plan (*A pairwise ranker*): the same features fit on the order inside each
case (``fit_pairwise``); it replaces the pointwise model as the one shipped only if, held out,
its mean is above the pointwise model's with Recall@5 not below (``preferred``).

scikit-learn is needed to train only (the ``eval`` extra); a trained model is a few numbers
(``LinearModel``, shared/retrieve/ranker.py), which the worker scores without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from shared.devtools.crossval import _R5, RULES, Metrics, Retrieved1, _mean, _metrics
from shared.retrieve.features import FEATURES, FileFeatures, file_features
from shared.retrieve.hybrid import Fusion, fuse
from shared.retrieve.keywords import MAX_DEFINITIONS
from shared.retrieve.ranker import TOP, LinearModel

C = 1.0
NO_PAIRS = "the training cases need fix files among their candidates and others"


@dataclass(frozen=True)
class CaseRows:
    """One case's candidates as the ranker sees them."""

    repo: str
    case_id: str
    gold: tuple[str, ...]
    files: list[FileFeatures]  # the fusion's first TOP, in its order
    rest: list[str]  # the fusion's files after them

    def labels(self) -> list[int]:
        return [int(f.path in self.gold) for f in self.files]


def case_rows(
    cases: Sequence[Retrieved1],
    fusion: Fusion,
    prior: Callable[[str], float] | None,
    depth: int,
    cap: int = MAX_DEFINITIONS,
) -> list[CaseRows]:
    out = []
    for c in cases:
        rankings = c.at(depth, cap)
        fused = fuse(rankings, fusion, prior)
        files = file_features(rankings, fused, c.text, prior, top=TOP)
        rest = [cand.path for cand in fused[TOP:]]
        out.append(CaseRows(c.repo, c.case.id, c.case.gold, files, rest))
    return out


def _scaling(rows: Sequence[CaseRows]) -> tuple[np.ndarray, np.ndarray]:
    """Each feature's mean and scale over every candidate of ``rows`` (1 for a constant one):
    what both fits standardise with, and what the model keeps."""
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(np.array([f.values for r in rows for f in r.files], float))
    return scaler.mean_, np.where(scaler.scale_ > 0, scaler.scale_, 1.0)


def _model(mean: np.ndarray, scale: np.ndarray, coef: np.ndarray, intercept: float) -> LinearModel:
    return LinearModel(
        FEATURES,
        tuple(float(m) for m in mean),
        tuple(float(s) for s in scale),
        tuple(float(w) for w in coef),
        float(intercept),
    )


def fit(rows: Sequence[CaseRows], c: float = C) -> LinearModel:
    """A logistic regression on every candidate of ``rows`` (the fix's files positive)."""
    from sklearn.linear_model import LogisticRegression

    y = [label for r in rows for label in r.labels()]
    if len(set(y)) < 2:
        raise ValueError(NO_PAIRS)
    mean, scale = _scaling(rows)
    x = (np.array([f.values for r in rows for f in r.files], float) - mean) / scale
    model = LogisticRegression(C=c, class_weight="balanced", max_iter=2000).fit(x, y)
    return _model(mean, scale, model.coef_[0], model.intercept_[0])


def fit_pairwise(rows: Sequence[CaseRows], c: float = C) -> LinearModel:
    """A logistic regression on the order inside each case: for every fix file and every
    other candidate of a case, their standardised difference (label 1) and its negation (0);
    each case weighs the same. No intercept: only differences are scored."""
    from sklearn.linear_model import LogisticRegression

    # a case with no fix file among its candidates, or nothing to order one against, gives none
    ordered = [r for r in rows if 0 < sum(r.labels()) < len(r.files)]
    if not ordered:
        raise ValueError(NO_PAIRS)
    mean, scale = _scaling(rows)
    diffs: list[np.ndarray] = []
    weights: list[np.ndarray] = []
    for r in ordered:
        z = (np.array([f.values for f in r.files], float) - mean) / scale
        fix = np.array(r.labels(), dtype=bool)
        pairs = (z[fix][:, None, :] - z[~fix][None, :, :]).reshape(-1, z.shape[1])
        diffs.append(pairs)
        weights.append(np.full(len(pairs), 1.0 / len(pairs)))
    d, w = np.vstack(diffs), np.concatenate(weights)
    model = LogisticRegression(C=c, fit_intercept=False, max_iter=2000).fit(
        np.vstack([d, -d]),
        np.concatenate([np.ones(len(d)), np.zeros(len(d))]),
        sample_weight=np.concatenate([w, w]),
    )
    return _model(mean, scale, model.coef_[0], 0.0)


def ranked(model: LinearModel, row: CaseRows) -> list[str]:
    """The case's files as the model orders its candidates (ties keep the fusion's order)."""
    scored = sorted(range(len(row.files)), key=lambda i: (-model.score(row.files[i].values), i))
    return [row.files[i].path for i in scored] + row.rest


@dataclass(frozen=True)
class RankerCv:
    held_out: list[Metrics]  # each case's, ranked by the model fit without its repository
    in_sample: list[Metrics]  # each case's, ranked by the model fit on every case
    model: LinearModel  # fit on every case
    name: str = "learned ranker"

    def rows(self) -> list[tuple[str, Metrics]]:
        return [
            (f"{self.name}, in-sample", _mean(self.in_sample)),
            (f"{self.name}, cross-validated: leave one repo out", _mean(self.held_out)),
        ]


Fit = Callable[[Sequence[CaseRows], float], LinearModel]


def leave_one_repo_out(
    rows: Sequence[CaseRows], c: float = C, *, pairwise: bool = False
) -> RankerCv:
    """Each repository's cases ranked by the model fit on the others' (``fit``, or with
    ``pairwise`` ``fit_pairwise``), and the model fit on every case."""
    fitter: Fit = fit_pairwise if pairwise else fit
    repos = sorted({r.repo for r in rows})
    held: dict[int, Metrics] = {}
    for repo in repos:
        model = fitter([r for r in rows if r.repo != repo], c)
        for j, r in enumerate(rows):
            if r.repo == repo:
                held[j] = _metrics(ranked(model, r), r.gold)
    every = fitter(rows, c)
    return RankerCv(
        [held[j] for j in range(len(rows))],
        [_metrics(ranked(every, r), r.gold) for r in rows],
        every,
        "pairwise ranker" if pairwise else "learned ranker",
    )


def preferred(pointwise: RankerCv, pairwise: RankerCv) -> RankerCv:
    """The model to ship by the pairwise plan's rule: the pairwise one only if, held out, its
    mean of Recall@1/3/5/10 and MRR is above the pointwise one's and its Recall@5 not below."""
    a, b = _mean(pointwise.held_out), _mean(pairwise.held_out)
    mean = RULES["mean"]
    return pairwise if mean(b) > mean(a) and b[_R5] >= a[_R5] else pointwise


def explain(model: LinearModel | None, row: CaseRows, shown: int = 10) -> object:
    """A table of the case's first candidates: the fusion's rank, the model's score and each
    feature's value (with a model: its contribution in brackets)."""
    from rich.table import Table

    order = ranked(model, row) if model is not None else [f.path for f in row.files]
    by_path = {f.path: (i, f) for i, f in enumerate(row.files, start=1)}
    table = Table(
        title=f"{row.case_id}: why the first files came first (fix: {', '.join(row.gold)})"
    )
    table.add_column("#", justify="right")
    table.add_column("file")
    table.add_column("fusion #", justify="right")
    if model is not None:
        table.add_column("score", justify="right")
    for name in FEATURES:
        table.add_column(name, justify="right")
    for n, path in enumerate(order[:shown], start=1):
        if path not in by_path:
            continue
        i, f = by_path[path]
        cells = [f"{v:.2f}" for v in f.values]
        if model is not None:
            parts = model.contributions(f.values)
            cells = [f"{v:.2f} ({p:+.1f})" for v, p in zip(f.values, parts, strict=True)]
        mark = " ✓" if path in row.gold else ""
        score = [f"{model.score(f.values):+.2f}"] if model is not None else []
        table.add_row(str(n), path + mark, str(i), *score, *cells)
    return table
