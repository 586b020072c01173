"""BM25 over a repo's whole keyword index, kept in step with it one segment at a time.

A worker maps each segment of the index once (from the machine's segment files,
``shared/index/segment_cache.py``), and when the index changes it maps only the new segments
and marks the removed chunks dead: the corpus statistics BM25Okapi's scores depend on (document
count, average length, the idf floor) are updated from those, never recomputed from the whole
corpus, and a query's term frequencies are summed over the segments that hold its words.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from shared.core.domain import ChunkHit
from shared.core.errors import PermanentError, TransientError
from shared.index.corpus import CorpusState, RedisCorpus
from shared.index.segment_cache import SegmentCache
from shared.index.segment_files import SegmentFile, keys_of
from shared.index.tokens import tokenize
from shared.intake.frames import PathMapper, shortest_first
from shared.retrieve.bm25 import EPSILON, length_norms, query_terms
from shared.retrieve.top_scores import Postings, add_term, top_documents


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
    """One loaded segment and which of its documents live."""

    seg: SegmentFile
    live: np.ndarray  # bool per document; replaced, never changed in place (views hold it)
    dead_df: np.ndarray | None = None  # per local term, dead documents holding it

    def live_df(self) -> np.ndarray:
        df = self.seg.term_frequencies()
        return df - self.dead_df if self.dead_df is not None else df

    def df_of(self, keys: np.ndarray) -> np.ndarray:
        """Live documents holding each term key (0 where the segment has none)."""
        sorted_keys = self.seg.a["term_sorted"]
        if not len(sorted_keys) or not len(keys):
            return np.zeros(len(keys), np.int64)
        at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
        hit = sorted_keys[at] == keys
        out = np.zeros(len(keys), np.int64)
        out[hit] = self.df_at(self.seg.a["term_local"][at[hit]])
        return out

    def df_at(self, local: np.ndarray) -> np.ndarray:
        """Live documents holding each of these local terms."""
        ip = self.seg.indptr
        df = ip[local + 1] - ip[local]
        return df - self.dead_df[local] if self.dead_df is not None else df

    def killed(self, docs: np.ndarray) -> tuple[_Part, np.ndarray | None]:
        """This part with ``docs`` dead too, and per local term how many of them held it
        (itself and None when they all were dead already)."""
        docs = docs[self.live[docs]]
        if not len(docs):
            return self, None
        gone = self.seg.terms_of(docs)
        live = self.live.copy()
        live[docs] = False
        dead_df = gone if self.dead_df is None else self.dead_df + gone
        return _Part(self.seg, live, dead_df), gone


def _global_df(parts: Iterable[_Part], keys: np.ndarray) -> np.ndarray:
    return sum((p.df_of(keys) for p in parts), np.zeros(len(keys), np.int64))


class _DfHistogram:
    """How many distinct terms of the live corpus hold each document frequency: what
    BM25Okapi's idf floor (epsilon times the mean idf over every term) needs, kept without a
    corpus-wide vocabulary in memory. Changes move terms between frequencies."""

    def __init__(self, parts: Sequence[_Part] = ()) -> None:
        """Counted from scratch over ``parts`` (one sort of every segment's term keys)."""
        keys = [p.seg.a["term_sorted"] for p in parts]
        dfs = [p.live_df()[p.seg.a["term_local"]] for p in parts]
        self.counts = np.zeros(1, np.int64)
        if not keys:
            return
        k, df = np.concatenate(keys), np.concatenate(dfs).astype(np.int64)
        order = np.argsort(k, kind="stable")  # each segment's keys are runs: a merge of runs
        k, df = k[order], df[order]
        starts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
        totals = np.add.reduceat(df, starts) if len(df) else df
        self.counts = np.bincount(totals[totals > 0], minlength=1).astype(np.int64)

    def copy(self) -> _DfHistogram:
        out = _DfHistogram()
        out.counts = self.counts.copy()
        return out

    def move(self, before: np.ndarray, after: np.ndarray) -> None:
        """Terms whose corpus-wide document frequency went from ``before`` to ``after``."""
        size = int(max(before.max(initial=0), after.max(initial=0))) + 1
        if size > len(self.counts):
            self.counts = np.concatenate((self.counts, np.zeros(size - len(self.counts), np.int64)))
        self.counts -= np.bincount(before[before > 0], minlength=len(self.counts))
        self.counts += np.bincount(after[after > 0], minlength=len(self.counts))

    def idf_floor(self, n: int) -> float:
        """epsilon times the mean of log(n - df + 0.5) - log(df + 0.5) over every term."""
        df = np.flatnonzero(self.counts)
        if not len(df):
            return 0.0
        weights = self.counts[df]
        idf = np.log(n - df + 0.5) - np.log(df + 0.5)
        return EPSILON * float((weights * idf).sum() / weights.sum())


class KeywordView:
    """The keyword index of one repo at one version: BM25 search, chunks by location, and
    chunks by the names they define. Reads no version: a retrieve asks for one view, once."""

    def __init__(
        self,
        repo: str,
        corpus: RedisCorpus,
        state: CorpusState,
        parts: list[_Part],
        histogram: _DfHistogram,
    ) -> None:
        self.repo, self.corpus, self.version, self.parts = repo, corpus, state.version, parts
        self.legacy = state.legacy
        self.bases = np.cumsum([0, *(len(p.seg) for p in parts)])
        self.lives = [p.live for p in parts]
        self.live = np.concatenate(self.lives) if parts else np.zeros(0, bool)
        self.size = int(self.live.sum())
        self.dead = np.flatnonzero(~self.live)
        self.postings = [
            Postings(p.seg, base) for p, base in zip(parts, self.bases.tolist(), strict=False)
        ]
        lengths = np.concatenate([p.seg.lengths for p in parts]) if parts else np.zeros(0)
        avgdl = float(lengths[self.live].sum()) / self.size if self.size else 1.0
        self.norm = length_norms(lengths, avgdl)
        self.floor = histogram.idf_floor(self.size)
        self._live_paths: list[np.ndarray] | None = None

    def documents(self) -> list[tuple[str, str, int, int]]:
        """Every live chunk as (id, path, start line, end line), in index order."""
        return [
            (p.seg.id_at(d), p.seg.path_at(d), int(p.seg.starts[d]), int(p.seg.ends[d]))
            for p, live in zip(self.parts, self.lives, strict=True)
            for d in np.flatnonzero(live).tolist()
        ]

    def _check(self, repo: str) -> None:
        if repo != self.repo:
            raise ValueError(f"a keyword view of {self.repo!r} was asked about {repo!r}")

    def _terms(self, query: Sequence[str]) -> tuple[list[np.ndarray], np.ndarray]:
        """Per part, each distinct query word's term there (-1: absent); per word its weight:
        BM25Okapi's idf over the live corpus times its count in the query (0 where no live
        document holds it)."""
        counts = query_terms(query)
        words = list(counts)
        keys = keys_of(words)
        found = [p.seg.find_terms(words, keys) for p in self.parts]
        df = np.zeros(len(words), np.int64)
        for part, local in zip(self.parts, found, strict=True):
            held = local >= 0
            df[held] += part.df_at(local[held])
        idf = np.log(self.size - df + 0.5) - np.log(df + 0.5)
        idf = np.where(idf < 0, self.floor, idf)
        weight = idf * np.asarray([counts[w] for w in words], dtype=np.float64)
        return found, np.where(df > 0, weight, 0.0)

    def scores(self, query: Sequence[str]) -> np.ndarray:
        """BM25Okapi's score of every document (dead ones 0) over the live corpus: every
        posting of every query term (the reference :meth:`search`'s top is tested against)."""
        score = np.zeros(len(self.live))
        if not query or not self.size:
            return score
        found, weight = self._terms(query)
        for part, local in zip(self.postings, found, strict=True):
            for j in np.flatnonzero((local >= 0) & (weight != 0)).tolist():
                add_term(score, self.norm, part, int(local[j]), float(weight[j]))
        score[self.dead] = 0.0
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
                path=p.seg.path_at(i),
                start_line=int(p.seg.starts[i]),
                end_line=int(p.seg.ends[i]),
                text=text,
                score=score,
            )
            for (p, i), cid, text, (_, score) in zip(located, ids, texts, ranked, strict=True)
        ]

    def texts(self, repo: str, ids: Sequence[str]) -> list[str]:
        """The chunks' texts ("" for one the corpus does not hold): the vector hits' code."""
        self._check(repo)
        return self.corpus.texts(repo, ids)

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
        found, weight = self._terms(query)
        top = top_documents(self.postings, found, weight, self.norm, self.dead, n)
        return self._hits(top)

    def path_mapper(self, repo: str) -> PathMapper:
        """The frame mapper over the live paths (found by key in each segment's files)."""
        self._check(repo)
        return _ViewPaths(self)

    def live_paths(self) -> list[np.ndarray]:
        """Per part, per path index, whether a live document has that path."""
        if self._live_paths is None:
            self._live_paths = [
                np.bincount(p.seg.path_of[live], minlength=p.seg.path_count) > 0
                for p, live in zip(self.parts, self.lives, strict=True)
            ]
        return self._live_paths

    def chunks_at(self, repo: str, path: str, line: int | None) -> list[ChunkHit]:
        self._check(repo)
        spans = [
            (int(p.seg.starts[d]), int(p.seg.ends[d]), base + d)
            for p, live, base in zip(self.parts, self.lives, self.bases.tolist(), strict=False)
            for d in p.seg.docs_of_path(path).tolist()
            if live[d]
        ]
        return self._hits([(i, 0.0) for i in chunks_covering(spans, line)])

    def chunks_of(self, repo: str, path: str) -> list[ChunkHit]:
        """Every live chunk of ``path`` in line order ([] for a path not in the index)."""
        self._check(repo)
        spans = sorted(
            (int(p.seg.starts[d]), base + d)
            for p, live, base in zip(self.parts, self.lives, self.bases.tolist(), strict=False)
            for d in p.seg.docs_of_path(path).tolist()
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
            for d in p.seg.defining(name).tolist()
            if live[d]
        ]
        return found or default


