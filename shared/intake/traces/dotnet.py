""".NET's exceptions: the inner exception printed on the same line after `` ---> ``.

The pattern the exception scanner (shared/intake/exceptions.py) reads; its frames are not
parsed yet.
"""

from __future__ import annotations

import re

language = "csharp"

# .NET prints the inner exception on the same line: "System.A: outer ---> System.B: inner".
INNER = re.compile(r" ---> (?=(?:[A-Za-z_][\w]*\.)+[A-Z]\w*(?:Exception|Error)\b)")
