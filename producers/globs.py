"""The tailer's file patterns: glob syntax with ``**``, matched and walked without following
directory symlinks (``glob(recursive=True)`` follows them, and a symlink loop never ends).

``*`` and ``?`` stay within one path component, ``[...]`` is a character class (``[!...]``
negates), ``**`` spans any number of directories, ``~`` is the home directory.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

_MAGIC = re.compile(r"[*?[]")


def _translate(pattern: str) -> str:
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and (end := pattern.find("]", i + 2)) > 0:
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class Pattern:
    text: str  # absolute, ~ expanded
    regex: re.Pattern[str]
    base: str  # the longest leading directory without wildcards
    recursive: bool  # a wildcard in a directory component or "**": walk below base

    @classmethod
    def of(cls, pattern: str) -> Pattern:
        text = os.path.abspath(os.path.expanduser(pattern))
        parts = text.split("/")
        static = []
        for part in parts[:-1]:
            if _MAGIC.search(part):
                break
            static.append(part)
        base = "/".join(static) or "/"
        return cls(
            text=text,
            regex=re.compile(_translate(text) + r"\Z"),
            base=base,
            recursive=len(static) < len(parts) - 1,
        )

    def matches(self, path: str) -> bool:
        return self.regex.match(os.path.abspath(path)) is not None


def compile_patterns(patterns: Sequence[str]) -> list[Pattern]:
    return [Pattern.of(p) for p in patterns]


def matching_paths(patterns: Sequence[Pattern]) -> Iterator[str]:
    """Every existing path matching a pattern, each once, in a stable order. Directories are
    walked without following symlinks (a symlinked *file* is still matched)."""
    seen: set[str] = set()
    for pattern in patterns:
        if not pattern.recursive:
            last = pattern.text.rsplit("/", 1)[1]
            found = sorted(glob.glob(os.path.join(glob.escape(pattern.base), last)))
        else:
            found = sorted(_walk(pattern))
        for path in found:
            if path not in seen:
                seen.add(path)
                yield path


def _walk(pattern: Pattern) -> Iterator[str]:
    for root, dirs, files in os.walk(pattern.base, followlinks=False, onerror=lambda e: None):
        dirs.sort()
        for name in files:  # a symlinked file is listed here; a symlinked directory is not entered
            path = os.path.join(root, name)
            if pattern.regex.match(path):
                yield path
