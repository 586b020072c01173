"""The log tailer: follows files like ``tail -F`` and hands every error record to intake.

What it guarantees (tests/integration/test_tail_chaos.py breaks it on purpose):

- **At-least-once delivery.** A file's read offset is checkpointed only after every event read
  before it was handed over. After a crash, ``kill -9`` or a Redis outage the tailer reads again
  from the checkpoint, so an error is never skipped.
- **Exactly-once counting.** An event's id is the file's identity, the record's offset and its
  text; intake counts an id once, so what is read again adds nothing.
- **File identity.** An open file is known by device and inode; across copies and restarts by a
  fingerprint of its first line (up to 256 bytes), as Vector's checksum and Filebeat's
  fingerprint do. A copy whose first line matches a file already read (logrotate's
  ``copytruncate``, a rename while the tailer was down) continues that file's offset. A
  truncation found after a round's read undoes that round: what it read may be the new
  content at the old offsets, so the copy continues from where the round began.
- **Discovery.** inotify (watchdog) opens new and renamed files the moment they appear, so a
  generation that rotates in and out between two scans is still read; a scan runs too, every
  ``scan_every`` seconds. A rotated file is read to its end and kept while it still grows
  (``linger`` seconds after its last growth); a deleted one is closed once read.
- **Where to start.** A file the tailer has never seen is read from its start — except on the
  very first run (no state file yet), where files already there are history, read from their
  end as ``tail -F`` does, unless ``--from-start``.
- **Outages.** When intake cannot take a round's events (Redis down), the file is rewound to
  its checkpoint, the tailer backs off (capped exponential, one log line per attempt) and reads
  again from there once Redis is back.
- **Hand-over.** A round's events of a file go to intake in one call, in file order (what a
  truncation flushes goes first, in a call of its own, as the file starts over).
- **Fast path.** Only the lines that may be part of an error record run through the grouper,
  and events are built only for records that may be errors (producers/skim.py; equivalent to
  feeding every line, ``skim=False``, on generated logs).
- **Rotations nobody saw.** A generation that inotify missed (its queue lagged or overflowed,
  or no inotify at all) and that rotated away between two scans is still found: every scan
  also reads the rotated siblings of the followed files (``app.log.1``, ``app.log-2026…``)
  that were written since the tailer started and are not known yet.

copytruncate loses what is written between the copy and the truncate, in every tailer
(Fluent Bit and Vector document the same); prefer ``create`` rotation.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import queue
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from producers.globs import Pattern, compile_patterns, matching_paths
from producers.multiline import Grouper, Record
from producers.skim import LINE_TRUNCATED, group_lines
from shared.core.domain import ErrorEvent
from shared.core.logs import Throttle
from shared.core.settings import Settings
from shared.intake.events import from_input, may_be_log_error

log = logging.getLogger(__name__)

FINGERPRINT_BYTES = 256
MIN_COPY_FINGERPRINT = 32  # a first line shorter than this identifies nothing across copies
READ_CHUNK = 1 << 20
READ_BUDGET = 16 << 20  # bytes per file per round: other files and new ones get their turn
STATE_VERSION = 2
RETIRED_MAX = 256  # identities of closed files remembered for copies that appear later
BACKOFF_START, BACKOFF_MAX = 0.5, 30.0

# One call per file and round with that round's events, in order (a truncation flushes what was
# pending in a call of its own); the return value (the group decisions) is unused. Raising
# means nothing after the last checkpoint was handed over.
EnqueueMany = Callable[[list[ErrorEvent]], object]


ROTATION_SEPARATORS = (".", "-", "_")
# Compressed rotations hold nothing a line reader could read.
COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip", ".br")


def rotated_siblings(paths: Sequence[str]) -> list[str]:
    """The files beside each of ``paths`` named as rotations are: ``app.log.1``,
    ``app.log-20261201``, ``app.log.2026-12-01_10`` (RotatingFileHandler, logrotate,
    TimedRotatingFileHandler); each directory is listed once."""
    by_dir: dict[str, set[str]] = {}
    for path in paths:
        directory, name = os.path.split(path)
        by_dir.setdefault(directory, set()).add(name)
    found: list[str] = []
    for directory, names in by_dir.items():
        try:
            entries = os.listdir(directory or ".")
        except OSError:
            continue
        found += [
            os.path.join(directory, n)
            for n in entries
            if not n.endswith(COMPRESSED)
            # A followed name, a separator and a digit (a number or a date: "syslog" does not
            # make "syslog.conf" its rotation); a set lookup per separator in the entry.
            and any(
                c in ROTATION_SEPARATORS and n[i + 1 : i + 2].isdigit() and n[:i] in names
                for i, c in enumerate(n)
                if i
            )
        ]
    return found


class HandOverFailed(Exception):
    """Intake could not take a round's events (its Redis is out of reach)."""


