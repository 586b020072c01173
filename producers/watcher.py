"""The source watcher: file changes under a repo → debounced, coalesced index work.

Events only say *which* paths to look at; what is sent is decided from the disk at flush time,
after the path has been quiet. So an editor's write-temp-then-rename reindexes the target and
never the temp file (it no longer exists when its turn comes), a directory rename removes the
old paths and indexes the new ones, and a ``git checkout`` of 500 files becomes one flush of a
few ``index_files`` batches instead of 1,500 events.

Inotify can drop events (queue overflow, watches missing after ENOSPC), so the watcher also
reconciles disk against the index on start and every ``rescan_every`` seconds.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pathspec
import redis
from celery import Celery
from celery.result import AsyncResult
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserverVFS

from shared.core.errors import PermanentError
from shared.core.pipeline import (
    enqueue_files,
    enqueue_history,
    enqueue_owners,
    enqueue_prune,
    enqueue_remove,
    sender_app,
)
from shared.core.settings import Settings
from shared.index.chunking import chunk_file, language_of
from shared.index.corpus import RedisCorpus
from shared.index.git import GitUnavailable, head
from shared.index.history import HistoryBounds, collect_history
from shared.index.owners import read_codeowners
from shared.index.reindex import batches
from shared.index.sources import (
    ALWAYS_SKIP_DIRS,
    Skipped,
    SourceFile,
    gitignore_spec,
    in_build_output,
    read_source,
    walk,
)
from shared.intake.redact import Redactor

log = logging.getLogger(__name__)

# What the watcher listens to; opened / closed-without-write / attrib events (our own reads
# produce the first two) would only wake the debouncer for nothing.
EVENT_TYPES: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]

Stat = tuple[int, int] | None  # (size, mtime_ns), None when the path is not a regular file


class WatchLimitError(PermanentError):
    """The kernel refused more inotify watches or instances; polling or a higher limit helps."""


def watch_limit_error(exc: OSError, root: Path) -> WatchLimitError | None:
    """A clear error for inotify's limits, or None when ``exc`` is something else."""
    text = str(exc)
    if exc.errno == errno.ENOSPC or "watch limit" in text:
        setting = "fs.inotify.max_user_watches"
    elif exc.errno == errno.EMFILE and "inotify" in text:
        setting = "fs.inotify.max_user_instances"
    else:
        return None
    return WatchLimitError(
        f"cannot watch {root}: inotify limit reached ({text}). Raise it, e.g. "
        f"`sudo sysctl {setting}=524288` (persist it in /etc/sysctl.d/), "
        "or run the watcher with --polling"
    )


def inotify_watch_limit() -> int | None:
    try:
        return int(Path("/proc/sys/fs/inotify/max_user_watches").read_text().strip())
    except (OSError, ValueError):
        return None


def count_dirs(root: Path) -> int:
    """Directories a recursive inotify watch needs (links are not followed, like watchdog)."""
    return sum(1 for _ in os.walk(root, followlinks=False))


def file_stat(path: Path) -> Stat:
    try:
        st = path.lstat()
    except OSError:
        return None
    if not os.path.isfile(path) or os.path.islink(path):
        return None
    return st.st_size, st.st_mtime_ns


def task_id(repo: str, *parts: str) -> str:
    """Deterministic: the same work for the same content gets the same id, repeats are harmless."""
    return hashlib.sha1("\0".join((repo, *parts)).encode("utf-8", errors="replace")).hexdigest()


@dataclass
class _Pending:
    first: float
    last: float
    stat: Stat
    ready_at: float | None = None


