"""Code history in an analysis: the latest change the prompt shows, the commits the message
names for each cited range, and the indexed commit against the error's release.

Only what the indexer recorded is read (shared/index/history.py, one Redis hash): no git call
and no checkout on the model worker. Author names, subjects and hunks are untrusted text: they
are redacted here, escaped by the message module, and fenced in the prompt.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis

from shared.core.domain import (
    Analysis,
    Candidate,
    CitedHistory,
    CodeVersion,
    Commit,
    ErrorEvent,
    FileHistory,
)
from shared.index.history import HistoryStore, changes_in, latest_hunks
from shared.intake.frames import map_frames

log = logging.getLogger(__name__)

MAX_CITED = 5  # cited ranges whose commits the message lists
COMMITS_PER_RANGE = 3
PROMPT_CHANGES = 2  # candidates (best first) whose latest change the prompt shows
PROMPT_CHANGE_CHARS = 2500  # per change, all its hunks together
RELEASE_KEYS = ("release", "commit", "revision")
_LOCATION = re.compile(r"^(?P<path>.+?):(?P<start>\d+)(?:-(?P<end>\d+))?$")
_SHA = re.compile(r"^[0-9a-f]{7,40}$")


@dataclass(frozen=True)
class RecentChange:
    """The latest commit that changed a candidate's shown lines, with its (redacted) hunks."""

    path: str
    lines: str
    commit: Commit
    diff: str


@dataclass(frozen=True)
class Recorded:
    version: CodeVersion | None
    files: dict[str, FileHistory]


def frame_lines(event: ErrorEvent, recorded: Recorded) -> dict[str, list[int]]:
    """The lines the trace's in-repo frames point at, per file with recorded history."""
    if not recorded.files:
        return {}
    frames = event.trace.code_frames() if event.trace else ()  # read at intake
    lines: dict[str, list[int]] = {}
    for f in map_frames(frames, recorded.files.keys()):
        if f.line is not None:
            lines.setdefault(f.path, []).append(f.line)
    return lines


def suspects(
    history: FileHistory, start: int, end: int, lines: Sequence[int], *, limit: int
) -> list[Commit]:
    """The commits behind ``start``..``end``: the one that last changed a line the trace
    points at first (what Sentry calls a suspect commit), then the others, newest first."""
    on_frames = [c for n in lines if start <= n <= end for c in changes_in(history, n, n, limit=1)]
    ranked = [*on_frames, *changes_in(history, start, end, limit=limit)]
    return list({c.sha: c for c in ranked}.values())[:limit]


def lookup(store: HistoryStore, repo: str, paths: Sequence[str]) -> Recorded:
    """What the indexer recorded for these files; nothing (and a log line) if Redis fails:
    history sharpens a message, it never holds one up."""
    try:
        return Recorded(store.version(repo), store.files(repo, paths))
    except (redis.RedisError, ValueError) as exc:
        log.warning("history.lookup_failed", extra={"repo": repo, "error": str(exc)})
        return Recorded(None, {})


def _safe(commit: Commit, redact: Callable[[str], str]) -> Commit:
    return commit.model_copy(
        update={"author": redact(commit.author), "subject": redact(commit.subject)}
    )


def prompt_changes(
    candidates: Sequence[Candidate],
    recorded: Recorded,
    redact: Callable[[str], str],
    frames: dict[str, list[int]],
) -> list[RecentChange]:
    """For the best candidates with recent history: the latest change to the line the trace
    points at in them, else to their shown lines."""
    changes: list[RecentChange] = []
    for cand in candidates:
        history = recorded.files.get(cand.path)
        if history is None:
            continue
        start = min(h.start_line for h in cand.chunks)
        end = max(h.end_line for h in cand.chunks)
        hit = [n for n in frames.get(cand.path, []) if start <= n <= end]
        if hit:
            start = end = hit[0]  # nearest the raise
        latest = changes_in(history, start, end, limit=1)
        if not latest:
            continue
        diff = "\n".join(h.text for h in latest_hunks(history, start, end))
        if len(diff) > PROMPT_CHANGE_CHARS:
            diff = diff[: PROMPT_CHANGE_CHARS - 12] + "\n…[clipped]"
        changes.append(
            RecentChange(cand.path, f"{start}-{end}", _safe(latest[0], redact), redact(diff))
        )
        if len(changes) == PROMPT_CHANGES:
            break
    return changes


def cited_locations(analysis: Analysis | None, candidates: Sequence[Candidate]) -> list[str]:
    """``path:start-end`` the message presents: the analysis's files and evidence, else the
    candidates' best chunks."""
    found: list[str] = []
    if analysis is not None and not analysis.degraded:
        found += [f"{f.path}:{f.start_line}-{f.end_line}" for f in analysis.relevant_files]
        found += [e for h in analysis.hypotheses for e in h.evidence]
    if not found:
        found = [f"{c.path}:{c.lines}" for c in candidates]
    return list(dict.fromkeys(found))


def cited_history(
    locations: Sequence[str],
    recorded: Recorded,
    redact: Callable[[str], str],
    frames: dict[str, list[int]],
) -> list[CitedHistory]:
    """The commits that touched each cited range (ranges with none left out): the last
    change to a line the trace points at first, then the most recent."""
    out: list[CitedHistory] = []
    for location in locations:
        m = _LOCATION.match(location.strip())
        history = recorded.files.get(m["path"]) if m else None
        if m is None or history is None:
            continue
        start = int(m["start"])
        end = int(m["end"] or start)
        commits = suspects(history, start, end, frames.get(m["path"], []), limit=COMMITS_PER_RANGE)
        if commits:
            safe = [_safe(c, redact) for c in commits]
            out.append(CitedHistory(location=f"{m['path']}:{start}-{end}", commits=safe))
        if len(out) == MAX_CITED:
            break
    return out


def error_release(event: ErrorEvent) -> str:
    """The release or commit the error says it came from, or ""."""
    for key in RELEASE_KEYS:
        value = event.attributes.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()[:100]
    return ""


def same_code(release: str, version: CodeVersion) -> bool:
    """Whether ``release`` names the indexed commit: its sha (or a prefix), or a tag at it
    (``1.4.2`` matches tag ``v1.4.2``); Sentry's ``package@version`` form is understood."""
    wanted = release.rsplit("@", 1)[-1].strip().lower()
    commit = (version.commit or "").lower()
    if _SHA.match(wanted) and commit and (commit.startswith(wanted) or wanted.startswith(commit)):
        return True
    return wanted.removeprefix("v") in {t.lower().removeprefix("v") for t in version.tags}


def version_note(event: ErrorEvent, version: CodeVersion | None) -> str | None:
    """ "code indexed at abc1234, error from release 1.4.2" when the two differ."""
    release = error_release(event)
    if not release or version is None or version.commit is None or same_code(release, version):
        return None
    return f"code indexed at {version.commit[:7]}, error from release {release}"
