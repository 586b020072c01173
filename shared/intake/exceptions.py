"""The exceptions a trace prints: one scanner for the event (which exception it reports) and the
fingerprint (every type in the chain).

Languages print chains in opposite orders. Python and PHP print the root cause first and the
exception that was thrown out last ("The above exception was the direct cause…", "During
handling…", PHP's ``Next``); Java, Kotlin, Node, .NET, Go, Rust and Ruby print the outermost
first and the causes after it (``Caused by:``, ``[cause]:``, `` ---> ``). ``printed`` returns
the exception lines in the order they appear; ``reported`` picks the one an event names, the
outermost (as Sentry titles an issue). The event's ``Trace`` (shared/core/domain.py) carries
the lines on: its ``chain`` orders the types outermost first, root cause last, for grouping.
"""

from __future__ import annotations

import re

from shared.core.domain import Printed, reported_of
from shared.core.memo import TextMemo
from shared.intake.traces import dotnet, go, jvm, node, php, python, ruby, rust

_MAX_LINE = 300  # patterns read a line up to here (a megabyte line must not cost seconds)

_LOGURU_FRAME = "> File "  # loguru marks the frame that caught the exception
# Java/Kotlin/Node/.NET: "java.lang.X: msg", "TypeError: x", after what each language prints
# before a type ("Caused by: ", "  [cause]: ", " ---> ", …: each grammar's EXCEPTION_PREFIX).
_PREFIXES = "|".join(lang.EXCEPTION_PREFIX for lang in (jvm, node, dotnet))
_OTHER_EXC = re.compile(
    rf"^(?:{_PREFIXES})?"
    r"(?P<type>(?:[A-Za-z_$][\w$]*\.)*(?:[A-Z][\w$]*)?"
    r"(?:Error|Exception|Throwable|Fault|Failure|Exit|Interrupt|Warning))(?::\s?(?P<msg>.*))?$"
)


def _lines(text: str) -> list[str]:
    out: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if " ---> " in line[:_MAX_LINE]:  # .NET: outer and inner exception on one line
            out.extend(dotnet.INNER.split(line))
        elif line:
            out.append(line)
    return out


def _message(m: re.Match[str], group: str, line: str) -> str:
    """The message a pattern found in ``line[:_MAX_LINE]``, read to the end of the full line."""
    if m[group] is None:
        return ""
    cut = len(m.string) < len(line) and m.end(group) == len(m.string)
    return line[m.start(group) :].strip() if cut else m[group].strip()


_PRINTED: TextMemo[tuple[Printed, ...]] = TextMemo()
_MEMO_MIN_CHARS = 256  # a stack trace: storms repeat the same one; short texts are cheap


def printed(text: str) -> tuple[Printed, ...]:
    """Every exception line of ``text``, in the order printed; suppressed exceptions (Java's
    ``Suppressed:``) and frames are not exception lines."""
    if len(text) >= _MEMO_MIN_CHARS:
        return _PRINTED.get(text, None, lambda: _printed(text))
    return _printed(text)


def _printed(text: str) -> tuple[Printed, ...]:
    found: list[Printed] = []
    in_traceback = False
    lines = _lines(text)
    for i, full in enumerate(lines):
        line = full[:_MAX_LINE]
        if python.TRACEBACK_START.match(line):
            in_traceback = True
            continue
        if in_traceback:
            body = python.GROUP_PREFIX.sub("", line, count=1) if line.lstrip()[:1] in "+|" else line
            if body[:1].isspace() or body.startswith(_LOGURU_FRAME):
                continue  # frames, source lines, carets, "[Previous line repeated …]"
            in_traceback = False
            if m := python.EXCEPTION.match(body):
                group = python.GROUP_LINE.match(line) is not None
                body_full = full[len(line) - len(body) :]
                found.append(Printed(m["type"], _message(m, "msg", body_full), True, group))
                continue
        if (m := _OTHER_EXC.match(line)) or (m := go.EXCEPTION.match(line)):
            found.append(Printed(m["type"], _message(m, "msg", full), False))
        elif m := rust.PANIC.match(line):
            message = _message(m, "old", full) if m["old"] is not None else _next(lines, i)
            found.append(Printed("panic", message.strip(), False))
        elif "PHP Fatal error:" in line and (m := php.FATAL.match(full)):
            if m["type"]:
                found.append(Printed(m["type"], (m["msg"] or "").strip(), True))
            elif m["fatal"] is not None:
                found.append(Printed("Fatal error", m["fatal"].strip(), True))
        elif line.startswith("Next ") and (m := php.NEXT.match(full)):
            found.append(Printed(m["type"], (m["msg"] or "").strip(), True))
        elif (".rb:" in line and (m := ruby.EXCEPTION.match(full))) or (
            (m := ruby.LOGGER_EXCEPTION.match(full)) and ruby.LINE.match(_next(lines, i))
        ):
            found.append(Printed(m["type"], m["msg"].strip(), False))
    return tuple(found)


def _next(lines: list[str], i: int) -> str:
    return lines[i + 1] if i + 1 < len(lines) else ""


def reported(text: str) -> Printed | None:
    """The exception an event names (``reported_of``): the outermost one."""
    return reported_of(printed(text))


# A line that only a stack trace prints: the record is a trace whatever its level says.
STACK_MARK = re.compile(
    r"^(?:Traceback \(most recent call last\):"
    r"|\s*\+ Exception Group Traceback"
    r"|\s+File \".*\", line \d+"
    r"|\s+at \S.*(?:\)|:\d+)\s*(?:\{|~?\[[^\]]*\])?$"  # Java ("… ~[app.jar:?]"), Node, .NET
    r"|goroutine \d+ .*\]:$"
    r"|panic: |fatal error: "
    r"|Exception in thread \""
    r"|(?:Caused by|Wrapped by): "
    r"|thread '[^']*'(?: \(\d+\))? panicked at "
    r"|(?:\[[^\]]*\] )?PHP Fatal error: "
    r"|Stack trace:$"
    r"|\s*(?:from )?\S+\.rb:\d+:in [`']"  # Ruby
    r"|Unhandled [Ee]xception)",
    re.MULTILINE,
)


def has_stack(text: str) -> bool:
    return STACK_MARK.search(text) is not None
