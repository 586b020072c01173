"""The eval harness end to end on a tiny corpus with the simulator's embeddings (runs in CI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.devtools.eval import (
    BASE_MODES,
    KS,
    Case,
    EmbeddingCache,
    SimulatorEmbedder,
    load_cases,
    recall_at,
    reciprocal_rank,
    run_eval,
    summarize,
)
from shared.retrieve.features import FEATURES
from shared.retrieve.ranker import LinearModel, load_model


def test_recall_and_reciprocal_rank_arithmetic() -> None:
    ranked = ["a.py", "b.py", "c.py", "d.py"]
    assert recall_at(ranked, {"b.py", "z.py"}, 1) == 0.0
    assert recall_at(ranked, {"b.py", "z.py"}, 2) == 0.5
    assert recall_at(ranked, {"a.py", "d.py"}, 10) == 1.0
    assert reciprocal_rank(ranked, {"c.py"}) == pytest.approx(1 / 3)
    assert reciprocal_rank(ranked, {"z.py"}) == 0.0
    s = summarize([(ranked, {"a.py"}), (ranked, {"c.py", "z.py"})])
    assert s["recall@1"] == pytest.approx((1 + 0) / 2)
    assert s["recall@3"] == pytest.approx((1 + 0.5) / 2)
    assert s["mrr"] == pytest.approx((1 + 1 / 3) / 2)
    assert s["cases"] == 2


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def corpora(tmp_path: Path) -> Path:
    return corpora_at(tmp_path)


def corpora_at(tmp_path: Path) -> Path:
    """A tiny corpus, shop-1.0, under ``tmp_path/corpora``."""
    root = tmp_path / "corpora" / "shop-1.0"
    write(root, "shop/__init__.py", "")
    write(
        root,
        "shop/pricing.py",
        "def apply_discount(total, count):\n    return total / count\n\n\n"
        "def tax(amount):\n    return amount * 0.2\n",
    )
    write(
        root,
        "shop/api.py",
        "from shop.pricing import apply_discount\n\n\n"
        "def handle(cart):\n    return apply_discount(cart.total, cart.count)\n",
    )
    write(root, "shop/inventory.py", "def reserve(sku, stock):\n    return stock[sku] - 1\n")
    write(root, "tests/test_pricing.py", "def test_discount():\n    assert apply_discount(1, 1)\n")
    write(root, "docs/index.rst", "Shop\n====\n\nInventory and pricing.\n")
    (root / "shop" / "blob.bin").write_bytes(b"\x00\x01")
    return tmp_path / "corpora"


TRACE = """Discount crashes on empty carts
Traceback (most recent call last):
  File "/srv/app/shop/api.py", line 5, in handle
    return apply_discount(cart.total, cart.count)
  File "/srv/app/shop/pricing.py", line 2, in apply_discount
    return total / count
