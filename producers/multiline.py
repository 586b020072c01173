"""Grouping tailed log lines into records: a multi-line stack trace becomes one record.

Sits between the file tailer (which reads physical lines and their byte offsets) and intake:
``Grouper`` turns lines into ``Record``s; shared/intake/events.py decides which records are
errors and turns them into events, as it does for every producer.

Grouping is a small state machine per pending record. A record starts at any line; the state it
starts in (plain line, Python traceback, JVM/Node exception, Go panic, Rust panic, PHP fatal,
Ruby error, Node "file:line" header) decides which following lines continue it. A blank line
is held back where a trace may go on after one (Python chaining, loguru's frames, Go goroutine
dumps, PHP's ``Next``, Ruby's marked code, Node's ``Node.js vX`` footer) and dropped if the
trace does not; blank lines outside traces belong to no record. A JSON-object line is always a
record of its own and is never cut (cutting would break the JSON; intake trims its stack).
A text record over max_lines / max_bytes keeps its first quarter and its last lines (where the
Python/Java exception line is) around a marker line; one line may use at most max_bytes / 4.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.intake.levels import is_jul_level_line
from shared.intake.traces import dotnet, go, jvm, node, php, python, ruby, rust

MARKER = "… [{n} lines truncated by tracehound]"
_LINE_CUT = " … [{n} bytes truncated by tracehound]"
_MARKER_ROOM = 64  # bytes kept free for the marker line when a record is cut
_MAX_HELD_BLANKS = 2  # Python chaining prints one blank before and one after its sentence

# --- states of a pending record ---------------------------------------------------------------
PLAIN = "plain"  # a log line (and its indented continuation lines)
PY_TB = "py-traceback"  # inside "Traceback (most recent call last):" frames
PY_EXC = "py-exception"  # after the exception line; only chaining can continue it
PY_CHAIN = "py-chain"  # after "During handling of the above exception…"
FRAMES = "frames"  # JVM / Node exception line and its "at" frames
GO = "go"  # Go panic and goroutine dump
NODE_SRC = "node-src"  # Node's uncaught-error header "/app/x.js:12" …
NODE_CODE = "node-code"  # … then the offending source line …
NODE_CARET = "node-caret"  # … then the "    ^" line; the error line follows
RUST = "rust"  # "thread 'main' panicked at src/x.rs:4:5:", its message, notes and backtrace
RUST_MSG = "rust-message"  # the line after a Rust panic header is its message, whatever it holds
PHP = "php"  # "PHP Fatal error:  Uncaught …", "Stack trace:", "#0 …", "Next …", "  thrown in"
RUBY = "ruby"  # "x.rb:3:in 'save': msg (Err)", its code marked, "\tfrom …", causes
_HOLDS_BLANK = frozenset({PY_TB, PY_EXC, PY_CHAIN, FRAMES, GO, NODE_CARET, PHP, RUBY})

_LOGURU_FRAME = re.compile(r"^> File \"")  # loguru marks the frame that caught the exception
# java.util.logging's SimpleFormatter: "Nov 30, 2026 7:42:54 PM com.shop.Orders run", then the
# level line "SEVERE: …" and the throwable.
_JUL_HEADER = re.compile(r"^[A-Z][a-z]{2} \d{1,2}, \d{4} \d{1,2}:\d\d:\d\d [AP]M \S+")


@dataclass(frozen=True)
class Record:
    text: str  # the record's lines joined with "\n" (no trailing newline)
    start: int  # byte offset in the file of the record's first line
    end: int  # byte offset just after the record's last line (incl. its newline)
    truncated: bool  # capped by max_lines / max_bytes (a marker line was inserted)


class _Pending:
    """A record being built: all lines until a cap is hit, then a fixed head and a bounded tail."""

    def __init__(self, start: int, state: str, max_lines: int, max_bytes: int) -> None:
        self.start = self.end = start
        self.state = state
        self.max_lines, self.max_bytes = max_lines, max_bytes
        self.head: list[str] = []
        self.head_bytes = 0
        self.tail: deque[str] = deque()
        self.tail_bytes = 0
        self.dropped = 0
        self.cut_line = False

    def add(self, line: str, end: int) -> None:
        self.end = end
        line = self._cap_line(line)
        size = len(line.encode("utf-8", errors="replace")) + 1
        if not self.dropped and not self.tail:
            self.head.append(line)
            self.head_bytes += size
            if len(self.head) > self.max_lines or self.head_bytes > self.max_bytes:
                self._split()
            return
        self.tail.append(line)
        self.tail_bytes += size
        self._shrink_tail()

    def _cap_line(self, line: str) -> str:
        """One line may take at most a quarter of the byte budget, so head and tail both fit."""
        limit = self.max_bytes // 4
        raw = line.encode("utf-8", errors="replace")
        if len(raw) <= limit:
            return line
        self.cut_line = True
        suffix = _LINE_CUT.format(n=len(raw) - limit)
        keep = max(0, limit - len(suffix.encode()))
        return raw[:keep].decode("utf-8", errors="ignore") + _LINE_CUT.format(n=len(raw) - keep)

    def _split(self) -> None:
        head_lines = max(1, self.max_lines // 4)
        head_budget = self.max_bytes // 4
        lines, self.head, self.head_bytes = self.head, [], 0
        for i, line in enumerate(lines):
            size = len(line.encode("utf-8", errors="replace")) + 1
            if len(self.head) >= head_lines or (self.head and self.head_bytes + size > head_budget):
                rest = lines[i:]
                break
            self.head.append(line)
            self.head_bytes += size
        else:
            rest = []
        for line in rest:
            self.tail.append(line)
            self.tail_bytes += len(line.encode("utf-8", errors="replace")) + 1
        self._shrink_tail()

    def _shrink_tail(self) -> None:
        max_tail_lines = self.max_lines - len(self.head) - 1  # one line for the marker
        max_tail_bytes = self.max_bytes - self.head_bytes - _MARKER_ROOM
        while len(self.tail) > 1 and (
            len(self.tail) > max_tail_lines or self.tail_bytes > max_tail_bytes
        ):
            self.tail_bytes -= len(self.tail.popleft().encode("utf-8", errors="replace")) + 1
            self.dropped += 1

    def record(self) -> Record:
        lines = list(self.head)
        if self.dropped or self.tail:
            if self.dropped:
                lines.append(MARKER.format(n=self.dropped))
            lines.extend(self.tail)
        return Record(
            text="\n".join(lines),
            start=self.start,
            end=self.end,
            truncated=bool(self.dropped) or self.cut_line,
        )


def _json_object(line: str) -> dict[str, Any] | None:
    stripped = line.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return None
    try:
        value = json.loads(stripped)
    except ValueError:  # "{ not really json }": a text line
        return None
    return value if isinstance(value, dict) else None


def _start_state(line: str) -> str:
    if python.TRACEBACK_LINE.match(line):
        return PY_TB
    if go.START.match(line):
        return GO
    if rust.START.match(line):
        return RUST_MSG
    if php.START.match(line):
        return PHP
    if ruby.START.match(line):
        return RUBY
    if node.SOURCE_HEADER.match(line):
        return NODE_SRC
    if jvm.UNCAUGHT.match(line) or jvm.EXCEPTION_START.match(line):
        return FRAMES
    return PLAIN


def _after_blank(state: str, line: str) -> str | None:
    """The state after ``line`` when blank lines came between it and the record in ``state``."""
    indented = line[:1] in (" ", "\t")
    if state == PY_TB:
        if indented or _LOGURU_FRAME.match(line):
            return PY_TB  # loguru (backtrace=True) puts a blank line between frames …
        return PY_EXC if python.EXCEPTION_LINE.match(line) else None  # … and before the exception
    continues = {
        PHP: line.startswith("Next "),
        PY_EXC: line.strip() in python.CHAIN_SENTENCES,
        PY_CHAIN: python.TRACEBACK_LINE.match(line) is not None,
        GO: go.AFTER_BLANK.match(line) is not None,
        FRAMES: node.FOOTER.match(line) is not None,
        NODE_CARET: True,  # the error line after Node's caret and blank line
        RUBY: indented,  # the code error_highlight marks, after a blank line, and frames
    }
    if not continues.get(state, False):
        return None
    return {PY_EXC: PY_CHAIN, PY_CHAIN: PY_TB, NODE_CARET: FRAMES}.get(state, state)


def _after_plain(line: str, first: str | None) -> str | None:
    if line[:1] in (" ", "\t"):
        return FRAMES if jvm.AT_FRAME.match(line) else PLAIN
    if python.TRACEBACK_LINE.match(line):
        return PY_TB  # logger.exception(): the header line, then the traceback
    if jvm.EXCEPTION_START.match(line) and not jvm.UNCAUGHT.match(line):
        return FRAMES  # logback/log4j: the header line, then "java.lang.X: msg"
    if ruby.LINE.match(line):
        return RUBY  # Ruby's Logger: "E, [...] ERROR -- : msg (Class)", then bare frames
    if first is not None and _JUL_HEADER.match(first) and is_jul_level_line(line):
        return PLAIN  # java.util.logging's level line under its header line
    return None


def may_continue_plain(line: str) -> bool:
    """Whether ``line`` could continue a plain record, whatever that record's first line."""
    return _after_plain(line, None) is not None or is_jul_level_line(line)


