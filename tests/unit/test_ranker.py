"""The learned ranker: features of each candidate, a model fit without the held-out
repository, and what --explain shows."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
from rich.console import Console

from shared.core.domain import ChunkHit
from shared.devtools.crossval import Collector
from shared.devtools.eval import Case
from shared.devtools.ranker import LinearModel, case_rows, explain, fit, leave_one_repo_out
from shared.retrieve.features import FEATURES, file_features
from shared.retrieve.hybrid import Fusion, fuse
from shared.retrieve.priors import PathPrior


def hits(*paths: str, score: float = 1.0) -> list[ChunkHit]:
    return [
        ChunkHit(chunk_id=f"{p}#{i}", path=p, start_line=1, end_line=2, text="", score=score)
        for i, p in enumerate(paths)
    ]


def test_features_say_what_each_signal_and_the_path_saw() -> None:
    rankings = [
        ("vector", hits("pkg/a.py", "pkg/checkout.py", "pkg/a.py")),
        ("bm25", hits("pkg/checkout.py")),
        ("frames", hits("pkg/checkout.py")),
    ]
    found = file_features(rankings, fuse(rankings, Fusion(), None), "TypeError in checkout()", None)
    assert [f.path for f in found] == [c.path for c in fuse(rankings, Fusion(), None)]
    a, checkout = (f.as_dict() for f in sorted(found, key=lambda f: f.path))
    assert a["vector_rr"] == 1.0 and a["bm25_rr"] == 0.0 and a["agree"] == 1.0
    assert a["vector_chunks"] > checkout["vector_chunks"]  # two of its chunks were found
    assert checkout["vector_rr"] == 0.5 and checkout["frames_rr"] == 1.0
    assert checkout["agree"] == 2.0 and checkout["name_in_text"] == 1.0
    assert a["name_in_text"] == 0.0 and checkout["path_words"] == 0.5  # "checkout", not "pkg"
    assert len(found[0].values) == len(FEATURES)


def corpus_of_cases(seed: int = 7) -> Collector:
    """Cases from four repositories where the fusion puts the fix second or third and only the
    error text names its file: a ranker that reads the name puts it first."""
    rng = random.Random(seed)
    collect = Collector()
    for repo in ("alpha", "beta", "gamma", "delta"):
        for n in range(6):
            fix = f"{repo}/mod{n}/handler{rng.randrange(99)}.py"
            decoys = [f"{repo}/mod{n}/other{i}.py" for i in range(4)]
            at = rng.choice((1, 2))
            order = [*decoys[:at], fix, *decoys[at:]]
            query = f"KeyError raised in {fix.rsplit('/', 1)[-1].removesuffix('.py')}"
            collect(
                Case(id=f"{repo}{n}", corpus=f"{repo}-1.0", query=query, gold=(fix,)),
                [("vector", hits(*order)), ("bm25", hits(*decoys[::-1][:3]))],
            )
    return collect


def test_held_out_the_ranker_learns_what_the_fusion_cannot_see() -> None:
    rows = case_rows(corpus_of_cases().cases, Fusion(), None, depth=50)
    fused_r1 = sum(r.files[0].path in r.gold for r in rows) / len(rows)

    cv = leave_one_repo_out(rows)

    held_r1 = sum(m[0] for m in cv.held_out) / len(rows)
    assert fused_r1 == 0.0 and held_r1 == 1.0
    names = dict(zip(cv.model.features, cv.model.coef, strict=True))
    assert names["name_in_text"] == max(names.values())


def test_a_fold_never_sees_its_own_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = case_rows(corpus_of_cases().cases, Fusion(), None, depth=50)
    seen: list[set[str]] = []
    real_fit = fit

    def spying_fit(train, c=1.0):  # type: ignore[no-untyped-def]
        seen.append({r.repo for r in train})
        return real_fit(train, c)

    monkeypatch.setattr("shared.devtools.ranker.fit", spying_fit)
    leave_one_repo_out(rows)
    assert seen[:4] == [{"beta", "delta", "gamma"}, {"alpha", "delta", "gamma"},
                        {"alpha", "beta", "gamma"}, {"alpha", "beta", "delta"}]  # fmt: skip
    assert seen[4] == {"alpha", "beta", "gamma", "delta"}  # the shipped model: every case


def test_a_model_is_a_few_numbers_that_load_back(tmp_path: Path) -> None:
    rows = case_rows(corpus_of_cases().cases, Fusion(), PathPrior(["tests/"], 0.3), depth=50)
    model = fit(rows)
    path = tmp_path / "ranker.json"
    path.write_text(model.to_json())
    loaded = LinearModel.load(path)
    values = rows[0].files[0].values
    assert loaded.score(values) == pytest.approx(model.score(values))
    assert sum(loaded.contributions(values)) + loaded.intercept == pytest.approx(
        loaded.score(values)
    )
    path.write_text(model.to_json().replace('"name_in_text"', '"renamed"'))
    with pytest.raises(ValueError, match="other features"):
        LinearModel.load(path)


def test_explain_shows_each_candidates_features_and_marks_the_fix() -> None:
    rows = case_rows(corpus_of_cases().cases, Fusion(), None, depth=50)
    model = fit([r for r in rows if r.repo != "alpha"])
    buffer = io.StringIO()
    Console(file=buffer, width=400).print(explain(model, rows[0]))
    shown = buffer.getvalue()
    first = shown.splitlines()[4]  # title, top border, header, rule, first row
    assert rows[0].gold[0] + " ✓" in first
    assert "name_in_text" in shown and "fusion #" in shown and "┃ score ┃" in shown
    buffer = io.StringIO()
    Console(file=buffer, width=400).print(explain(None, rows[0]))
    assert "┃ score ┃" not in buffer.getvalue()  # features only, no model
