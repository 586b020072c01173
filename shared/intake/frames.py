"""Stack frames mapped onto the repo's indexed paths.

Traces name the files, lines and functions that failed (parsed once, at intake:
shared/intake/traces/); retrieval uses them as a signal next to vectors and BM25. Mapping is
pure string work against the set of indexed paths: nothing is ever read from the paths a trace
names, so a frame outside the repository can only be ignored.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from shared.core.domain import Frame


@dataclass(frozen=True)
class MappedFrame:
    """A frame whose file is one of the repo's indexed paths."""

    path: str  # repo-relative
    line: int | None
    function: str
    depth: int  # 0 = nearest the raise, among all parsed frames
    vendored: bool  # third-party code copied into the repo (weighs less)
    code: str = ""


# Installed-package roots: what follows is a package's own path (``pkg/mod.py``).
_INSTALL_DIRS = frozenset({"site-packages", "dist-packages", "node_modules"})
# Container and virtualenv prefixes are covered by suffix matching; these never hold app code.
_STDLIB = re.compile(
    r"(^|/)lib(64)?/python\d+(\.\d+)?/(?!.*(site|dist)-packages/)"  # CPython stdlib
    r"|(^|/)go/src/(runtime|net|os|sync|reflect|testing|internal)/"  # GOROOT
    r"|^node:|^internal/"  # Node built-ins
)
# Where a language's runtime and installed libraries live, never the app's own code (also
# not in-app for grouping, shared/intake/fingerprint.py): Rust's std as built into the
# toolchain and crates from crates.io or git, Ruby's standard library and gems.
LIBRARY_PATHS = {
    "rust": re.compile(r"^/rustc/[0-9a-f]+/|(?:^|/)\.cargo/(?:registry|git)/"),
    "ruby": re.compile(r"(?:^|/)lib/ruby/(?:\d|gems/|vendor_ruby/)|(?:^|/)gems/[^/]+-\d[^/]*/"),
}
_JAVA_LIBS = ("java.", "javax.", "jdk.", "sun.", "com.sun.", "kotlin.", "kotlinx.", "scala.")
# Directory names that hold third-party code copied into a repo.
VENDOR_DIRS = frozenset(
    {
        "vendor",
        "_vendor",
        "vendored",
        "third_party",
        "thirdparty",
        "extern",
        "externals",
        "packages",
    }
)


def normalize_path(raw: str) -> tuple[list[str], bool]:
    """Path components of a frame's file and whether they are an installed package's own path.

    Backslashes, drive letters, ``file://``, ``~`` and ``..`` are dropped; everything up to the
    last ``site-packages``/``dist-packages``/``node_modules``/``*.egg`` or Go module-cache
    ``name@version`` directory is stripped, since what follows is the package's own layout.
    """
    path = raw.strip().strip("[]")
    path = re.sub(r"^file://", "", path)
    path = path.replace("\\", "/")
    path = re.sub(r"^[A-Za-z]:/", "/", path)
    parts = [p for p in path.split("/") if p not in ("", ".", "..", "~", "[...]", "...")]
    installed = False
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i]
        if part in _INSTALL_DIRS or part.endswith((".egg", ".whl")) or "@v" in part:
            parts = parts[i + 1 :]
            installed = True
            break
    return parts, installed


def shortest_first(path: str) -> tuple[int, str]:
    return path.count("/"), path


class PathMapper:
    """Maps frame files onto repo paths by the longest matching run of trailing components."""

    def __init__(self, paths: Iterable[str]) -> None:
        self._by_suffix: dict[tuple[str, ...], list[str]] = {}
        for path in sorted(paths, key=shortest_first):
            parts = tuple(path.split("/"))
            for i in range(len(parts)):
                self._by_suffix.setdefault(parts[i:], []).append(path)

    def ending_with(self, suffix: tuple[str, ...]) -> list[str]:
        """The repo paths whose trailing components are ``suffix``, shortest first."""
        return self._by_suffix.get(suffix, [])

    def map_file(self, file: str, *, derived: bool = False) -> str | None:
        """The repo path a frame's file names, or None when it is not in the repo.

        ``derived`` paths (a Java package plus file name) must match whole. So must an installed
        package's path after ``site-packages/``; other paths need two trailing components in
        common with a repo path, or equal a top-level repo file, so a bare ``utils.py`` or a
        stdlib ``distutils/version.py`` does not land on the repo's own ``version.py``.
        """
        if not file or "<" in file or _STDLIB.search(file.replace("\\", "/")):
            return None
        parts, installed = normalize_path(file)
        if not parts:
            return None
        whole = derived or installed
        for k in range(len(parts), 0, -1):
            found = self.ending_with(tuple(parts[-k:]))
            if not found:
                continue
            if whole and k < len(parts):
                return None
            if k >= 2 or whole:
                return found[0]  # shortest path first: src/pkg/x.py over build/lib/pkg/x.py
            top = [p for p in found if "/" not in p]
            return top[0] if top else None
        return None

    def map_frames(self, frames: Sequence[Frame]) -> list[MappedFrame]:
        """The frames that fall inside the repo, nearest the raise first; the rest are dropped."""
        mapped: list[MappedFrame] = []
        for depth, frame in enumerate(frames):
            path = self._map(frame)
            if path is None:
                continue
            vendored = any(part in VENDOR_DIRS for part in path.split("/")[:-1])
            mapped.append(
                MappedFrame(path, frame.line, frame.function, depth, vendored, frame.code)
            )
        return mapped

    def _map(self, frame: Frame) -> str | None:
        if frame.language in ("java", "kotlin"):
            if frame.module.startswith(_JAVA_LIBS):
                return None
            # com.shop.Outer$Inner -> com/shop/ + the file the frame names
            package = frame.module.rsplit(".", 1)[0] if "." in frame.module else ""
            derived = "/".join([*package.split("."), frame.file]) if package else frame.file
            return self.map_file(derived, derived=True)
        library = LIBRARY_PATHS.get(frame.language)
        if library is not None and library.search(frame.file.replace("\\", "/")):
            return None
        return self.map_file(frame.file)


def map_frames(frames: Sequence[Frame], paths: Collection[str]) -> list[MappedFrame]:
    return PathMapper(paths).map_frames(frames)