class _ViewPaths(PathMapper):
    """A PathMapper over a view's live paths that keeps no table of every path's suffixes:
    each segment file holds its paths' suffixes by key (a 1M-chunk repo's table took a second
    and ~100 MB per process to build)."""

    def __init__(self, view: KeywordView) -> None:
        self.view = view
        self._found: dict[tuple[str, ...], list[str]] = {}

    def ending_with(self, suffix: tuple[str, ...]) -> list[str]:
        if suffix not in self._found:
            joined = "/".join(suffix)
            paths = {
                p.seg.path(i)
                for p, live in zip(self.view.parts, self.view.live_paths(), strict=True)
                for i in p.seg.paths_ending_with(joined)
                if live[i]
            }
            self._found[suffix] = sorted(paths, key=shortest_first)
        return self._found[suffix]


@dataclass
class _Loaded:
    view: KeywordView
    parts: dict[int, _Part]
    histogram: _DfHistogram


_Change = tuple[str, int, _Part, np.ndarray | None]  # kind, segment id, part, terms' losses

# A change touching more than this share of the loaded terms counts the histogram again from
# scratch (one sort) instead of looking each touched term up in every segment.
RECOUNT_SHARE = 0.25


class BM25Index:
    """BM25Okapi's scores over every chunk of a repo (never a sample of it), from postings
    (``shared/retrieve/bm25.py``: rank-bm25's numbers, per query term over the chunks that hold
    it, instead of a Python loop over every chunk).

    One per worker process: :meth:`current` reads the index's version (one GET) and brings the
    loaded segments up to it. The search methods here each do that; a retrieve takes one view
    and asks it everything. Segments come mapped from ``cache`` (``shared/index/
    segment_cache.py``): with a directory, every process on the machine shares their pages.
    """

    def __init__(self, corpus: RedisCorpus, cache: SegmentCache | None = None) -> None:
        self.corpus = corpus
        self.cache = cache or SegmentCache(None)
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
        parts = dict(loaded.parts) if loaded is not None else {}
        listed = {s.sid for s in state.segments}
        changes: list[_Change] = []  # what moved which terms, in order
        for sid in [sid for sid in parts if sid not in listed]:
            changes.append(("drop", sid, parts.pop(sid), None))
        for info in state.segments:
            dead = state.dead.get(info.sid, np.zeros(0, dtype=np.int64))
            if info.sid in parts:
                part, gone = parts[info.sid].killed(dead)
                if part is not parts[info.sid]:
                    changes.append(("kill", info.sid, part, gone))
                    parts[info.sid] = part
                continue
            seg = self.corpus.segment_file(repo, info.sid, self.cache)
            if seg is None:  # retired by a merge after the state was read: read it again
                return None
            part, _ = _Part(seg, np.ones(len(seg), dtype=bool)).killed(dead)
            parts[info.sid] = part
            changes.append(("add", info.sid, part, None))
        ordered = [parts[s.sid] for s in state.segments]
        histogram = self._histogram(loaded, parts, changes)
        self.cache.touch([p.seg for p in ordered])
        view = KeywordView(repo, self.corpus, state, ordered, histogram)
        self._loaded[repo] = _Loaded(view, parts, histogram)
        return view

    @staticmethod
    def _histogram(
        loaded: _Loaded | None,
        parts: dict[int, _Part],
        changes: list[_Change],
    ) -> _DfHistogram:
        """The new version's histogram: the old one moved by ``changes``, or counted again."""
        touched = sum(p.seg.terms for kind, _, p, _ in changes if kind != "kill")
        total = sum(p.seg.terms for p in parts.values()) or 1
        if loaded is None or touched > RECOUNT_SHARE * total:
            return _DfHistogram(list(parts.values()))
        histogram = loaded.histogram.copy()
        # Replay the changes in order over the parts as they were before each one.
        before = dict(loaded.parts)
        for kind, sid, part, gone in changes:
            if kind == "kill":
                assert gone is not None
                held = np.flatnonzero(gone)
                delta = -gone[held]
            else:
                df = part.live_df()
                held = np.flatnonzero(df > 0)
                delta = df[held] if kind == "add" else -df[held]
            was = _global_df(before.values(), part.seg.term_keys[held])
            histogram.move(was, was + delta)
            if kind == "drop":
                before.pop(sid)
            else:
                before[sid] = part
        return histogram

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
