"""The log tailer: follows files like ``tail -F`` and enqueues their error records.

Rotation by rename (the old file is read to its end), copytruncate, delete-and-recreate and new
files matching the globs are all followed. The read offset of each file is checkpointed only
after the events read before it are enqueued, so a crash or restart never loses an error; a
replay may repeat one, with the same event id.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import logging
import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from producers.multiline import Grouper, Record
from shared.core.domain import ErrorEvent
from shared.core.settings import Settings
from shared.intake.events import from_input

log = logging.getLogger(__name__)

FINGERPRINT_BYTES = 256
READ_CHUNK = 1 << 20
LINE_TRUNCATED = " …[line truncated by tracehound]"

Enqueue = Callable[[ErrorEvent], object]  # the return value (a group decision) is unused


def fingerprint(f: BinaryIO, length: int = FINGERPRINT_BYTES) -> tuple[str, int]:
    """Hash of the file's first bytes and how many were hashed (fewer while it is short)."""
    f.seek(0)
    head = f.read(length)
    return hashlib.sha1(head).hexdigest(), len(head)


def same_file(f: BinaryIO, fp: str, fp_len: int) -> bool:
    """Whether an open file still starts with the bytes a checkpoint saw (inode reuse check)."""
    f.seek(0)
    return hashlib.sha1(f.read(fp_len)).hexdigest() == fp


