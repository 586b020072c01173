"""Node's frames (JavaScript and TypeScript): ``at fn (/app/src/x.js:10:5)``; innermost first."""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.core.domain import Frame

language = "javascript"
innermost_last = False

# The line patterns the tailer's grouping (producers/multiline.py) and the exception
# scanner (shared/intake/exceptions.py) read.
SOURCE_HEADER = re.compile(r"^(?:(?:file://)?(?:/|[A-Za-z]:\\)\S*\.[cm]?[jt]sx?|node:\S+):\d+$")
CARET = re.compile(r"^\s*\^+\s*$")
FOOTER = re.compile(r"^Node\.js v\d")

# at handler (/app/src/x.js:10:5)   /   at /app/src/x.js:10:5   /   at async fn (file:///x.mjs:1:2)
_NODE = re.compile(
    r"^\s*at (?:(?P<func>.+?) \()?(?P<file>[^()\s]+?\.(?:js|mjs|cjs|jsx|ts|tsx|mts|cts))"
    r":(?P<line>\d+):\d+\)?\s*$"
)


def frame(lines: Sequence[str], i: int) -> Frame | None:
    """The frame line ``i`` of ``lines`` names, if it is one of Node's."""
    if m := _NODE.match(lines[i].rstrip()):
        func = (m["func"] or "").removeprefix("async ").removeprefix("new ")
        return Frame(m["file"], int(m["line"]), func, language="javascript")
    return None
