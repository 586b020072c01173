"""Rust's panics: ``thread 'main' panicked at src/x.rs:4:5:``, its message and backtrace.

With ``RUST_BACKTRACE=1`` the backtrace lists a numbered function line, then its place:
``   4: shop::parse_quantity`` / ``             at ./src/lib.rs:7:24``, innermost first (the
panic machinery's own frames above, under ``/rustc/<hash>/library/``). Without it the panic's
place is the only one printed, and it is read as the innermost frame.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.core.domain import Frame

language = "rust"
innermost_last = False
TEXT_MARKS = (".rs:",)  # a text without one has no Rust frame

START = re.compile(r"^thread '[^']*'(?: \(\d+\))? panicked at ")
LINE = re.compile(r"^(?:note: |stack backtrace:$)")

# What makes a line worth the tailer's grouper (producers/skim.py): a line starting with one of
# SKIM_HEADS, holding one of SKIM_WORDS as written or one of SKIM_FOLDED in any case.
SKIM_HEADS: tuple[bytes, ...] = ()
SKIM_WORDS: tuple[bytes, ...] = ()
SKIM_FOLDED = (rb"panic",)  # "thread 'main' panicked at …"
# Rust: "thread 'main' panicked at src/main.rs:4:5:" + the message on the next line (1.73+),
# or "thread 'main' panicked at 'msg', src/main.rs:4:5" (older); 1.80+ may add " (tid)".
PANIC = re.compile(
    r"^thread '[^']*'(?: \(\d+\))? panicked at (?:'(?P<old>.*)', \S+|\S+:\d+:\d+:?)$"
)

_PLACE = re.compile(r"(?P<file>[^\s']+\.rs):(?P<line>\d+):\d+:?$")
_FUNCTION = re.compile(r"^\s*\d+: (?:0x[0-9a-f]+ - )?(?P<func>\S.*?)\s*$")
_AT = re.compile(r"^\s+at (?P<file>\S+\.rs):(?P<line>\d+)(?::\d+)?\s*$")
_BACKTRACE = "stack backtrace:"
_LOOKAHEAD = 40  # lines of panic message searched for the backtrace that follows it
_HASH = re.compile(r"::h[0-9a-f]{16}$")  # RUST_BACKTRACE=full's symbol hash


def frame(lines: Sequence[str], i: int) -> Frame | None:
    """The frame line ``i`` of ``lines`` names, if it is one of Rust's: a backtrace's
    ``at`` line (its function on the line before), or the panic's own place when no backtrace
    follows it."""
    line = lines[i]
    if m := _AT.match(line):
        fm = _FUNCTION.match(lines[i - 1]) if i else None
        qual = _HASH.sub("", fm["func"]) if fm else ""
        module, _, func = qual.rpartition("::")
        return Frame(m["file"], int(m["line"]), func, module=module, language=language)
    if START.match(line) and (m := _PLACE.search(line)):
        ahead = lines[i + 1 : i + 1 + _LOOKAHEAD]
        if any(a.strip() == _BACKTRACE for a in ahead):
            return None  # the backtrace names this place with its function
        return Frame(m["file"], int(m["line"]), "", language=language)
    return None
