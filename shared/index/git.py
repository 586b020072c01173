"""Reading a git checkout for the indexer: bounded ``git`` calls and their parsed output.

Every call has a timeout and an output cap; any failure (no git, not a checkout, a timeout, a
refusal such as ``safe.directory``) is a ``GitUnavailable`` with a short reason, which callers
turn into "no history", never into a failed index.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shared.core.domain import BlameRange, Commit, Hunk

OUTPUT_MAX_BYTES = 8 * 1024 * 1024
UNCOMMITTED = "0" * 40
# Quiet, stable, never asks: no pager, no prompt, no colour, paths unquoted, C locale.
_CONFIG = ("-c", "core.quotepath=off", "-c", "color.ui=false", "-c", "log.showSignature=false")


class GitUnavailable(Exception):
    """git cannot say anything about this tree (the reason is short and shown to users)."""


def run_git(root: Path, args: Sequence[str], *, timeout: float) -> str:
    """``git -C root args`` stdout; ``GitUnavailable`` on any failure or timeout."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            ["git", *_CONFIG, "-C", str(root), *args],
            capture_output=True,
            timeout=max(timeout, 0.1),
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        raise GitUnavailable("git is not installed") from None
    except subprocess.TimeoutExpired:
        raise GitUnavailable(f"git {args[0]} took longer than {timeout:.0f}s") from None
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        first = err[0] if err else f"exit {done.returncode}"
        if "not a git repository" in first:
            raise GitUnavailable("not a git checkout")
        raise GitUnavailable(f"git {args[0]} failed: {first[:200]}")
    return done.stdout[:OUTPUT_MAX_BYTES].decode("utf-8", "replace")


@dataclass(frozen=True)
class Head:
    sha: str
    time: int  # committer time, epoch seconds
    shallow: bool
    tags: list[str]


def head(root: Path, *, timeout: float) -> Head:
    """The checkout's HEAD commit, whether the clone is shallow, and the tags at HEAD."""
    run_git(root, ["rev-parse", "--show-toplevel"], timeout=timeout)  # "not a git checkout"
    try:
        sha, ctime = run_git(
            root, ["log", "-1", "--format=%H %ct", "HEAD"], timeout=timeout
        ).split()
    except GitUnavailable:
        raise GitUnavailable("no commits yet") from None
    shallow = run_git(root, ["rev-parse", "--is-shallow-repository"], timeout=timeout).strip()
    tags = run_git(root, ["tag", "--points-at", "HEAD"], timeout=timeout).split()
    return Head(sha, int(ctime), shallow == "true", tags[:10])


def recently_changed(root: Path, *, since: int, max_commits: int, timeout: float) -> list[str]:
    """Paths under ``root`` (relative to it) changed by commits after ``since``, most recently
    changed first, from one ``git log`` over at most ``max_commits`` commits."""
    out = run_git(
        root,
        [
            "log",
            f"--since={since}",
            f"--max-count={max_commits}",
            "--name-only",
            "--relative",
            "--format=",
            "--no-merges",
            "HEAD",
            "--",
            ".",
        ],
        timeout=timeout,
    )
    return list(dict.fromkeys(line for line in out.splitlines() if line.strip()))


@dataclass(frozen=True)
class Blame:
    ranges: list[BlameRange]
    commits: dict[str, Commit]
    paths: dict[str, str]  # sha -> the file's path (from the top level) in that commit


_HEADER = re.compile(r"^([0-9a-f]{40}) (\d+) (\d+) (\d+)$")


def parse_blame(text: str) -> Blame:
    """``git blame --incremental`` output; boundary commits (the ``--since`` bound, a root
    commit seen without ``--root``, a shallow clone's graft) and uncommitted lines are left
    out: none of them is a change we can name."""
    ranges: list[BlameRange] = []
    commits: dict[str, Commit] = {}
    paths: dict[str, str] = {}
    meta: dict[str, dict[str, str]] = {}
    boundary: set[str] = set()
    sha = ""
    group: tuple[int, int, int] | None = None
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            sha = m[1]
            group = (int(m[2]), int(m[3]), int(m[4]))
            meta.setdefault(sha, {})
            continue
        key, _, value = line.partition(" ")
        if key == "boundary":
            boundary.add(sha)
        elif key == "filename" and group is not None:
            # "filename" ends each group of the incremental format.
            orig, final, count = group
            paths.setdefault(sha, value)
            if sha != UNCOMMITTED:
                ranges.append(
                    BlameRange(start=final, end=final + count - 1, sha=sha, orig_start=orig)
                )
            group = None
        elif sha and key in ("author", "author-time", "summary"):
            meta[sha][key] = value
    for sha, info in meta.items():
        if sha == UNCOMMITTED or sha in boundary:
            continue
        commits[sha] = Commit(
            sha=sha,
            author=info.get("author", "")[:100],
            time=int(info.get("author-time", "0") or 0),
            subject=info.get("summary", "")[:200],
        )
    ranges = sorted((r for r in ranges if r.sha in commits), key=lambda r: r.start)
    return Blame(ranges, commits, {s: p for s, p in paths.items() if s in commits})


def blame(root: Path, path: str, *, since: int, shallow: bool, timeout: float) -> Blame:
    """Who last changed each line of ``path`` (relative to ``root``) after ``since``.

    Renames are followed (git blame does so for whole-file renames); whitespace-only changes
    are not counted as changes. A shallow clone's oldest commit stands for all the history it
    cut off, so it is a boundary there; in a full clone the root commit is a real change.
    """
    args = ["blame", "--incremental", "-w", f"--since={since}"]
    if not shallow:
        args.append("--root")
    return parse_blame(run_git(root, [*args, "HEAD", "--", path], timeout=timeout))


_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def parse_hunks(sha: str, diff: str, *, max_chars: int) -> list[Hunk]:
    """The hunks of one file's diff, each clipped to ``max_chars``."""
    hunks: list[Hunk] = []
    current: list[str] = []
    start = count = 0
    for line in [*diff.splitlines(), "@@ end"]:
        m = _HUNK.match(line)
        if m or line == "@@ end":
            if current:
                text = "\n".join(current)
                if len(text) > max_chars:
                    text = text[: max_chars - 12] + "\n…[clipped]"
                hunks.append(Hunk(sha=sha, start=start, end=start + max(count, 1) - 1, text=text))
            current = []
            if m:
                start, count = int(m[1]), int(m[2] if m[2] is not None else 1)
                current = [line]
        elif current:
            current.append(line)
    return hunks


def commit_diff(root: Path, sha: str, top_path: str, *, timeout: float) -> str:
    """The change ``sha`` made to ``top_path`` (a path from the repository's top level)."""
    return run_git(
        root,
        [
            "show",
            "--format=",
            "--no-ext-diff",
            "--no-textconv",
            "-U3",
            sha,
            "--",
            f":(top){top_path}",
        ],
        timeout=timeout,
    )
