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

# The line patterns the tailer's grouping (producers/multiline.py) and the exception
# scanner (shared/intake/exceptions.py) read.
# "java.lang.IllegalStateException: x", "TypeError: x", "Error: x", "kotlinx.…CancellationException"
EXCEPTION_START = re.compile(
    r"^(?:[A-Za-z_$][\w$]*\.)*(?:[A-Z][\w$]*)?(?:Error|Exception|Throwable)(?::.*)?$"
)
UNCAUGHT = re.compile(r'^Exception in thread "[^"]*" ')
CAUSE_LINE = re.compile(r"^(?:Caused by|Wrapped by): ")
AT_FRAME = re.compile(r"^\s+at \S")

# at com.shop.OrderService.place(OrderService.java:42)  (optionally "app//" or "java.base/")
_JAVA = re.compile(
    r"^\s*at (?:[\w.$-]+/+)?(?P<qual>[\w$.<>]+)\((?P<file>[\w$.-]+\.(?:java|kt|kts|scala|groovy))"
    r":(?P<line>\d+)\)"
)
_JAVA_CAUSE = re.compile(r"^\s*Caused by:")


def starts_cause(line: str) -> bool:
    return _JAVA_CAUSE.match(line) is not None


def frame(lines: Sequence[str], i: int) -> Frame | None:
    """The frame line ``i`` of ``lines`` names, if it is one of the JVM's."""
    if m := _JAVA.match(lines[i].rstrip()):
        owner, _, method = m["qual"].rpartition(".")
        return Frame(m["file"], int(m["line"]), method, module=owner, language="java")
    return None
