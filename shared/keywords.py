"""BM25 search over a repo's whole keyword corpus, rebuilt only when the corpus changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from rank_bm25 import BM25Okapi

from shared.corpus import CorpusSnapshot, RedisCorpus
from shared.domain import ChunkHit
from shared.tokens import tokenize


class KeywordIndex(Protocol):
    def search(self, repo: str, text: str, n: int) -> list[ChunkHit]: ...


@dataclass
class _Built:
    snap: CorpusSnapshot
    bm25: BM25Okapi | None


class BM25Index:
    """rank-bm25's BM25Okapi over every chunk of a repo (never a sample of it).

    The scorer is cached per repo and rebuilt when the corpus version moves, so a query on an
    unchanged corpus only pays for scoring.
    """

    def __init__(self, corpus: RedisCorpus) -> None:
        self.corpus = corpus
        self._built: dict[str, _Built] = {}

    def _index(self, repo: str) -> _Built:
        built = self._built.get(repo)
        if built is None or built.snap.version != self.corpus.version(repo):
            snap = self.corpus.snapshot(repo)
            bm25 = BM25Okapi(snap.tokens) if snap.tokens else None
            built = self._built[repo] = _Built(snap, bm25)
        return built

    def search(self, repo: str, text: str, n: int) -> list[ChunkHit]:
        query = tokenize(text)
        built = self._index(repo)
        if built.bm25 is None or not query:
            return []
        scores = np.asarray(built.bm25.get_scores(query))
        n = min(n, len(scores))
        top = np.argpartition(-scores, n - 1)[:n]
        ranked = sorted(
            ((int(i), float(scores[i])) for i in top if scores[i] > 0), key=lambda p: (-p[1], p[0])
        )
        return self.corpus.hits(repo, ranked, built.snap)
