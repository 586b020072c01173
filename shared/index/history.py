"""Code history: recorded by the indexer where the checkout is, read by analyze from Redis.

The analysis workers may not share a filesystem with the indexer (compose runs them in their
own containers), so ``index`` and ``watch`` read git and record, per recently changed file,
which commits last changed which lines (blame) and those commits' hunks; the ``record_history``
task stores that in Redis beside the keyword index. Analyze then needs no git and no checkout:
a cited range's commits are the blame ranges that overlap it. The price is freshness: the
history is as of the last index (``watch`` records it again when HEAD moves), which is also
the version the cited line numbers refer to.

Everything is bounded: only commits after HEAD's time minus ``since_days`` (relative to HEAD,
not to now, so a quiet repository keeps its last changes), at most ``max_files`` files
(most recently changed first) and ``max_commits`` commits per file, every git call under a
timeout and the whole collection under a time budget, hunks clipped.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import redis

from shared.core import keys
from shared.core.domain import BlameRange, CodeVersion, Commit, FileHistory, Hunk, RepoHistory
from shared.core.settings import Settings
from shared.index.git import GitUnavailable, blame, commit_diff, head, parse_hunks, recently_changed

log = logging.getLogger(__name__)

VERSION_FIELD = "\0version"  # no path can start with NUL
LOG_MAX_COMMITS = 2000
HUNKS_PER_COMMIT = 3


@dataclass(frozen=True)
class HistoryBounds:
    since_days: int = 90
    max_files: int = 200
    max_commits: int = 5
    git_timeout: float = 10.0
    budget: float = 60.0
    hunk_chars: int = 1500

    @classmethod
    def from_settings(cls, s: Settings) -> HistoryBounds:
        return cls(
            since_days=s.history_since_days,
            max_files=s.history_max_files,
            max_commits=s.history_max_commits,
            git_timeout=s.history_git_timeout,
            budget=s.history_budget,
            hunk_chars=s.history_hunk_chars,
        )


def _file_history(
    root: Path, path: str, since: int, shallow: bool, b: HistoryBounds, timeout: float
) -> FileHistory:
    found = blame(root, path, since=since, shallow=shallow, timeout=timeout)
    recent = sorted(found.commits.values(), key=lambda c: c.time, reverse=True)[: b.max_commits]
    kept = {c.sha for c in recent}
    ranges = [r for r in found.ranges if r.sha in kept]
    hunks: list[Hunk] = []
    for commit in recent:
        # Only the hunks that made lines still alive at HEAD: what a cited range can point at.
        alive = [
            (r.orig_start, r.orig_start + r.end - r.start) for r in ranges if r.sha == commit.sha
        ]
        diff = commit_diff(root, commit.sha, found.paths[commit.sha], timeout=timeout)
        touching = [
            h
            for h in parse_hunks(commit.sha, diff, max_chars=b.hunk_chars)
            # A file's creation is no change to show: the code itself is in the prompt.
            if not h.text.startswith("@@ -0,0 ")
            and any(h.start <= end and start <= h.end for start, end in alive)
        ]
        hunks.extend(touching[:HUNKS_PER_COMMIT])
    return FileHistory(path=path, commits=recent, ranges=ranges, hunks=hunks)


def collect_history(root: Path, paths: Collection[str], bounds: HistoryBounds) -> RepoHistory:
    """The checkout's commit and the recent history of those of ``paths`` (the indexed files)
    that recent commits changed; "no history" with a reason when git cannot say."""
    deadline = time.monotonic() + bounds.budget

    def left() -> float:
        return min(bounds.git_timeout, deadline - time.monotonic())

    try:
        at = head(root, timeout=left())
    except GitUnavailable as exc:
        log.info("history.unavailable", extra={"path": str(root), "reason": str(exc)})
        return RepoHistory(version=CodeVersion(reason=str(exc)))
    version = CodeVersion(commit=at.sha, tags=at.tags, shallow=at.shallow)
    since = at.time - bounds.since_days * 86400
    try:
        changed = recently_changed(root, since=since, max_commits=LOG_MAX_COMMITS, timeout=left())
    except GitUnavailable as exc:
        log.info("history.unavailable", extra={"path": str(root), "reason": str(exc)})
        return RepoHistory(version=version.model_copy(update={"reason": str(exc)}))
    wanted = set(paths)
    files: list[FileHistory] = []
    partial = False
    for path in [p for p in changed if p in wanted][: bounds.max_files]:
        if left() <= 0.5:
            partial = True
            break
        try:
            got = _file_history(root, path, since, at.shallow, bounds, left())
        except GitUnavailable as exc:  # one file's trouble (a timeout) costs only its history
            log.info("history.file_skipped", extra={"path": path, "reason": str(exc)})
            partial = partial or "longer than" in str(exc)
            continue
        if got.commits:
            files.append(got)
    if partial:
        log.warning("history.partial", extra={"path": str(root), "files": len(files)})
    return RepoHistory(version=version.model_copy(update={"partial": partial}), files=files)


# --- reading what was recorded (analyze) -------------------------------------------------------


def changes_in(history: FileHistory, start: int, end: int, *, limit: int) -> list[Commit]:
    """The most recent commits that last changed a line of ``start``..``end``."""
    shas = {r.sha for r in history.ranges if r.start <= end and start <= r.end}
    return [c for c in history.commits if c.sha in shas][:limit]


def latest_hunks(history: FileHistory, start: int, end: int) -> list[Hunk]:
    """The hunks of the latest commit that changed ``start``..``end``, where they made it."""
    latest = changes_in(history, start, end, limit=1)
    if not latest:
        return []
    sha = latest[0].sha
    inside = [r for r in history.ranges if r.sha == sha and r.start <= end and start <= r.end]
    origins = [_origin(r, start, end) for r in inside]
    hunks = [h for h in history.hunks if h.sha == sha]
    return [h for h in hunks if any(h.start <= b and a <= h.end for a, b in origins)] or hunks[:1]


def _origin(r: BlameRange, start: int, end: int) -> tuple[int, int]:
    """The part of ``r`` inside ``start``..``end``, in the lines of ``r``'s own commit."""
    lo, hi = max(r.start, start), min(r.end, end)
    return r.orig_start + lo - r.start, r.orig_start + hi - r.start


class HistoryStore:
    """One Redis hash per repo: the version, and one field per file with recent history."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r

    def put(self, repo: str, record: RepoHistory) -> None:
        """Replace the repo's history as a whole (files no longer recent drop out)."""
        mapping = {VERSION_FIELD: record.version.model_dump_json()}
        mapping |= {f.path: f.model_dump_json() for f in record.files}
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(keys.history(repo))
        pipe.hset(keys.history(repo), mapping=cast(Any, mapping))
        pipe.execute()

    def version(self, repo: str) -> CodeVersion | None:
        raw = self.r.hget(keys.history(repo), VERSION_FIELD)
        return CodeVersion.model_validate_json(raw) if raw else None

    def files(self, repo: str, paths: Iterable[str]) -> dict[str, FileHistory]:
        wanted = list(dict.fromkeys(paths))
        if not wanted:
            return {}
        raw = self.r.hmget(keys.history(repo), wanted)
        return {
            p: FileHistory.model_validate(json.loads(v))
            for p, v in zip(wanted, raw, strict=True)
            if v
        }