class Checkpoints:
    """Read offsets per file identity, in a JSON file replaced atomically on every save."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[str, dict[str, Any]] = {}
        if path.exists():
            try:
                self.entries = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                # A torn file cannot happen with replace(); a hand-edited one can.
                log.warning(
                    "tail.checkpoints_unreadable", extra={"path": str(path), "error": str(exc)}
                )

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.entries, sort_keys=True))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


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
    draining: bool = False  # replaced at its path: read to the end, then close


class Tailer:
    """Follows the files matching ``patterns``; ``poll_once`` does one round of work."""

    def __init__(
        self,
        patterns: list[str],
        *,
        service: str,
        repo: str,
        enqueue: Enqueue,
        state_path: Path,
        from_start: bool = False,
        max_line_bytes: int = 1 << 20,
        max_record_lines: int = 1000,
        max_record_bytes: int = 256_000,
        flush_after: float = 1.5,
        max_trace_bytes: int = 64_000,
    ) -> None:
        self.patterns = patterns
        self.service, self.repo = service, repo
        self.enqueue = enqueue
        self.checkpoints = Checkpoints(state_path)
        self.from_start = from_start
        self.max_line_bytes = max_line_bytes
        self.flush_after = flush_after
        self.max_trace_bytes = max_trace_bytes
        self._grouper_args: dict[str, Any] = {
            "max_lines": max_record_lines,
            "max_bytes": max_record_bytes,
            "flush_after": flush_after,
        }
        self.files: dict[str, Followed] = {}  # by key
        self.by_path: dict[str, str] = {}  # path -> key currently at that path
        self.first_scan = True
        self.events = 0
        self._warned: set[str] = set()

    # --- discovery -------------------------------------------------------------------

    def _matches(self) -> Iterator[str]:
        seen: set[str] = set()
        for pattern in self.patterns:
            for path in sorted(glob.glob(os.path.expanduser(pattern), recursive=True)):
                if path not in seen:
                    seen.add(path)
                    yield path

    def discover(self, now: float) -> None:
        present: dict[str, str] = {}
        for path in self._matches():
            try:
                st = os.stat(path)
            except OSError:
                continue  # vanished between glob and stat
            if not stat.S_ISREG(st.st_mode):
                if path not in self._warned:  # a directory named like a log file
                    self._warned.add(path)
                    log.info("tail.skip", extra={"path": path, "reason": "not a regular file"})
                continue
            key = f"{st.st_dev}:{st.st_ino}"
            present[path] = key
            if key in self.files:
                self.files[key].path = path  # renamed to another matching name: same file
                continue
            self._open(path, key, now)
        live = set(present.values())
        for key, fl in self.files.items():
            # Rotated away from the globs, replaced by a new file, or deleted: read to the end.
            fl.draining = key not in live
        self.by_path = present
        self.first_scan = False

    def _open(self, path: str, key: str, now: float) -> None:
        try:
            f = open(path, "rb")  # noqa: SIM115 - kept open across polls, closed in _close
        except OSError as exc:
            log.warning("tail.open_failed", extra={"path": path, "error": str(exc)})
            return
        st = os.fstat(f.fileno())
        if f"{st.st_dev}:{st.st_ino}" != key:  # replaced between stat and open
            f.close()
            return
        followed = Followed(
            key=key, path=path, f=f, grouper=Grouper(**self._grouper_args), last_growth=now
        )
        saved = self.checkpoints.entries.get(key)
        if saved and same_file(f, saved["fp"], saved["fp_len"]) and saved["offset"] <= st.st_size:
            followed.offset = int(saved["offset"])
        elif saved is None and self.first_scan and not self.from_start:
            followed.offset = st.st_size  # like tail -F: existing content is history
        followed.partial_start = followed.offset
        followed.fp, followed.fp_len = fingerprint(f)
        self.files[key] = followed
        log.info("tail.open", extra={"path": path, "offset": followed.offset})

    # --- reading ---------------------------------------------------------------------

    def _lines(self, fl: Followed, now: float) -> Iterator[tuple[str, int, int]]:
        """Complete lines from the current offset; a huge line is cut, never held whole."""
        fl.f.seek(fl.offset)
        while True:
            chunk = fl.f.read(READ_CHUNK)
            if not chunk:
                return
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

    def _emit(self, fl: Followed, records: list[Record]) -> None:
        for record in records:
            event = from_input(
                record.text,
                origin="log",
                service=self.service,
                repo=self.repo,
                max_bytes=self.max_trace_bytes,
            )
            if isinstance(event, ErrorEvent):
                # The same record at the same place of the same file gets the same id.
                key = f"{fl.fp}:{record.start}:{record.text}".encode("utf-8", errors="replace")
                event = event.model_copy(update={"id": hashlib.sha1(key).hexdigest()[:32]})
                self.enqueue(event)
                self.events += 1

    def _checkpoint(self, fl: Followed) -> None:
        safe = fl.grouper.safe_offset()
        offset = fl.partial_start if safe is None else min(safe, fl.partial_start)
        self.checkpoints.entries[fl.key] = {
            "offset": offset,
            "fp": fl.fp,
            "fp_len": fl.fp_len,
            "path": fl.path,
        }

    def _refresh_fingerprint(self, fl: Followed) -> None:
        if fl.fp_len < FINGERPRINT_BYTES:  # the file was short when first seen
            fl.fp, fl.fp_len = fingerprint(fl.f)

    def _read(self, fl: Followed, now: float) -> None:
        size = os.fstat(fl.f.fileno()).st_size
        rewritten = fl.fp_len > 0 and not same_file(fl.f, fl.fp, fl.fp_len)
        if size < fl.offset or rewritten:  # copytruncate: the same inode started over
            log.info("tail.truncated", extra={"path": fl.path, "offset": fl.offset})
            self._emit(fl, fl.grouper.flush(now, force=True))
            fl.offset = fl.partial_start = 0
            fl.partial.clear()
            fl.fp, fl.fp_len = fingerprint(fl.f)
        for line, start, end in self._lines(fl, now):
            self._emit(fl, fl.grouper.feed(line, start, end, now))
        self._refresh_fingerprint(fl)
        if fl.partial and now - fl.last_growth >= self.flush_after:
            # A last line without its newline: the writer has stopped, take it as it is.
            end = fl.offset
            self._emit(fl, fl.grouper.feed(self._take_line(fl), fl.partial_start, end, now))
            fl.partial_start = end
        self._emit(fl, fl.grouper.flush(now))

    def poll_once(self, now: float | None = None) -> None:
        """Discover files, read what is new, enqueue errors, then save checkpoints."""
        now = time.monotonic() if now is None else now
        self.discover(now)
        for key, fl in list(self.files.items()):
            try:
                self._read(fl, now)
            except Exception:
                # Enqueue failed (broker down) or the file misbehaved: forget what was read
                # since the checkpoint and read it again next round. Nothing is lost.
                log.exception("tail.read_failed", extra={"path": fl.path})
                self._rewind(fl)
                continue
            self._checkpoint(fl)
            if fl.draining and not fl.partial and fl.grouper.safe_offset() is None:
                self._close(key, fl, now)
        self.checkpoints.save()

    def _rewind(self, fl: Followed) -> None:
        saved = self.checkpoints.entries.get(fl.key)
        fl.offset = fl.partial_start = int(saved["offset"]) if saved else 0
        fl.partial.clear()
        fl.partial_overflow = False
        fl.grouper = Grouper(**self._grouper_args)

    def _close(self, key: str, fl: Followed, now: float) -> None:
        """A rotated or deleted file fully read: flush what is pending and let it go."""
        self._emit(fl, fl.grouper.flush(now, force=True))
        fl.f.close()
        del self.files[key]
        self.checkpoints.entries.pop(key, None)
        log.info("tail.closed", extra={"path": fl.path})

    def close(self) -> None:
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
    from shared.intake.submit import intake_for

    app = sender_app(settings)
    intake = intake_for(settings, app)
    state = (state_dir or settings.data_dir / "tail") / f"{_safe(service)}.json"
    tailer = Tailer(
        patterns,
        service=service,
        repo=repo or service,
        enqueue=intake.submit,
        state_path=state,
        from_start=from_start,
        max_trace_bytes=settings.max_trace_bytes,
    )
    stop = stop or threading.Event()
    with contextlib.suppress(ValueError):  # signals only work in the main thread
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        while not stop.is_set():
            tailer.poll_once()
            stop.wait(interval)
    finally:
        tailer.close()
        app.close()


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "service"
