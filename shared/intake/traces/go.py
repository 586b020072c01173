"""Go's frames: a function line, then ``\t/app/x.go:42 +0x1d``; innermost first.

A panic dump lists every goroutine: ``panicking`` keeps the one that panicked, with argument
lists emptied, which shared/intake/trace.py reads instead of the whole dump.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.core.domain import Frame

language = "go"
innermost_last = False
TEXT_MARKS: tuple[str, ...] = ()  # tried on every text

# The line patterns the tailer's grouping (producers/multiline.py) and the exception
# scanner (shared/intake/exceptions.py) read.
START = re.compile(r"^(?:panic: |fatal error: )")
LINE = re.compile(
    r"^(?:goroutine \d+ .*\]:$|created by |exit status \d+$|\[signal |panic: |fatal error: "
    r"|\.\.\.additional frames elided\.\.\.|\S+\(.*\)$)"
)
AFTER_BLANK = re.compile(r"^(?:goroutine \d+ |exit status \d+$|\[signal |created by )")
EXCEPTION = re.compile(r"^(?P<type>panic|fatal error): (?P<msg>.*)$")

# What makes a line worth the tailer's grouper (producers/skim.py): a line starting with one of
# SKIM_HEADS, holding one of SKIM_WORDS as written or one of SKIM_FOLDED in any case.
SKIM_HEADS = (rb"goroutine ",)
SKIM_WORDS: tuple[bytes, ...] = ()
SKIM_FOLDED = (rb"panic",)

_GO_FILE = re.compile(r"^\t(?P<file>\S+\.go):(?P<line>\d+)(?: \+0x[0-9a-f]+)?\s*$")
_GO_FUNC = re.compile(r"^(?:created by )?(?P<func>[\w./*()$\-\[\]{},]+?)(?: in goroutine \d+)?$")
_GO_ARGS = re.compile(r"\((?:[^()]|\.\.\.)*\)$")
_GOROUTINE = re.compile(r"^goroutine \d+ \[", re.MULTILINE)
# A Go function line whose arguments hold spaces ("main.(*S).apply(0xc0, {0xc1, 0x3, 0x4})"):
# ``frame`` only reads argument lists without spaces, so the arguments are dropped first.
_GO_CALL_WITH_SPACES = re.compile(r"^(?P<func>[^\s(]\S*?)\((?=[^()\n]* )[^()\n]*\)$", re.MULTILINE)


def panicking(text: str) -> str:
    """A Go panic dump cut to the panicking goroutine (the others are whatever else was
    running) with argument lists emptied."""
    headers = _GOROUTINE.finditer(text)
    first = next(headers, None)
    if first is None:
        return text
    second = next(headers, None)
    if second is not None:
        text = text[: second.start()]
    return _GO_CALL_WITH_SPACES.sub(r"\g<func>(...)", text)


def frame(lines: Sequence[str], i: int) -> Frame | None:
    """The frame line ``i`` of ``lines`` names (its function is on the line before), if it
    is one of Go's."""
    if m := _GO_FILE.match(lines[i]):
        prev = lines[i - 1].strip() if i else ""
        fm = _GO_FUNC.match(prev)
        qual = _GO_ARGS.sub("", fm["func"]) if fm else ""
        pkg, _, func = qual.rpartition(".")
        return Frame(m["file"], int(m["line"]), func, module=pkg, language="go")
    return None
