"""A keyword segment as a reader holds it: one flat file of aligned arrays, memory-mapped.

Redis keeps a segment as the writer made it (``shared/index/segments.py``). A reader turns it
once into a :class:`SegmentFile`: the same postings and per-document arrays plus the lookups a
query needs (terms, defined names and paths by a 64-bit key, sorted), so that nothing of the
segment becomes Python objects. Written to the local cache (``shared/index/segment_cache.py``)
and mapped read-only, the pages are shared by every process on the machine that maps the same
file: prefork children, a ``cpu`` worker's two slots, the next worker after a restart.

Layout: ``MAGIC``, the header's length (u64 little-endian), the header (JSON: each array's
dtype, offset and length), then the arrays, each at a 64-byte boundary.

Terms, names and paths are found by key (the first 8 bytes of their BLAKE2b digest) and then
checked against the stored string, so a string sharing a key with another is still told apart.
Only BM25Okapi's idf floor, the mean idf over every distinct term, counts terms by key: two
terms sharing one (about 1 in 10^6 for 5M distinct terms) would count as one there.
"""

from __future__ import annotations

import hashlib
import io
import json
import mmap
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from shared.index.segments import SEP, Segment

MAGIC = b"THSEG\x00\x02\x00"  # its second-to-last byte: the layout version
ALIGN = 64
KEY = np.dtype("<u8")


def key_of(text: str) -> int:
    digest = hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def keys_of(texts: Iterable[str]) -> np.ndarray:
    return np.fromiter((key_of(t) for t in texts), dtype=KEY)


ARRAYS = frozenset(
    [
        "ids",
        "paths",
        "names",
        "vocab",
        "ids_at",
        "paths_at",
        "vocab_at",
        "names_at",
        "path_of",
        "starts",
        "ends",
        "lengths",
        "indptr",
        "docs",
        "tfs",
        "term_maxtf",
        "term_keys",
        "term_sorted",
        "term_local",
        "path_sorted",
        "path_index",
        "suffix_sorted",
        "suffix_path",
        "path_docs",
        "path_bounds",
        "name_sorted",
        "name_docs",
    ]
)


def offsets(blob: bytes) -> np.ndarray:
    """Where each NUL-separated string of ``blob`` starts, and one past the end: string i is
    ``blob[at[i] : at[i + 1] - 1]``. An empty blob holds no string."""
    if not blob:
        return np.zeros(1, np.int64)
    seps = np.flatnonzero(np.frombuffer(blob, dtype=np.uint8) == 0)
    return np.concatenate(([0], seps + 1, [len(blob) + 1])).astype(np.int64)


