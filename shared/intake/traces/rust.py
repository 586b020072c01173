"""Rust's panics: ``thread 'main' panicked at src/x.rs:4:5:``, its message and backtrace.

The line patterns the tailer's grouping (producers/multiline.py) and the exception scanner
(shared/intake/exceptions.py) read; its frames are not parsed yet.
"""

from __future__ import annotations

import re

language = "rust"

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