ZeroDivisionError: division by zero
"""


def cases_file(tmp_path: Path) -> Path:
    rows = [
        {
            "id": "t-1",
            "pypi_name": "shop",
            "pypi_version": "1.0",
            "query": TRACE,
            "gold_files": ["shop/pricing.py"],
            "query_kind": "traceback",
        },
        {
            "id": "t-2",
            "pypi_name": "shop",
            "pypi_version": "1.0",
            "query": "Reserving stock fails\nKeyError: 'sku' in reserve stock",
            "gold_files": ["shop/inventory.py"],
            "query_kind": "error_message",
        },
        {
            "id": "t-3",
            "pypi_name": "gone",
            "pypi_version": "9",
            "query": "ValueError: x",
            "gold_files": ["gone.py"],
        },
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_eval_ranks_files_per_mode_and_skips_a_missing_corpus(
    tmp_path: Path, corpora: Path
) -> None:
    cases = load_cases(cases_file(tmp_path))
    cache = EmbeddingCache(tmp_path / "cache" / "vectors.sqlite")
    # the learned mode orders with a model that reads test paths only: tests first
    n = len(FEATURES)
    likes_tests = tuple(1.0 if f == "test_path" else 0.0 for f in FEATURES)
    model = LinearModel(FEATURES, (0.0,) * n, (1.0,) * n, likes_tests, 0.0)
    report = run_eval(cases, corpora, embedder=SimulatorEmbedder(), cache=cache, ranker=model)
    assert report.skipped == [{"id": "t-3", "reason": f"corpus missing: {corpora / 'gone-9'}"}]
    assert set(report.summary) == set(BASE_MODES)
    by_id = {row["id"]: row for row in report.cases}
    traced = by_id["t-1"]
    assert traced["frames"] == ["shop/pricing.py:2 apply_discount", "shop/api.py:5 handle"]
    assert traced["modes"]["frames"]["files"] == ["shop/pricing.py", "shop/api.py"]
    assert traced["modes"]["hybrid+frames"]["files"][0] == "shop/pricing.py"
    # the second case has no frames: the frames mode finds nothing, BM25 finds the file
    assert by_id["t-2"]["modes"]["frames"]["files"] == []
    assert by_id["t-2"]["modes"]["bm25"]["files"][0] == "shop/inventory.py"
    # summary is the mean over the two cases that ran
    for mode in BASE_MODES:
        rows = [by_id[i]["modes"][mode] for i in ("t-1", "t-2")]
        assert report.summary[mode]["cases"] == 2
        assert report.summary[mode]["recall@5"] == pytest.approx(
            sum(r["recall@5"] for r in rows) / 2
        )
        assert report.summary[mode]["mrr"] == pytest.approx(sum(r["rr"] for r in rows) / 2)
    assert report.summary["frames"]["mrr"] == pytest.approx(0.5)
    assert report.summary["hybrid+frames"]["recall@1"] == 1.0
    for row in (by_id["t-1"], by_id["t-2"]):
        fused, learned = row["modes"]["all"]["files"], row["modes"]["learned"]["files"]
        assert sorted(fused) == sorted(learned)
        assert fused[0] != "tests/test_pricing.py"  # the fusion's prior demotes it
        assert learned == ["tests/test_pricing.py"] + [f for f in fused if f != learned[0]]
    with pytest.raises(ValueError, match="needs a ranker"):
        run_eval(cases, corpora, embedder=SimulatorEmbedder(), cache=cache)
    cache.close()


def test_second_run_reuses_cached_chunk_vectors(tmp_path: Path, corpora: Path) -> None:
    calls: list[int] = []

    class Counting(SimulatorEmbedder):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            calls.append(len(texts))
            return super().embed(texts)

    cases = [Case("t-1", "shop-1.0", TRACE, ("shop/pricing.py",))]
    for _ in range(2):
        cache = EmbeddingCache(tmp_path / "cache.sqlite")
        run_eval(cases, corpora, embedder=Counting(), cache=cache, modes=["vector"])
        cache.close()
    # first run: the corpus' chunks, then the query; second run: the query only
    assert calls[0] > 1 and calls[1:] == [1, 1]


def test_cli_eval_writes_a_table_and_json(tmp_path: Path, corpora: Path) -> None:
    from typer.testing import CliRunner

    from producers.cli import cli

    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        cli,
        [
            "eval",
            "--cases",
            str(cases_file(tmp_path)),
            "--corpora",
            str(corpora),
            "--json",
            str(out),
            "--cache-dir",
            str(tmp_path / "c"),
            "--modes",
            "bm25,hybrid+frames",
        ],
        env={"TRACEHOUND_RERANK_BACKEND": "none"},
    )
    assert result.exit_code == 0, result.output
    assert "hybrid+frames" in result.output and "R@5" in result.output
    data = json.loads(out.read_text())
    assert data["modes"] == ["bm25", "hybrid+frames"]
    assert [c["id"] for c in data["cases"]] == ["t-1", "t-2"]
    assert data["skipped"][0]["id"] == "t-3"


def test_threshold_separates_misses_from_hits() -> None:
    from shared.devtools.calibration import flagged_shares, suggest_threshold

    points = [(0.9, True), (0.8, True), (0.7, True), (0.35, True), (0.3, False), (0.1, False)]
    c = suggest_threshold(points)
    assert c is not None and 0.3 < c.threshold < 0.35
    assert (c.misses_flagged, c.hits_flagged) == (1.0, 0.0)
    assert flagged_shares(points, 0.75) == (1.0, 0.5)
    # overlapping scores: the best trade-off, never a threshold sitting on a case's score
    mixed = [(0.9, True), (0.6, False), (0.5, True), (0.4, True), (0.2, False)]
    m = suggest_threshold(mixed)
    assert m is not None and m.threshold not in {s for s, _ in mixed}
    assert m.misses_flagged - m.hits_flagged == pytest.approx(0.5 - 0.0)
    assert suggest_threshold([(0.9, True), (0.2, True)]) is None  # nothing missed: no evidence


def test_eval_with_a_rerank_server_suggests_a_min_relevance(tmp_path: Path, corpora: Path) -> None:
    from shared.devtools.calibration import flagged_shares
    from shared.devtools.simulators.ollama import OllamaSimulator
    from shared.models.reranker import HttpReranker

    cases = [
        Case("t-1", "shop-1.0", TRACE, ("shop/pricing.py",)),
        Case("t-2", "shop-1.0", "KeyError: 'sku' in reserve stock", ("shop/inventory.py",)),
        # labelled with a file the text says nothing about: the shown file misses it
        Case("t-3", "shop-1.0", "tax amount is wrong for exempt items", ("shop/inventory.py",)),
    ]
    with OllamaSimulator() as sim:
        reranker = HttpReranker("tei", sim.url, "reranker")
        report = run_eval(
            cases,
            corpora,
            embedder=SimulatorEmbedder(),
            modes=["all", "all+rerank"],
            reranker=reranker,
            shown=1,
        )
    assert set(report.calibration) == {"all+rerank"}
    c = report.calibration["all+rerank"]
    rows = [row["modes"]["all+rerank"] for row in report.cases]
    held = [row["files"][0] in case.gold for row, case in zip(rows, cases, strict=True)]
    assert held[2] is False  # t-3's label cannot be found
    assert c is not None and (c["hits"], c["misses"]) == (sum(held), 3 - sum(held))
    points = [(row["best_relevance"], h) for row, h in zip(rows, held, strict=True)]
    assert all(0 <= s <= 1 for s, _ in points)
    assert flagged_shares(points, float(c["threshold"])) == pytest.approx(
        (c["misses_flagged"], c["hits_flagged"]), abs=1e-3
    )
    assert "best_relevance" not in report.cases[0]["modes"]["all"]


def test_cli_eval_reads_several_case_files_and_refuses_an_id_in_two(
    tmp_path: Path, corpora: Path
) -> None:
    from typer.testing import CliRunner

    from producers.cli import cli

    lines = cases_file(tmp_path).read_text().splitlines()
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text(lines[0] + "\n")
    second.write_text("\n".join(lines[1:]) + "\n")
    out = tmp_path / "out.json"
    args = ["eval", "--corpora", str(corpora), "--cache-dir", str(tmp_path / "c")]
    args += ["--modes", "bm25"]
    env = {"TRACEHOUND_RERANK_BACKEND": "none"}
    both = CliRunner().invoke(
        cli, [*args, "--cases", str(first), "--cases", str(second), "--json", str(out)], env=env
    )
    assert both.exit_code == 0, both.output
    assert [c["id"] for c in json.loads(out.read_text())["cases"]] == ["t-1", "t-2"]
    twice = CliRunner().invoke(cli, [*args, "--cases", str(first), "--cases", str(first)], env=env)
    assert twice.exit_code == 2 and "case ids in more than one place: t-1" in twice.output


def test_cli_cross_validation_reports_each_repository_and_writes_each_held_out_case(
    tmp_path: Path, corpora: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two repositories; the default setting of the cross-validation is what mode ``all``
    ranked, and every case's held-out score under each rule lands in the JSON."""
    import shutil

    from typer.testing import CliRunner

    from producers.cli import cli

    shutil.copytree(corpora / "shop-1.0", corpora / "store-2.0")
    rows = [json.loads(line) for line in cases_file(tmp_path).read_text().splitlines()][:2]
    rows += [r | {"id": "s-" + r["id"], "pypi_name": "store", "pypi_version": "2.0"} for r in rows]
    cases = tmp_path / "two.jsonl"
    cases.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "out.json"
    args = ["eval", "--cases", str(cases), "--corpora", str(corpora), "--cv", "repo"]
    args += ["--cache-dir", str(tmp_path / "c"), "--modes", "bm25", "--json", str(out)]
    done = CliRunner().invoke(cli, args, env={"TRACEHOUND_RERANK_BACKEND": "none"})
    assert done.exit_code == 0, done.output
    assert "each repository held out" in done.output and "held out store (2 cases)" in done.output
    written = json.loads(out.read_text())
    cv = written["cv"]
    assert cv["rule"] == "mean" and set(cv["chosen"]) == {"shop", "store"}
    assert cv["rows"]["default (the fusion the ranker reorders)"] == pytest.approx(
        {k: v for k, v in written["summary"]["all"].items() if k != "cases"}
    )
    assert [c["id"] for c in cv["cases"]] == ["t-1", "t-2", "s-t-1", "s-t-2"]
    assert all(set(c["held_out"]) == {"r5", "mrr", "mean"} for c in cv["cases"])
    by_id = {c["id"]: c for c in written["cases"]}
    for c in cv["cases"]:
        assert c["default"]["mrr"] == pytest.approx(by_id[c["id"]]["modes"]["all"]["rr"])
    # the learned ranker is scored beside the fusion, and the model fit on every case written
    assert "learned ranker, cross-validated: leave one repo out" in cv["rows"]
    metrics = {"recall@1", "recall@3", "recall@5", "recall@10", "mrr"}
    assert all(set(c["learned_held_out"]) == metrics for c in cv["cases"])
    assert "pairwise ranker, cross-validated: leave one repo out" in cv["rows"]
    assert all(set(c["pairwise_held_out"]) == metrics for c in cv["cases"])
    model = tmp_path / "model.json"
    saved = CliRunner().invoke(cli, [*args, "--save-ranker", str(model)])
    assert saved.exit_code == 0, saved.output
    assert load_model(model).features == FEATURES
    no_cv = [a for a in args if a not in ("--cv", "repo")] + ["--save-ranker", str(model)]
    refused = CliRunner().invoke(cli, no_cv)
    assert refused.exit_code == 2 and "--save-ranker needs --cv repo" in refused.output
    # a pairwise model that cannot be fit leaves the pointwise one scored, and written
    from shared.devtools import eval_command, ranker

    def no_pairs(rows, c=1.0, *, pairwise=False):  # type: ignore[no-untyped-def]
        if pairwise:
            raise ValueError("no case has a fix file and another candidate")
        return ranker.leave_one_repo_out(rows, c)

    with monkeypatch.context() as m:
        m.setattr(eval_command, "ranker_cv", no_pairs)
        alone = CliRunner().invoke(cli, [*args, "--save-ranker", str(model)])
    assert alone.exit_code == 0, alone.output
    assert "the pairwise ranker is not scored: no case has" in alone.output
    assert "wrote the learned ranker fit on every case" in alone.output
    cv = json.loads(out.read_text())["cv"]
    assert "learned ranker, cross-validated: leave one repo out" in cv["rows"]
    assert not any(k.startswith("pairwise") for k in cv["rows"])
    # --explain scores a case with the kind of model shipped, fit without its repository
    explained = CliRunner().invoke(cli, [*args, "--explain", "s-t-1"])
    assert explained.exit_code == 0, explained.output
    assert "scored by the pairwise ranker fit without store (2 cases)" in explained.output


