"""The machine's keyword segments, one file each, named by the segment's content digest.

The first process on a machine that needs a segment reads it from Redis once and writes its
:class:`~shared.index.segment_files.SegmentFile` here (to a private name, then linked into
place, so a reader never sees half a file and a writer killed midway leaves only a stray
temporary); every other process maps the same file, and the kernel keeps one copy of its pages.
Files are found by digest, so a segment is never confused with another whatever Redis or repo
it came from, and a merge's new segment is a new file.

Without a directory (tests, the eval) the same arrays live in each process's own memory. A
directory that cannot be written (full disk, read-only) falls back to that, with a warning:
retrieval never fails for want of a cache.

Files not opened for ``max_idle`` seconds, and past ``max_bytes`` the least recently opened,
are deleted when a new one is written (a process that still maps one keeps its pages; the
next process writes it again).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
from pathlib import Path

from shared.index.segment_files import (
    MAGIC,
    CorruptSegmentFile,
    SegmentFile,
    arrays_of,
    image,
    read,
    write,
)
from shared.index.segments import Segment

log = logging.getLogger(__name__)

SUFFIX = f".v{MAGIC[-2]}.seg"
MAX_IDLE = 3 * 86_400.0
# Merges write new segments, and the files of the ones they replaced stay until idle: past
# this size the least recently opened go first (a 1M-chunk repo's index is ~0.75 GB of files).
MAX_BYTES = 8 * 2**30
RECENT = 600.0


class SegmentCache:
    def __init__(
        self, root: Path | None, *, max_idle: float = MAX_IDLE, max_bytes: int = MAX_BYTES
    ) -> None:
        self.root = root
        self.max_idle, self.max_bytes = max_idle, max_bytes

    def path(self, digest: str) -> Path | None:
        if self.root is None or not digest.isalnum():
            return None
        return self.root / f"{digest}{SUFFIX}"

    def get(self, digest: str) -> SegmentFile | None:
        """The cached file of ``digest``, mapped; None if there is none (or it is damaged, and
        then it is removed so the next reader writes it again)."""
        path = self.path(digest)
        if path is None:
            return None
        try:
            found = read(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (CorruptSegmentFile, OSError, ValueError) as exc:
            log.warning("segment_cache.unreadable", extra={"path": str(path), "reason": str(exc)})
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
            return None
        _touch(path)
        return found

    def put(self, digest: str, segment: Segment) -> SegmentFile:
        """``segment`` as a file of this cache (or in memory without one), mapped."""
        arrays = arrays_of(segment)
        path = self.path(digest)
        if path is None:
            return SegmentFile(image(arrays))
        assert self.root is not None
        tmp = self.root / f".{digest}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tmp.open("wb") as out:
                write(arrays, out)
                out.flush()
                os.fsync(out.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)  # first writer wins; a second keeps the first's pages
        except OSError as exc:
            log.warning(
                "segment_cache.unwritable",
                extra={"path": str(self.root), "reason": f"{type(exc).__name__}: {exc}"},
            )
            return SegmentFile(image(arrays))
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        self.prune()
        return self.get(digest) or SegmentFile(image(arrays))

    def touch(self, files: list[SegmentFile]) -> None:
        """Mark ``files`` in use (a long-lived worker's files are not pruned under it)."""
        for f in files:
            if f.file is not None:
                _touch(f.file)

    def prune(self) -> int:
        """Delete temporaries left by killed writers and files idle past ``max_idle``; then,
        while the files pass ``max_bytes``, the least recently opened ones (never one opened
        in the last ``RECENT`` seconds). Returns how many were deleted."""
        if self.root is None:
            return 0
        now = time.time()
        try:
            entries = list(os.scandir(self.root))
        except OSError:
            return 0
        kept: list[tuple[float, int, str]] = []
        removed = 0
        for entry in entries:
            if not (entry.name.endswith(SUFFIX) or entry.name.endswith(".tmp")):
                continue
            try:
                st = entry.stat()
                if st.st_mtime < now - self.max_idle:
                    os.unlink(entry.path)
                    removed += 1
                elif entry.name.endswith(SUFFIX):
                    kept.append((st.st_mtime, st.st_size, entry.path))
            except OSError:
                continue
        total = sum(size for _, size, _ in kept)
        for mtime, size, path in sorted(kept):
            if total <= self.max_bytes or mtime > now - RECENT:
                break
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
                total -= size
        return removed


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)
