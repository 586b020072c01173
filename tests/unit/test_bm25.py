"""The postings scorer gives rank-bm25's BM25Okapi scores, on a real corpus of code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from shared.index.chunking import chunk_file
from shared.index.tokens import tokenize
from shared.retrieve.bm25 import Postings

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "traces"


def code_corpus() -> list[list[str]]:
    """Chunks of this repository's and the sample service's sources, tokenized as the index
    tokenizes them (path and text)."""
    docs: list[list[str]] = []
    for folder in ("shared", "producers", "workers", "tests/data/sample-service"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            text = path.read_bytes().decode("utf-8", errors="replace")  # one is Latin-1
            for c in chunk_file("th", rel, text):
                docs.append(tokenize(f"{c.path}\n{c.text}"))
    return docs


@pytest.fixture(scope="module")
def corpus() -> list[list[str]]:
    return code_corpus()


def queries() -> list[list[str]]:
    traces = [tokenize(p.read_text(encoding="utf-8")) for p in sorted(TRACES.glob("*.log"))]
    return [
        *traces,  # real traces: ~hundreds of tokens, many repeated
        tokenize("KeyError: 'redelivery_after' in celery_config"),
        ["self", "self", "def", "return"],  # terms in most chunks: the idf floor
        ["zzz_not_in_the_corpus"],
        [],
    ]


def test_scores_equal_bm25okapi_and_the_top_50_is_the_same(corpus: list[list[str]]) -> None:
    assert len(corpus) > 500
    reference, ours = BM25Okapi(corpus), Postings(corpus)
    floor = reference.epsilon * reference.average_idf
    floored = [w for w, v in reference.idf.items() if v == floor]
    assert floored, "the corpus must exercise the idf floor"
    for query in queries():
        expected = np.asarray(reference.get_scores(query))
        got = ours.scores(query)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
        top = np.argsort(-expected, kind="stable")[:50]
        assert list(np.argsort(-got, kind="stable")[:50]) == list(top)


def test_constants_are_bm25okapis(corpus: list[list[str]]) -> None:
    query = tokenize((TRACES / "python.log").read_text(encoding="utf-8"))
    reference = BM25Okapi(corpus, k1=1.2, b=0.5, epsilon=0.1)
    got = Postings(corpus, k1=1.2, b=0.5, epsilon=0.1).scores(query)
    np.testing.assert_allclose(got, reference.get_scores(query), rtol=0, atol=1e-6)


def test_an_empty_corpus_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one document"):
        Postings([])