def test_the_follow_up_cross_validation_reproduces_the_follow_up_mode(
    tmp_path: Path, corpora: Path
) -> None:
    """The cross-validation re-runs each case's lookups on its own fusion; at the default
    setting that must give exactly what the eval's all+followup mode ranked. With one file
    shown, the lookups read api.py (a frame) and find ``handle`` there; fused at half a
    retriever's weight (not the default, which only counts them as seen), that lifts api.py
    above the fix."""
    import shutil

    from shared.devtools.crossval import (
        SYMBOL_CAPS,
        Collector,
        followup_cv,
        leave_one_repo_out,
    )
    from shared.retrieve.hybrid import Fusion

    shutil.copytree(corpora / "shop-1.0", corpora / "store-2.0")
    cases = [c for c in load_cases(cases_file(tmp_path)) if c.corpus == "shop-1.0"]
    cases += [Case(f"s-{c.id}", "store-2.0", c.query, c.gold) for c in cases]
    collect = Collector(followup=True)
    report = run_eval(
        cases, corpora, embedder=SimulatorEmbedder(), modes=["all", "all+followup"],
        depth=100, shown=1, on_case=collect, collect_depth=100, collect_caps=SYMBOL_CAPS,
        followup_weight=0.5,
    )  # fmt: skip
    assert report.summary["all+followup"]["recall@1"] < report.summary["all"]["recall@1"]
    crossed = leave_one_repo_out(collect.cases, Fusion(), [], 1.0, 100)
    followed = followup_cv(collect.cases, crossed, [], default_weight=0.5)
    label, metrics = followed.rows[0]
    assert label == "default + lookups at weight 0.5"
    summary = report.summary["all+followup"]
    expected = (*(summary[f"recall@{k}"] for k in KS), summary["mrr"])
    assert metrics == pytest.approx(expected)
    assert set(followed.chosen) == {"shop", "store"}


