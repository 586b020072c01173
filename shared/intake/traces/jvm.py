"""Java's and Kotlin's frames (Scala's and Groovy's alike): ``at pkg.Class.method(File.java:42)``.

The JVM prints the innermost frame first; a ``Caused by:`` section is the deeper cause, so its
frames come before those above it (``starts_cause``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.core.domain import Frame

language = "java"
innermost_last = False
TEXT_MARKS: tuple[str, ...] = ()  # tried on every text

# The line patterns the tailer's grouping (producers/multiline.py) and the exception
# scanner (shared/intake/exceptions.py) read.
# "java.lang.IllegalStateException: x", "TypeError: x", "Error: x", "kotlinx.…CancellationException"
EXCEPTION_START = re.compile(
    r"^(?:[A-Za-z_$][\w$]*\.)*(?:[A-Z][\w$]*)?(?:Error|Exception|Throwable)(?::.*)?$"
)
UNCAUGHT = re.compile(r'^Exception in thread "[^"]*" ')
CAUSE_LINE = re.compile(r"^(?:Caused by|Wrapped by): ")
AT_FRAME = re.compile(r"^\s+at \S")
# What precedes an exception line's type: "Caused by: X", "Exception in thread "main" X".
EXCEPTION_PREFIX = r'Caused by: |Wrapped by: |Exception in thread "[^"]*" '

# What makes a line worth the tailer's grouper (producers/skim.py): a line starting with one of
# SKIM_HEADS, holding one of SKIM_WORDS as written or one of SKIM_FOLDED in any case.
# java.util.logging prints its level on a line of its own, before the message ("INFO: x").
SKIM_HEADS = (rb"Caused by: ", rb"Wrapped by: ", rb"(?:WARNING|INFO|CONFIG|FINE\w*): ")
SKIM_WORDS = (rb"Exception", rb"Throwable")
SKIM_FOLDED: tuple[bytes, ...] = ()

# at com.shop.OrderService.place(OrderService.java:42)  (optionally "app//" or "java.base/")
_JAVA = re.compile(
    r"^\s*at (?:[\w.$-]+/+)?(?P<qual>[\w$.<>]+)\((?P<file>[\w$.-]+\.(?:java|kt|kts|scala|groovy))"
    r":(?P<line>\d+)\)"
)
_JAVA_CAUSE = re.compile(r"^\s*Caused by:")


def starts_cause(line: str) -> bool:
    return _JAVA_CAUSE.match(line) is not None


# A Kotlin (or Java) lambda's class: "Checkout$settle$1" runs inside settle.
_LAMBDA = re.compile(r"\$(?P<function>[a-z_]\w*)\$\d+$")


def frame(lines: Sequence[str], i: int) -> Frame | None:
    """The frame line ``i`` of ``lines`` names, if it is one of the JVM's."""
    if m := _JAVA.match(lines[i].rstrip()):
        owner, _, method = m["qual"].rpartition(".")
        if method in ("invoke", "invokeSuspend") and (lam := _LAMBDA.search(owner)):
            method = lam["function"]
        return Frame(m["file"], int(m["line"]), method, module=owner, language="java")
    return None
