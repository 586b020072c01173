"""Grouping log lines into records: multi-line stack traces become one record; only errors become
events.

Sits between the file tailer (which reads physical lines and their byte offsets) and the analysis
chain: ``Grouper`` turns lines into ``Record``s, ``to_event`` turns an error record into an
``ErrorEvent`` and everything else into ``None``.

Grouping is a small state machine per pending record. A record starts at any line; the state it
starts in (plain line, Python traceback, JVM/Node exception, Go panic, Node "file:line" header)
decides which following lines continue it. A blank line is held back where a trace may go on
after one (Python chaining, Go goroutine dumps, Node's ``Node.js vX`` footer) and dropped if the
trace does not; blank lines outside traces belong to no record. A JSON-object line is always a
record of its own and is never cut (cutting would break the JSON; ``to_event`` trims its stack).
A text record over max_lines / max_bytes keeps its first quarter and its last lines (where the
Python/Java exception line is) around a marker line; one line may use at most max_bytes / 4.
"""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from shared.core.domain import ErrorEvent
from shared.core.errors import PermanentError
from shared.intake.events import (
    MESSAGE_FIELDS,
    STACK_FIELDS,
    event_from_json,
    event_from_text,
    trim,
)

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
_HOLDS_BLANK = frozenset({PY_EXC, PY_CHAIN, FRAMES, GO, NODE_CARET})

_PY_TB = re.compile(r"^\s*(?:\+\s*)?(?:Exception Group )?Traceback \(most recent call last\):\s*$")
_PY_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(?::.*)?$")  # "ValueError: x", "KeyboardInterrupt"
_PY_CHAIN = frozenset(
    {
        "During handling of the above exception, another exception occurred:",
        "The above exception was the direct cause of the following exception:",
    }
)
# "java.lang.IllegalStateException: x", "TypeError: x", "Error: x", "kotlinx.…CancellationException"
_EXC_START = re.compile(
    r"^(?:[A-Za-z_$][\w$]*\.)*(?:[A-Z][\w$]*)?(?:Error|Exception|Throwable)(?::.*)?$"
)
_JVM_UNCAUGHT = re.compile(r'^Exception in thread "[^"]*" ')
_JVM_CAUSE = re.compile(r"^(?:Caused by|Wrapped by): ")
_AT_FRAME = re.compile(r"^\s+at \S")
_NODE_SRC = re.compile(r"^(?:(?:file://)?(?:/|[A-Za-z]:\\)\S*\.[cm]?[jt]sx?|node:\S+):\d+$")
_NODE_CARET = re.compile(r"^\s*\^+\s*$")
_NODE_FOOTER = re.compile(r"^Node\.js v\d")
_GO_START = re.compile(r"^(?:panic: |fatal error: )")
_GO_LINE = re.compile(
    r"^(?:goroutine \d+ .*\]:$|created by |exit status \d+$|\[signal |panic: |fatal error: "
    r"|\.\.\.additional frames elided\.\.\.|\S+\(.*\)$)"
)
_GO_AFTER_BLANK = re.compile(r"^(?:goroutine \d+ |exit status \d+$|\[signal |created by )")

# --- error detection --------------------------------------------------------------------------
ERROR_LEVELS = frozenset(
    {"ERROR", "FATAL", "CRITICAL", "SEVERE", "PANIC", "EMERG", "EMERGENCY", "ALERT", "ASSERT"}
)
_LEVEL_ALIASES = {"ERR": "ERROR", "EROR": "ERROR", "E": "ERROR", "CRIT": "CRITICAL", "F": "FATAL"}
_LEVEL_ALIASES |= {"A": "ASSERT", "W": "WARN", "I": "INFO", "D": "DEBUG", "V": "VERBOSE"}
_WORDS = (
    "TRACE|DEBUG|DBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|EROR|FATAL|CRITICAL|CRIT|SEVERE|PANIC"
    "|EMERG|EMERGENCY|ALERT|FINE|FINER|FINEST|CONFIG|VERBOSE"
)
# The leftmost level-looking token of the header line wins, so "INFO … ERROR queue" is INFO.
# Bare words must be upper case ("error" in prose is not a level); the bracketed and key=value
# forms are case-insensitive.
_TEXT_LEVEL = re.compile(
    rf"\b(?i:level|lvl|severity|loglevel)[\"']?\s*[=:]\s*[\"']?(?P<kv>\w+)"
    rf"|^(?:[^\s\d]*+\d\S*+\s+)?(?P<colon>(?i:{_WORDS})):\s"  # winston "2026-…Z error: msg"
    rf"|[\[<(]\s*(?:\w+:)?(?P<br>(?i:{_WORDS}))\s*[\]>)]"
    rf"|\b(?P<word>{_WORDS})\b"
    r"|^(?:[\d\-:. ]+\s)?(?P<android>[VDIWEFA])/[^\s(:]+\s*(?:\(\s*\d+\))?:"  # logcat "E/Tag(1):"
    r"|^\d\d-\d\d \d\d:\d\d:\d\d\.\d+\s+\d+\s+\d+\s+(?P<threadtime>[VDIWEFA])\s"  # logcat
    r"|^(?P<glog>[IWEF])\d{4} \d\d:\d\d:\d\d(?:\.\d+)?\s+\d+\s+[^\]\s]+\]"  # klog "E1130 …] "
)