def test_a_git_case_names_its_commit_as_corpus_and_is_scored_per_language(tmp_path: Path) -> None:
    shop = tmp_path / "corpora" / "acme__shop@0123456789ab"
    (shop / "src").mkdir(parents=True)
    (shop / "src" / "Cart.java").write_text(
        "package shop;\nclass Cart {\n  int total(int[] xs) { return xs[99]; }\n}\n"
    )
    (shop / "src" / "Other.java").write_text("package shop;\nclass Other {\n  void idle() {}\n}\n")
    lines = [
        {
            "id": f"acme__shop-{i}",
            "repo": "acme/shop",
            "language": "java",
            "query": "java.lang.ArrayIndexOutOfBoundsException\n\tat shop.Cart.total(Cart.java:3)",
            "query_kind": "traceback",
            "gold_files": ["src/Cart.java"],
            "artifact": {"type": "git", "repo": "acme/shop", "commit": "0123456789ab" + "c" * 28},
        }
        for i in range(2)
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(json.dumps(c) for c in lines))
    cases = load_cases(path)
    assert {(c.corpus, c.language) for c in cases} == {("acme__shop@0123456789ab", "java")}
    report = run_eval(cases, tmp_path / "corpora", embedder=SimulatorEmbedder(), modes=["all"])
    assert report.by_language["java"]["all"]["cases"] == 2
    assert report.by_language["java"]["all"]["recall@1"] == 1.0
