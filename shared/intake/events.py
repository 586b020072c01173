"""Turning raw error text or a JSON event into an ErrorEvent; trimming huge traces."""

from __future__ import annotations

import json
import re
from typing import Any

from shared.core.domain import ErrorEvent
from shared.core.errors import PermanentError

# "ValueError: bad", "java.lang.IllegalStateException: x", "panic: runtime error", "TypeError"
_EXC_LINE = re.compile(
    r"^(?:Caused by: |Exception in thread \"[^\"]*\" )?"
    r"(?P<type>(?:[A-Za-z_][\w$]*\.)*[A-Z][\w$]*(?:Error|Exception|Exit|Interrupt|Warning|Fault)"
    r"|panic)(?::\s?(?P<msg>.*))?$"
)
STACK_FIELDS = ("stack", "stacktrace", "stack_trace", "exception", "exc_info", "traceback")
MESSAGE_FIELDS = ("message", "msg", "error", "log")


def trim(text: str, max_bytes: int) -> str:
    """Keep the head and, mostly, the tail (where the exception is) with a marker between."""
    raw = text.encode("utf-8", errors="replace")
    if len(raw) <= max_bytes:
        return text
    head_n, tail_n = max_bytes // 4, max_bytes - max_bytes // 4
    head = raw[:head_n].decode("utf-8", errors="ignore")
    tail = raw[-tail_n:].decode("utf-8", errors="ignore")
    return f"{head}\n…[{len(raw) - head_n - tail_n} bytes trimmed by tracehound]…\n{tail}"


def exception_line(trace: str) -> tuple[str | None, str]:
    """(exception type, message) from the last line that looks like one; else (None, last line)."""
    lines = [ln.strip() for ln in trace.splitlines() if ln.strip()]
    for line in reversed(lines):
        m = _EXC_LINE.match(line)
        if m:
            return m["type"], (m["msg"] or "").strip()
    return None, (lines[-1] if lines else "")


def _first(record: dict[str, Any], names: tuple[str, ...]) -> str:
    for name in names:
        value = record.get(name)
        if isinstance(value, dict):  # {"error": {"message": ..., "stack": ...}}
            continue
        if value not in (None, ""):
            return value if isinstance(value, str) else json.dumps(value)
    return ""


def event_from_text(text: str, *, service: str, repo: str, max_bytes: int = 64_000) -> ErrorEvent:
    """A raw log excerpt or trace as an event: empty or non-trace text is kept as the message."""
    text = trim(text.replace("\r\n", "\n"), max_bytes)
    exc_type, message = exception_line(text)
    looks_like_trace = exc_type is not None and "\n" in text.strip()
    return ErrorEvent(
        service=service,
        repo=repo,
        exception_type=exc_type,
        message=message if looks_like_trace or exc_type else text.strip(),
        stacktrace=text if looks_like_trace else "",
    )


def event_from_json(
    record: dict[str, Any], *, service: str | None, repo: str | None, max_bytes: int = 64_000
) -> ErrorEvent:
    """A JSON event (ours, or a log shipper's common shape) as an ErrorEvent."""
    if not isinstance(record, dict):
        raise PermanentError("event must be a JSON object")
    error_field = record.get("error")
    nested: dict[str, Any] = error_field if isinstance(error_field, dict) else {}
    stack = _first(record, STACK_FIELDS) or _first(nested, STACK_FIELDS)
    message = _first(record, MESSAGE_FIELDS) or _first(nested, ("message", "msg"))
    svc = record.get("service") or service
    rep = record.get("repo") or repo or svc
    if not svc:
        raise PermanentError("event has no 'service' (give one with --service)")
    if not message and not stack:
        raise PermanentError("event has neither 'message' nor a stack ('stack', 'stack_trace', …)")
    stack = trim(stack, max_bytes) if stack else ""
    exc_type = record.get("exception_type") or nested.get("type")
    if not exc_type:
        exc_type, parsed = exception_line(stack or message)
        message = message or parsed
    fields: dict[str, Any] = {
        "service": str(svc),
        "repo": str(rep),
        "message": trim(message, 8000),
        "exception_type": exc_type,
        "stacktrace": stack,
        "level": str(record.get("level", "ERROR")).upper(),
        "attributes": record.get("attributes") or {},
    }
    if record.get("timestamp"):
        fields["timestamp"] = record["timestamp"]
    if record.get("id"):
        fields["id"] = str(record["id"])
    return ErrorEvent.model_validate(fields)


def parse_error_input(
    data: str, *, service: str | None, repo: str | None, max_bytes: int = 64_000
) -> ErrorEvent:
    """What ``tracehound analyze`` accepts: a JSON event, or raw trace/log text."""
    stripped = data.strip()
    if stripped.startswith("{"):
        try:
            record = json.loads(stripped)
        except json.JSONDecodeError:
            record = None  # a log line that starts with "{" but is not JSON: treat as text
        if isinstance(record, dict):
            return event_from_json(record, service=service, repo=repo, max_bytes=max_bytes)
    if not service:
        raise PermanentError("raw error text needs --service")
    return event_from_text(data, service=service, repo=repo or service, max_bytes=max_bytes)