def maybe_error(line: str) -> bool:
    """False only when ``line`` cannot carry an error level: every error form _TEXT_LEVEL knows
    contains one of these substrings, and substring tests cost a fraction of that pattern."""
    low = line.lower()
    return (
        "err" in low
        or "eror" in low
        or "fatal" in low
        or "crit" in low
        or "severe" in low
        or "panic" in low
        or "emerg" in low
        or "alert" in low
        or "assert" in low
        # single-letter levels: logcat "E/Tag", threadtime " E ", klog "E1130 10:00:00"
        or "E/" in line
        or "F/" in line
        or "A/" in line
        or " E " in line
        or " F " in line
        or " A " in line
        or (line[:1] in ("E", "F") and line[1:5].isdigit())
    )


_STACK_MARK = re.compile(
    r"^(?:Traceback \(most recent call last\):"
    r"|\s*\+ Exception Group Traceback"
    r"|\s+File \".*\", line \d+"
    r"|\s+at \S.*(?:\)|:\d+)\s*(?:\{)?$"
    r"|goroutine \d+ .*\]:$"
    r"|panic: |fatal error: "
    r"|Exception in thread \""
    r"|(?:Caused by|Wrapped by): )",
    re.MULTILINE,
)
_GROUP_LINE = re.compile(r"^[\s|]*(?P<type>[\w.]*ExceptionGroup): (?P<msg>.*)$")
_FALLBACK_EXC = re.compile(
    r"^\s*(?:Uncaught )?(?P<type>Error|AggregateError|fatal error)(?::\s?(?P<msg>.*))?$"
)
_JSON_LEVEL_KEYS = (
    *("level", "severity", "levelname", "log.level", "severity_text", "lvl", "loglevel"),
    *("@l", "@level"),  # Serilog compact JSON
)


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
    if _PY_TB.match(line):
        return PY_TB
    if _GO_START.match(line):
        return GO
    if _NODE_SRC.match(line):
        return NODE_SRC
    if _JVM_UNCAUGHT.match(line) or _EXC_START.match(line):
        return FRAMES
    return PLAIN


def _next_state(state: str, line: str, *, after_blank: bool) -> str | None:
    """The state after ``line`` if it continues a record in ``state``; None if it starts anew."""
    indented = line[:1] in (" ", "\t")
    if after_blank:
        if state == PY_EXC and line.strip() in _PY_CHAIN:
            return PY_CHAIN
        if state == PY_CHAIN and _PY_TB.match(line):
            return PY_TB
        if state == GO and _GO_AFTER_BLANK.match(line):
            return GO
        if state == FRAMES and _NODE_FOOTER.match(line):
            return FRAMES
        if state == NODE_CARET:
            return FRAMES  # the error line after Node's caret and blank line
        return None
    if state == PLAIN:
        if indented:
            return FRAMES if _AT_FRAME.match(line) else PLAIN
        if _PY_TB.match(line):
            return PY_TB  # logger.exception(): the header line, then the traceback
        if _EXC_START.match(line) and not _JVM_UNCAUGHT.match(line):
            return FRAMES  # logback/log4j: the header line, then "java.lang.X: msg"
        return None
    if state == PY_TB:
        if indented:
            return PY_TB  # frames, code, ^^^^ markers, exception-group "| " and "+-" lines
        return PY_EXC if _PY_EXC_LINE.match(line) else None
    if state == PY_EXC:
        return PY_EXC if indented else None
    if state == PY_CHAIN:
        return PY_TB if _PY_TB.match(line) else None
    if state == FRAMES:
        if indented or _JVM_CAUSE.match(line) or line.strip() == "}":
            return FRAMES  # "at …", "... 3 more", "Suppressed:", Node's "[cause]:" and "}"
        return None
    if state == GO:
        return GO if indented or _GO_LINE.match(line) else None
    if state == NODE_SRC:
        return NODE_CODE  # the source line, whatever it holds
    if state == NODE_CODE:
        return NODE_CARET if _NODE_CARET.match(line) else None
    if state == NODE_CARET:
        return FRAMES
    return None


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
            state = _next_state(self._pending.state, line, after_blank=bool(self._blanks))
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

    def safe_offset(self) -> int | None:
        """Offset before which every line is in a returned record; None if nothing is pending."""
        return self._pending.start if self._pending is not None else None

    def _close(self) -> list[Record]:
        pending, self._pending = self._pending, None
        self._blanks.clear()  # blank lines after a finished record belong to no record
        return [pending.record()] if pending is not None else []