def _same_if(state: str, pattern: re.Pattern[str]) -> Callable[[str, bool], str | None]:
    """Indented lines and lines matching ``pattern`` continue a record in ``state``."""
    return lambda line, indented: state if indented or pattern.match(line) else None


# The state after a line that directly follows a record in each state (None: a new record).
_NEXT: dict[str, Callable[[str, bool], str | None]] = {
    PY_TB: lambda line, indented: (
        PY_TB  # frames, code, ^^^^ markers, exception-group "| " and "+-" lines
        if indented or _LOGURU_FRAME.match(line)
        else PY_EXC
        if python.EXCEPTION_LINE.match(line)
        else None
    ),
    PY_EXC: lambda line, indented: PY_EXC if indented else None,
    PY_CHAIN: lambda line, indented: PY_TB if python.TRACEBACK_LINE.match(line) else None,
    # "at …", "... 3 more", "Suppressed:", Node's "[cause]:" and its closing "}", Mono's
    # second report of the same unhandled exception
    FRAMES: lambda line, indented: (
        FRAMES
        if indented
        or jvm.CAUSE_LINE.match(line)
        or line.strip() == "}"
        or dotnet.MONO_REPEAT.match(line)
        else None
    ),
    GO: _same_if(GO, go.LINE),
    RUST_MSG: lambda line, indented: RUST,  # the panic message, whatever it holds
    RUST: _same_if(RUST, rust.LINE),
    PHP: _same_if(PHP, php.LINE),
    RUBY: _same_if(RUBY, ruby.LINE),  # frames ("\tfrom …", bare), a cause's first line
    NODE_SRC: lambda line, indented: NODE_CODE,  # the source line, whatever it holds
    NODE_CODE: lambda line, indented: NODE_CARET if node.CARET.match(line) else None,
    NODE_CARET: lambda line, indented: FRAMES,
}


