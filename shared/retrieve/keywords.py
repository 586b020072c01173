"""BM25 search over a repo's whole keyword corpus, rebuilt only when the corpus changed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from shared.core.domain import ChunkHit
from shared.core.errors import PermanentError
from shared.index.corpus import CorpusSnapshot, RedisCorpus
from shared.index.tokens import tokenize
from shared.intake.frames import PathMapper
from shared.retrieve.bm25 import Postings


class KeywordIndex(Protocol):
    def search(self, repo: str, text: str, n: int) -> list[ChunkHit]: ...


# A name defined in more places than this says little about which one failed (``__init__``,
# ``fit``, ``run``); it is left to the other signals.
MAX_DEFINITIONS = 5


def symbol_table(names: Sequence[Sequence[str]]) -> dict[str, list[int]]:
    """Defined name -> indexes of the chunks defining it, from each chunk's defined names."""
    table: dict[str, list[int]] = {}
    for i, defined in enumerate(names):
        for name in defined:
            table.setdefault(name, []).append(i)
    return table


def defining(
    table: dict[str, list[int]], names: Sequence[str], *, max_definitions: int = MAX_DEFINITIONS
) -> list[int]:
    """Chunks defining ``names``, in the names' order; names defined too often are skipped."""
    found: list[int] = []
    for name in names:
        where = table.get(name, [])
        if len(where) <= max_definitions:
            found.extend(i for i in where if i not in found)
    return found


@dataclass
class _Built:
    snap: CorpusSnapshot
    bm25: Postings | None
    by_path: dict[str, list[int]] = field(default_factory=dict)
    symbols: dict[str, list[int]] = field(default_factory=dict)
    mapper: PathMapper | None = None  # built on the first trace with frames

    def __post_init__(self) -> None:
        for i, (path, _, _) in enumerate(self.snap.meta):
            self.by_path.setdefault(path, []).append(i)
        self.symbols = symbol_table(self.snap.names)


def chunks_covering(spans: list[tuple[int, int, int]], line: int | None) -> list[int]:
    """Indexes of the (start, end, index) spans holding ``line``; else the nearest one.

    A frame's line can fall outside every chunk (the trace came from another version of the
    file, or the line was blank); the nearest chunk still holds the code around it.
    """
    if not spans:
        return []
    ordered = sorted(spans)
    if line is None:
        return [ordered[0][2]]
    inside = [i for s, e, i in ordered if s <= line <= e]
    if inside:
        return inside[:1]
    nearest = min(ordered, key=lambda t: min(abs(t[0] - line), abs(t[1] - line)))
    return [nearest[2]]


class BM25Index:
    """BM25Okapi's scores over every chunk of a repo (never a sample of it), from postings
    (``shared/retrieve/bm25.py``: rank-bm25's numbers, per query term over the chunks that hold
    it, instead of a Python loop over every chunk).

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
            bm25 = Postings(snap.tokens) if snap.tokens else None
            built = self._built[repo] = _Built(snap, bm25)
        return built

    def search(self, repo: str, text: str, n: int) -> list[ChunkHit]:
        query = tokenize(text)
        built = self._index(repo)
        if built.bm25 is None:
            # Never silently keyword-less: an empty corpus means the repo was never indexed,
            # or Redis lost it (a restart without persistence).
            raise PermanentError(
                f"no keyword index for repo {repo!r} (never indexed, or Redis lost it): "
                "`tracehound index` rebuilds it"
            )
        if not query:
            return []
        scores = built.bm25.scores(query)
        n = min(n, len(scores))
        top = np.argpartition(-scores, n - 1)[:n]
        ranked = sorted(
            ((int(i), float(scores[i])) for i in top if scores[i] > 0), key=lambda p: (-p[1], p[0])
        )
        return self.corpus.hits(repo, ranked, built.snap)

    def path_mapper(self, repo: str) -> PathMapper:
        built = self._index(repo)
        if built.mapper is None:
            built.mapper = PathMapper(built.by_path.keys())
        return built.mapper

    def chunks_at(self, repo: str, path: str, line: int | None) -> list[ChunkHit]:
        built = self._index(repo)
        spans = [
            (built.snap.meta[i][1], built.snap.meta[i][2], i) for i in built.by_path.get(path, [])
        ]
        return self.corpus.hits(repo, [(i, 0.0) for i in chunks_covering(spans, line)], built.snap)

    def defining(self, repo: str, names: Sequence[str]) -> list[ChunkHit]:
        """Chunks whose code defines one of ``names`` (functions, classes, methods)."""
        built = self._index(repo)
        return self.corpus.hits(
            repo, [(i, 0.0) for i in defining(built.symbols, names)], built.snap
        )
