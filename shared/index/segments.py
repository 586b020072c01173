"""Keyword-index segments: immutable inverted indexes of a batch of chunks, merged over time.

The keyword index of a repo is a list of segments (as in Lucene): each ``corpus.add`` writes
one segment holding its chunks' postings, a removed chunk is only marked dead, and small
segments are merged into larger ones in the background of indexing (:func:`merge_plan`). A
worker therefore loads a new segment when the index changes, never the whole corpus, and the
segments are compact arrays that load without parsing.

A segment is stored as byte strings (:meth:`Segment.fields`: compressed, as a reader reads a
segment once per machine, ``shared/index/segment_cache.py``; the store keeps the LARGE ones
apart, see ``shared/index/corpus.py``); string lists are joined by NUL, which neither chunk
ids, paths nor tokens contain.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from shared.core.domain import Chunk
from shared.index.chunking import defined_names
from shared.index.tokens import tokenize

FORMAT = b"2"
FORMAT_1 = b"1"  # uncompressed, as written before FORMAT 2; still read
LEVEL = 1  # zlib: its fastest level takes postings from 30 to 5 MB; higher levels gain little
SEP = "\0"
# Segments within one power of MERGE_FACTOR in size form a tier; a tier holding this many is
# merged into one. Fewer segments means fewer postings lookups per query term, more merging.
MERGE_FACTOR = 6
# A segment with more dead chunks than live ones is rewritten even if its tier is not full.
MAX_DEAD_SHARE = 0.5
# Merges stop at this many documents per segment: one segment's largest array stays far below
# Redis's 512 MB value limit, and a monorepo is a few such segments.
MAX_SEGMENT_DOCS = 250_000


@dataclass(frozen=True)
class Inverted:
    """Postings of a list of token lists: for local term t, documents
    ``docs[indptr[t]:indptr[t+1]]`` (ascending) with term frequencies ``tfs[...]``."""

    vocab: list[str]
    indptr: np.ndarray  # int64, len(vocab) + 1
    docs: np.ndarray  # int32
    tfs: np.ndarray  # int32 in memory, uint16 when stored unless a count needs more
    lengths: np.ndarray  # int32, tokens per document (repetitions counted)


def invert(docs: Sequence[Sequence[str]]) -> Inverted:
    vocab: dict[str, int] = {}
    terms: list[int] = []
    tfs: list[int] = []
    per_doc = np.zeros(len(docs), dtype=np.int64)
    lengths = np.empty(len(docs), dtype=np.int32)
    for d, doc in enumerate(docs):
        counts = Counter(doc)
        lengths[d] = len(doc)
        terms.extend(vocab.setdefault(w, len(vocab)) for w in counts)
        tfs.extend(counts.values())
        per_doc[d] = len(counts)
    term_of = np.asarray(terms, dtype=np.int32)
    doc_of = np.repeat(np.arange(len(docs), dtype=np.int32), per_doc)
    order = np.argsort(term_of, kind="stable")  # grouped by term, documents ascending
    df = np.bincount(term_of, minlength=len(vocab))
    return Inverted(
        vocab=list(vocab),
        indptr=np.concatenate(([0], np.cumsum(df))).astype(np.int64),
        docs=doc_of[order],
        tfs=np.asarray(tfs, dtype=np.int32)[order],
        lengths=lengths,
    )


def chunk_tokens(chunk: Chunk) -> list[str]:
    """What BM25 indexes of a chunk: its path and its text."""
    return tokenize(f"{chunk.path}\n{chunk.text}")


# Arrays too large to read in one reply without doubling a worker's memory for a moment: the
# store keeps them apart and reads them in ranges (``shared/index/corpus.py``).
LARGE = ("docs", "tfs")


@dataclass(frozen=True)
class Segment:
    """A batch of chunks' postings and what a hit needs of each chunk (id, path, lines).

    Chunk ids and defined names stay one NUL-joined string until asked for: a 100k-chunk
    segment holds them in a few MB instead of 100k Python objects each.
    """

    id_blob: bytes
    paths: list[str]  # distinct paths; path_of indexes them
    path_of: np.ndarray  # int32 per document
    starts: np.ndarray  # int32 per document
    ends: np.ndarray  # int32 per document
    name_blob: bytes  # per document its defined names, space-joined; documents NUL-joined
    postings: Inverted

    def __len__(self) -> int:
        return len(self.starts)

    @cached_property
    def _id_ends(self) -> np.ndarray:
        ends = np.flatnonzero(np.frombuffer(self.id_blob, dtype=np.uint8) == 0)
        return np.append(ends, len(self.id_blob)) if len(self) else ends

    def id_at(self, doc: int) -> str:
        start = int(self._id_ends[doc - 1]) + 1 if doc else 0
        return self.id_blob[start : int(self._id_ends[doc])].decode()

    @cached_property
    def ids(self) -> list[str]:
        return _strings(self.id_blob, len(self))

    @cached_property
    def names(self) -> list[list[str]]:
        """What each document defines (functions, classes, methods)."""
        return list(self.iter_names())

    def iter_names(self) -> Iterator[list[str]]:
        """:attr:`names` without keeping them (a reader builds its symbol table from these)."""
        return (n.split() for n in _strings(self.name_blob, len(self)))

    def term_of_postings(self) -> np.ndarray:
        """The local term of every posting (postings are grouped by term)."""
        p = self.postings
        return np.repeat(np.arange(len(p.vocab), dtype=np.int32), np.diff(p.indptr))

    def tfs_dtype(self) -> str:
        tfs = self.postings.tfs
        wide = len(tfs) and int(tfs.max()) > np.iinfo(np.uint16).max
        return "<i4" if wide else "<u2"  # a chunk rarely holds a token 65,536 times

    def fields(self) -> dict[str, bytes]:
        """The stored form (FORMAT 2): every field zlib-compressed, arrays byte-shuffled
        first, and each term's documents as gaps from the one before (small numbers)."""
        p = self.postings
        tfs_dtype = self.tfs_dtype()
        blobs = {
            "ids": self.id_blob,
            "paths": SEP.join(self.paths).encode("utf-8", errors="surrogateescape"),
            "names": self.name_blob,
            "vocab": SEP.join(p.vocab).encode(),
        }
        arrays = {
            "path_of": (self.path_of, "<i4"),
            "starts": (self.starts, "<i4"),
            "ends": (self.ends, "<i4"),
            "indptr": (p.indptr, "<i8"),
            "docs": (_gaps(p.docs, p.indptr), "<i4"),
            "tfs": (p.tfs, tfs_dtype),
            "lengths": (p.lengths, "<i4"),
        }
        return {
            "format": FORMAT,
            "tfs_dtype": tfs_dtype.encode(),
            **{name: zlib.compress(blob, LEVEL) for name, blob in blobs.items()},
            **{name: _pack(a, dtype) for name, (a, dtype) in arrays.items()},
        }

    @classmethod
    def from_fields(cls, raw: Mapping[bytes | str, bytes | np.ndarray]) -> Segment:
        """The segment :meth:`fields` wrote (or FORMAT 1, uncompressed, as written before);
        the LARGE ones may come as arrays already."""
        f = {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}
        packed = f.get("format") == FORMAT
        if not packed and f.get("format") != FORMAT_1:
            raise ValueError(f"unknown keyword segment format {f.get('format')!r}")

        def data(name: str) -> bytes:
            v = f[name]
            return v.tobytes() if isinstance(v, np.ndarray) else v

        def array(name: str, dtype: str) -> np.ndarray:
            if packed:
                return _unpack(data(name), dtype)
            v = f[name]
            return v.view(dtype) if isinstance(v, np.ndarray) else np.frombuffer(v, dtype=dtype)

        def blob(name: str) -> bytes:
            return zlib.decompress(data(name)) if packed else data(name)

        indptr = array("indptr", "<i8")
        docs = array("docs", "<i4")
        return cls(
            id_blob=blob("ids"),
            paths=_strings(blob("paths"), None, errors="surrogateescape"),
            path_of=array("path_of", "<i4"),
            starts=array("starts", "<i4"),
            ends=array("ends", "<i4"),
            name_blob=blob("names"),
            postings=Inverted(
                vocab=_strings(blob("vocab"), None),
                indptr=indptr,
                docs=_ungap(docs, indptr) if packed else docs,
                tfs=array("tfs", data("tfs_dtype").decode()),
                lengths=array("lengths", "<i4"),
            ),
        )


