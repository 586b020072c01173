"""Log levels: read from a text line or a JSON record, named the same way whatever the source.

Names are upper case (``ERROR``, ``FATAL``, ``WARN``…); numeric levels map to names: pino and
bunyan (10 trace … 60 fatal), syslog severities (0 emerg … 7 debug) and OpenTelemetry's
``severity_number`` (1–24). ``ERROR_LEVELS`` are the ones that make a record an error.
"""

from __future__ import annotations

import re
from typing import Any

ERROR_LEVELS = frozenset(
    {"ERROR", "FATAL", "CRITICAL", "SEVERE", "PANIC", "EMERG", "EMERGENCY", "ALERT", "ASSERT"}
)
_ALIASES = {"ERR": "ERROR", "EROR": "ERROR", "E": "ERROR", "CRIT": "CRITICAL", "F": "FATAL"}
_ALIASES |= {"A": "ASSERT", "W": "WARN", "I": "INFO", "D": "DEBUG", "V": "VERBOSE"}
_ALIASES |= {"DBUG": "DEBUG", "TRCE": "TRACE", "FAIL": "ERROR"}
_ALIASES |= {"FATAL ERROR": "FATAL", "PARSE ERROR": "FATAL", "DEPRECATED": "INFO"}
_WORDS = (
    "TRACE|DEBUG|DBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|EROR|FATAL|CRITICAL|CRIT|SEVERE|PANIC"
    "|EMERG|EMERGENCY|ALERT|FINE|FINER|FINEST|CONFIG|VERBOSE"
)
# The leftmost level-looking token of the line wins, so "INFO … ERROR queue" is INFO. Bare words
# must be upper case ("error" in prose is not a level); the bracketed, "word:" and key=value
# forms are case-insensitive.
_TEXT_LEVEL = re.compile(
    rf"\b(?i:level|lvl|severity|loglevel)[\"']?\s*[=:]\s*[\"']?(?P<kv>\w+)"
    rf"|^(?:[^\s\d]*+\d\S*+\s+)?(?P<colon>(?i:{_WORDS})):\s"  # winston "2026-…Z error: msg"
    rf"|[\[<(]\s*(?:\w+:)?(?P<br>(?i:{_WORDS}))\s*[\]>)]"
    rf"|\b(?P<word>{_WORDS})\b"
    r"|^(?:[\d\-:. ]+\s)?(?P<android>[VDIWEFA])/[^\s(:]+\s*(?:\(\s*\d+\))?:"  # logcat "E/Tag(1):"
    r"|^\d\d-\d\d \d\d:\d\d:\d\d\.\d+\s+\d+\s+\d+\s+(?P<threadtime>[VDIWEFA])\s"  # logcat
    r"|^(?P<glog>[IWEF])\d{4} \d\d:\d\d:\d\d(?:\.\d+)?\s+\d+\s+[^\]\s]+\]"  # klog "E1130 …] "
    r"|^(?P<ms>trce|dbug|info|warn|fail|crit): "  # .NET console logger "fail: Category[1]"
    r"|\bPHP (?P<php>Fatal error|Parse error|Warning|Notice|Deprecated):"  # PHP's error log
    r"|^[DIWEFAU], \[[^\]]*\]\s+(?P<ruby>[A-Z]+) -- "  # Ruby's Logger "E, [time #1] ERROR -- "
)
# java.util.logging's SimpleFormatter puts the level at the start of the record's second line.
_JUL_LEVEL = re.compile(r"^(?P<jul>SEVERE|WARNING|INFO|CONFIG|FINE|FINER|FINEST): ")

JSON_LEVEL_KEYS = (
    *("level", "severity", "levelname", "log.level", "severity_text", "lvl", "loglevel"),
    *("@l", "@level"),  # Serilog compact JSON
)
_PINO = {10: "TRACE", 20: "DEBUG", 30: "INFO", 40: "WARN", 50: "ERROR", 60: "FATAL"}
_SYSLOG = ("EMERGENCY", "ALERT", "CRITICAL", "ERROR", "WARN", "NOTICE", "INFO", "DEBUG")
_OTEL = ((21, "FATAL"), (17, "ERROR"), (13, "WARN"), (9, "INFO"), (5, "DEBUG"), (1, "TRACE"))


def normal_level(value: str) -> str:
    upper = value.strip().upper()
    return _ALIASES.get(upper, upper)


def maybe_error(line: str) -> bool:
    """False only when ``line`` cannot carry an error level: every error form ``text_level``
    knows contains one of these substrings, and substring tests cost a fraction of that
    pattern."""
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


def text_level(line: str) -> str | None:
    """The level of a plain-text log line ("ERROR", "[error]", "level=error", "E/Tag: …")."""
    m = _TEXT_LEVEL.search(line)
    if m is None:
        return None
    return normal_level(next(v for v in m.groupdict().values() if v))


def level_span(line: str) -> tuple[int, int] | None:
    """Where ``text_level`` found the level in ``line`` (to cut the prefix off a message)."""
    m = _TEXT_LEVEL.search(line)
    return m.span() if m else None


_LEADING_STAMP = re.compile(r"^[\d\s\-:.,/TZ+\[\]|()]*$")


def leads_with_level(line: str) -> bool:
    """Whether ``line`` looks like a raw log line: a level in a log-format position (at the
    start, after a timestamp, bracketed, ``level=``…), not an upper-case word in a sentence."""
    m = _TEXT_LEVEL.search(line)
    if m is None:
        return False
    return m.lastgroup != "word" or _LEADING_STAMP.match(line[: m.start()]) is not None


def record_level(lines: list[str]) -> str | None:
    """The level of a text record: its first line's, else java.util.logging's second line."""
    first = text_level(lines[0]) if lines else None
    if first is None and len(lines) > 1 and (m := _JUL_LEVEL.match(lines[1])):
        return normal_level(m["jul"])
    return first


def is_jul_level_line(line: str) -> bool:
    return _JUL_LEVEL.match(line) is not None


def number_level(value: int, key: str = "level") -> str:
    """A numeric level as a name: OpenTelemetry severity numbers, pino/bunyan, syslog."""
    if key == "severity_number":
        return next((name for floor, name in _OTEL if value >= floor), "TRACE")
    if value >= 10:
        return _PINO.get(value - value % 10, "FATAL" if value > 60 else "TRACE")
    return _SYSLOG[value] if 0 <= value < len(_SYSLOG) else "DEBUG"


def json_level(record: dict[str, Any]) -> str | None:
    """The level of a JSON log record, by name or number, or None when it has none."""
    value: Any = None
    key = "level"
    for key in (*JSON_LEVEL_KEYS, "severity_number"):
        if record.get(key) not in (None, ""):
            value = record[key]
            break
    else:
        nested = record.get("log")
        if isinstance(nested, dict):
            value = nested.get("level")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return number_level(value, key)
    if isinstance(value, str) and value.strip():
        return normal_level(value)
    return None


def is_error_level(level: str | None) -> bool:
    return level in ERROR_LEVELS
