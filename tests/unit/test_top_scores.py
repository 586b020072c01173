"""The pruned top n (MaxScore) is BM25Okapi's top n, on corpora where pruning happens and on
tiny ones whose idf floor is negative (no bound holds there)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from shared.index.chunking import chunk_file
from shared.index.segment_files import SegmentFile, arrays_of, image, keys_of
from shared.index.segments import chunk_tokens, segment_of
from shared.retrieve.bm25 import length_norms, query_terms
from shared.retrieve.top_scores import Postings, top_documents

WORDS = [f"w{i}" for i in range(60)]


def corpus(rng: random.Random, docs: int, common: int) -> list[str]:
    """Documents of Zipf-ish words: a few in nearly every document, most rare."""
    out = []
    for _ in range(docs):
        words = rng.sample(WORDS[:common], k=common // 2)
        words += rng.choices(WORDS, weights=[1 / (i + 1) for i in range(len(WORDS))], k=20)
        out.append(" ".join(words))
    return out


SAME_WORDS = ["w0 w1 w2 w3", "w0 w1 w2 w4", "w0 w1 w3 w2", "w0 w1 w2 w5 w0"]


@pytest.mark.parametrize(("docs", "common", "seed"), [(400, 6, 1), (900, 10, 2), (0, 0, 3)])
def test_the_pruned_top_is_bm25okapis_top(docs: int, common: int, seed: int) -> None:
    rng = random.Random(seed)
    texts = corpus(rng, docs, common) if docs else SAME_WORDS  # the last: an idf floor below 0
    chunks = [chunk_file("r", f"d{i}.py", t)[0] for i, t in enumerate(texts)]
    cut = len(chunks) // 2
    parts = [segment_of(chunks[:cut]), segment_of(chunks[cut:])]
    files = [SegmentFile(image(arrays_of(s))) for s in parts]
    postings = [Postings(f, base) for f, base in zip(files, (0, cut), strict=True)]
    tokens = [chunk_tokens(c) for c in chunks]
    reference = BM25Okapi(tokens)
    assert (reference.average_idf < 0) == (not docs)
    lengths = np.asarray([len(t) for t in tokens])
    norm = length_norms(lengths, lengths.mean())
    for _ in range(25):
        query = rng.choices(WORDS[: 8 if not docs else None], k=rng.randint(1, 40))
        counts = query_terms(query)
        words = list(counts)
        found = [f.find_terms(words, keys_of(words)) for f in files]
        df = np.asarray([sum(1 for t in tokens if w in t) for w in words])
        floor = reference.epsilon * reference.average_idf  # BM25Okapi's own
        idf = np.log(len(tokens) - df + 0.5) - np.log(df + 0.5)
        idf = np.where(idf < 0, floor, idf)
        weight = np.where(df > 0, idf * np.asarray([counts[w] for w in words]), 0.0)
        expected = reference.get_scores(query)
        for n in (1, 5, 30):
            got = top_documents(postings, found, weight, norm, np.zeros(0, np.int64), n)
            best = sorted((s for s in expected.tolist() if s > 0), reverse=True)[:n]
            np.testing.assert_allclose([s for _, s in got], best, rtol=0, atol=1e-9)
            for doc, s in got:
                assert abs(s - expected[doc]) < 1e-9
