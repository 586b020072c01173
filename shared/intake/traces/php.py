"""PHP's fatal errors: ``PHP Fatal error:  Uncaught …``, ``Stack trace:``, ``#0 …``, ``Next …``.

``Exception::__toString`` (php-src Zend/zend_exceptions.c) prints ``Type: message in
/app/x.php:42``, then ``Stack trace:`` and ``#0 /app/y.php(17): App\\Cls->method()``: each
``#N`` line is a call, made at that file and line, of the function the line names; the
function running at ``#N``'s place is the one the next line calls (``#N+1``), and the place
the exception was thrown is the header's ``in file:line``, inside the function ``#0`` calls.
Innermost first. An exception with a previous one prints the previous (deeper) first, and each
wrapper after it under ``Next``: the print order is already nearest the raise first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.core.domain import Frame

language = "php"
innermost_last = False
TEXT_MARKS = (".php(", ".php:")  # a text without one has no PHP frame

START = re.compile(r"^(?:\[[^\]]*\] )?PHP Fatal error: ")
LINE = re.compile(r"^(?:Stack trace:$|#\d+ |Next \S)")

# What makes a line worth the tailer's grouper (producers/skim.py): a line starting with one of
# SKIM_HEADS, holding one of SKIM_WORDS as written or one of SKIM_FOLDED in any case.
SKIM_HEADS = (rb"Stack trace:",)
SKIM_WORDS: tuple[bytes, ...] = ()
SKIM_FOLDED: tuple[bytes, ...] = ()
# PHP: "PHP Fatal error:  Uncaught App\Payment\DeclinedException: msg in /app/x.php:12", then
# for each exception that wrapped it "Next App\Orders\StorageException: msg in /app/y.php:19".
NEXT = re.compile(r"^Next (?P<type>[\w\\]+)(?:: (?P<msg>.*?))? in \S+:\d+$")
FATAL = re.compile(
    r"^(?:\[[^\]]*\] )?PHP Fatal error:\s+(?:Uncaught (?P<type>[\w\\]+)(?:: (?P<msg>.*?))?"
    r"|(?P<fatal>.*?))(?: in \S+(?::\d+| on line \d+))?$"
)

# "#0 /app/src/Orders/Checkout.php(17): App\Payment\Gateway->charge(42)"; "#3 {main}";
# "#1 [internal function]: App\X->y()" (a callback PHP itself called: no place).
_CALL = re.compile(r"^\s*#\d+ (?:(?P<file>\S.*?\.php)\((?P<line>\d+)\)|\[internal function\]): ")
_CALLED = re.compile(r": (?:(?P<cls>[\w\\]+)(?:->|::))?(?P<func>[\w\\{}]+)\(")
# The thrown-at place of a header: "…Uncaught X: msg in /app/x.php:42" or "Next X: msg in …".
_THROWN = re.compile(
    r"^(?:\[[^\]]*\] )?(?:(?:PHP )?Fatal error:\s+Uncaught |Next )\S.* in "
    r"(?P<file>\S+\.php):(?P<line>\d+)$"
)
_MAIN = re.compile(r"^\s*#\d+ \{main\}\s*$")
_LOOKAHEAD = 3  # "Stack trace:" and then "#0" follow a header


def _called(line: str) -> tuple[str, str]:
    """(class, function) of the call a ``#N`` line names: ``App\\X->y()`` -> ("App\\X", "y");
    the script's own code is ``{main}``."""
    if _MAIN.match(line):
        return "", "{main}"
    m = _CALL.match(line)
    c = _CALLED.search(line, m.end() - 2) if m else None
    return (c["cls"] or "", c["func"]) if c else ("", "")


def frame(lines: Sequence[str], i: int) -> Frame | None:
    """The frame line ``i`` of ``lines`` names, if it is one of PHP's: a ``#N`` call with a
    place, or the place a header says the exception was thrown."""
    line = lines[i].rstrip()
    if (m := _CALL.match(line)) and m["file"]:
        cls, func = _called(lines[i + 1] if i + 1 < len(lines) else "")
        return Frame(m["file"], int(m["line"]), func, module=cls, language=language)
    if m := _THROWN.match(line):
        calls = [
            ln for ln in lines[i + 1 : i + 1 + _LOOKAHEAD] if _CALL.match(ln) or _MAIN.match(ln)
        ]
        cls, func = _called(calls[0]) if calls else ("", "")
        return Frame(m["file"], int(m["line"]), func, module=cls, language=language)
    return None