# --- records to events ------------------------------------------------------------------------


def _normal_level(value: str) -> str:
    upper = value.strip().upper()
    return _LEVEL_ALIASES.get(upper, upper)


def text_level(line: str) -> str | None:
    """The level of a plain-text log line ("ERROR", "[error]", "level=error", "E/Tag: …")."""
    m = _TEXT_LEVEL.search(line)
    if m is None:
        return None
    value = next(v for v in m.groupdict().values() if v)
    return _normal_level(value)


def json_level(record: dict[str, Any]) -> str | None:
    """The level of a JSON log record; pino/bunyan numbers (10–60) and syslog numbers (0–7)."""
    value: Any = None
    for key in _JSON_LEVEL_KEYS:
        if record.get(key) not in (None, ""):
            value = record[key]
            break
    else:
        nested = record.get("log")
        if isinstance(nested, dict):
            value = nested.get("level")
    if isinstance(value, str) and value:
        return _normal_level(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if value >= 10:  # pino / bunyan
            return "FATAL" if value >= 60 else "ERROR" if value >= 50 else "INFO"
        return "ERROR" if value <= 3 else "INFO"  # syslog severities: 0 emerg … 3 err
    return None


def _normalise_json(obj: dict[str, Any]) -> dict[str, Any]:
    """Common log shapes onto what ``event_from_json`` reads; the input is not modified."""
    rec = {k: v for k, v in obj.items() if k not in ("service", "repo", "id")}
    nested: dict[str, Any] = {}
    for key in ("err", "error"):  # pino's "err", ECS / ours "error"; "error" wins
        if isinstance(rec.get(key), dict):
            nested.update(rec[key])
    for key in [k for k in rec if k.startswith("error.")]:  # flat ECS "error.stack_trace"
        nested.setdefault(key[len("error.") :], rec.pop(key))
    if nested:
        if isinstance(rec.get("error"), str):
            nested.setdefault("message", rec["error"])
        rec["error"] = nested
    if "@x" in rec:  # Serilog compact JSON
        rec.setdefault("exception", rec.pop("@x"))
    for key in ("@m", "@mt", "event"):  # Serilog rendered message / template, structlog
        if isinstance(rec.get(key), str) and not any(rec.get(m) for m in MESSAGE_FIELDS):
            rec["message"] = rec[key]
    for key in ("@timestamp", "time", "ts", "@t"):
        if "timestamp" not in rec and rec.get(key) not in (None, ""):
            rec["timestamp"] = rec[key]
    if not isinstance(rec.get("attributes", {}), dict):
        rec.pop("attributes")
    return rec


def _json_has_stack(rec: dict[str, Any]) -> bool:
    nested = rec.get("error")
    fields = [rec.get(f) for f in STACK_FIELDS]
    if isinstance(nested, dict):
        fields += [nested.get(f) for f in STACK_FIELDS]
    return any(v not in (None, "", [], {}) and not isinstance(v, dict | bool) for v in fields)


def _json_event(
    obj: dict[str, Any], text: str, *, service: str, repo: str, max_bytes: int
) -> ErrorEvent | None:
    rec = _normalise_json(obj)
    level = json_level(obj)
    if not _json_has_stack(rec) and level not in ERROR_LEVELS:
        return None
    try:
        event = event_from_json(rec, service=service, repo=repo, max_bytes=max_bytes)
    except PermanentError:
        # An error-level line with neither message nor stack ({"level": "error"}): the raw line is
        # the best message there is, and an error should not vanish silently.
        event = ErrorEvent(service=service, repo=repo, message=trim(text, 8000))
    except ValueError:  # pydantic: a timestamp, attributes or type it cannot read
        for key in ("timestamp", "attributes", "exception_type"):
            rec.pop(key, None)
        try:
            event = event_from_json(rec, service=service, repo=repo, max_bytes=max_bytes)
        except ValueError:
            event = ErrorEvent(service=service, repo=repo, message=trim(text, 8000))
    update: dict[str, Any] = {"level": level or "ERROR"}
    if event.exception_type is None and event.stacktrace:
        found = _exception_of(event.stacktrace)
        if found is not None:
            update["exception_type"] = found[0]
            update["message"] = event.message or found[1]
    return event.model_copy(update=update)


def _python_exception(text: str) -> tuple[str, str] | None:
    """The last exception line printed after a Python traceback's frames (the one that propagated
    when exceptions are chained); any class name, not only "…Error"/"…Exception"."""
    found: tuple[str, str] | None = None
    in_traceback = False
    for line in text.split("\n"):
        if _PY_TB.match(line) and not line[:1].isspace():
            in_traceback = True
        elif in_traceback and not line[:1].isspace() and _PY_EXC_LINE.match(line):
            exc_type, _, message = line.partition(":")
            found, in_traceback = (exc_type.strip(), message.strip()), False
    return found


def _exception_of(text: str) -> tuple[str, str] | None:
    """(type, message) where ``exception_line``'s "…Error"/"…Exception" rule falls short: a
    Python exception group, any Python exception class, Node's bare "Error:", "fatal error:"."""
    lines = text.split("\n")
    if "Exception Group Traceback" in text:
        group = next((m for ln in lines if (m := _GROUP_LINE.match(ln))), None)
        if group is not None:
            return group["type"], group["msg"].strip()
    if (found := _python_exception(text)) is not None:
        return found
    fallback = [m for ln in lines if (m := _FALLBACK_EXC.match(ln))]
    if fallback:
        return fallback[-1]["type"], (fallback[-1]["msg"] or "").strip()
    return None


def _text_event(record: Record, *, service: str, repo: str, max_bytes: int) -> ErrorEvent | None:
    lines = record.text.split("\n")
    header = next((ln for ln in lines if ln.strip()), "")
    has_stack = _STACK_MARK.search(record.text) is not None
    if not has_stack and not maybe_error(header):
        return None
    level = text_level(header)
    if not has_stack and level not in ERROR_LEVELS:
        return None
    event = event_from_text(record.text, service=service, repo=repo, max_bytes=max_bytes)
    update: dict[str, Any] = {"level": level if level in ERROR_LEVELS else "ERROR"}
    text = trim(record.text, max_bytes)
    precise = "Traceback (most recent call last):" in text or event.exception_type is None
    if precise and (found := _exception_of(text)) is not None:
        update |= {"exception_type": found[0], "message": found[1]}
    if has_stack and not event.stacktrace:
        update["stacktrace"] = text
    if not has_stack and len(lines) == 1 and not header.lstrip().startswith("{"):
        # "2026-11-30 10:00:00 ERROR [app] payment failed" → "[app] payment failed": the message
        # then stays the same each time the error recurs.
        m = _TEXT_LEVEL.search(header)
        rest = header[m.end() :].lstrip(" :]>)-|\t") if m else ""
        if rest and event.exception_type is None:
            update["message"] = rest
    if not (update.get("message") or event.message):
        update["message"] = update.get("exception_type") or event.exception_type or header.strip()
    return event.model_copy(update=update)


def to_event(
    record: Record,
    *,
    service: str,
    repo: str,
    max_bytes: int = 64_000,
    event_id: str | None = None,
) -> ErrorEvent | None:
    """The record as an ErrorEvent if it is an error (a stack trace or an error level), else None.

    The exception reported is the last one printed: for Python the one that propagated (after
    "During handling…" / "The above exception…"), for Java/Kotlin the deepest "Caused by:" (the
    root cause); the whole trace stays in ``stacktrace``. ``event_id``, when given, becomes the
    event's id (the tailer derives it from the file and offset so a re-read is not a new error).
    """
    obj = _json_object(record.text) if "\n" not in record.text else None
    if obj is not None:
        event = _json_event(obj, record.text, service=service, repo=repo, max_bytes=max_bytes)
    else:
        event = _text_event(record, service=service, repo=repo, max_bytes=max_bytes)
    if event is not None and event_id is not None:
        event = event.model_copy(update={"id": event_id})
    return event


__all__ = ["ERROR_LEVELS", "MARKER", "Grouper", "Record", "json_level", "text_level", "to_event"]
