"""BM25 over a repo's whole keyword index, kept in step with it one segment at a time.

A worker loads each segment of the index once (``shared/index/corpus.py``), and when the index
changes it loads only the new segments and marks the removed chunks dead: the corpus
statistics BM25Okapi's scores depend on (document count, average length, every term's document
frequency, the idf floor) are updated from those, never recomputed from the whole corpus.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from shared.core.domain import ChunkHit
from shared.core.errors import PermanentError, TransientError
from shared.index.corpus import CorpusState, RedisCorpus
from shared.index.segments import Segment
from shared.index.tokens import tokenize
from shared.intake.frames import PathMapper
from shared.retrieve.bm25 import EPSILON, K1, length_norms, okapi_idf, query_terms


class KeywordIndex(Protocol):
    def search(self, repo: str, text: str, n: int) -> list[ChunkHit]: ...


# A name defined in more places than this says little about which one failed (``__init__``,
# ``fit``, ``run``); it is left to the other signals. 2 (from 5) is the leave-one-repo-out
# rule's choice on 112 dev cases (README, *Cross-validated*).
MAX_DEFINITIONS = 2


class SymbolTable(Protocol):
    def get(self, name: str, default: list[int], /) -> list[int]: ...


def symbol_table(names: Iterable[Sequence[str]]) -> dict[str, list[int]]:
    """Defined name -> indexes of the chunks defining it, from each chunk's defined names."""
    table: dict[str, list[int]] = {}
    for i, defined in enumerate(names):
        for name in defined:
            table.setdefault(name, []).append(i)
    return table


def defining(
    table: SymbolTable, names: Sequence[str], *, max_definitions: int = MAX_DEFINITIONS
) -> list[int]:
    """Chunks defining ``names``, in the names' order; names defined too often are skipped."""
    found: list[int] = []
    for name in names:
        where = table.get(name, [])
        if len(where) <= max_definitions:
            found.extend(i for i in where if i not in found)
    return found


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


@dataclass
class _Part:
    """One loaded segment: its terms in the repo-wide vocabulary and which documents live."""

    seg: Segment
    gids: np.ndarray  # local term -> repo-wide term id
    live: np.ndarray  # bool per document
    live_df: np.ndarray  # per local term: live documents holding it
    keys: np.ndarray = field(init=False)  # gids sorted, to find a repo-wide term's local id
    local: np.ndarray = field(init=False)
    _paths: tuple[dict[str, int], np.ndarray, np.ndarray] | None = None
    _symbols: dict[str, list[int]] | None = None

    def __post_init__(self) -> None:
        order = np.argsort(self.gids, kind="stable")
        self.keys, self.local = self.gids[order], order

    def dead_df(self, docs: np.ndarray) -> np.ndarray:
        """Per local term, how many of ``docs`` hold it."""
        mask = np.zeros(len(self.seg), dtype=bool)
        mask[docs] = True
        held = mask[self.seg.postings.docs]
        return np.bincount(
            self.seg.term_of_postings()[held], minlength=len(self.seg.postings.vocab)
        )

    def at_path(self, path: str) -> np.ndarray:
        """The documents of ``path`` (dead ones included)."""
        if self._paths is None:
            order = np.argsort(self.seg.path_of, kind="stable")
            bounds = np.searchsorted(self.seg.path_of[order], np.arange(len(self.seg.paths) + 1))
            self._paths = ({p: i for i, p in enumerate(self.seg.paths)}, order, bounds)
        index, order, bounds = self._paths
        i = index.get(path)
        return order[bounds[i] : bounds[i + 1]] if i is not None else order[:0]

    def symbols(self) -> dict[str, list[int]]:
        if self._symbols is None:
            self._symbols = symbol_table(self.seg.iter_names())
        return self._symbols


class _Vocabulary:
    """Repo-wide term ids and document frequencies over the live documents of every segment."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.df = np.zeros(0, dtype=np.int64)

    def add(self, seg: Segment, dead: np.ndarray) -> _Part:
        vocab = seg.postings.vocab
        gids = np.fromiter(
            (self.ids.setdefault(w, len(self.ids)) for w in vocab), dtype=np.int64, count=len(vocab)
        )
        if len(self.ids) > len(self.df):
            grown = np.zeros(max(len(self.ids), 2 * len(self.df)), dtype=np.int64)
            grown[: len(self.df)] = self.df
            self.df = grown
        live = np.ones(len(seg), dtype=bool)
        live[dead] = False
        part = _Part(seg, gids, live, np.diff(seg.postings.indptr).astype(np.int64))
        if len(dead):
            part.live_df = part.live_df - part.dead_df(dead)
        self.df[gids] += part.live_df
        return part

    def kill(self, part: _Part, docs: np.ndarray) -> None:
        """Mark more of ``part``'s documents dead (in a new array: views keep the old one)."""
        docs = docs[part.live[docs]]
        if not len(docs):
            return
        gone = part.dead_df(docs)
        part.live = part.live.copy()
        part.live[docs] = False
        part.live_df = part.live_df - gone
        self.df[part.gids] -= gone

    def drop(self, part: _Part) -> None:
        self.df[part.gids] -= part.live_df

    def garbage(self) -> bool:
        """Most ids name terms no live document holds any more (a long run of edits)."""
        return len(self.ids) > 50_000 and int((self.df > 0).sum()) * 2 < len(self.ids)


