"""Python's frames: the interpreter's traceback, pytest's and pdb's, IPython's and Jupyter's.

Python prints the innermost frame last (``innermost_last``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.core.domain import Frame

language = "python"
innermost_last = True
TEXT_MARKS: tuple[str, ...] = ()  # tried on every text

# The line patterns the tailer's grouping (producers/multiline.py) and the exception
# scanner (shared/intake/exceptions.py) read.
TRACEBACK_LINE = re.compile(
    r"^\s*(?:\+\s*)?(?:Exception Group )?Traceback \(most recent call last\):\s*$"
)
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?::.*)?$")  # "ValueError: x", "KeyboardInterrupt"
CHAIN_SENTENCES = frozenset(
    {
        "During handling of the above exception, another exception occurred:",
        "The above exception was the direct cause of the following exception:",
    }
)
TRACEBACK_START = re.compile(r"^(?:[ ]*[+|][ -]?)?[ ]*(?:Exception Group )?Traceback \(most recent")
GROUP_PREFIX = re.compile(r"^[ ]*[+|][ ]?")
EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")
GROUP_LINE = re.compile(r"^[\s|]*(?P<type>[\w.]*ExceptionGroup): (?P<msg>.*)$")

# What makes a line worth the tailer's grouper (producers/skim.py): a line starting with one of
# SKIM_HEADS, holding one of SKIM_WORDS as written or one of SKIM_FOLDED in any case.
SKIM_HEADS: tuple[bytes, ...] = ()
SKIM_WORDS = (rb"Traceback",)
SKIM_FOLDED: tuple[bytes, ...] = ()

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


def frame(lines: Sequence[str], i: int) -> Frame | None:
    """The frame line ``i`` of ``lines`` names, if it is one of Python's."""
    line = lines[i].rstrip()
    if m := _PY_FILE.search(line):
        return Frame(m["file"], int(m["line"]), m["func"] or "", code=_py_code_after(lines, i))
    if m := _PY_IPY8.match(line):
        _, code = _ipython_line(lines, i)
        return Frame(m["file"], int(m["line"]), m["func"], code=code)
    if m := _PY_IPY.match(line):
        number, code = _ipython_line(lines, i)
        return Frame(m["file"], number, m["func"], code=code)
    if m := _PY_PYTEST.match(line):
        return Frame(m["file"], int(m["line"]), m["func"] or "")
    if m := _PY_PDB.match(line):
        return Frame(m["file"], int(m["line"]), m["func"])
    return None
