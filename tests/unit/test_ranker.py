"""The learned ranker: features of each candidate, a model fit without the held-out
repository, and what --explain shows."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import random
from pathlib import Path

import pytest
from rich.console import Console

from shared.core.domain import ChunkHit, ErrorEvent
from shared.devtools.crossval import Collector, Retrieved1
from shared.devtools.eval import Case, MemoryIndex, SimulatorEmbedder, embed_chunks, run_eval
from shared.devtools.ranker import (
    CaseRows,
    RankerCv,
    case_rows,
    explain,
    fit,
    fit_pairwise,
    leave_one_repo_out,
    preferred,
    ranked,
)
from shared.index.chunking import chunk_file
from shared.retrieve.features import (
    ERROR_TEXT_MAX,
    FEATURES,
    FileFeatures,
    error_text,
    file_features,
)
from shared.retrieve.hybrid import Fusion, fuse, hybrid_retrieve
from shared.retrieve.keywords import MAX_DEFINITIONS
from shared.retrieve.priors import PathPrior
from shared.retrieve.ranker import LinearModel, load_model
from tests.unit.test_eval import TRACE, corpora_at


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


def test_the_pairwise_model_learns_the_order_inside_each_case() -> None:
    rows = case_rows(corpus_of_cases().cases, Fusion(), None, depth=50)

    cv = leave_one_repo_out(rows, pairwise=True)

    assert sum(m[0] for m in cv.held_out) / len(rows) == 1.0  # the fusion's R@1 is 0 here
    assert cv.name == "pairwise ranker" and cv.model.intercept == 0.0
    names = dict(zip(cv.model.features, cv.model.coef, strict=True))
    assert names["name_in_text"] == max(names.values())
    assert [label for label, _ in cv.rows()] == [
        "pairwise ranker, in-sample",
        "pairwise ranker, cross-validated: leave one repo out",
    ]


def synthetic(case_id: str, fix: dict[str, float], others: list[dict[str, float]]) -> CaseRows:
    def row(path: str, named: dict[str, float]) -> FileFeatures:
        return FileFeatures(path, tuple(named.get(f, 0.0) for f in FEATURES))

    files = [row("fix.py", fix), *(row(f"other{i}.py", o) for i, o in enumerate(others))]
    return CaseRows("r", case_id, ("fix.py",), files, [])


def test_each_case_weighs_the_same_in_the_pairwise_fit() -> None:
    """One case with 29 other candidates says a high ``agree`` is against the fix; two cases
    with one other each say it is for it. Counted by pairs the one case would win (29 to 2);
    each case weighing the same, the two do."""
    crowded = synthetic("crowded", {}, [{"agree": 1.0}] * 29)
    pairs = [synthetic(f"small{i}", {"agree": 1.0}, [{}]) for i in range(2)]

    model = fit_pairwise([crowded, *pairs])

    assert dict(zip(model.features, model.coef, strict=True))["agree"] > 0
    assert ranked(model, pairs[0])[0] == "fix.py"


def test_a_case_with_no_fix_among_its_candidates_gives_no_pairs() -> None:
    lost = CaseRows("r", "lost", ("gone.py",), synthetic("x", {}, [{"agree": 1.0}]).files, [])
    with pytest.raises(ValueError, match="fix files among their candidates"):
        fit_pairwise([lost])


def cv_of(*held_out: tuple[float, ...]) -> RankerCv:
    return RankerCv(list(held_out), list(held_out), one_feature_model("agree", 1.0))


def test_the_pairwise_model_ships_only_when_the_plan_says_so() -> None:
    pointwise = cv_of((0.5, 0.8, 0.9, 1.0, 0.7))
    better = dataclasses.replace(cv_of((0.6, 0.8, 0.9, 1.0, 0.75)), name="pairwise ranker")
    worse_r5 = dataclasses.replace(cv_of((0.9, 0.9, 0.8, 1.0, 0.9)), name="pairwise ranker")
    tied = dataclasses.replace(pointwise, name="pairwise ranker")
    assert preferred(pointwise, better) is better
    assert preferred(pointwise, worse_r5) is pointwise  # a higher mean, a lower Recall@5
    assert preferred(pointwise, tied) is pointwise  # above, not equal


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


def test_training_scores_the_order_retrieval_gives(tmp_path: Path) -> None:
    """What the ranker is fit and cross-validated on (``case_rows``, ``ranked``) is the order
    retrieval with the model gives (the eval's learned mode runs ``hybrid_retrieve`` as the
    worker does): the same error text (the whole report, which names inventory past what the
    composed query keeps) and the signals in the same order."""
    corpora = corpora_at(tmp_path)
    report = TRACE + "\n" + "The cart page was open for a while. " * 120 + "inventory?\n"
    case = Case(id="long", corpus="shop-1.0", query=report, gold=("shop/pricing.py",))
    n = len(FEATURES)
    # a probe, not a good model: it ranks files whose name the text holds last, so which text
    # the features read decides the first file
    shuns_names = tuple(-20.0 if f == "name_in_text" else 0.0 for f in FEATURES)
    model = LinearModel(FEATURES, (0.0,) * n, (1.0,) * n, shuns_names, 0.0)
    prior = PathPrior(["tests/", "docs/"], 0.15)
    collect = Collector()
    found = run_eval(
        [case], corpora, embedder=SimulatorEmbedder(), modes=["all", "learned"],
        prior=prior, on_case=collect, ranker=model, collect_caps=(MAX_DEFINITIONS,),
    )  # fmt: skip
    [row] = case_rows(collect.cases, Fusion(), prior, depth=50)
    learned = found.cases[0]["modes"]["learned"]["files"]
    assert learned == ranked(model, row)[: len(learned)]
    # the whole report names inventory, pricing and api: the files it does not name lead
    assert learned[0] in ("tests/test_pricing.py", "docs/index.rst")


def index(files: dict[str, str]) -> MemoryIndex:
    chunks = [c for path, text in files.items() for c in chunk_file("shop", path, text)]
    return MemoryIndex(chunks, embed_chunks(chunks, SimulatorEmbedder(), None))


SHOP = {
    "shop/pricing.py": "def apply_discount(total, count):\n    return total / count\n",
    "shop/api.py": "from shop.pricing import apply_discount\n\n\ndef handle(cart):\n"
    "    return apply_discount(cart.total, cart.count)\n",
    "tests/test_pricing.py": "from shop.pricing import apply_discount\n\n\n"
    "def test_apply_discount():\n    assert apply_discount(10, 2) == 5\n",
    # files the error does not touch, so that its words are rare enough for BM25 to score
    **{f"shop/other{i}.py": f"def unrelated_{i}(x):\n    return x + {i}\n" for i in range(8)},
}


def one_feature_model(name: str, weight: float) -> LinearModel:
    """A model that scores one feature only: its order is known without training."""
    n = len(FEATURES)
    coef = tuple(weight if f == name else 0.0 for f in FEATURES)
    return LinearModel(FEATURES, (0.0,) * n, (1.0,) * n, coef, 0.0)


def test_retrieval_with_a_ranker_puts_its_choice_first_and_falls_back_to_the_fusion() -> None:
    idx = index(SHOP)
    text = "ZeroDivisionError in apply_discount total count"

    def retrieve(ranker: LinearModel | None) -> tuple[list[str], str]:
        found = hybrid_retrieve("shop", text, None, vectors=idx, keywords=idx, ranker=ranker)
        return [c.path for c in found.candidates], found.ranked_by

    fused, how = retrieve(None)
    assert how == "fusion" and fused[0] != "tests/test_pricing.py"
    # a model that likes test paths puts the test first: the ranker's order is what is returned
    learned, how = retrieve(one_feature_model("test_path", 5.0))
    assert how == "learned" and learned[0] == "tests/test_pricing.py"
    assert sorted(learned) == sorted(fused)
    # a model whose score overflows cannot order anything: the fusion's order stands
    overflowing = dataclasses.replace(one_feature_model("prior", 1e308), intercept=1e308)
    broken, how = retrieve(overflowing)
    assert how == "fusion" and broken == fused


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\xff", "not UTF-8"),
        (b"{not json", "not a ranker model"),
        (b'{"features": []}', "not a ranker model"),
        (b"x" * 70_000, "over 64000 bytes"),
        (b"[" * 60_000, "RecursionError"),
        (b'{"intercept": 1' + b"0" * 400 + b"}", "not a ranker model"),
    ],
)
def test_a_file_that_is_not_a_model_is_refused_with_its_name(
    tmp_path: Path, content: bytes, says: str
) -> None:
    path = tmp_path / "model.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=says) as caught:
        load_model(path)
    assert str(path) in str(caught.value)


def test_a_path_that_is_no_file_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "model.json"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    for path in (fifo, tmp_path, tmp_path / "missing.json"):
        with pytest.raises(ValueError, match="no such file"):
            load_model(path)


def test_a_model_of_the_wrong_shape_or_with_bad_numbers_is_refused(tmp_path: Path) -> None:
    good = one_feature_model("prior", 1.0)
    for change, says in [
        ({"coef": good.coef[:-1]}, "one mean, scale and weight"),
        ({"scale": (0.0,) * len(FEATURES)}, "scales must be positive"),
        ({"intercept": float("nan")}, "finite"),
        ({"scale": (1e-320,) * len(FEATURES)}, "weight over its scale"),
    ]:
        raw = json.loads(good.to_json()) | change
        path = tmp_path / "model.json"
        path.write_text(json.dumps(raw))
        with pytest.raises(ValueError, match=says):
            load_model(path)


def test_the_shipped_model_loads_and_reads_todays_features() -> None:
    """A stale model (features added or renamed since it was fit) fails here, not in a
    worker, where it would only log ranker.unusable and fall back."""
    model = load_model(None)
    assert model.features == FEATURES
    assert any(model.coef) and LinearModel.from_json(model.to_json(), "again") == model


def test_recollected_symbols_keep_the_place_retrieval_gives_them() -> None:
    """The fusion breaks ties by the rankings' order: the cross-validation's re-fused rankings
    (symbols under another cap) are in the order hybrid_retrieve makes them."""
    idx = index(SHOP)
    text = "ZeroDivisionError in apply_discount total count"
    vector = SimulatorEmbedder().embed([text])[0]
    found = hybrid_retrieve("shop", text, vector, vectors=idx, keywords=idx)
    order = [s for s, _ in found.rankings]
    assert "symbols" in order and order.index("symbols") < order.index("vector")
    symbols = dict(found.rankings)["symbols"]
    without = [(s, hits) for s, hits in found.rankings if s != "symbols"]
    case = Case(id="c", corpus="shop-1.0", query=text, gold=("shop/pricing.py",))
    again = Retrieved1(case, "shop", without, {MAX_DEFINITIONS: symbols})
    assert [s for s, _ in again.at(50, MAX_DEFINITIONS)] == order


def test_the_error_text_is_the_whole_report_within_a_bound() -> None:
    event = ErrorEvent(service="s", repo="r", message="KeyError: 'sku'", stacktrace="x" * 1_000_000)
    text = error_text(event)
    assert text.startswith("KeyError: 'sku'\nxxx") and len(text) == ERROR_TEXT_MAX
    assert error_text(event.model_copy(update={"stacktrace": ""})) == "KeyError: 'sku'"