def _gaps(docs: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Each posting's document minus the one before it in its term (the first: itself)."""
    out = np.diff(np.asarray(docs, np.int64), prepend=0)
    firsts = indptr[:-1][np.diff(indptr) > 0]
    out[firsts] = docs[firsts]
    return out


def _ungap(gaps: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    total = np.cumsum(gaps, dtype=np.int64)
    counts = np.diff(indptr)
    before = np.concatenate(([0], total))[indptr[:-1]]  # the running sum before each term
    return (total - np.repeat(before, counts)).astype(np.int32)


def _pack(a: np.ndarray, dtype: str) -> bytes:
    """``a`` as ``dtype``, its bytes grouped by position in the number (all first bytes, then
    all second bytes...: the high bytes of small numbers are runs of zeros), compressed."""
    raw = np.ascontiguousarray(a, dtype=dtype)
    width = raw.dtype.itemsize
    shuffled = raw.view(np.uint8).reshape(-1, width).T.tobytes()
    return zlib.compress(shuffled, LEVEL)


def _unpack(packed: bytes, dtype: str) -> np.ndarray:
    flat = np.frombuffer(zlib.decompress(packed), dtype=np.uint8)
    width = np.dtype(dtype).itemsize
    return np.ascontiguousarray(flat.reshape(width, -1).T).view(dtype).reshape(-1)


def _strings(raw: bytes, n: int | None, *, errors: str = "strict") -> list[str]:
    text = raw.decode("utf-8", errors=errors)
    if n == 0 or (n is None and not text):
        return []
    return text.split(SEP)


def segment_of(chunks: Sequence[Chunk]) -> Segment:
    """The segment indexing ``chunks`` (one document per chunk, in order)."""
    paths: dict[str, int] = {}
    path_of = np.asarray([paths.setdefault(c.path, len(paths)) for c in chunks], dtype=np.int32)
    return Segment(
        id_blob=_joined(c.id for c in chunks),
        paths=list(paths),
        path_of=path_of,
        starts=np.asarray([c.start_line for c in chunks], dtype=np.int32),
        ends=np.asarray([c.end_line for c in chunks], dtype=np.int32),
        name_blob=_joined(" ".join(defined_names(c)) for c in chunks),
        postings=invert([chunk_tokens(c) for c in chunks]),
    )


def merge(parts: Sequence[tuple[Segment, np.ndarray]]) -> tuple[Segment, list[np.ndarray]]:
    """One segment holding the live documents of ``parts`` ((segment, live mask) pairs), in
    order; and per part, each old document's index in the merged segment (-1 when dead)."""
    ids: list[str] = []
    names: list[list[str]] = []
    path_index: dict[str, int] = {}
    vocab: dict[str, int] = {}
    path_of, starts, ends, lengths, term, doc, tf, moved = [], [], [], [], [], [], [], []
    base = 0
    for seg, live in parts:
        keep = np.flatnonzero(live)
        where = np.full(len(seg), -1, dtype=np.int32)
        where[keep] = np.arange(base, base + len(keep), dtype=np.int32)
        moved.append(where)
        base += len(keep)
        ids.extend(seg.ids[i] for i in keep)
        names.extend(seg.names[i] for i in keep)
        pmap = np.asarray([path_index.setdefault(p, len(path_index)) for p in seg.paths], np.int32)
        path_of.append(pmap[seg.path_of[keep]] if len(pmap) else seg.path_of[keep])
        starts.append(seg.starts[keep])
        ends.append(seg.ends[keep])
        lengths.append(seg.postings.lengths[keep])
        tmap = np.asarray([vocab.setdefault(w, len(vocab)) for w in seg.postings.vocab], np.int32)
        new_doc = where[seg.postings.docs]
        alive = new_doc >= 0
        term.append(tmap[seg.term_of_postings()[alive]] if len(tmap) else new_doc[alive])
        doc.append(new_doc[alive])
        tf.append(seg.postings.tfs[alive])
    terms, docs, tfs = (np.concatenate(a) if a else np.zeros(0, np.int32) for a in (term, doc, tf))
    # Terms only dead documents held are dropped from the vocabulary; as they have no postings,
    # the others keep their order and the postings stay grouped by term.
    df = np.bincount(terms, minlength=len(vocab))
    used = df > 0
    order = np.lexsort((docs, terms))
    merged = Segment(
        id_blob=_joined(ids),
        paths=list(path_index),
        path_of=_cat(path_of),
        starts=_cat(starts),
        ends=_cat(ends),
        name_blob=_joined(" ".join(n) for n in names),
        postings=Inverted(
            vocab=[w for w, u in zip(vocab, used.tolist(), strict=True) if u],
            indptr=np.concatenate(([0], np.cumsum(df[used]))).astype(np.int64),
            docs=docs[order].astype(np.int32),
            tfs=tfs[order].astype(np.int32),
            lengths=_cat(lengths),
        ),
    )
    return merged, moved


def _joined(strings: Iterable[str]) -> bytes:
    return SEP.join(strings).encode()


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays).astype(np.int32) if arrays else np.zeros(0, np.int32)


@dataclass(frozen=True)
class SegmentInfo:
    sid: int
    size: int  # documents written
    dead: int  # of which removed since


def merge_plan(
    segments: Sequence[SegmentInfo],
    *,
    factor: int = MERGE_FACTOR,
    max_docs: int = MAX_SEGMENT_DOCS,
) -> list[int]:
    """Which segments to merge next, by id; [] when none needs it.

    Segments whose live sizes are within one power of ``factor`` form a tier, and a tier with
    ``factor`` segments is merged (the smallest such tier first): each document is rewritten
    about log_factor(N) times over the index's life, and there are at most ``factor - 1``
    segments per tier. A merge stops at ``max_docs`` live documents (its smallest segments
    first). A segment mostly dead is rewritten to drop its dead documents.
    """
    tiers: dict[int, list[tuple[int, int]]] = {}
    for s in segments:
        live = s.size - s.dead
        if s.size and (live == 0 or s.dead / s.size > MAX_DEAD_SHARE):
            return [s.sid]
        tiers.setdefault(int(math.log(max(live, 1), factor)), []).append((live, s.sid))
    for _, members in sorted(tiers.items()):
        if len(members) < factor:
            continue
        pick: list[int] = []
        total = 0
        for live, sid in sorted(members):
            if total + live > max_docs:
                break
            pick.append(sid)
            total += live
        if len(pick) >= 2:
            return sorted(pick, key=[sid for _, sid in members].index)
    return []