class KeywordView:
    """The keyword index of one repo at one version: BM25 search, chunks by location, and
    chunks by the names they define. Reads no version: a retrieve asks for one view, once."""

    def __init__(
        self,
        repo: str,
        corpus: RedisCorpus,
        state: CorpusState,
        parts: list[_Part],
        vocab: _Vocabulary,
        previous: KeywordView | None,
    ) -> None:
        self.repo, self.corpus, self.version, self.parts = repo, corpus, state.version, parts
        self.legacy = state.legacy
        self.vocab = vocab.ids
        self.bases = np.cumsum([0, *(len(p.seg) for p in parts)])
        self.lives = [p.live for p in parts]  # never changed in place, see _Vocabulary.kill
        self.live = np.concatenate(self.lives) if parts else np.zeros(0, bool)
        self.size = int(self.live.sum())
        lengths = np.concatenate([p.seg.postings.lengths for p in parts]) if parts else np.zeros(0)
        avgdl = float(lengths[self.live].sum()) / self.size if self.size else 1.0
        self.norm = length_norms(lengths, avgdl)
        present = vocab.df > 0
        self.idf = np.zeros(len(vocab.df))
        self.idf[present] = okapi_idf(vocab.df[present], self.size, epsilon=EPSILON)
        self._mapper: tuple[frozenset[str], PathMapper] | None = (
            previous._mapper if previous is not None else None
        )

    def documents(self) -> list[tuple[str, str, int, int]]:
        """Every live chunk as (id, path, start line, end line), in index order."""
        return [
            (
                p.seg.id_at(d),
                p.seg.paths[int(p.seg.path_of[d])],
                int(p.seg.starts[d]),
                int(p.seg.ends[d]),
            )
            for p, live in zip(self.parts, self.lives, strict=True)
            for d in np.flatnonzero(live).tolist()
        ]

    def _check(self, repo: str) -> None:
        if repo != self.repo:
            raise ValueError(f"a keyword view of {self.repo!r} was asked about {repo!r}")

    def scores(self, query: Sequence[str]) -> np.ndarray:
        """BM25Okapi's score of every document (dead ones 0) over the live corpus."""
        score = np.zeros(len(self.live))
        counts = query_terms(query)
        # Terms a later version added (the vocabulary is shared) have no idf in this view.
        known = [w for w in counts if self.vocab.get(w, len(self.idf)) < len(self.idf)]
        if not known or not self.size:
            return score
        g = np.asarray([self.vocab[w] for w in known], dtype=np.int64)
        weight = self.idf[g] * np.asarray([counts[w] for w in known], dtype=np.float64)
        for part, base in zip(self.parts, self.bases.tolist(), strict=False):
            if not len(part.keys):
                continue
            at = np.minimum(np.searchsorted(part.keys, g), len(part.keys) - 1)
            postings = part.seg.postings
            for j in np.flatnonzero(part.keys[at] == g).tolist():
                t = part.local[at[j]]
                lo, hi = postings.indptr[t], postings.indptr[t + 1]
                docs = postings.docs[lo:hi] + base
                tf = postings.tfs[lo:hi]
                score[docs] += weight[j] * (tf * (K1 + 1) / (tf + self.norm[docs]))
        score[~self.live] = 0.0
        return score

    def _locate(self, doc: int) -> tuple[_Part, int]:
        k = int(np.searchsorted(self.bases, doc, side="right")) - 1
        return self.parts[k], doc - int(self.bases[k])

    def _hits(self, ranked: Sequence[tuple[int, float]]) -> list[ChunkHit]:
        located = [self._locate(d) for d, _ in ranked]
        ids = [p.seg.id_at(i) for p, i in located]
        texts = self.corpus.texts(self.repo, ids)
        return [
            ChunkHit(
                chunk_id=cid,
                path=p.seg.paths[int(p.seg.path_of[i])],
                start_line=int(p.seg.starts[i]),
                end_line=int(p.seg.ends[i]),
                text=text,
                score=score,
            )
            for (p, i), cid, text, (_, score) in zip(located, ids, texts, ranked, strict=True)
        ]

    def search(self, repo: str, text: str, n: int) -> list[ChunkHit]:
        self._check(repo)
        if not self.size:
            # Never silently keyword-less: an empty index means the repo was never indexed,
            # or Redis lost it (a restart without persistence).
            if self.legacy:
                raise PermanentError(
                    f"the keyword index of repo {repo!r} is in the format before segments: "
                    "run `tracehound index` once to convert it (nothing is embedded again)"
                )
            raise PermanentError(
                f"no keyword index for repo {repo!r} (never indexed, or Redis lost it): "
                "`tracehound index` rebuilds it"
            )
        query = tokenize(text)
        if not query:
            return []
        scores = self.scores(query)
        n = min(n, len(scores))
        top = np.argpartition(-scores, n - 1)[:n]
        ranked = sorted(
            ((int(i), float(scores[i])) for i in top if scores[i] > 0), key=lambda p: (-p[1], p[0])
        )
        return self._hits(ranked)

    def path_mapper(self, repo: str) -> PathMapper:
        """The frame mapper over the live paths, reused from the view before while they are
        the same (an edit that keeps a file's name keeps the mapper)."""
        self._check(repo)
        paths = frozenset(
            p.seg.paths[k]
            for p, live in zip(self.parts, self.lives, strict=True)
            for k in np.unique(p.seg.path_of[live]).tolist()
        )
        if self._mapper is None or self._mapper[0] != paths:
            self._mapper = (paths, PathMapper(paths))
        return self._mapper[1]

    def chunks_at(self, repo: str, path: str, line: int | None) -> list[ChunkHit]:
        self._check(repo)
        spans = [
            (int(p.seg.starts[d]), int(p.seg.ends[d]), base + d)
            for p, live, base in zip(self.parts, self.lives, self.bases.tolist(), strict=False)
            for d in p.at_path(path).tolist()
            if live[d]
        ]
        return self._hits([(i, 0.0) for i in chunks_covering(spans, line)])

    def chunks_of(self, repo: str, path: str) -> list[ChunkHit]:
        """Every live chunk of ``path`` in line order ([] for a path not in the index)."""
        self._check(repo)
        spans = sorted(
            (int(p.seg.starts[d]), base + d)
            for p, live, base in zip(self.parts, self.lives, self.bases.tolist(), strict=False)
            for d in p.at_path(path).tolist()
            if live[d]
        )
        return self._hits([(i, 0.0) for _, i in spans])

    def defining(self, repo: str, names: Sequence[str]) -> list[ChunkHit]:
        """Chunks whose code defines one of ``names`` (functions, classes, methods)."""
        self._check(repo)
        return self._hits([(i, 0.0) for i in defining(self, names)])

    def get(self, name: str, default: list[int], /) -> list[int]:
        """The live chunks defining ``name``, as repo-wide document indexes (a SymbolTable)."""
        found = [
            base + d
            for p, live, base in zip(self.parts, self.lives, self.bases.tolist(), strict=False)
            for d in p.symbols().get(name, [])
            if live[d]
        ]
        return found or default


