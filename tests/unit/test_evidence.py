"""The weak-evidence judgement without a reranker, and what the model and the cache see of it."""

from __future__ import annotations

from shared.analyze.cache import cache_identity
from shared.analyze.llm import build_messages
from shared.core.domain import (
    Candidate,
    ChunkHit,
    ErrorEvent,
    Evidence,
    GroupRef,
    Investigation,
)
from shared.retrieve.evidence import judge, lexical_overlap

EVENT = ErrorEvent(
    service="checkout",
    repo="shop",
    message="division by zero",
    exception_type="ZeroDivisionError",
    stacktrace="ZeroDivisionError: division by zero",
)
PRICING = "def allocate_discount(lines, coupon):\n    share = coupon.amount / len(lines)\n"


def candidate(path: str, text: str, rerank: float | None = None) -> Candidate:
    chunk = ChunkHit(chunk_id=path, path=path, start_line=1, end_line=2, text=text, score=0.1)
    return Candidate(path=path, score=0.1, chunks=[chunk], rerank_score=rerank)


QUERY = "ZeroDivisionError: division by zero\nin allocate_discount (pricing.py)\ncoupon lines"


def test_overlap_counts_the_errors_identifiers_the_top_file_holds() -> None:
    assert lexical_overlap(QUERY, candidate("shop/pricing.py", PRICING)) > 0.5
    assert lexical_overlap(QUERY, candidate("shop/mail.py", "def send(to): smtp.send(to)")) < 0.2


def test_without_a_reranker_an_in_repo_frame_is_strong_and_no_frame_with_little_overlap_weak() -> (
    None
):
    unrelated = [candidate("shop/mail.py", "def send(to): smtp.send(to)")]
    kw = {"min_relevance": 0.2, "min_overlap": 0.2}
    assert judge(QUERY, unrelated, own_frames=0, **kw).weak
    assert not judge(QUERY, unrelated, own_frames=2, **kw).weak  # the trace ran through it
    assert not judge(QUERY, [candidate("shop/pricing.py", PRICING)], own_frames=0, **kw).weak
    assert judge(QUERY, [], own_frames=0, **kw).weak


def test_a_rerank_score_decides_when_there_is_one() -> None:
    kw = {"own_frames": 3, "min_relevance": 0.2, "min_overlap": 0.2}
    assert judge(QUERY, [candidate("shop/pricing.py", PRICING, rerank=0.05)], **kw).weak
    assert not judge(QUERY, [candidate("shop/mail.py", "smtp", rerank=0.9)], **kw).weak


def test_the_model_is_told_when_evidence_is_weak_and_which_language_to_write() -> None:
    [_, plain] = build_messages(EVENT, [], nonce="n")
    assert "Evidence is weak" not in plain["content"] and "Korean" not in plain["content"]
    [_, told] = build_messages(
        EVENT,
        [],
        nonce="n",
        weak_reason="no frame of the trace is in the indexed code",
        language="ko",
    )
    assert "Evidence is weak: no frame of the trace is in the indexed code" in told["content"]
    assert "no confidence above 0.3" in told["content"]
    assert "in Korean" in told["content"] and "file paths, code" in told["content"]


def test_language_and_weakness_are_part_of_the_analysis_cache_key() -> None:
    inv = Investigation(event=EVENT, group=GroupRef(fingerprint="fp", window_start=0))
    weak = inv.model_copy(update={"evidence": Evidence(weak=True, reason="x")})
    keys = {
        cache_identity(inv, "m", "v1", "en"),
        cache_identity(inv, "m", "v1", "ko"),
        cache_identity(weak, "m", "v1", "en"),
    }
    assert len(keys) == 3
