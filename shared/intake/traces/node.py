"""Node's frames (JavaScript and TypeScript): ``at fn (/app/src/x.js:10:5)``; innermost first."""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.core.domain import Frame

language = "javascript"
innermost_last = False
TEXT_MARKS: tuple[str, ...] = ()  # tried on every text

# The line patterns the tailer's grouping (producers/multiline.py) and the exception
# scanner (shared/intake/exceptions.py) read.
SOURCE_HEADER = re.compile(r"^(?:(?:file://)?(?:/|[A-Za-z]:\\)\S*\.[cm]?[jt]sx?|node:\S+):\d+$")
CARET = re.compile(r"^\s*\^+\s*$")
FOOTER = re.compile(r"^Node\.js v\d")
# What precedes an exception line's type: "  [cause]: Error: x", "Uncaught TypeError: x".
EXCEPTION_PREFIX = r"\s*\[cause\]: |Uncaught "

# What makes a line worth the tailer's grouper (producers/skim.py): a line starting with one of
# SKIM_HEADS, holding one of SKIM_WORDS as written or one of SKIM_FOLDED in any case.
# A source header: "node:internal/x:12", "file:///app/x.mjs:3", "C:\\app\\x.js:3".
SKIM_HEADS = (rb"node:", rb"file:", rb"[A-Za-z]:\\")
SKIM_WORDS: tuple[bytes, ...] = ()
SKIM_FOLDED: tuple[bytes, ...] = ()

# at handler (/app/src/x.js:10:5)   /   at /app/src/x.js:10:5   /   at async fn (file:///x.mjs:1:2)
_NODE = re.compile(
    r"^\s*at (?:(?P<func>.+?) \()?(?P<file>[^()\s]+?\.(?:js|mjs|cjs|jsx|ts|tsx|mts|cts))"
    r":(?P<line>\d+):(?P<column>\d+)\)?(?: \{)?\s*$"  # " {": the error's own properties follow
)


def frame(lines: Sequence[str], i: int) -> Frame | None:
    """The frame line ``i`` of ``lines`` names, if it is one of Node's."""
    if m := _NODE.match(lines[i].rstrip()):
        func = (m["func"] or "").removeprefix("async ").removeprefix("new ")
        return Frame(
            m["file"], int(m["line"]), func, language="javascript", column=int(m["column"])
        )
    return None