class Debouncer:
    """Per-path quiet periods, released together so a burst becomes one batch.

    A path is ready once no event touched it for ``quiet`` seconds and its size and mtime did
    not change in that time (``max_wait`` caps a file that never settles). Ready paths are held
    while other touched paths are still settling, up to ``max_hold``, so one burst is one flush.
    Thread-safe: the observer thread touches, the watcher's loop takes.
    """

    def __init__(
        self,
        quiet: float,
        *,
        stat: Callable[[str], Stat],
        clock: Callable[[], float] = time.monotonic,
        max_hold: float | None = None,
        max_wait: float = 60.0,
    ) -> None:
        self.quiet = quiet
        self.max_hold = max_hold if max_hold is not None else max(2.0, 4 * quiet)
        self.max_wait = max_wait
        self._stat = stat
        self._clock = clock
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()

    def touch(self, path: str) -> None:
        now = self._clock()
        stat = self._stat(path)
        with self._lock:
            prev = self._pending.get(path)
            self._pending[path] = _Pending(prev.first if prev else now, now, stat)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def take(self) -> list[str]:
        """The paths to send now (sorted), or [] while a burst is still settling."""
        now = self._clock()
        with self._lock:
            items = list(self._pending.items())
        settling = False
        for path, p in items:
            if p.ready_at is not None:
                continue
            overdue = now - p.first >= self.max_wait
            if now - p.last < self.quiet and not overdue:
                settling = True
                continue
            stat = self._stat(path)
            with self._lock:
                if self._pending.get(path) is not p:  # touched again meanwhile
                    settling = True
                    continue
                if stat != p.stat and not overdue:
                    p.stat, p.last = stat, now  # still being written: another quiet period
                    settling = True
                    continue
                p.ready_at = now
        with self._lock:
            ready = {path: p for path, p in self._pending.items() if p.ready_at is not None}
            if not ready:
                return []
            oldest = min(p.ready_at for p in ready.values() if p.ready_at is not None)
            if settling and now - oldest < self.max_hold:
                return []
            for path in ready:
                del self._pending[path]
        return sorted(ready)


@dataclass
class WatchStats:
    flushes: int = 0  # flushes of debounced paths that sent anything
    index_tasks: int = 0  # index_files messages sent (events and reconciles)
    files_sent: int = 0
    remove_tasks: int = 0
    reconciles: int = 0
    skipped: int = 0


@dataclass
class _Local:
    """What the watcher last saw of a file on disk."""

    stat: Stat
    sha256: str
    chunk_ids: list[str]


@dataclass(eq=False)  # watchdog keeps handlers in a set: identity hashing
class _Handler(FileSystemEventHandler):
    on_event: Callable[[FileSystemEvent], None]
    errors: list[BaseException] = field(default_factory=list)

    def on_any_event(self, event: FileSystemEvent) -> None:
        try:
            self.on_event(event)
        except Exception as exc:  # an exception here would kill the observer thread
            log.exception("watch.event_failed", extra={"event": repr(event)})
            self.errors.append(exc)


