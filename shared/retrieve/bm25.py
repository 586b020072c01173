"""rank-bm25's ``BM25Okapi`` scores, computed from an inverted index.

``BM25Okapi.get_scores`` loops in Python over every document for each query token: seconds per
query on a 100k-chunk repo. The scores only change for documents that hold a query term, so
here each term keeps its postings (document indexes and term frequencies, numpy arrays) and a
query touches only those. The formula, its constants (k1, b, epsilon) and its idf floor are
BM25Okapi's, and a repeated query token counts once per repetition, as there; tests/unit
asserts the scores equal rank-bm25's on a real corpus. rank-bm25 stays the reference (and the
eval's in-memory index).

:class:`Postings` scores one list of documents; the keyword index spreads the same arithmetic
over segments (``shared/retrieve/keywords.py``) with the statistics of the whole corpus.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from shared.index.segments import invert

K1, B, EPSILON = 1.5, 0.75, 0.25  # BM25Okapi's defaults


def okapi_idf(df: np.ndarray, n: int, *, epsilon: float = EPSILON) -> np.ndarray:
    """BM25Okapi's idf for each term's document frequency ``df`` (every one > 0) in ``n``
    documents: log(n - df + 0.5) - log(df + 0.5), and where that is negative, ``epsilon``
    times the average idf over the whole vocabulary."""
    idf = np.log(n - df + 0.5) - np.log(df + 0.5)
    if not len(idf):
        return idf
    floor = epsilon * float(idf.mean())
    return np.where(idf < 0, floor, idf)


def length_norms(lengths: np.ndarray, avgdl: float, *, k1: float = K1, b: float = B) -> np.ndarray:
    """The k1 * (1 - b + b * |d| / avgdl) term of each document."""
    return k1 * (1 - b + b * lengths / avgdl)


def query_terms(query: Sequence[str]) -> Counter[str]:
    """Each distinct query token with how often it occurs: BM25Okapi adds a term's share once
    per repetition, so the share is multiplied by the count."""
    return Counter(query)


class Postings:
    """BM25Okapi over ``docs`` (token lists), scored per query term over its postings only."""

    def __init__(
        self,
        docs: Sequence[Sequence[str]],
        *,
        k1: float = K1,
        b: float = B,
        epsilon: float = EPSILON,
    ) -> None:
        if not docs:
            raise ValueError("BM25 needs at least one document")
        inv = invert(docs)
        self.k1 = k1
        self.size = len(docs)
        self.vocab = {w: i for i, w in enumerate(inv.vocab)}
        self.indptr, self.docs, self.tfs = inv.indptr, inv.docs, inv.tfs
        self.idf = okapi_idf(np.diff(inv.indptr), self.size, epsilon=epsilon)
        avgdl = float(inv.lengths.sum()) / self.size
        self.norm = length_norms(inv.lengths, avgdl, k1=k1, b=b)

    def scores(self, query: Sequence[str]) -> np.ndarray:
        """One score per document, as ``BM25Okapi(docs).get_scores(query)`` gives them."""
        score = np.zeros(self.size)
        for word, times in query_terms(query).items():
            t = self.vocab.get(word)
            if t is None:
                continue
            lo, hi = self.indptr[t], self.indptr[t + 1]
            docs, tf = self.docs[lo:hi], self.tfs[lo:hi]
            score[docs] += times * self.idf[t] * (tf * (self.k1 + 1) / (tf + self.norm[docs]))
        return score
