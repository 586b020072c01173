"""The keyword corpus in Redis: postings in segments, each chunk's text, each file's chunk ids.

Keys per repo (``{r}`` is the repo name):
  th:corpus:{r}:segments   JSON [[segment id, documents], ...]: the live segments, in order
  th:corpus:{r}:seg:{sid}  hash: one segment's arrays (shared/index/segments.py) and the
                           digest of their content (a reader's cache file name), but
  th:corpus:{r}:seg:{sid}:docs / :tfs   its postings, strings read in ranges
  th:corpus:{r}:where      hash chunk id -> "sid:doc", where the chunk is live
  th:corpus:{r}:dead       set of "sid:doc" removed since their segment was written
  th:corpus:{r}:text       hash chunk id -> zlib-compressed chunk text (its only copy in Redis)
  th:corpus:{r}:files      hash path -> JSON list of the chunk ids last fully indexed for it
  th:corpus:{r}:next       counter: the last segment id handed out
  th:corpus:{r}:lock       writers' lock over segments, where and dead
  th:corpus:{r}:version    bumped by every change, so readers know when to look again

Adding chunks writes one segment; removing one only marks it dead; merging (in the writer,
after its change is visible) folds small segments into larger ones. Each change is one
MULTI/EXEC, so a writer killed at any point leaves the previous or the next state.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import redis

from shared.core import keys
from shared.core.domain import Chunk
from shared.core.errors import TransientError
from shared.index.segment_cache import SegmentCache
from shared.index.segment_files import SegmentFile, digest_of
from shared.index.segments import (
    LARGE,
    MAX_SEGMENT_DOCS,
    Segment,
    SegmentInfo,
    merge,
    merge_plan,
    segment_of,
)

log = logging.getLogger(__name__)

# Writers hold the lock for a few Redis round trips; a writer killed holding it delays the
# others by at most this long.
LOCK_TIMEOUT = 30.0
LOCK_WAIT = 60.0
# A segment replaced by a merge stays readable this long for readers that read the list
# before the merge and load the segment after it (a reader that misses it reads the list again).
RETIRED_TTL = 30
MAX_MERGES_PER_CHANGE = 8
READ_RANGE = 4 * 2**20


@dataclass(frozen=True)
class CorpusState:
    """The keyword index's shape at one version: which segments, which documents are dead."""

    version: int
    segments: list[SegmentInfo]
    dead: dict[int, np.ndarray]  # segment id -> dead document indexes
    legacy: bool = False  # a corpus in the format before segments, not yet converted

    def info(self, sid: int) -> SegmentInfo | None:
        return next((s for s in self.segments if s.sid == sid), None)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class RedisCorpus:
    def __init__(self, client: redis.Redis) -> None:
        self.r = client

    # --- reading -------------------------------------------------------------------------

    def version(self, repo: str) -> int:
        return int(self.r.get(keys.corpus(repo, "version")) or 0)

    def state(self, repo: str) -> CorpusState:
        """Version, segment list and dead documents, read in one MULTI so they agree."""
        pipe = self.r.pipeline(transaction=True)
        pipe.get(keys.corpus(repo, "version"))
        pipe.get(keys.corpus(repo, "segments"))
        pipe.smembers(keys.corpus(repo, "dead"))
        pipe.exists(keys.corpus(repo, "docs"))
        version, listed, dead_members, legacy = pipe.execute()
        dead: dict[int, list[int]] = {}
        for m in dead_members:
            sid, doc = _text(m).split(":")
            dead.setdefault(int(sid), []).append(int(doc))
        segments = [
            SegmentInfo(sid, size, len(dead.get(sid, ())))
            for sid, size in json.loads(listed or "[]")
        ]
        return CorpusState(
            int(version or 0),
            segments,
            {sid: np.asarray(sorted(docs), dtype=np.int64) for sid, docs in dead.items()},
            legacy=bool(legacy) and not segments,
        )

    def segment(self, repo: str, sid: int) -> Segment | None:
        """A segment's arrays; None if a merge has retired it and its grace time ran out."""
        fields = self._fields(repo, sid)
        return Segment.from_fields(fields) if fields is not None else None

    def segment_file(self, repo: str, sid: int, cache: SegmentCache) -> SegmentFile | None:
        """A segment as a reader maps it: from the machine's cache when it holds the
        segment's digest, else read from Redis once and put there; None as :meth:`segment`."""
        digest = self.r.hget(keys.corpus_segment(repo, sid), "digest")
        if digest is not None:
            found = cache.get(_text(digest))
            if found is not None:
                return found
        fields = self._fields(repo, sid)
        if fields is None:
            return None
        # An index written before digests were stored: its content names it all the same.
        name = _text(digest) if digest is not None else digest_of(_named(fields))
        segment = Segment.from_fields(fields)
        del fields
        return cache.put(name, segment)

    def _fields(self, repo: str, sid: int) -> dict[bytes | str, bytes | np.ndarray] | None:
        """The stored fields of a segment.

        The large arrays are read in ranges straight into their final buffers: one reply of
        the whole array would hold it twice, and a worker's memory keeps its high-water mark.
        """
        pipe = self.r.pipeline(transaction=False)
        pipe.hgetall(keys.corpus_segment(repo, sid))
        for name in LARGE:
            pipe.strlen(keys.corpus_segment(repo, sid, name))
        raw, *sizes = pipe.execute()
        if not raw:
            return None
        fields: dict[bytes | str, bytes | np.ndarray] = dict(raw)
        for name, size in zip(LARGE, sizes, strict=True):
            buffer = np.empty(int(size), dtype=np.uint8)
            key = keys.corpus_segment(repo, sid, name)
            for at in range(0, int(size), READ_RANGE):
                piece = cast(bytes, self.r.getrange(key, at, min(at + READ_RANGE, int(size)) - 1))
                if len(piece) != min(READ_RANGE, int(size) - at):
                    return None  # expired while being read
                buffer[at : at + len(piece)] = np.frombuffer(piece, dtype=np.uint8)
            fields[name] = buffer
        return fields

    def _write_segment(self, pipe: Any, repo: str, sid: int, segment: Segment) -> None:
        fields: dict[str, bytes] = segment.fields()
        fields["digest"] = digest_of(fields).encode()
        for name in LARGE:
            pipe.set(keys.corpus_segment(repo, sid, name), fields.pop(name))
        pipe.hset(keys.corpus_segment(repo, sid), mapping=cast(Any, fields))

    def _retire_segment(self, pipe: Any, repo: str, sid: int) -> None:
        for key in (keys.corpus_segment(repo, sid, name) for name in ("", *LARGE)):
            pipe.expire(key, RETIRED_TTL)

    def existing_ids(self, repo: str, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        found = self.r.hmget(keys.corpus(repo, "where"), list(ids))
        return {cid for cid, v in zip(ids, found, strict=True) if v is not None}

    def texts(self, repo: str, ids: Sequence[str]) -> list[str]:
        if not ids:
            return []
        raw = self.r.hmget(keys.corpus(repo, "text"), list(ids))
        return [zlib.decompress(cast(bytes, v)).decode("utf-8") if v else "" for v in raw]

    def file_ids(self, repo: str, path: str) -> list[str]:
        raw = self.r.hget(keys.corpus(repo, "files"), path)
        return json.loads(raw) if raw else []

    def files_ids(self, repo: str, paths: Sequence[str]) -> list[list[str]]:
        """``file_ids`` of several paths in one round trip, in their order."""
        if not paths:
            return []
        raw = self.r.hmget(keys.corpus(repo, "files"), list(paths))
        return [json.loads(v) if v else [] for v in raw]

    def paths(self, repo: str) -> set[str]:
        return {_text(p) for p in self.r.hkeys(keys.corpus(repo, "files"))}

    # --- writing -------------------------------------------------------------------------

    def forget_file(self, repo: str, path: str) -> None:
        self.r.hdel(keys.corpus(repo, "files"), path)

    def set_files(self, repo: str, ids_by_path: Mapping[str, Sequence[str]]) -> None:
        """Record each path's chunk ids, in one round trip; a path with no ids is forgotten."""
        kept: dict[Any, Any] = {p: json.dumps(list(ids)) for p, ids in ids_by_path.items() if ids}
        gone = [p for p, ids in ids_by_path.items() if not ids]
        pipe = self.r.pipeline(transaction=True)
        if kept:
            pipe.hset(keys.corpus(repo, "files"), mapping=kept)
        if gone:
            pipe.hdel(keys.corpus(repo, "files"), *gone)
        pipe.execute()

    def _lock(self, repo: str) -> Any:
        lock = self.r.lock(keys.corpus(repo, "lock"), timeout=LOCK_TIMEOUT)
        if not lock.acquire(blocking_timeout=LOCK_WAIT):
            raise TransientError(f"keyword index of {repo!r}: lock busy for {LOCK_WAIT:.0f} s")
        return lock

    def _listed(self, repo: str) -> list[list[int]]:
        return cast(list[list[int]], json.loads(self.r.get(keys.corpus(repo, "segments")) or "[]"))

    def add(self, repo: str, chunks: Sequence[Chunk]) -> None:
        """Store ``chunks`` as one new segment; a chunk id stored before is replaced."""
        chunks = list({c.id: c for c in chunks}.values())
        if not chunks:
            return
        segment = segment_of(chunks)
        texts: dict[Any, Any] = {
            c.id: zlib.compress(c.text.encode("utf-8", errors="replace")) for c in chunks
        }
        lock = self._lock(repo)
        try:
            replaced = [
                _text(v) for v in self.r.hmget(keys.corpus(repo, "where"), segment.ids) if v
            ]
            sid = int(self.r.incr(keys.corpus(repo, "next")))
            listed = [*self._listed(repo), [sid, len(segment)]]
            pipe = self.r.pipeline(transaction=True)
            self._write_segment(pipe, repo, sid, segment)
            pipe.hset(
                keys.corpus(repo, "where"),
                mapping={cid: f"{sid}:{i}" for i, cid in enumerate(segment.ids)},
            )
            if replaced:
                pipe.sadd(keys.corpus(repo, "dead"), *replaced)
            pipe.set(keys.corpus(repo, "segments"), json.dumps(listed))
            pipe.hset(keys.corpus(repo, "text"), mapping=texts)
            pipe.unlink(keys.corpus(repo, "docs"))  # the old format, superseded from here on
            pipe.incr(keys.corpus(repo, "version"))
            pipe.execute()
        finally:
            lock.release()
        self.merge(repo)

    def delete(self, repo: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        ids = list(dict.fromkeys(ids))
        lock = self._lock(repo)
        try:
            where = [_text(v) for v in self.r.hmget(keys.corpus(repo, "where"), ids) if v]
            pipe = self.r.pipeline(transaction=True)
            pipe.hdel(keys.corpus(repo, "where"), *ids)
            if where:
                pipe.sadd(keys.corpus(repo, "dead"), *where)
            pipe.hdel(keys.corpus(repo, "text"), *ids)
            pipe.incr(keys.corpus(repo, "version"))
            pipe.execute()
        finally:
            lock.release()
        if where:
            self.merge(repo)

    # --- merging -------------------------------------------------------------------------

    def merge(self, repo: str, *, everything: bool = False) -> int:
        """Merge what :func:`merge_plan` asks for (with ``everything``: all segments, up to
        MAX_SEGMENT_DOCS each, as after a full index); returns how many merges were made.

        One process merges a repo at a time; the others skip, as the one merging will get to
        their segments too. The merge is built outside the writers' lock, then committed
        under it with the removals made meanwhile carried over.
        """
        token = self.r.set(keys.corpus(repo, "merging"), "1", nx=True, ex=int(LOCK_TIMEOUT * 4))
        if not token:
            return 0
        done = 0
        try:
            for _ in range(MAX_MERGES_PER_CHANGE if not everything else 1_000):
                state = self.state(repo)
                plan = compaction(state) if everything else merge_plan(state.segments)
                if not plan:
                    break
                if self._merge(repo, state, plan):
                    done += 1
        finally:
            self.r.delete(keys.corpus(repo, "merging"))
        return done

    def _merge(self, repo: str, state: CorpusState, sids: list[int]) -> bool:
        parts: list[tuple[Segment, np.ndarray]] = []
        for sid in sids:
            seg = self.segment(repo, sid)
            if seg is None:
                return False
            live = np.ones(len(seg), dtype=bool)
            live[state.dead.get(sid, np.zeros(0, np.int64))] = False
            parts.append((seg, live))
        merged, moved = merge(parts)
        lock = self._lock(repo)
        try:
            now = self.state(repo)
            listed = self._listed(repo)
            if not all(now.info(sid) for sid in sids):
                return False  # another merge took these (never two at once, but be sure)
            # Removals made since the merge was planned move over as dead documents of the
            # merged segment, so nothing removed comes back.
            later: list[int] = []
            members: list[str] = []
            for (sid, where), (_, live) in zip(zip(sids, moved, strict=True), parts, strict=True):
                gone = now.dead.get(sid, np.zeros(0, np.int64))
                members += [f"{sid}:{d}" for d in gone.tolist()]
                later += [int(where[d]) for d in gone.tolist() if live[d]]
            new_sid = int(self.r.incr(keys.corpus(repo, "next")))
            at = min(i for i, (sid, _) in enumerate(listed) if sid in sids)
            kept = [e for e in listed if e[0] not in sids]
            if len(merged):
                kept.insert(at, [new_sid, len(merged)])
            later_set = set(later)
            pipe = self.r.pipeline(transaction=True)
            if len(merged):
                self._write_segment(pipe, repo, new_sid, merged)
                pipe.hset(
                    keys.corpus(repo, "where"),
                    mapping={
                        cid: f"{new_sid}:{i}"
                        for i, cid in enumerate(merged.ids)
                        if i not in later_set
                    },
                )
            if members:
                pipe.srem(keys.corpus(repo, "dead"), *members)
            if later:
                pipe.sadd(keys.corpus(repo, "dead"), *(f"{new_sid}:{d}" for d in later))
            for sid in sids:
                self._retire_segment(pipe, repo, sid)
            pipe.set(keys.corpus(repo, "segments"), json.dumps(kept))
            pipe.incr(keys.corpus(repo, "version"))
            pipe.execute()
        finally:
            lock.release()
        log.info(
            "corpus.merged",
            extra={"repo": repo, "segments": len(sids), "documents": len(merged)},
        )
        return True


def _named(fields: dict[bytes | str, bytes | np.ndarray]) -> dict[str, bytes | np.ndarray]:
    return {_text(k): v for k, v in fields.items()}


def compaction(state: CorpusState) -> list[int]:
    """The first run of neighbouring segments that can become one (at most MAX_SEGMENT_DOCS
    live documents), or a lone segment holding dead documents; [] when there is none."""
    run: list[int] = []
    total = 0
    for s in state.segments:
        live = s.size - s.dead
        if run and total + live > MAX_SEGMENT_DOCS:
            if len(run) > 1 or state.dead.get(run[0]) is not None:
                return run
            run, total = [], 0
        run.append(s.sid)
        total += live
    if len(run) > 1 or (run and state.dead.get(run[0]) is not None):
        return run
    return []