def _sorted_lookup(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(keys, kind="stable")
    return keys[order], order.astype(np.int32)


def arrays_of(seg: Segment) -> dict[str, np.ndarray]:
    """Every array a :class:`SegmentFile` holds, from a segment as Redis keeps it."""
    p = seg.postings
    blobs = {
        "ids": seg.id_blob,
        "paths": SEP.join(seg.paths).encode("utf-8", errors="surrogateescape"),
        "names": seg.name_blob,
        "vocab": SEP.join(p.vocab).encode(),
    }
    out: dict[str, np.ndarray] = {}
    for name, blob in blobs.items():
        out[name] = np.frombuffer(blob, dtype=np.uint8)
        out[f"{name}_at"] = offsets(blob)
    out.update(
        path_of=np.asarray(seg.path_of, "<i4"),
        starts=np.asarray(seg.starts, "<i4"),
        ends=np.asarray(seg.ends, "<i4"),
        lengths=np.asarray(p.lengths, "<i4"),
        indptr=np.asarray(p.indptr, "<i8"),
        docs=np.asarray(p.docs, "<i4"),
        tfs=np.asarray(p.tfs, seg.tfs_dtype()),
    )
    out.update(_term_lookups(seg))
    out.update(_path_lookups(seg))
    out.update(_name_lookups(seg))
    return out


def _term_lookups(seg: Segment) -> dict[str, np.ndarray]:
    """Each term's key (in local order, and sorted with the local term) and largest tf."""
    p = seg.postings
    counts = np.diff(np.asarray(p.indptr))
    maxtf = np.zeros(len(p.vocab), "<i4")
    held = counts > 0
    if held.any():
        maxtf[held] = np.maximum.reduceat(np.asarray(p.tfs, "<i4"), p.indptr[:-1][held])
    keys = keys_of(p.vocab)
    ordered, local = _sorted_lookup(keys)
    return {"term_maxtf": maxtf, "term_keys": keys, "term_sorted": ordered, "term_local": local}


def _path_lookups(seg: Segment) -> dict[str, np.ndarray]:
    """Paths by key, by the key of each of their trailing runs of components (what a frame's
    file is matched on), and each path's documents."""
    suffixes = [
        (key_of("/".join(parts[i:])), k)
        for k, parts in enumerate(path.split("/") for path in seg.paths)
        for i in range(len(parts))
    ]
    sk = np.asarray([key for key, _ in suffixes], dtype=KEY)
    sp = np.asarray([k for _, k in suffixes], dtype=np.int32)
    order = np.lexsort((sp, sk))
    by_path = np.argsort(seg.path_of, kind="stable").astype(np.int32)
    bounds = np.searchsorted(np.asarray(seg.path_of)[by_path], np.arange(len(seg.paths) + 1))
    ordered, index = _sorted_lookup(keys_of(seg.paths))
    return {
        "path_sorted": ordered,
        "path_index": index,
        "suffix_sorted": sk[order],
        "suffix_path": sp[order],
        "path_docs": by_path,
        "path_bounds": bounds.astype(np.int64),
    }


def _name_lookups(seg: Segment) -> dict[str, np.ndarray]:
    """The documents defining each name, by the name's key."""
    name_keys: list[int] = []
    name_docs: list[int] = []
    for d, names in enumerate(seg.iter_names()):
        for name in dict.fromkeys(names):
            name_keys.append(key_of(name))
            name_docs.append(d)
    nk = np.asarray(name_keys, dtype=KEY)
    docs = np.asarray(name_docs, np.int32)
    order = np.lexsort((docs, nk))
    return {"name_sorted": nk[order], "name_docs": docs[order]}


def _layout(arrays: Mapping[str, np.ndarray]) -> tuple[bytes, list[tuple[int, np.ndarray]]]:
    """The head (magic, header length, header, padding) and each array's file offset."""
    layout: dict[str, list[Any]] = {}
    at = 0
    for name, a in arrays.items():
        layout[name] = [a.dtype.str, at, len(a)]
        at += -(-a.nbytes // ALIGN) * ALIGN
    header = json.dumps(layout).encode()
    head = MAGIC + len(header).to_bytes(8, "little") + header
    base = -(-len(head) // ALIGN) * ALIGN
    head += bytes(base - len(head))
    return head, [(base + layout[name][1], a) for name, a in arrays.items()]


def write(arrays: Mapping[str, np.ndarray], out: BinaryIO) -> None:
    """Write the file to ``out`` array by array (never the whole image in memory)."""
    head, placed = _layout(arrays)
    out.write(head)
    at = len(head)
    for offset, a in placed:
        out.write(bytes(offset - at))
        out.write(np.ascontiguousarray(a).data.cast("B"))
        at = offset + a.nbytes


def image(arrays: Mapping[str, np.ndarray]) -> bytes:
    """The file's bytes, for a reader without a cache directory."""
    buf = io.BytesIO()
    write(arrays, buf)
    return buf.getvalue()


class CorruptSegmentFile(ValueError):
    pass


class SegmentFile:
    """A segment's arrays over one buffer (a read-only map of a cache file, or bytes)."""

    def __init__(self, buffer: bytes | mmap.mmap, path: Path | None = None) -> None:
        self.file = path
        self._buffer = buffer
        view = memoryview(buffer)
        if len(view) < 16 or bytes(view[:8]) != MAGIC:
            raise CorruptSegmentFile(f"not a keyword segment file: {path}")
        size = int.from_bytes(view[8:16], "little")
        try:
            layout = json.loads(bytes(view[16 : 16 + size]))
        except ValueError as exc:
            raise CorruptSegmentFile(f"unreadable header in {path}") from exc
        base = -(-(16 + size) // ALIGN) * ALIGN
        self.a: dict[str, np.ndarray] = {}
        for name, (dtype, offset, count) in layout.items():
            dt = np.dtype(dtype)
            start = base + int(offset)
            if start + dt.itemsize * int(count) > len(view):
                raise CorruptSegmentFile(f"{path} is shorter than its header says")
            self.a[name] = np.frombuffer(buffer, dtype=dt, count=int(count), offset=start)
        missing = ARRAYS - self.a.keys()
        if missing:
            raise CorruptSegmentFile(f"{path} lacks {sorted(missing)}")
        a = self.a
        self.path_of, self.starts, self.ends = a["path_of"], a["starts"], a["ends"]
        self.lengths, self.indptr, self.docs, self.tfs = (
            a["lengths"],
            a["indptr"],
            a["docs"],
            a["tfs"],
        )
        self.term_keys = a["term_keys"]

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def nbytes(self) -> int:
        return len(self._buffer)

    @property
    def terms(self) -> int:
        return len(self.term_keys)

    def _string(self, blob: str, i: int) -> str:
        at = self.a[f"{blob}_at"]
        raw = self.a[blob][int(at[i]) : int(at[i + 1]) - 1]
        return raw.tobytes().decode("utf-8", "surrogateescape")

    def id_at(self, doc: int) -> str:
        return self._string("ids", doc)

    def path(self, i: int) -> str:
        return self._string("paths", i)

    @property
    def path_count(self) -> int:
        return len(self.a["paths_at"]) - 1

    def path_at(self, doc: int) -> str:
        return self.path(int(self.path_of[doc]))

    def find_terms(self, words: list[str], keys: np.ndarray) -> np.ndarray:
        """The local term of each word (-1 where the segment does not hold it)."""
        a = self.a
        vocab = lambda i: self._string("vocab", i)  # noqa: E731
        return _find(a["term_sorted"], a["term_local"], keys, vocab, words)

    def docs_of_path(self, path: str) -> np.ndarray:
        """The documents of ``path``, dead ones included."""
        a = self.a
        (i,) = _find(a["path_sorted"], a["path_index"], keys_of([path]), self.path, [path])
        if i < 0:
            return self.a["path_docs"][:0]
        bounds = self.a["path_bounds"]
        return self.a["path_docs"][bounds[i] : bounds[i + 1]]

    def paths_ending_with(self, suffix: str) -> list[int]:
        """The paths (indexes) that are ``suffix`` or end with ``/suffix``."""
        keys = self.a["suffix_sorted"]
        k = np.uint64(key_of(suffix))
        lo, hi = np.searchsorted(keys, k, "left"), np.searchsorted(keys, k, "right")
        return [
            i
            for i in self.a["suffix_path"][lo:hi].tolist()
            if (path := self.path(i)) == suffix or path.endswith("/" + suffix)
        ]

    def defining(self, name: str) -> np.ndarray:
        """The documents defining ``name`` (found by key, then checked by name)."""
        keys = self.a["name_sorted"]
        k = np.uint64(key_of(name))
        lo, hi = np.searchsorted(keys, k, "left"), np.searchsorted(keys, k, "right")
        docs = self.a["name_docs"][lo:hi]
        return np.asarray(
            [d for d in docs.tolist() if name in self._string("names", d).split(" ")], np.int32
        )

    def term_frequencies(self) -> np.ndarray:
        """Per local term, the documents holding it."""
        return np.diff(self.indptr)

    def terms_of(self, docs: np.ndarray) -> np.ndarray:
        """Per local term, how many of ``docs`` hold it (one pass over the postings, no
        per-posting term array)."""
        mask = np.zeros(len(self), dtype=bool)
        mask[docs] = True
        at = np.flatnonzero(mask[self.docs])
        terms = np.searchsorted(self.indptr, at, side="right") - 1
        return np.bincount(terms, minlength=self.terms)


def _find(
    sorted_keys: np.ndarray, index: np.ndarray, keys: np.ndarray, text: Any, words: list[str]
) -> np.ndarray:
    """Per word, the index its key and its stored string match (-1 if none)."""
    found = np.full(len(keys), -1, dtype=np.int64)
    if not len(sorted_keys):
        return found
    lo = np.searchsorted(sorted_keys, keys, "left")
    hi = np.searchsorted(sorted_keys, keys, "right")
    for j in np.flatnonzero(hi > lo).tolist():
        for at in range(int(lo[j]), int(hi[j])):  # one, unless strings share a key
            if text(int(index[at])) == words[j]:
                found[j] = int(index[at])
                break
    return found


def read(path: Path) -> SegmentFile:
    """Map ``path`` read-only (CorruptSegmentFile if it is not a whole segment file)."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if size < 16:
            raise CorruptSegmentFile(f"{path} is truncated")
        buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return SegmentFile(buffer, path)


def digest_of(fields: Mapping[str, bytes | np.ndarray]) -> str:
    """Content identity of a segment as stored (its fields, names and bytes, in name order)."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(fields):
        if name == "digest":
            continue
        value = fields[name]
        data = value.tobytes() if isinstance(value, np.ndarray) else value
        h.update(name.encode() + SEP.encode() + len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()
