"""Leave-one-repo-out: constants chosen on the other repositories, scored on the held-out one."""

from __future__ import annotations

import random

import pytest

from shared.core.domain import ChunkHit
from shared.devtools.crossval import Collector, fast_rank, leave_one_repo_out, repo_of
from shared.devtools.eval import Case
from shared.retrieve.hybrid import Fusion, fuse
from shared.retrieve.priors import PathPrior


def hits(*paths: str) -> list[ChunkHit]:
    return [
        ChunkHit(chunk_id=p, path=p, start_line=1, end_line=2, text="", score=0.0) for p in paths
    ]


def alpha_and_beta() -> Collector:
    """Three cases of 'alpha' where BM25 finds the fix and the vectors do not, one of 'beta'
    where it is the other way round."""
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
    return collect


def test_a_repository_whose_cases_want_other_constants_scores_lower_held_out() -> None:
    """alpha_and_beta: alpha has more cases. Chosen on every case, one weighting serves alpha and
    loses beta; held out, beta is scored with what alpha prefers, and alpha with what beta
    prefers — so the cross-validated recall is below the in-sample one."""
    collect = alpha_and_beta()
    report = leave_one_repo_out(collect.cases, Fusion(), [], 1.0)
    rows = dict(report.rows)
    r1 = 0  # Recall@1 is the first column
    assert report.repos == {"alpha": 3, "beta": 1}
    assert rows["in-sample: chosen on every case"][r1] == 0.75  # alpha's three, not beta
    assert rows["cross-validated: leave one repo out"][r1] < 0.75
    assert "bm25 2" in report.chosen["beta"].label()  # chosen on alpha: BM25 counts double
    assert rows["bm25 alone"][r1] == 0.75 and rows["vector alone"][r1] == 0.25


def test_releases_of_one_project_share_a_fold_however_the_index_spells_it() -> None:
    """PyPI names compare case- and separator-insensitively: Babel 2.6.0 and babel 2.16.0 are
    one project, so neither release may train the fold that holds the other out."""
    collect = alpha_and_beta()
    for n, corpus in enumerate(("Babel-2.6.0", "babel-2.16.0", "zope.Interface-5.0")):
        collect(
            Case(id=f"c{n}", corpus=corpus, query="", gold=("fix.py",)),
            [("vector", hits("fix.py")), ("bm25", hits("x.py"))],
        )
    report = leave_one_repo_out(collect.cases, Fusion(), [], 1.0)
    assert report.repos == {"alpha": 3, "beta": 1, "babel": 2, "zope-interface": 1}
    assert repo_of("org__name@0123456789ab") == "org-name"


def test_a_shallower_depth_is_the_rankings_cut_short_and_a_cap_swaps_the_symbols() -> None:
    collect = Collector()
    deep = [f"f{i}.py" for i in range(100)]
    collect(
        Case(id="c", corpus="alpha-1.0", query="", gold=("f60.py",)),
        [("vector", hits(*deep)), ("bm25", hits(*deep)), ("symbols", hits("s5.py"))],
        {2: [], 5: hits("s5.py"), 10: hits("s5.py", "s10.py")},
    )
    [case] = collect.cases
    at20 = dict(case.at(20, 2))
    assert len(at20["vector"]) == 20 and len(at20["bm25"]) == 20 and "symbols" not in at20
    at100 = dict(case.at(100, 10))
    assert len(at100["vector"]) == 100 and [h.path for h in at100["symbols"]] == ["s5.py", "s10.py"]
    # The fix is 61st in both retrievers: only the settings 100 deep can find it at all.
    report = leave_one_repo_out(collect.cases, Fusion(), [], 1.0)
    assert "depth 100" in report.in_sample.label()
    assert dict(report.rows)["default (the fusion the ranker reorders)"][-1] == 0.0  # 50 deep


def test_frames_as_a_boost_only_raise_files_another_signal_found() -> None:
    rankings = [
        ("vector", hits("a.py", "fix.py")),
        ("bm25", hits("a.py", "fix.py")),
        ("frames", hits("lib/site.py", "a.py")),  # the trace ran through the library's file
    ]
    ranked = [c.path for c in fuse(rankings, Fusion(frames_boost=False))]
    boosted = [c.path for c in fuse(rankings, Fusion(frames_boost=True))]
    assert ranked == ["a.py", "lib/site.py", "fix.py"]  # as a ranking, the frame adds a file
    assert boosted == ["a.py", "fix.py"]  # as a boost, it only raises what the others found


def test_the_fast_ranking_orders_files_exactly_as_the_pipelines_fusion() -> None:
    """fast_rank is what makes thousands of settings affordable; fuse is the reference."""
    rng = random.Random(5)
    prior = PathPrior(["tests/**"], 0.3)
    for _ in range(200):
        rankings = []
        for signal in ("vector", "bm25", "frames", "vendored", "symbols"):
            chunks = rng.sample(range(40), rng.randint(0, 25))
            paths = [f"{'tests/' if i % 7 == 0 else ''}f{i % 9}.py" for i in chunks]
            found = [  # one file, several chunks
                h.model_copy(update={"chunk_id": f"c{i}"})
                for i, h in zip(chunks, hits(*paths), strict=True)
            ]
            rankings.append((signal, found))
        fusion = Fusion(
            bm25=rng.choice((0.5, 1.0, 2.0)), frames=rng.choice((1.0, 3.0)),
            rrf_k=rng.choice((10, 60)), decay=rng.choice((0.3, 0.5)),
            frames_boost=rng.random() < 0.5,
        )  # fmt: skip
        lean = [(s, [(h.chunk_id, h.path) for h in hs]) for s, hs in rankings]
        expected = [c.path for c in fuse(rankings, fusion, prior)]
        assert fast_rank(lean, fusion, prior) == expected


