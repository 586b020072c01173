"""Unit tests of reciprocal rank fusion and per-file grouping of fused chunks."""

from __future__ import annotations

import pytest

from shared.core.domain import ChunkHit
from shared.retrieve.fusion import RRF_K, group_by_file, reciprocal_rank_fusion
from shared.retrieve.priors import PathPrior


def hit(chunk_id: str, path: str | None = None, score: float = 0.0) -> ChunkHit:
    return ChunkHit(
        chunk_id=chunk_id,
        path=path or f"{chunk_id}.py",
        start_line=1,
        end_line=10,
        text=f"code of {chunk_id}",
        score=score,
    )


def ids(hits: list[ChunkHit]) -> list[str]:
    return [h.chunk_id for h in hits]


def test_default_constant_is_sixty() -> None:
    assert RRF_K == 60


def test_score_is_sum_of_reciprocal_ranks_with_k_60() -> None:
    dense = [hit("a"), hit("b"), hit("c")]
    keyword = [hit("x"), hit("y"), hit("a")]
    fused = {h.chunk_id: h.score for h in reciprocal_rank_fusion([dense, keyword])}
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 63)
    assert fused["b"] == pytest.approx(1 / 62)
    assert fused["x"] == pytest.approx(1 / 61)
    assert fused["y"] == pytest.approx(1 / 62)
    assert fused["c"] == pytest.approx(1 / 63)


def test_chunk_found_by_both_retrievers_beats_chunks_first_in_only_one() -> None:
    dense = [hit("dense-only"), hit("both")]
    keyword = [hit("keyword-only"), hit("both")]
    assert ids(reciprocal_rank_fusion([dense, keyword]))[0] == "both"  # 2/62 > 1/61


def ranked_both_at(rank: int) -> list[list[ChunkHit]]:
    """Rankings where "top" is first in one list only and "deep" is at ``rank`` in both."""
    dense = [hit("top")] + [hit(f"d{i}") for i in range(rank - 2)] + [hit("deep")]
    keyword = [hit(f"k{i}") for i in range(rank - 1)] + [hit("deep")]
    return [dense, keyword]


def test_agreement_at_rank_40_in_both_lists_beats_a_single_first_place() -> None:
    scores = {h.chunk_id: h.score for h in reciprocal_rank_fusion(ranked_both_at(40))}
    assert scores["deep"] == pytest.approx(2 / 100)  # 0.0200 > 1/61 = 0.0164
    assert ids(reciprocal_rank_fusion(ranked_both_at(40)))[0] == "deep"


def test_agreement_at_rank_70_in_both_lists_loses_to_a_single_first_place() -> None:
    scores = {h.chunk_id: h.score for h in reciprocal_rank_fusion(ranked_both_at(70))}
    assert scores["deep"] == pytest.approx(2 / 130)  # 0.0154 < 1/61 = 0.0164
    assert ids(reciprocal_rank_fusion(ranked_both_at(70)))[0] == "top"


def test_smaller_k_changes_the_scores() -> None:
    fused = reciprocal_rank_fusion([[hit("a"), hit("b")]], k=1)
    assert [h.score for h in fused] == pytest.approx([1 / 2, 1 / 3])


def test_ties_keep_first_appearance_order() -> None:
    dense = [hit("a"), hit("b")]
    keyword = [hit("c"), hit("d")]
    # a and c tie at 1/61, b and d at 1/62: first seen comes first, every time.
    for _ in range(3):
        assert ids(reciprocal_rank_fusion([dense, keyword])) == ["a", "c", "b", "d"]


def test_fused_hits_keep_their_chunk_data_with_the_fused_score() -> None:
    original = hit("a", path="svc/orders.py", score=0.93)
    [fused] = reciprocal_rank_fusion([[original]])
    assert (fused.path, fused.text, fused.start_line) == ("svc/orders.py", "code of a", 1)
    assert fused.score == pytest.approx(1 / 61)


def test_no_rankings_give_no_hits() -> None:
    assert reciprocal_rank_fusion([]) == []
    assert reciprocal_rank_fusion([[], []]) == []


def test_files_score_their_best_chunks_each_counting_less_than_the_one_before() -> None:
    fused = [
        hit("o1", "orders.py", 0.05),
        hit("p1", "payments.py", 0.04),
        hit("o2", "orders.py", 0.03),
        hit("u1", "users.py", 0.02),
        hit("p2", "payments.py", 0.01),
    ]
    groups = group_by_file(fused)  # FILE_DECAY 0.5: a second chunk counts half the first
    assert [c.path for c in groups] == ["orders.py", "payments.py", "users.py"]
    assert [c.score for c in groups] == pytest.approx([0.065, 0.045, 0.02])
    steeper = group_by_file(fused, decay=0.3)
    assert [c.score for c in steeper] == pytest.approx([0.059, 0.043, 0.02])
    assert [ids(c.chunks) for c in groups] == [["o1", "o2"], ["p1", "p2"], ["u1"]]


def test_a_file_several_chunks_point_into_beats_one_lucky_chunk() -> None:
    fused = [
        hit("lucky", "helpers.py", 0.030),
        hit("a", "orders.py", 0.025),
        hit("b", "orders.py", 0.020),
    ]
    assert [c.path for c in group_by_file(fused)] == ["orders.py", "helpers.py"]
    # Only the best few count: a long file does not win by its length alone.
    many = [hit("top", "small.py", 0.05)] + [hit(f"c{i}", "long.py", 0.02) for i in range(40)]
    assert [c.path for c in group_by_file(many)] == ["small.py", "long.py"]


def test_a_prior_weighs_files_by_path() -> None:
    fused = [hit("t", "tests/test_orders.py", 0.05), hit("o", "orders.py", 0.03)]
    prior = PathPrior(["tests/"], 0.3)
    assert [c.path for c in group_by_file(fused, weight=prior)] == [
        "orders.py",
        "tests/test_orders.py",
    ]
    assert [c.path for c in group_by_file(fused)] == ["tests/test_orders.py", "orders.py"]


def test_chunks_per_file_are_capped_keeping_the_best() -> None:
    fused = [hit(f"c{i}", "big.py", 1.0 - i / 10) for i in range(6)]
    [candidate] = group_by_file(fused, chunks_per_file=2)
    assert ids(candidate.chunks) == ["c0", "c1"]
    assert candidate.lines == "1-10"


def test_weights_scale_each_rankings_contribution() -> None:
    frames = [hit("framed")]
    dense = [hit("dense-top"), hit("framed")]
    fused = {h.chunk_id: h.score for h in reciprocal_rank_fusion([frames, dense], weights=[3, 1])}
    assert fused["framed"] == pytest.approx(3 / 61 + 1 / 62)
    assert fused["dense-top"] == pytest.approx(1 / 61)


def test_weights_must_match_the_rankings() -> None:
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([[hit("a")]], weights=[1.0, 2.0])
