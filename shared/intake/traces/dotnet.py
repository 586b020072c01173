""".NET's exceptions: the inner exception printed on the same line after `` ---> ``.

The pattern the exception scanner (shared/intake/exceptions.py) reads; its frames are not
parsed yet.
"""

from __future__ import annotations

import re

language = "csharp"

# .NET prints the inner exception on the same line: "System.A: outer ---> System.B: inner".
INNER = re.compile(r" ---> (?=(?:[A-Za-z_][\w]*\.)+[A-Z]\w*(?:Exception|Error)\b)")
# What precedes an exception line's type: "Unhandled exception. System.X: y", " ---> System.X:
# y" (an inner exception), or an indent (the console logger indents the exception under its
# header) before a dotted type.
EXCEPTION_PREFIX = r"Unhandled [Ee]xception\.? |\s*---> |[ ]{2,}(?=[A-Za-z_$][\w$]*\.)"

# What makes a line worth the tailer's grouper (producers/skim.py): a line starting with one of
# SKIM_HEADS, holding one of SKIM_WORDS as written or one of SKIM_FOLDED in any case.
SKIM_HEADS = (rb"Unhandled",)
SKIM_WORDS: tuple[bytes, ...] = ()
SKIM_FOLDED: tuple[bytes, ...] = ()