def test_frames_rank_alone_when_no_other_signal_found_anything() -> None:
    """Vectors and BM25 failed (a degraded retrieval): the trace's files still come first."""
    only_frames = [("frames", hits("app/pricing.py", "app/api.py"))]
    assert [c.path for c in fuse(only_frames, Fusion(frames_boost=True))] == [
        "app/pricing.py",
        "app/api.py",
    ]


def test_the_lookups_weight_is_chosen_on_the_other_repositories() -> None:
    """In 'alpha' the lookups find the fix retrieval put third; in 'beta' they find a wrong
    file and retrieval had the fix first. Any weight lifts alpha's fix to first; weight 2 puts
    beta's wrong file above its fix. Held out, alpha is scored with what beta prefers (no
    lookups) and beta with what alpha prefers (the smallest weight that helps), so the
    cross-validated recall is below the in-sample choice's, which serves both."""
    from shared.devtools.crossval import followup_cv
    from shared.devtools.followup import Lookups

    def follow(found: list[str]):  # type: ignore[no-untyped-def]
        return lambda candidates, prior: Lookups(found, found, ["find_symbol"])

    collect = Collector(followup=True)
    for n in range(3):
        collect(
            Case(id=f"a{n}", corpus="alpha-1.0", query="", gold=("fix.py",)),
            [("vector", hits("x.py", "y.py", "fix.py")), ("bm25", hits("x.py", "y.py", "fix.py"))],
            None,
            follow(["fix.py"]),
        )
    collect(
        Case(id="b0", corpus="beta-2.0", query="", gold=("fix.py",)),
        [("vector", hits("fix.py", "x.py"))],
        None,
        follow(["bad.py"]),
    )
    report = leave_one_repo_out(collect.cases, Fusion(), [], 1.0)
    followed = followup_cv(collect.cases, report, [])
    rows = dict(followed.rows)
    r1 = 0
    assert followed.chosen == {"alpha": 0.0, "beta": 0.25}
    assert followed.in_sample == 0.25
    assert rows["in-sample: setting and weight (0.25) chosen on every case"][r1] == 1.0
    assert rows["cross-validated: leave one repo out"][r1] == 0.25  # beta's case only
    assert rows["default + lookups at weight 0"][r1] == 0.25  # the default: lookups only seen


def test_a_collector_without_lookups_refuses_the_follow_up_cross_validation() -> None:
    from shared.devtools.crossval import followup_cv

    collect = Collector()  # followup off: the lookups (and the corpus' index) are not kept
    collect(Case(id="a", corpus="alpha-1.0", query="", gold=("a.py",)), [("bm25", hits("a.py"))])
    report = leave_one_repo_out(collect.cases, Fusion(), [], 1.0)
    with pytest.raises(ValueError, match="without their lookups"):
        followup_cv(collect.cases, report, [])


def test_each_choice_rule_prefers_its_own_metric() -> None:
    """Setting 0 puts the fix second in every case; setting 1 puts it first in half the cases
    and seventh in the rest. Recall@5 prefers the steady one, MRR the other; the mean of every
    metric prefers the steady one too (0.70 against 0.61)."""
    from shared.devtools.crossval import _best

    steady = (0.0, 1.0, 1.0, 1.0, 0.5)
    first, seventh = (1.0, 1.0, 1.0, 1.0, 1.0), (0.0, 0.0, 0.0, 1.0, 1 / 7)
    metrics = [[steady, steady], [first, seventh]]
    assert _best(metrics, [0, 1], "r5") == 0
    assert _best(metrics, [0, 1], "mrr") == 1
    assert _best(metrics, [0, 1], "mean") == 0
    assert _best(metrics, [0], "r5") == 1  # on the first case alone both reach R@5; MRR decides


def test_every_rule_is_cross_validated_and_each_case_keeps_its_held_out_score() -> None:
    collect = alpha_and_beta()
    report = leave_one_repo_out(collect.cases, Fusion(), [], 1.0)
    assert set(report.held_out) == {"r5", "mrr", "mean"}
    rows = dict(report.rows)
    assert rows["cross-validated, chosen by mrr"][0] == pytest.approx(
        sum(m[0] for m in report.held_out["mrr"]) / 4
    )
    # beta's only case, held out, is ranked by what alpha prefers (BM25 counts double): BM25's
    # first file, which the vectors also found, outranks the vectors' first, the fix
    assert report.held_out["r5"][3][-1] == pytest.approx(1 / 2)
    by_repo = {repo: (n, held) for repo, n, held, _ in report.by_repo()}
    assert by_repo["beta"] == (1, report.held_out[report.rule][3])
    assert by_repo["alpha"][0] == 3
