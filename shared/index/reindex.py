"""Indexing a whole repository from the outside: walk, read, batch, enqueue, wait, prune."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from celery import Celery
from celery.result import AsyncResult

from shared.core.domain import RepoHistory
from shared.core.errors import PermanentError
from shared.core.pipeline import enqueue_files, enqueue_history, enqueue_owners, enqueue_prune
from shared.index.chunking import language_of
from shared.index.history import HistoryBounds, collect_history
from shared.index.owners import read_codeowners
from shared.index.sources import Skipped, SourceFile, read_source, walk

log = logging.getLogger(__name__)

BATCH_BYTES = 512 * 1024
BATCH_FILES = 64


@dataclass
class IndexReport:
    repo: str
    files: int = 0
    chunks: int = 0
    embedded: int = 0
    removed_files: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    history: str = "not read"

    def skip_reasons(self) -> Counter[str]:
        return Counter(s.reason.split(" (")[0] for s in self.skipped)

    def skipped_summary(self) -> str:
        """Each skipped source file with its reason, then how many files were not source."""
        named = [f"{s.path} ({s.reason})" for s in self.skipped if s.reason != NOT_SOURCE]
        others = sum(s.reason == NOT_SOURCE for s in self.skipped)
        if others:
            noun = "files that are" if others > 1 else "file that is"
            named.append(f"{others} {noun} not source")
        return ", ".join(named) or "none"


NOT_SOURCE = "not a source file"


def collect(
    root: Path, *, max_bytes: int, report: IndexReport, redact: Callable[[str], str] = str
) -> Iterator[SourceFile]:
    """Indexable files under ``root``, ``redact``-ed; every skipped one is logged and
    reported with a reason."""
    for rel in walk(root):
        if language_of(rel) is None:
            report.skipped.append(Skipped(rel, NOT_SOURCE))
            continue
        got = read_source(root, rel, max_bytes=max_bytes, redact=redact)
        if isinstance(got, Skipped):
            log.info("index.skip", extra={"path": rel, "reason": got.reason})
            report.skipped.append(got)
            continue
        yield got


def batches(files: Iterator[SourceFile]) -> Iterator[list[SourceFile]]:
    batch: list[SourceFile] = []
    size = 0
    for f in files:
        batch.append(f)
        size += len(f.text)
        if size >= BATCH_BYTES or len(batch) >= BATCH_FILES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def index_repository(
    app: Celery,
    root: Path,
    repo: str,
    *,
    max_bytes: int,
    timeout: float = 3600.0,
    on_total: Callable[[int], None] = lambda n: None,
    on_done: Callable[[int], None] = lambda n: None,
    history: HistoryBounds | None = HistoryBounds(),  # noqa: B008 (frozen)
    redact: Callable[[str], str] = str,
) -> IndexReport:
    """Send every indexable file to the index queue, wait for all, then prune deleted files.
    Files go out ``redact``-ed (the index worker redacts what it is sent in any case).

    With ``history``, the checkout's commit and its files' recent git history are read while
    the workers index, and recorded (shared/index/history.py); a tree that is not a git
    checkout is indexed all the same, with "no history"."""
    if not root.is_dir():
        raise PermanentError(f"index path {str(root)!r} does not exist or is not a directory")
    report = IndexReport(repo)
    files = list(collect(root, max_bytes=max_bytes, report=report, redact=redact))
    on_total(len(files))
    pending: list[tuple[AsyncResult, int, list[str]]] = []
    for batch in batches(iter(files)):
        payload = [{"path": f.path, "text": f.text} for f in batch]
        pending.append((enqueue_files(app, repo, payload), len(batch), [f.path for f in batch]))
    owners = enqueue_owners(app, repo, read_codeowners(root))
    recorded = None
    if history is not None:
        record = collect_history(root, [f.path for f in files], history)
        report.history = history_summary(record)
        recorded = enqueue_history(app, repo, record)
    for result, n, paths in pending:
        try:
            summary = result.get(timeout=timeout, propagate=True)
        except Exception as exc:  # a failed batch is reported; the others still count
            report.failed.extend(f"{p}: {exc}" for p in paths)
            on_done(n)
            continue
        report.files += int(summary["files"])
        report.chunks += int(summary["chunks"])
        report.embedded += int(summary["embedded"])
        on_done(n)
    if not report.failed:  # pruning after a partial failure could drop files that still exist
        pruned = enqueue_prune(app, repo, [f.path for f in files]).get(timeout=timeout)
        report.removed_files = list(pruned["removed_files"])
    try:
        owners.get(timeout=timeout, propagate=True)
    except Exception as exc:  # messages go out all the same, without CODEOWNERS mentions
        log.warning("codeowners.record_failed", extra={"repo": repo, "error": str(exc)})
    if recorded is not None:
        try:
            recorded.get(timeout=timeout, propagate=True)
        except Exception as exc:  # the index is fine without it; analyses say "no history"
            log.warning("history.record_failed", extra={"repo": repo, "error": str(exc)})
            report.history = f"not recorded ({exc})"
    return report


def history_summary(record: RepoHistory) -> str:
    """One line for the index report: at which commit, how many files with recent changes."""
    v = record.version
    if v.commit is None:
        return f"unavailable ({v.reason})"
    extra = "".join(
        f", {w}" for w, on in (("shallow clone", v.shallow), ("partial", v.partial)) if on
    )
    return f"at {v.commit[:12]}, {len(record.files)} files with recent changes{extra}"