def head_identity(f: BinaryIO) -> tuple[str, int, bool]:
    """(hash, bytes hashed, final): the file's first line, at most 256 bytes. Not final while
    the file holds fewer bytes and no newline yet."""
    f.seek(0)
    head = f.read(FINGERPRINT_BYTES)
    nl = head.find(b"\n")
    n = nl + 1 if nl >= 0 else len(head)
    final = nl >= 0 or len(head) == FINGERPRINT_BYTES
    return hashlib.sha1(head[:n]).hexdigest(), n, final


def same_head(f: BinaryIO, fp: str, fp_len: int) -> bool:
    """Whether an open file still starts with the bytes a checkpoint hashed."""
    f.seek(0)
    return hashlib.sha1(f.read(fp_len)).hexdigest() == fp


class Checkpoints:
    """Read offsets per open file (device:inode) and identities of closed ones, in a JSON file
    replaced atomically on every save."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.existed = path.exists()
        self.saved_at = path.stat().st_mtime if self.existed else 0.0
        self.entries: dict[str, dict[str, Any]] = {}
        self.retired: list[dict[str, Any]] = []
        if not self.existed:
            return
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            # A torn file cannot happen with replace(); a hand-edited one can.
            log.warning("tail.checkpoints_unreadable", extra={"path": str(path), "error": str(exc)})
            return
        if isinstance(data, dict) and data.get("version") == STATE_VERSION:
            self.entries = dict(data.get("files") or {})
            self.retired = list(data.get("retired") or [])
        elif isinstance(data, dict):  # version 1: the entries themselves
            self.entries = data

    def retire(self, entry: dict[str, Any]) -> None:
        self.retired = [*self.retired, entry][-RETIRED_MAX:]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        body = {"version": STATE_VERSION, "files": self.entries, "retired": self.retired}
        tmp.write_text(json.dumps(body, sort_keys=True))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.existed = True


@dataclass
class Followed:
    """One open file being read (it may no longer be at its path: rotated or deleted)."""

    key: str  # "dev:inode"
    path: str
    f: BinaryIO
    grouper: Grouper
    offset: int = 0  # where the next read starts (after the partial line)
    partial: bytearray = field(default_factory=bytearray)
    partial_start: int = 0
    partial_overflow: bool = False
    last_growth: float = 0.0
    fp: str = ""
    fp_len: int = 0
    fp_final: bool = False
    at_path: bool = True  # still present at a path matching the patterns
    read_at: float = 0.0  # wall clock of the last read (copies newer than it are unread data)

    def safe_offset(self) -> int:
        """Where a restart must read again: before every line not yet in a handed-over event."""
        pending = self.grouper.safe_offset()
        return self.partial_start if pending is None else min(pending, self.partial_start)

    def snapshot(self) -> tuple[Any, ...]:
        """The read position and everything held between reads, to undo a round."""
        return (
            self.offset,
            bytes(self.partial),
            self.partial_start,
            self.partial_overflow,
            copy.deepcopy(self.grouper),
        )

    def restore(self, snap: tuple[Any, ...]) -> None:
        self.offset, partial, self.partial_start, self.partial_overflow, self.grouper = snap
        self.partial = bytearray(partial)

    def entry(self) -> dict[str, Any]:
        return {
            "offset": self.safe_offset(),
            "fp": self.fp,
            "fp_len": self.fp_len,
            "path": self.path,
        }


class _Watch:
    """inotify through watchdog: files created in, or renamed into or out of, the patterns'
    directories are opened at once and handed to the tailer's thread, so a file rotated away
    before the next scan is still held (an open descriptor reads it whatever its name)."""

    def __init__(self, patterns: list[Pattern], known: Callable[[str], bool]) -> None:
        self.patterns, self.known = patterns, known
        self.opened: queue.SimpleQueue[tuple[str, BinaryIO]] = queue.SimpleQueue()
        self.observer: Any = None

    def start(self) -> None:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        watch = self

        class Handler(FileSystemEventHandler):
            def on_created(self, event: FileSystemEvent) -> None:
                if not event.is_directory:
                    watch._maybe_open(str(event.src_path), rotated=False)

            def on_moved(self, event: FileSystemEvent) -> None:
                if event.is_directory:
                    return
                src, dest = str(event.src_path), str(event.dest_path)
                # Renamed into the patterns, or a followed name rotated to one outside them.
                rotated = watch._matches(src) or watch.known(src)
                watch._maybe_open(dest, rotated=rotated)

        observer = Observer()
        bases = {p.base: p.recursive for p in self.patterns}
        for base, recursive in bases.items():
            if os.path.isdir(base):
                observer.schedule(Handler(), base, recursive=recursive)
        observer.daemon = True
        observer.start()
        self.observer = observer

    def _matches(self, path: str) -> bool:
        return any(p.matches(path) for p in self.patterns)

    def _maybe_open(self, path: str, *, rotated: bool) -> None:
        if not (rotated or self._matches(path)):
            return
        try:
            f = open(path, "rb")  # noqa: SIM115 - handed to the tailer, which closes it
        except OSError:
            return  # gone already, or unreadable: the scan logs it
        self.opened.put((path, f))

    def stop(self) -> None:
        if self.observer is not None:
            self.observer.stop()
            self.observer.join(timeout=2)
            self.observer = None


class Tailer:
    """Follows the files matching ``patterns``; ``poll_once`` does one round of work."""

    def __init__(
        self,
        patterns: list[str],
        *,
        service: str,
        repo: str,
        enqueue_many: EnqueueMany,
        state_path: Path,
        from_start: bool = False,
        max_line_bytes: int = 1 << 20,
        max_record_lines: int = 1000,
        max_record_bytes: int = 256_000,
        flush_after: float = 1.5,
        max_trace_bytes: int = 64_000,
        scan_every: float = 1.0,
        linger: float = 30.0,
        inotify: bool = True,
        stop: threading.Event | None = None,
        skim: bool = True,
        read_chunk: int = READ_CHUNK,
    ) -> None:
        self.patterns = compile_patterns(patterns)
        self.service, self.repo = service, repo
        self.enqueue_many = enqueue_many
        self.skim, self.read_chunk = skim, read_chunk
        self.checkpoints = Checkpoints(state_path)
        # Rotated siblings written since then may hold lines never read (see _sweep_rotated).
        self.fresh_since = self.checkpoints.saved_at or time.time()
        self.swept: dict[str, int] = {}  # key -> size of a sibling read to its end and let go
        # Only the very first run treats what is already there as history.
        self.history_at_start = not self.checkpoints.existed and not from_start
        self.max_line_bytes = max_line_bytes
        self.flush_after = flush_after
        self.max_trace_bytes = max_trace_bytes
        self.scan_every, self.linger = scan_every, linger
        self.stop = stop or threading.Event()
        self._grouper_args: dict[str, Any] = {
            "max_lines": max_record_lines,
            "max_bytes": max_record_bytes,
            "flush_after": flush_after,
        }
        self.files: dict[str, Followed] = {}  # by key
        self.first_scan = True
        self.events = 0
        self._next_scan = 0.0
        self._retry_at = 0.0
        self._backoff = 0.0
        self._throttle = Throttle()
        self._watch: _Watch | None = None
        if inotify:
            self._watch = _Watch(self.patterns, self._is_followed_path)
            try:
                self._watch.start()
            except OSError as exc:  # the inotify limit: the scan still finds everything
                log.warning("tail.inotify_unavailable", extra={"error": str(exc)})
                self._watch = None

    def _is_followed_path(self, path: str) -> bool:
        return any(fl.path == path for fl in list(self.files.values()))

    # --- discovery -------------------------------------------------------------------

    def discover(self, now: float) -> None:
        """Adopt what inotify opened; every ``scan_every`` seconds, scan the patterns."""
        while self._watch is not None:
            try:
                path, f = self._watch.opened.get_nowait()
            except queue.Empty:
                break
            self._adopt(path, f, now)
        if now < self._next_scan and not self.first_scan:
            return
        self._next_scan = now + self.scan_every
        present: set[str] = set()
        live: list[str] = []
        for path in matching_paths(self.patterns):
            try:
                st = os.stat(path)
            except OSError:
                continue  # vanished between the scan and the stat
            if not stat.S_ISREG(st.st_mode):
                self._say_once(f"notreg:{path}", "tail.skip", path=path, reason="not a file")
                continue
            key = f"{st.st_dev}:{st.st_ino}"
            present.add(key)
            live.append(path)
            if key in self.files:
                self.files[key].path = path  # renamed to another matching name: same file
                continue
            try:
                f = open(path, "rb")  # noqa: SIM115 - kept open across polls, closed in _close
            except OSError as exc:
                self._say_once(f"open:{path}", "tail.open_failed", path=path, error=str(exc))
                continue
            self._adopt(path, f, now)
        for key, fl in self.files.items():
            fl.at_path = key in present
        self._sweep_rotated(live, now)
        if self.first_scan:
            self.first_scan = False
            for fl in self.files.values():
                self.checkpoints.entries[fl.key] = fl.entry()
            self.checkpoints.save()  # the first run's starting points survive a kill -9

    def _adopt(self, path: str, f: BinaryIO, now: float) -> Followed | None:
        st = os.fstat(f.fileno())
        key = f"{st.st_dev}:{st.st_ino}"
        if key in self.files or not stat.S_ISREG(st.st_mode):
            f.close()  # already followed (inotify and the scan both found it), or not a file
            return None
        fl = Followed(
            key=key,
            path=path,
            f=f,
            grouper=Grouper(**self._grouper_args),
            last_growth=now,
            read_at=time.time(),
        )
        fl.fp, fl.fp_len, fl.fp_final = head_identity(f)
        fl.offset = self._start_offset(fl, st.st_size)
        fl.partial_start = fl.offset
        self.files[key] = fl
        self._throttle.forget(f"open:{path}")
        log.info("tail.open", extra={"path": path, "offset": fl.offset, "size": st.st_size})
        return fl

    def _start_offset(self, fl: Followed, size: int) -> int:
        saved = self.checkpoints.entries.get(fl.key)
        if saved and saved["offset"] <= size and same_head(fl.f, saved["fp"], saved["fp_len"]):
            return int(saved["offset"])
        copied = self._copy_of(fl, size)
        if copied is not None:
            log.info("tail.copy_continues", extra={"path": fl.path, "offset": copied})
            return copied
        if self.first_scan and self.history_at_start:
            return size  # the first run ever: like tail -F, what is there is history
        return 0

    def _copy_of(self, fl: Followed, size: int) -> int | None:
        """The offset of a file with the same first line (this file is its copy), if any."""
        if not fl.fp_final or fl.fp_len < MIN_COPY_FINGERPRINT:
            return None
        known: list[dict[str, Any]] = [o.entry() for o in self.files.values()]
        known += [*self.checkpoints.entries.values(), *reversed(self.checkpoints.retired)]
        for entry in known:
            if entry.get("fp") == fl.fp and entry.get("fp_len") == fl.fp_len:
                return min(int(entry["offset"]), size)
        return None

    def _adopt_copies(self, fl: Followed, now: float) -> None:
        """After a copytruncate, the copies beside the file (``app.log.1``, ``app.log-2026…``)
        hold what was written after the last read and before the truncate: the copy of what was
        being read continues from its offset, and a copy made since the last read but of a
        content never seen (two rotations between two reads) is read whole — even where the
        patterns do not match them."""
        for path in rotated_siblings([fl.path]):
            try:
                f = open(path, "rb")  # noqa: SIM115 - adopted (then closed in _close) or closed
            except OSError:
                continue
            st = os.fstat(f.fileno())
            key = f"{st.st_dev}:{st.st_ino}"
            fresh = st.st_mtime >= fl.read_at - 1.0  # mtime is coarse on some filesystems
            if key not in self.files and (same_head(f, fl.fp, fl.fp_len) or fresh):
                self._adopt(path, f, now)
                self.files[key].at_path = False  # read to its end, then let go
            else:
                f.close()

    def _sweep_rotated(self, live: list[str], now: float) -> None:
        """Rotations neither inotify nor a scan saw: a file written since this tailer started
        (or since its state was last saved) that sits beside a followed file as one of its
        rotations (``app.log.2`` after two rotations between scans; an inotify queue that
        overflowed or lagged; no inotify at all) is read like any file found: from its
        checkpoint or its copy's offset if its identity is known, else from its start."""
        sizes: dict[str, int] = {}
        for path in sorted(set(rotated_siblings(live))):
            if any(p.matches(path) for p in self.patterns):
                continue  # the scan follows it
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = f"{st.st_dev}:{st.st_ino}"
            sizes[key] = st.st_size
            if (
                key in self.files
                or self.swept.get(key) == st.st_size
                or not stat.S_ISREG(st.st_mode)
            ):
                continue  # followed, or read to its end (or history) and unchanged since
            if st.st_mtime < self.fresh_since - 1.0:  # mtime is coarse on some filesystems
                # Written before this tailer (or its last saved state): history, even when a
                # rollover renames it later on.
                self.swept[key] = st.st_size
                continue
            try:
                f = open(path, "rb")  # noqa: SIM115 - kept open across polls, closed in _close
            except OSError:
                continue
            if (fl := self._adopt(path, f, now)) is not None:
                fl.at_path = False  # read to its end, then let go
                log.info("tail.rotation_found", extra={"path": path, "offset": fl.offset})
        # Only siblings still there are remembered: what was deleted cannot come back.
        self.swept = {k: v for k, v in self.swept.items() if k in sizes}

    # --- reading ---------------------------------------------------------------------

    def _group(self, fl: Followed, now: float) -> list[Record]:
        """The records closed by reading on from the current offset (at most READ_BUDGET bytes
        this round); a huge line is cut, never held whole."""
        if not self.skim:
            return [r for line in self._lines(fl, now) for r in fl.grouper.feed(*line, now)]
        fl.f.seek(fl.offset)
        records: list[Record] = []
        budget = READ_BUDGET
        while budget > 0 and not self.stop.is_set():
            chunk = fl.f.read(min(self.read_chunk, budget))
            if not chunk:
                break
            budget -= len(chunk)
            fl.last_growth = now
            base, pos = fl.offset, 0
            if fl.partial_start < fl.offset:  # the chunk goes on with a line begun before it
                nl = chunk.find(b"\n")
                self._hold(fl, chunk if nl < 0 else chunk[:nl])
                if nl < 0:
                    fl.offset += len(chunk)
                    continue
                pos = nl + 1
                records += fl.grouper.feed(self._take_line(fl), fl.partial_start, base + pos, now)
                fl.partial_start = base + pos
            last = chunk.rfind(b"\n", pos) + 1
            if last > pos:
                records += group_lines(
                    fl.grouper,
                    chunk,
                    pos,
                    last,
                    base=base,
                    now=now,
                    max_line_bytes=self.max_line_bytes,
                )
                fl.partial_start = base + last
                pos = last
            self._hold(fl, chunk[pos:])
            fl.offset = base + len(chunk)
        return records

    def _hold(self, fl: Followed, piece: bytes) -> None:
        """Keep the start of a line whose newline is not read yet (at most max_line_bytes)."""
        room = self.max_line_bytes - len(fl.partial)
        if len(piece) > room:
            fl.partial_overflow = True
            piece = piece[: max(room, 0)]
        fl.partial += piece

    def _lines(self, fl: Followed, now: float) -> Iterator[tuple[str, int, int]]:
        """Every complete line from the current offset (the reference path, ``skim=False``)."""
        fl.f.seek(fl.offset)
        budget = READ_BUDGET
        while budget > 0 and not self.stop.is_set():
            chunk = fl.f.read(min(self.read_chunk, budget))
            if not chunk:
                return
            budget -= len(chunk)
            fl.last_growth = now
            pos = 0
            while pos < len(chunk):
                nl = chunk.find(b"\n", pos)
                piece = chunk[pos:] if nl < 0 else chunk[pos:nl]
                room = self.max_line_bytes - len(fl.partial)
                if len(piece) > room:
                    fl.partial_overflow = True
                    piece = piece[: max(room, 0)]
                fl.partial += piece
                if nl < 0:
                    fl.offset += len(chunk) - pos
                    break
                end = fl.offset + (nl - pos) + 1
                yield self._take_line(fl), fl.partial_start, end
                fl.offset = end
                fl.partial_start = end
                pos = nl + 1

    def _take_line(self, fl: Followed) -> str:
        text = bytes(fl.partial).decode("utf-8", errors="replace").rstrip("\r")
        if fl.partial_overflow:
            text += LINE_TRUNCATED
        fl.partial.clear()
        fl.partial_overflow = False
        return text

    def _events(self, fl: Followed, records: list[Record]) -> list[ErrorEvent]:
        """The records that are errors as events, each with its id (at their place in this file,
        so take them before the file's identity changes)."""
        events: list[ErrorEvent] = []
        for record in records:
            if self.skim and not may_be_log_error(record.text):
                continue  # what from_input would ignore, decided without building an event
            event = from_input(
                record.text,
                origin="log",
                service=self.service,
                repo=self.repo,
                max_bytes=self.max_trace_bytes,
            )
            if not isinstance(event, ErrorEvent):
                continue
            if not fl.fp_final:  # a record was read, so the first line is complete now
                reading_at = fl.f.tell()
                fl.fp, fl.fp_len, fl.fp_final = head_identity(fl.f)
                fl.f.seek(reading_at)
            # The same record at the same place of the same file gets the same id.
            key = f"{fl.fp}:{record.start}:{record.text}".encode("utf-8", errors="replace")
            events.append(event.model_copy(update={"id": hashlib.sha1(key).hexdigest()[:32]}))
        return events

    def _hand_over(self, events: Sequence[ErrorEvent]) -> None:
        if not events:
            return
        try:
            self.enqueue_many(list(events))
        except Exception as exc:
            raise HandOverFailed(f"{type(exc).__name__}: {exc}") from exc
        self.events += len(events)

    def _truncated(self, fl: Followed) -> bool:
        """Whether the file started over (copytruncate) since it was read up to its offset."""
        size = os.fstat(fl.f.fileno()).st_size
        return size < fl.offset or (fl.fp_final and not same_head(fl.f, fl.fp, fl.fp_len))

    def _start_over(self, fl: Followed, now: float) -> None:
        """copytruncate: the same inode holds new content; its copy continues the old one."""
        log.info("tail.truncated", extra={"path": fl.path, "offset": fl.offset})
        self.checkpoints.retire(fl.entry())  # its copy continues from here
        self._adopt_copies(fl, now)
        if any(o is not fl and (o.fp, o.fp_len) == (fl.fp, fl.fp_len) for o in self.files.values()):
            fl.grouper = Grouper(**self._grouper_args)  # its copy reads the record whole
        else:
            # No copy: what was read of the old content goes now, in a hand-over of its own. If
            # it fails, the file is rewound while its identity is still the old content's, so
            # the next round finds the truncation again (the saved checkpoint is the old one).
            self._hand_over(self._events(fl, fl.grouper.flush(now, force=True)))
        fl.offset = fl.partial_start = 0
        fl.partial.clear()
        fl.partial_overflow = False
        fl.fp, fl.fp_len, fl.fp_final = head_identity(fl.f)

    def _read(self, fl: Followed, now: float) -> None:
        """One round of one file: read, group, then hand the round's events over at once."""
        if self._truncated(fl):
            self._start_over(fl, now)
        before = fl.snapshot()
        records = self._group(fl, now)
        if self._truncated(fl):
            # Truncated while this round read: the bytes past the old offset may be the new
            # content, read at the old content's offsets. Forget the round; the copy holds
            # the old content from where the round began, the file starts over at 0.
            fl.restore(before)
            self._start_over(fl, now)
            return
        events = self._events(fl, records)
        if not fl.fp_final:  # the file was short when first seen: its first line may be done
            fl.fp, fl.fp_len, fl.fp_final = head_identity(fl.f)
        if fl.partial and now - fl.last_growth >= self.flush_after:
            # A last line without its newline: the writer has stopped, take it as it is.
            end = fl.offset
            records = fl.grouper.feed(self._take_line(fl), fl.partial_start, end, now)
            events += self._events(fl, records)
            fl.partial_start = end
        events += self._events(fl, fl.grouper.flush(now))
        self._hand_over(events)
        fl.read_at = time.time()

    def poll_once(self, now: float | None = None) -> None:
        """Discover files, read what is new, hand errors over, then save checkpoints."""
        now = time.monotonic() if now is None else now
        self.discover(now)
        if now < self._retry_at:
            return  # intake is out of reach: wait, the checkpoints stay where they are
        for key, fl in list(self.files.items()):
            if self.stop.is_set():
                break
            try:
                self._read(fl, now)
            except HandOverFailed as exc:
                self._rewind(fl)
                self._back_off(now, str(exc))
                break
            except OSError as exc:
                # The file misbehaved (an I/O error): read it again from its checkpoint.
                self._say_once(f"read:{fl.path}", "tail.read_failed", path=fl.path, error=str(exc))
                self._rewind(fl)
                continue
            if self._backoff:
                log.warning("tail.recovered", extra={"after_backoff_s": self._backoff})
                self._backoff = 0.0
            self.checkpoints.entries[key] = fl.entry()
            if self._done(fl, now):
                self._close(key, fl, now)
        self.checkpoints.save()

    def _done(self, fl: Followed, now: float) -> bool:
        """A rotated or deleted file read to its end, and no longer growing."""
        if fl.at_path or fl.partial or fl.grouper.safe_offset() is not None:
            return False
        try:
            st = os.fstat(fl.f.fileno())
        except OSError:
            return True
        if st.st_size > fl.offset:
            return False
        return st.st_nlink == 0 or now - fl.last_growth >= self.linger

    def _back_off(self, now: float, error: str) -> None:
        self._backoff = min(BACKOFF_MAX, max(BACKOFF_START, self._backoff * 2))
        self._retry_at = now + self._backoff
        log.warning("tail.enqueue_failed", extra={"error": error, "retry_in_s": self._backoff})

    def _rewind(self, fl: Followed) -> None:
        saved = self.checkpoints.entries.get(fl.key)
        fl.offset = fl.partial_start = int(saved["offset"]) if saved else 0
        fl.partial.clear()
        fl.partial_overflow = False
        fl.grouper = Grouper(**self._grouper_args)

    def _close(self, key: str, fl: Followed, now: float) -> None:
        """A rotated or deleted file fully read: flush what is pending and let it go."""
        self._hand_over(self._events(fl, fl.grouper.flush(now, force=True)))
        with contextlib.suppress(OSError):
            self.swept[key] = os.fstat(fl.f.fileno()).st_size
        fl.f.close()
        del self.files[key]
        saved = self.checkpoints.entries.pop(key, None)
        if saved is not None:
            self.checkpoints.retire(saved)
        log.info("tail.closed", extra={"path": fl.path})

    def _say_once(self, key: str, event: str, **fields: Any) -> None:
        held = self._throttle.allow(key)
        if held is not None:
            log.warning(event, extra={**fields, "repeated": held} if held else fields)

    def close(self) -> None:
        if self._watch is not None:
            self._watch.stop()
        for fl in self.files.values():
            fl.f.close()
        self.files.clear()


def run(
    settings: Settings,
    patterns: list[str],
    *,
    service: str,
    repo: str | None = None,
    from_start: bool = False,
    state_dir: Path | None = None,
    interval: float = 0.25,
    stop: threading.Event | None = None,
) -> None:
    """Follow ``patterns`` until SIGINT/SIGTERM (``tracehound tail``)."""
    from shared.core.pipeline import sender_app
    from shared.groups.submit import intake_for

    app = sender_app(settings)
    intake = intake_for(settings, app)
    state = (state_dir or settings.data_dir / "tail") / f"{_safe(service)}.json"
    stop = stop or threading.Event()
    with contextlib.suppress(ValueError):  # signals only work in the main thread
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    tailer = Tailer(
        patterns,
        service=service,
        repo=repo or service,
        enqueue_many=intake.submit_many,
        state_path=state,
        from_start=from_start,
        max_trace_bytes=settings.max_trace_bytes,
        stop=stop,
    )
    try:
        while not stop.is_set():
            tailer.poll_once()
            stop.wait(interval)
    finally:
        tailer.close()
        app.close()


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "service"
