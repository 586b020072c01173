"""BM25Okapi's best ``n`` documents without scoring every posting of every query term.

A traceback as a query holds ~150 tokens, and the common ones (``self``, ``return``, ``line``)
have postings in most chunks: at 1M chunks a query touches ~6M postings, nearly all of them of
terms that add little to any score. MaxScore (Turtle and Flood, 1995) skips most of that work
and still returns the exact top ``n``: each term's contribution has an upper bound (its weight
times the largest ``tf (k1 + 1) / (tf + norm)`` any document can reach), so once the bounds of
the terms not yet scored add up to less than the ``n``-th best score so far (the threshold),
a document that none of the scored terms reached cannot get into the top ``n``. The remaining
terms are then added only for the documents that still can (one read of each posting list to
find them, instead of the arithmetic on all of it).

The scores of the documents returned are complete (every term added), so the top ``n`` and its
scores are those of the full computation (``KeywordView.scores``), which tests compare.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.index.segment_files import SegmentFile
from shared.retrieve.bm25 import K1


@dataclass(frozen=True)
class Postings:
    """One segment's place in the view's document numbering."""

    seg: SegmentFile
    base: int


def add_term(
    score: np.ndarray,
    norm: np.ndarray,
    part: Postings,
    term: int,
    weight: float,
    only: tuple[np.ndarray, np.ndarray] | None = None,
) -> None:
    """Add ``term``'s contribution (``weight`` its idf times its count in the query) to the
    scores of the part's documents holding it; with ``only`` (a mask over the part's
    documents, and the documents it selects, ascending), to those."""
    seg, base = part.seg, part.base
    end = base + len(seg)
    lo, hi = int(seg.indptr[term]), int(seg.indptr[term + 1])
    docs, tf = seg.docs[lo:hi], seg.tfs[lo:hi]
    if only is not None:
        mask, wanted = only
        if not len(wanted) or not len(docs):
            return
        if len(wanted) * 24 < len(docs):  # few: look each up (a term's documents ascend)
            at = np.minimum(np.searchsorted(docs, wanted), len(docs) - 1)
            at = at[docs[at] == wanted]
        else:  # many: one pass over the postings
            at = np.flatnonzero(mask[docs])
        docs, tf = docs[at], tf[at]
    norms = norm[base:end][docs]
    score[base:end][docs] += weight * (tf * (K1 + 1) / (tf + norms))


def top_documents(
    parts: Sequence[Postings],
    found: Sequence[np.ndarray],
    weight: np.ndarray,
    norm: np.ndarray,
    dead: np.ndarray,
    n: int,
) -> list[tuple[int, float]]:
    """The ``n`` best documents with a positive score, best first (ties: lower index first).

    ``found[k][j]`` is word j's term in part k (-1: absent), ``weight[j]`` its idf times its
    count in the query, ``norm`` each document's ``k1 (1 - b + b |d| / avgdl)``, ``dead`` the
    documents not to return.
    """
    size = len(norm)
    score = np.zeros(size)
    alive = np.ones(size, dtype=bool)
    alive[dead] = False
    min_norm = float(norm[alive].min()) if alive.any() else 0.0
    maxtf = np.zeros(len(weight))
    held_by = np.zeros(len(weight), np.int64)
    for part, local in zip(parts, found, strict=True):
        at = np.flatnonzero(local >= 0)
        maxtf[at] = np.maximum(maxtf[at], part.seg.a["term_maxtf"][local[at]])
        ip = part.seg.indptr
        held_by[at] += ip[local[at] + 1] - ip[local[at]]
    words = np.flatnonzero((held_by > 0) & (weight != 0))
    if (weight[words] < 0).any():  # an idf floor below zero (a tiny corpus): no bound holds
        bound = np.zeros(len(weight))
        order = words
    else:
        bound = weight * (maxtf * (K1 + 1) / (maxtf + min_norm))
        # Short posting lists first: the long ones (common words) are what the threshold can
        # spare, and they come last, where the bounds left are compared with it.
        order = words[np.argsort(held_by[words], kind="stable")]
    rest = np.concatenate((np.cumsum(bound[order][::-1])[::-1][1:], [0.0]))  # after each

    def scored(j: int, only: list[tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        for k, (part, local) in enumerate(zip(parts, found, strict=True)):
            if local[j] >= 0:
                add_term(
                    score, norm, part, int(local[j]), float(weight[j]), only[k] if only else None
                )

    # Finding the threshold reads every score: worth it only before a long posting list, once
    # the terms left could not lift an unscored document past the best scores so far, and
    # again after the postings scored since then have doubled.
    long = max(n, size // 64)
    ahead = np.append(held_by[order][1:], 0)  # the next term's postings
    threshold, done, postings, checked_at, reached = 0.0, len(order), 0, 0, 0.0
    for i, j in enumerate(order.tolist()):
        scored(j)
        postings += int(held_by[j])
        reached += float(bound[j])  # no score so far is above this
        if rest[i] <= 0 or rest[i] >= reached or ahead[i] < long or postings < 2 * checked_at:
            continue
        checked_at = postings
        score[dead] = 0.0
        threshold = nth_best(score, n)
        if rest[i] < threshold:
            done = i + 1
            break
    if done < len(order):
        # Only a document whose score can still reach the threshold needs the other terms.
        could = score >= threshold - rest[done - 1]
        masks = [could[p.base : p.base + len(p.seg)] for p in parts]
        only = [(m, np.flatnonzero(m)) for m in masks]
        for j in order[done:].tolist():
            scored(j, only)
        held = np.concatenate([wanted + p.base for p, (_, wanted) in zip(parts, only, strict=True)])
    else:
        held = np.arange(size)
    score[dead] = 0.0
    held = held[score[held] > 0]
    n = min(n, len(held))
    top = held[np.argpartition(-score[held], n - 1)[:n]] if n else held
    return sorted(((int(i), float(score[i])) for i in top), key=lambda p: (-p[1], p[0]))


def nth_best(score: np.ndarray, n: int) -> float:
    """The ``n``-th largest positive score (0 when fewer are positive)."""
    positive = score[score > 0]
    if len(positive) < n:
        return 0.0
    return float(np.partition(positive, len(positive) - n)[len(positive) - n])