@dataclass
class _Loaded:
    view: KeywordView | None
    parts: dict[int, _Part]
    vocab: _Vocabulary


class BM25Index:
    """BM25Okapi's scores over every chunk of a repo (never a sample of it), from postings
    (``shared/retrieve/bm25.py``: rank-bm25's numbers, per query term over the chunks that hold
    it, instead of a Python loop over every chunk).

    One per worker process: :meth:`current` reads the index's version (one GET) and brings the
    loaded segments up to it. The search methods here each do that; a retrieve takes one view
    and asks it everything.
    """

    def __init__(self, corpus: RedisCorpus) -> None:
        self.corpus = corpus
        self._loaded: dict[str, _Loaded] = {}

    def current(self, repo: str) -> KeywordView:
        loaded = self._loaded.get(repo)
        view = loaded.view if loaded is not None else None
        if view is not None and view.version == self.corpus.version(repo):
            return view
        for _ in range(3):
            view = self._refresh(repo, self.corpus.state(repo), self._loaded.get(repo))
            if view is not None:
                return view
        raise TransientError(f"keyword index of {repo!r} kept changing while it was loaded")

    def _refresh(self, repo: str, state: CorpusState, loaded: _Loaded | None) -> KeywordView | None:
        if loaded is None or loaded.vocab.garbage():
            loaded = _Loaded(None, {}, _Vocabulary())
        parts = dict(loaded.parts)
        vocab = loaded.vocab
        listed = {s.sid for s in state.segments}
        for sid in [sid for sid in parts if sid not in listed]:
            vocab.drop(parts.pop(sid))
        for info in state.segments:
            dead = state.dead.get(info.sid, np.zeros(0, dtype=np.int64))
            if info.sid in parts:
                vocab.kill(parts[info.sid], dead)
                continue
            seg = self.corpus.segment(repo, info.sid)
            if seg is None:  # retired by a merge after the state was read: read it again
                self._loaded[repo] = _Loaded(loaded.view, parts, vocab)
                return None
            parts[info.sid] = vocab.add(seg, dead)
        ordered = [parts[s.sid] for s in state.segments]
        view = KeywordView(repo, self.corpus, state, ordered, vocab, loaded.view)
        self._loaded[repo] = _Loaded(view, parts, vocab)
        return view

    def search(self, repo: str, text: str, n: int) -> list[ChunkHit]:
        return self.current(repo).search(repo, text, n)

    def path_mapper(self, repo: str) -> PathMapper:
        return self.current(repo).path_mapper(repo)

    def chunks_at(self, repo: str, path: str, line: int | None) -> list[ChunkHit]:
        return self.current(repo).chunks_at(repo, path, line)

    def defining(self, repo: str, names: Sequence[str]) -> list[ChunkHit]:
        return self.current(repo).defining(repo, names)

    def chunks_of(self, repo: str, path: str) -> list[ChunkHit]:
        return self.current(repo).chunks_of(repo, path)
