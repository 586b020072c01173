"""Reading a repository from disk: which files to index and how to decode them."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pathspec

from shared.index.generated import generated_reason

log = logging.getLogger(__name__)

# Never worth indexing, whatever .gitignore says.
ALWAYS_SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".idea",
        ".tracehound",
    }
)
# A directory holding this file is a Sphinx build's output (HTML, copied sources, pickles):
# generated, like a Cython module's C, and often shipped in sdists beside the real docs.
BUILD_OUTPUT_MARKERS = frozenset({".buildinfo"})
SNIFF_BYTES = 8192


@dataclass(frozen=True)
class SourceFile:
    path: str  # repo-relative, forward slashes
    text: str
    sha256: str  # of the raw bytes


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


def looks_binary(head: bytes) -> bool:
    """NUL bytes in the first block mean binary (git's own heuristic)."""
    return b"\x00" in head


def decode(raw: bytes) -> str:
    """UTF-8 with replacement: one bad byte must not cost a whole file."""
    return raw.decode("utf-8", errors="replace")


def read_source(
    root: Path, relpath: str, *, max_bytes: int, redact: Callable[[str], str] = str
) -> SourceFile | Skipped:
    """One file as text, or why it was skipped. Never reads outside ``root``. The text is
    ``redact``-ed whole (a producer sends no secret on; redaction keeps the file's lines)."""
    full = (root / relpath).resolve()
    if not full.is_relative_to(root.resolve()):
        return Skipped(relpath, "outside repository root")
    try:
        size = full.stat().st_size
        if size > max_bytes:
            return Skipped(relpath, f"oversize ({size} bytes > {max_bytes})")
        raw = full.read_bytes()
    except OSError as exc:
        return Skipped(relpath, f"unreadable ({exc.strerror or exc})")
    if looks_binary(raw[:SNIFF_BYTES]):
        return Skipped(relpath, "binary")
    text = decode(raw)
    if why := generated_reason(relpath, text):
        return Skipped(relpath, why)
    return SourceFile(relpath, redact(text), hashlib.sha256(raw).hexdigest())


def gitignore_spec(root: Path) -> pathspec.PathSpec:
    """Every .gitignore under ``root`` as one spec over repo-relative paths."""
    lines: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ALWAYS_SKIP_DIRS]
        if ".gitignore" in filenames:
            rel = Path(dirpath).relative_to(root).as_posix()
            prefix = "" if rel == "." else rel + "/"
            for line in (Path(dirpath) / ".gitignore").read_text(errors="replace").splitlines():
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                neg = line.startswith("!")
                pat = line[1:] if neg else line
                # A pattern with a slash (other than trailing) is anchored to its .gitignore's dir.
                anchored = "/" in pat.rstrip("/")
                pat = pat.lstrip("/")
                if anchored:
                    full = prefix + pat if prefix else "/" + pat
                else:
                    full = prefix + "**/" + pat if prefix else pat
                lines.append(("!" if neg else "") + full)
    return pathspec.GitIgnoreSpec.from_lines(lines)


def in_build_output(root: Path, rel: str) -> bool:
    """Whether ``rel`` lies in a build output directory (one holding a marker such as Sphinx's
    ``.buildinfo``), which :func:`walk` leaves out."""
    parts = rel.split("/")[:-1]
    for i in range(len(parts), 0, -1):
        folder = root.joinpath(*parts[:i])
        if any((folder / marker).is_file() for marker in BUILD_OUTPUT_MARKERS):
            return True
    return False


def walk(root: Path) -> Iterator[str]:
    """Repo-relative paths of candidate files: .gitignore honoured, links not followed, build
    output directories left out."""
    root = root.resolve()
    spec = gitignore_spec(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        if BUILD_OUTPUT_MARKERS.intersection(filenames):
            dirnames[:] = []
            continue
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in ALWAYS_SKIP_DIRS and not spec.match_file(rel_dir + d + "/")
        )
        for name in sorted(filenames):
            rel = rel_dir + name
            full = Path(dirpath) / name
            if full.is_symlink() or not full.is_file() or spec.match_file(rel):
                continue
            yield rel
