"""Stack frames parsed out of error text and mapped onto the repo's indexed paths.

Traces name the files, lines and functions that failed; retrieval uses them as a signal next to
vectors and BM25. Parsing covers Python (plain, pytest, IPython/Jupyter), Java/Kotlin, Node.js
and Go. Mapping is pure string work against the set of indexed paths: nothing is ever read from
the paths a trace names, so a frame outside the repository can only be ignored.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------
# Parsing


@dataclass(frozen=True)
class Frame:
    """One stack frame as the trace wrote it."""

    file: str
    line: int | None
    function: str = ""
    module: str = ""  # Java/Kotlin package-qualified class, Go package path; else ""
    language: str = "python"
    code: str = ""  # the source line the trace printed under the frame, if any


_PY_PATH = r"[^\s\"'<>()\[\]]*?\.pyx?"
# File "/app/x.py", line 12, in handler   (also after "INTERNALERROR>" or a log prefix)
_PY_FILE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>[^\s(]+))?')
# IPython >= 8: File ~/x/site-packages/pkg/mod.py:52, in Outer.<locals>.wrapper(registry, ...)
_PY_IPY8 = re.compile(rf"^\s*File (?P<file>{_PY_PATH}):(?P<line>\d+), in (?P<func>[\w<>.]+)")
# IPython < 8 and Colab: /x/pkg/mod.py in func(args)  /  [/x/mod.py](https://...) in func(args)
_PY_IPY = re.compile(
    rf"^\s*\[?(?P<file>(?:[A-Za-z]:)?{_PY_PATH})\]?(?:\([^)\s]*\))? in (?P<func>[\w<>.]+)\("
)
# the arrow IPython puts on the frame's current line: "---> 146" / "-> 1701"
_PY_ARROW = re.compile(r"^-*> (?P<line>\d+)\b")
# pytest: "src/pkg/mod.py:352: in _rewrite_test" and the last "pkg/mod.py:2554: ValueError"
_PY_PYTEST = re.compile(
    rf"^[\s*]*(?P<file>(?:[A-Za-z]:)?{_PY_PATH}):(?P<line>\d+): "
    r"(?:in (?P<func>[\w<>.]+)|(?P<exc>[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt)\b))"
)
# pdb: "> /srv/app/test_repro.py(10)tearDown()"
_PY_PDB = re.compile(rf"^> (?P<file>{_PY_PATH})\((?P<line>\d+)\)(?P<func>\w+)\(")
# at com.shop.OrderService.place(OrderService.java:42)  (optionally "app//" or "java.base/")
_JAVA = re.compile(
    r"^\s*at (?:[\w.$-]+/+)?(?P<qual>[\w$.<>]+)\((?P<file>[\w$.-]+\.(?:java|kt|kts|scala|groovy))"
    r":(?P<line>\d+)\)"
)
# at handler (/app/src/x.js:10:5)   /   at /app/src/x.js:10:5   /   at async fn (file:///x.mjs:1:2)
_NODE = re.compile(
    r"^\s*at (?:(?P<func>.+?) \()?(?P<file>[^()\s]+?\.(?:js|mjs|cjs|jsx|ts|tsx|mts|cts))"
    r":(?P<line>\d+):\d+\)?\s*$"
)
# Go: a function line, then "\t/app/x.go:42 +0x1d"
_GO_FILE = re.compile(r"^\t(?P<file>\S+\.go):(?P<line>\d+)(?: \+0x[0-9a-f]+)?\s*$")
_GO_FUNC = re.compile(r"^(?:created by )?(?P<func>[\w./*()$\-\[\]{},]+?)(?: in goroutine \d+)?$")
_GO_ARGS = re.compile(r"\((?:[^()]|\.\.\.)*\)$")
_JAVA_CAUSE = re.compile(r"^\s*Caused by:")


def _py_code_after(lines: Sequence[str], i: int) -> str:
    """The source line Python prints under a ``File ...`` line, if there is one."""
    if i + 1 < len(lines):
        nxt = lines[i + 1].strip()
        if nxt.startswith("INTERNALERROR>"):
            nxt = nxt[len("INTERNALERROR>") :].strip()
        if nxt and not nxt.startswith(("File ", "Traceback", "...")) and not _PY_FILE.search(nxt):
            return nxt[:300]
    return ""


def _ipython_line(lines: Sequence[str], i: int) -> tuple[int | None, str]:
    """Line number and code of the ``--> N`` arrow following an IPython frame header."""
    for j in range(i + 1, min(i + 40, len(lines))):
        text = lines[j].strip()
        m = _PY_ARROW.match(text)
        if m:
            return int(m["line"]), text[m.end() :].strip()[:300]
        if _PY_IPY.match(lines[j]) or _PY_IPY8.match(lines[j]):
            break
    return None, ""


def parse_frames(text: str) -> list[Frame]:
    """Frames of every trace in ``text``, nearest the raise first.

    Python prints the innermost frame last; Java, Node and Go print it first, and a Java
    ``Caused by:`` section is the deeper cause, so its frames come before those above it.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    python: list[Frame] = []
    blocks: list[list[Frame]] = [[]]  # innermost-first languages, one block per "Caused by"
    for i, raw in enumerate(lines):
        line = raw.rstrip()
        if _JAVA_CAUSE.match(line) and blocks[-1]:
            blocks.append([])
            continue
        if m := _PY_FILE.search(line):
            python.append(
                Frame(m["file"], int(m["line"]), m["func"] or "", code=_py_code_after(lines, i))
            )
        elif m := _PY_IPY8.match(line):
            _, code = _ipython_line(lines, i)
            python.append(Frame(m["file"], int(m["line"]), m["func"], code=code))
        elif m := _PY_IPY.match(line):
            number, code = _ipython_line(lines, i)
            python.append(Frame(m["file"], number, m["func"], code=code))
        elif m := _PY_PYTEST.match(line):
            python.append(Frame(m["file"], int(m["line"]), m["func"] or ""))
        elif m := _PY_PDB.match(line):
            python.append(Frame(m["file"], int(m["line"]), m["func"]))
        elif m := _JAVA.match(line):
            qual = m["qual"]
            owner, _, method = qual.rpartition(".")
            blocks[-1].append(
                Frame(m["file"], int(m["line"]), method, module=owner, language="java")
            )
        elif m := _NODE.match(line):
            func = (m["func"] or "").removeprefix("async ").removeprefix("new ")
            blocks[-1].append(Frame(m["file"], int(m["line"]), func, language="javascript"))
        elif m := _GO_FILE.match(raw):
            prev = lines[i - 1].strip() if i else ""
            fm = _GO_FUNC.match(prev)
            qual = _GO_ARGS.sub("", fm["func"]) if fm else ""
            pkg, _, func = qual.rpartition(".")
            blocks[-1].append(Frame(m["file"], int(m["line"]), func, module=pkg, language="go"))
    ordered: list[Frame] = []
    for block in reversed(blocks):
        ordered.extend(block)
    ordered.extend(reversed(python))
    return ordered


# ---------------------------------------------------------------------------------------------
# Mapping onto the repository


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


class PathMapper:
    """Maps frame files onto repo paths by the longest matching run of trailing components."""

    def __init__(self, paths: Iterable[str]) -> None:
        self._by_suffix: dict[tuple[str, ...], list[str]] = {}
        for path in sorted(paths, key=lambda p: (p.count("/"), p)):
            parts = tuple(path.split("/"))
            for i in range(len(parts)):
                self._by_suffix.setdefault(parts[i:], []).append(path)

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
            found = self._by_suffix.get(tuple(parts[-k:]))
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
        return self.map_file(frame.file)


def map_frames(frames: Sequence[Frame], paths: Collection[str]) -> list[MappedFrame]:
    return PathMapper(paths).map_frames(frames)