def _next_state(
    state: str, line: str, *, after_blank: bool, first: str | None = None
) -> str | None:
    """The state after ``line`` if it continues a record in ``state``; None if it starts anew.
    ``first`` is the record's first line while it has only one."""
    if after_blank:
        return _after_blank(state, line)
    if state == PLAIN:
        return _after_plain(line, first)
    step = _NEXT.get(state)
    return step(line, line[:1] in (" ", "\t")) if step else None


class Grouper:
    """Physical lines in, complete records out; memory bounded by max_lines and max_bytes."""

    def __init__(
        self, *, max_lines: int = 1000, max_bytes: int = 256_000, flush_after: float = 1.5
    ) -> None:
        if max_lines < 4 or max_bytes < 256:
            raise ValueError("max_lines must be >= 4 and max_bytes >= 256")
        self.max_lines, self.max_bytes, self.flush_after = max_lines, max_bytes, flush_after
        self._pending: _Pending | None = None
        self._blanks: list[tuple[str, int]] = []  # held blank lines (text, end offset)
        self._last_line_at = 0.0

    def feed(self, line: str, start: int, end: int, now: float) -> list[Record]:
        """One physical line (without its newline) found at bytes [start, end) of the file."""
        out: list[Record] = []
        if line.endswith("\r"):
            line = line[:-1]
        if self._pending is not None and now - self._last_line_at >= self.flush_after:
            out += self._close()  # as if flush() had run in the quiet gap
        self._last_line_at = now
        if _json_object(line) is not None:
            out += self._close()
            out.append(Record(text=line.strip(), start=start, end=end, truncated=False))
            return out
        if not line.strip():
            pending = self._pending
            if (
                pending is not None
                and pending.state in _HOLDS_BLANK
                and len(self._blanks) < _MAX_HELD_BLANKS
            ):
                self._blanks.append((line, end))
            else:
                out += self._close()
            return out
        if self._pending is not None:
            pending = self._pending
            only = pending.head[0] if len(pending.head) == 1 and not pending.tail else None
            state = _next_state(pending.state, line, after_blank=bool(self._blanks), first=only)
            if state is not None:
                for blank, blank_end in self._blanks:
                    self._pending.add(blank, blank_end)
                self._blanks.clear()
                self._pending.add(line, end)
                self._pending.state = state
                return out
            out += self._close()
        self._pending = _Pending(start, _start_state(line), self.max_lines, self.max_bytes)
        self._pending.add(line, end)
        return out

    def flush(self, now: float, *, force: bool = False) -> list[Record]:
        """The pending record if no line came for flush_after seconds (or at once with force)."""
        if self._pending is None:
            return []
        if force or now - self._last_line_at >= self.flush_after:
            return self._close()
        return []

    def plain_or_idle(self) -> bool:
        """Nothing pending, or a plain record (which never holds blank lines): a line that cannot
        continue a plain record then closes it and starts its own (producers/skim.py relies on
        it to skip such lines)."""
        return self._pending is None or self._pending.state == PLAIN

    def safe_offset(self) -> int | None:
        """Offset before which every line is in a returned record; None if nothing is pending."""
        return self._pending.start if self._pending is not None else None

    def _close(self) -> list[Record]:
        pending, self._pending = self._pending, None
        self._blanks.clear()  # blank lines after a finished record belong to no record
        return [pending.record()] if pending is not None else []


__all__ = ["MARKER", "Grouper", "Record", "may_continue_plain"]
