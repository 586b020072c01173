"""Leave-one-repo-out: constants chosen on the other repositories, scored on the held-out one."""

from __future__ import annotations

from shared.core.domain import ChunkHit
from shared.devtools.crossval import Collector, leave_one_repo_out
from shared.devtools.eval import Case
from shared.retrieve.hybrid import Fusion


def hits(*paths: str) -> list[ChunkHit]:
    return [
        ChunkHit(chunk_id=p, path=p, start_line=1, end_line=2, text="", score=0.0) for p in paths
    ]


def test_a_repository_whose_cases_want_other_constants_scores_lower_held_out() -> None:
    """In 'alpha' BM25 finds the fix and the vectors do not; in 'beta' it is the other way
    round, and alpha has more cases. Chosen on every case, one weighting serves alpha and
    loses beta; held out, beta is scored with what alpha prefers, and alpha with what beta
    prefers — so the cross-validated recall is below the in-sample one."""
    collect = Collector()
    for n in range(3):
        collect(
            Case(id=f"a{n}", corpus="alpha-1.0", query="", gold=("fix.py",)),
            [("vector", hits("x.py", "y.py", "fix.py")), ("bm25", hits("fix.py", "x.py"))],
        )
    collect(
        Case(id="b0", corpus="beta-2.0", query="", gold=("fix.py",)),
        [("vector", hits("fix.py", "x.py")), ("bm25", hits("x.py", "y.py", "fix.py"))],
    )
    report = leave_one_repo_out(collect.cases, Fusion(), [], 1.0)
    rows = dict(report.rows)
    r1 = 0  # Recall@1 is the first column
    assert report.repos == {"alpha": 3, "beta": 1}
    assert rows["in-sample: chosen on every case"][r1] == 0.75  # alpha's three, not beta
    assert rows["cross-validated: leave one repo out"][r1] < 0.75
    assert "bm25 2" in report.chosen["beta"]  # chosen on alpha: BM25 counts double
    assert rows["bm25 alone"][r1] == 0.75 and rows["vector alone"][r1] == 0.25