class Watcher:
    """Watches ``root`` and keeps the index of ``repo`` in step with it.

    ``start()`` begins watching, reconciles disk against the index, then processes events in a
    background thread; ``stop()`` ends both. ``corpus`` (the Redis BM25 corpus) lets reconcile
    send only files whose chunks differ from what is indexed; without it every file is sent on
    start and deletions are found with ``prune_repo``.
    """

    def __init__(
        self,
        app: Celery,
        root: Path,
        repo: str,
        *,
        settings: Settings,
        corpus: RedisCorpus | None = None,
        polling: bool = False,
        poll_interval: float = 1.0,
        include: list[str] | None = None,
        exclude: list[str] | None = None,
        quiet: float = 0.5,
        rescan_every: float = 300.0,
    ) -> None:
        self.app = app
        self.root = root.resolve()
        self.repo = repo
        self.settings = settings
        self.corpus = corpus
        self.polling = polling
        self.poll_interval = poll_interval
        self.include = _globs(include)
        self.exclude = _globs(exclude)
        self.quiet = quiet
        self.rescan_every = rescan_every
        self.stats = WatchStats()
        self.debouncer = Debouncer(quiet, stat=lambda rel: file_stat(self.root / rel))
        self._spec = gitignore_spec(self.root)
        self._local: dict[str, _Local] = {}  # files last sent or found up to date
        self._known: set[str] = set()  # paths that may be in the index
        self._known_lock = threading.Lock()
        self._inflight: dict[str, AsyncResult] = {}  # path -> its last task, until it finishes
        self._gitignore_changed: float | None = None
        self._history_at: str | None = None  # the HEAD (or git's refusal) last recorded
        self._owners_text: str | None = None  # the CODEOWNERS text last recorded
        self._owners_recorded = False
        self._stopping = threading.Event()
        self._observer: BaseObserver | None = None
        self._thread: threading.Thread | None = None
        self._handler = _Handler(self._on_event)
        # Files go out redacted, as the worker would store them: chunk ids compared on
        # reconcile are the worker's, and no secret sits in the queue.
        s = settings
        self._redact = Redactor.from_settings(s.redact, s.redact_extra, s.redact_disable).redact

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Watch, reconcile, then process events; raises WatchLimitError on inotify limits.

        The observer starts before the reconcile so a change made during the scan is queued,
        not lost; queued events are processed only after the reconcile has been sent.
        """
        if not self.root.is_dir():
            raise PermanentError(f"watch path {str(self.root)!r} is not a directory")
        self._observer = self._start_observer()
        try:
            self.reconcile()
        except BaseException:
            self._stop_observer()
            raise
        self._thread = threading.Thread(target=self._loop, name="tracehound-watcher", daemon=True)
        self._thread.start()
        log.info(
            "watch.start",
            extra={"repo": self.repo, "root": str(self.root), "polling": self.polling},
        )

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._stop_observer()
        log.info("watch.stop", extra={"repo": self.repo})

    def is_alive(self) -> bool:
        observer_ok = self._observer is not None and self._observer.is_alive()
        return observer_ok and self._thread is not None and self._thread.is_alive()

    def idle(self) -> bool:
        """Nothing waiting to settle and every task sent has finished."""
        return not self._inflight and len(self.debouncer) == 0

    def _start_observer(self) -> BaseObserver:
        observer: BaseObserver
        if self.polling:
            # lstat, not stat: the polling snapshot recurses into whatever stat calls a
            # directory, so a symlink loop would be walked 40 levels deep.
            observer = PollingObserverVFS(os.lstat, os.scandir, polling_interval=self.poll_interval)
        else:
            limit = inotify_watch_limit()
            if limit is not None and (dirs := count_dirs(self.root)) > limit:
                # watchdog silently skips subdirectories it cannot watch: fail loudly instead.
                raise WatchLimitError(
                    f"cannot watch {self.root}: it has {dirs} directories and "
                    f"fs.inotify.max_user_watches is {limit}. Raise it, e.g. `sudo sysctl "
                    "fs.inotify.max_user_watches=524288`, or run the watcher with --polling"
                )
            try:
                observer = Observer()
            except OSError as exc:
                if (err := watch_limit_error(exc, self.root)) is not None:
                    raise err from exc
                raise
        observer.schedule(self._handler, str(self.root), recursive=True, event_filter=EVENT_TYPES)
        try:
            observer.start()
        except OSError as exc:
            if (err := watch_limit_error(exc, self.root)) is not None:
                raise err from exc
            raise
        return observer

    def _stop_observer(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            if self._observer.is_alive():
                self._observer.join(10)
            self._observer = None

    def _loop(self) -> None:
        tick = max(0.02, min(0.1, self.quiet / 4))
        next_rescan = time.monotonic() + self.rescan_every
        next_reap = 0.0
        while not self._stopping.wait(tick):
            now = time.monotonic()
            try:
                if now >= next_reap:
                    self._reap()
                    next_reap = now + max(self.quiet, 0.2)
                changed = self._gitignore_changed
                if changed is not None and now - changed >= self.quiet:
                    self._gitignore_changed = None
                    log.info("watch.gitignore_changed", extra={"repo": self.repo})
                    self.reconcile()
                    next_rescan = now + self.rescan_every
                elif now >= next_rescan:
                    self.reconcile()
                    next_rescan = now + self.rescan_every
                paths = self.debouncer.take()
                if paths:
                    self.flush(paths)
            except Exception:  # Redis or the broker is down: keep watching, retry later
                log.exception("watch.loop_failed", extra={"repo": self.repo})
                next_rescan = min(next_rescan, now + max(5.0, self.quiet))

    # --- selection -------------------------------------------------------------------------

    def _rel(self, path: bytes | str) -> str | None:
        rel = os.path.relpath(os.fsdecode(path), self.root)
        if rel == "." or rel.startswith(".." + os.sep) or rel == "..":
            return None
        return Path(rel).as_posix()

    def selected(self, rel: str) -> bool:
        """Whether ``rel``, heard of by an event, is a file tracehound indexes: its path is
        selected and it is no build output (which :func:`walk` already leaves out)."""
        return self.path_selected(rel) and not in_build_output(self.root, rel)

    def path_selected(self, rel: str) -> bool:
        """Whether ``rel`` is selected by its path alone: languages, globs, .gitignore."""
        parts = rel.split("/")
        if any(p in ALWAYS_SKIP_DIRS for p in parts[:-1]) or language_of(rel) is None:
            return False
        if self.include is not None and not self.include.match_file(rel):
            return False
        if self.exclude is not None and self.exclude.match_file(rel):
            return False
        dirs = ["/".join(parts[: i + 1]) + "/" for i in range(len(parts) - 1)]
        return not any(self._spec.match_file(p) for p in [*dirs, rel])

    # --- events ----------------------------------------------------------------------------

    def _on_event(self, event: FileSystemEvent) -> None:
        moved = isinstance(event, DirMovedEvent | FileMovedEvent)
        src = self._rel(event.src_path) if event.src_path else None
        dest = self._rel(event.dest_path) if moved and event.dest_path else None
        if event.is_directory:
            gone: str | None = src if isinstance(event, DirDeletedEvent) or moved else None
            came: str | None = None
            if moved:
                came = dest
            elif isinstance(event, DirCreatedEvent):
                came = src
            if gone is not None:
                prefix = gone + "/"
                with self._known_lock:
                    under = [k for k in self._known if k.startswith(prefix)]
                for path in under:
                    self.debouncer.touch(path)
            # A synthetic event is one watchdog derived from a directory it already walked for
            # its parent's event, which the walk below covered.
            if came is not None and not event.is_synthetic:
                for dirpath, dirnames, filenames in os.walk(self.root / came, followlinks=False):
                    dirnames[:] = [d for d in dirnames if d not in ALWAYS_SKIP_DIRS]
                    for name in filenames:
                        if (found := self._rel(os.path.join(dirpath, name))) is not None:
                            self._note(found)
            return
        for rel in (src, dest):
            if rel is not None:
                self._note(rel)

    def _note(self, rel: str) -> None:
        if rel.rsplit("/", 1)[-1] == ".gitignore":
            self._gitignore_changed = time.monotonic()
            return
        with self._known_lock:
            known = rel in self._known
        if known or self.selected(rel):
            self.debouncer.touch(rel)

    # --- sending ---------------------------------------------------------------------------

    def _read(self, rel: str) -> tuple[SourceFile | None, _Local | Skipped]:
        """The file's text (None when the cache says it did not change) and its local state."""
        stat = file_stat(self.root / rel)
        if stat is None:
            return None, Skipped(rel, "not a regular file")
        cached = self._local.get(rel)
        if cached is not None and cached.stat == stat:
            return None, cached
        got = read_source(
            self.root, rel, max_bytes=self.settings.max_file_bytes, redact=self._redact
        )
        if isinstance(got, Skipped):
            return None, got
        chunks = chunk_file(
            self.repo,
            rel,
            got.text,
            size=self.settings.chunk_lines,
            overlap=self.settings.chunk_overlap,
            max_chars=self.settings.chunk_max_chars,
        )
        return got, _Local(stat, got.sha256, [c.id for c in chunks])

    def _skip(self, got: Skipped) -> None:
        self.stats.skipped += 1
        log.info("watch.skip", extra={"repo": self.repo, "path": got.path, "reason": got.reason})

    def flush(self, paths: Iterable[str]) -> None:
        """Send the current state of debounced paths: index what exists, remove what is gone."""
        to_index: list[tuple[SourceFile, _Local]] = []
        to_remove: list[str] = []
        for rel in paths:
            if rel in self._inflight:
                self.debouncer.touch(rel)  # its previous task first: tasks for a path in order
                continue
            with self._known_lock:
                known = rel in self._known
            if self.selected(rel):
                text, local = self._read(rel)
            else:
                text, local = None, Skipped(rel, "not selected")
            if isinstance(local, Skipped):
                if local.reason not in ("not a regular file", "not selected"):
                    self._skip(local)
                if known:
                    to_remove.append(rel)
                continue
            previous = self._local.get(rel)
            if known and previous is not None and previous.sha256 == local.sha256:
                self._local[rel] = local  # touched, not changed
                continue
            if text is None:  # the stat matched the cache but the index may be behind
                got = read_source(
                    self.root, rel, max_bytes=self.settings.max_file_bytes, redact=self._redact
                )
                if isinstance(got, Skipped):
                    continue
                text = got
            to_index.append((text, local))
        if not to_index and not to_remove:
            return
        sent = self._send_index(to_index)
        self._send_remove(to_remove)
        self.stats.flushes += 1
        log.info(
            "watch.batch",
            extra={
                "repo": self.repo,
                "files": len(to_index),
                "removed": len(to_remove),
                "tasks": sent + len(to_remove),
            },
        )

    def _send_index(self, files: list[tuple[SourceFile, _Local]]) -> int:
        locals_by_path = {f.path: local for f, local in files}
        n = 0
        for batch in batches(iter(f for f, _ in files)):
            payload = [{"path": f.path, "text": f.text} for f in batch]
            tid = task_id(self.repo, *(f"{f.path}\0{f.sha256}" for f in batch))
            result = enqueue_files(self.app, self.repo, payload, task_id=tid)
            n += 1
            self.stats.index_tasks += 1
            self.stats.files_sent += len(batch)
            with self._known_lock:
                self._known.update(f.path for f in batch)
            for f in batch:
                self._local[f.path] = locals_by_path[f.path]
                self._inflight[f.path] = result
        return n

    def _send_remove(self, paths: list[str]) -> None:
        for rel in paths:
            self._inflight[rel] = enqueue_remove(
                self.app, self.repo, rel, task_id=task_id(self.repo, rel, "removed")
            )
            self.stats.remove_tasks += 1
            self._local.pop(rel, None)
            with self._known_lock:
                self._known.discard(rel)

    def _reap(self) -> None:
        """Forget finished tasks; after a failure the path's cache is dropped so the next
        rescan sends it again (transient failures were already retried by the task)."""
        done: dict[str, AsyncResult] = {}
        checked: dict[str, bool] = {}
        for rel, result in list(self._inflight.items()):
            if result.id not in checked:
                checked[result.id] = result.ready()
            if checked[result.id]:
                done[rel] = result
        failed = set()
        for rel, result in done.items():
            del self._inflight[rel]
            if result.failed():
                failed.add(result.id)
                self._local.pop(rel, None)
        for tid in failed:
            log.warning("watch.task_failed", extra={"repo": self.repo, "task_id": tid})

    # --- reconcile -------------------------------------------------------------------------

    def reconcile(self) -> None:
        """Disk against the index: send changed and new files, remove files gone from disk.

        With the corpus, a file is sent only when the chunk ids it would get differ from those
        indexed for it (the ids hash the chunk texts), so a rescan of an unchanged repo sends
        nothing and a file the index lost is sent again. Files whose size and mtime did not
        change since they were last read are not read again.
        """
        started = time.monotonic()
        self._spec = gitignore_spec(self.root)
        indexed = self.corpus.paths(self.repo) if self.corpus is not None else None
        live: set[str] = set()
        to_index: list[tuple[SourceFile, _Local]] = []
        for rel in walk(self.root):
            if not self.path_selected(rel):  # walk() left build output out already
                continue
            text, local = self._read(rel)
            if isinstance(local, Skipped):
                self._skip(local)
                continue
            live.add(rel)
            if rel in self._inflight:
                continue  # its task is on the way; the next rescan checks the outcome
            if self.corpus is not None:
                current = self.corpus.file_ids(self.repo, rel) == local.chunk_ids
            else:
                previous = self._local.get(rel)
                current = previous is not None and previous.sha256 == local.sha256
            if current:
                self._local[rel] = local
                with self._known_lock:
                    self._known.add(rel)
                continue
            if text is None:
                got = read_source(
                    self.root, rel, max_bytes=self.settings.max_file_bytes, redact=self._redact
                )
                if isinstance(got, Skipped):
                    continue
                text = got
            to_index.append((text, local))
        sent = self._send_index(to_index)
        with self._known_lock:
            known = set(self._known)
        gone = sorted((indexed if indexed is not None else known) - live)
        removed: list[str] = []
        for rel in gone:
            if rel in self._inflight:
                continue
            if file_stat(self.root / rel) is not None and self.selected(rel):
                self.debouncer.touch(rel)  # appeared since the walk: the event path sends it
            else:
                removed.append(rel)
        self._send_remove(removed)
        if indexed is None and self.stats.reconciles == 0:
            # Without the corpus nothing says what was indexed before this process started.
            enqueue_prune(
                self.app,
                self.repo,
                sorted(live),
                task_id=task_id(self.repo, "prune", *sorted(live)),
            )
        self.stats.reconciles += 1
        self.record_history(live)
        self.record_owners()
        for rel in set(self._local) - live:
            self._local.pop(rel, None)
        log.info(
            "watch.reconcile",
            extra={
                "repo": self.repo,
                "files": len(live),
                "sent": len(to_index),
                "tasks": sent,
                "removed": len(removed),
                "seconds": round(time.monotonic() - started, 3),
            },
        )

    def record_owners(self) -> None:
        """Record the CODEOWNERS file when it changed since the last record (on start and at
        each rescan)."""
        text = read_codeowners(self.root)
        if text == self._owners_text and self._owners_recorded:
            return
        self._owners_text, self._owners_recorded = text, True
        enqueue_owners(self.app, self.repo, text)
        log.info("watch.codeowners", extra={"repo": self.repo, "found": text is not None})

    def record_history(self, live: Iterable[str]) -> None:
        """Read and record the checkout's git history when HEAD moved since the last record
        (on start and at each rescan): a commit changes the history without changing a file."""
        if not self.settings.history:
            return
        try:
            at = head(self.root, timeout=self.settings.history_git_timeout).sha
        except GitUnavailable as exc:
            at = f"unavailable: {exc}"
        if at == self._history_at:
            return
        self._history_at = at
        record = collect_history(self.root, set(live), HistoryBounds.from_settings(self.settings))
        enqueue_history(self.app, self.repo, record)
        log.info(
            "watch.history",
            extra={"repo": self.repo, "commit": record.version.commit, "files": len(record.files)},
        )


