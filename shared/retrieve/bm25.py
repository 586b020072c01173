"""rank-bm25's ``BM25Okapi`` scores, computed from an inverted index.

``BM25Okapi.get_scores`` loops in Python over every document for each query token: seconds per
query on a 100k-chunk repo. The scores only change for documents that hold a query term, so
here each term keeps its postings (document indexes and term frequencies, numpy arrays) and a
query touches only those. The formula, its constants (k1, b, epsilon) and its idf floor are
BM25Okapi's, and a repeated query token counts once per repetition, as there; tests/unit
asserts the scores equal rank-bm25's on a real corpus. rank-bm25 stays the reference (and the
eval's in-memory index).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np


class Postings:
    """BM25Okapi over ``docs`` (token lists), scored per query term over its postings only."""

    def __init__(
        self,
        docs: Sequence[Sequence[str]],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
    ) -> None:
        if not docs:
            raise ValueError("BM25 needs at least one document")
        self.k1 = k1
        self.size = len(docs)
        vocab: dict[str, int] = {}
        terms: list[int] = []
        tfs: list[int] = []
        starts = np.empty(self.size + 1, dtype=np.int64)
        starts[0] = 0
        doc_len = np.empty(self.size, dtype=np.float64)
        for d, doc in enumerate(docs):
            counts = Counter(doc)
            doc_len[d] = len(doc)
            terms.extend(vocab.setdefault(w, len(vocab)) for w in counts)
            tfs.extend(counts.values())
            starts[d + 1] = len(terms)
        term_of = np.asarray(terms, dtype=np.int32)
        doc_of = np.repeat(np.arange(self.size, dtype=np.int32), np.diff(starts))
        order = np.argsort(term_of, kind="stable")  # grouped by term, documents ascending
        self.docs = doc_of[order]
        self.tfs = np.asarray(tfs, dtype=np.int32)[order]
        df = np.bincount(term_of, minlength=len(vocab))
        self.indptr = np.concatenate(([0], np.cumsum(df))).astype(np.int64)
        self.vocab = vocab
        # BM25Okapi's idf: log(N - df + 0.5) - log(df + 0.5), with negative values replaced by
        # epsilon times the average idf (summed in the same order, so the same float).
        idf = [math.log(self.size - f + 0.5) - math.log(f + 0.5) for f in df.tolist()]
        floor = epsilon * (sum(idf) / len(idf))
        self.idf = np.asarray([v if v >= 0 else floor for v in idf], dtype=np.float64)
        avgdl = float(doc_len.sum()) / self.size
        self.norm = k1 * (1 - b + b * doc_len / avgdl)

    def scores(self, query: Sequence[str]) -> np.ndarray:
        """One score per document, as ``BM25Okapi(docs).get_scores(query)`` gives them."""
        score = np.zeros(self.size)
        for word in query:  # each repetition adds its share, as BM25Okapi's loop does
            t = self.vocab.get(word)
            if t is None:
                continue
            lo, hi = self.indptr[t], self.indptr[t + 1]
            docs, tf = self.docs[lo:hi], self.tfs[lo:hi]
            score[docs] += self.idf[t] * (tf * (self.k1 + 1) / (tf + self.norm[docs]))
        return score