def _globs(patterns: list[str] | None) -> pathspec.PathSpec | None:
    """Include/exclude globs with .gitignore wildcard rules: ``*.py`` matches at any depth,
    ``src/**/*.py`` is anchored at the repo root, ``**`` spans directories."""
    if patterns is None:
        return None
    return pathspec.GitIgnoreSpec.from_lines(patterns)


def run(
    settings: Settings,
    root: Path,
    repo: str,
    *,
    polling: bool = False,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    quiet: float = 0.5,
    rescan_every: float = 300.0,
    stop: threading.Event | None = None,
) -> None:
    """Watch ``root`` as ``repo`` until ``stop`` is set, SIGINT or SIGTERM."""
    stop = stop or threading.Event()
    app = sender_app(settings)
    client = redis.Redis.from_url(settings.redis_url)
    watcher = Watcher(
        app,
        root,
        repo,
        settings=settings,
        corpus=RedisCorpus(client),
        polling=polling,
        include=include,
        exclude=exclude,
        quiet=quiet,
        rescan_every=rescan_every,
    )
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, on_signal)
    try:
        watcher.start()
        while not stop.wait(1.0):
            if not watcher.is_alive():
                raise RuntimeError(f"the watcher of {root} stopped (was the directory removed?)")
    finally:
        watcher.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        app.close()
        client.close()
