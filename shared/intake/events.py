"""The one event model: raw input (trace text, a JSON log record) becomes an ``ErrorEvent``.

Every producer calls this module — the tailer for each record it groups, ``tracehound
ingest`` for each record a shipper sends, ``tracehound analyze`` for its input — so the same
record becomes the same event whichever way it arrives:

- **Is it an error?** A stack trace, or an error level (``ERROR``, ``FATAL``, ``CRITICAL``,
  ``SEVERE``…, numeric levels included: pino 50/60, syslog 0–3, OpenTelemetry 17–24). Below
  that without a stack it is ``Ignored``. A record with no level at all is an error when it
  was *sent* on purpose (ingest, analyze) and ignored when it was read from a log with
  everything else (the tailer).
- **Which exception?** The one thrown out — the outermost (shared/intake/exceptions.py); the
  causes stay in ``stacktrace``. A JSON record's own type field (``error.type``, pino's
  ``err.type``, loguru's ``record.exception.type``) wins over parsing.
- **Message.** A JSON record's message field; for trace text the exception's message; for one
  log line the text after its level (``2026-… ERROR [app] payment failed`` → ``[app] payment
  failed``), so the message is the same each time the error recurs.
- **Service and repo.** The producer's configured service (``--service``, ``?service=``) wins;
  a record's own ``service``/``repo`` fills in when none is configured.
- **Bounds.** ``stacktrace`` is trimmed to ``max_bytes`` keeping head and tail, the message and
  every attribute string to 8,000 characters; an unreadable timestamp is kept as an attribute
  instead of failing.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from shared.core.domain import NAME_MAX_CHARS, ErrorEvent, encodable, one_line
from shared.core.errors import PermanentError
from shared.intake.exceptions import has_stack, reported
from shared.intake.levels import (
    is_error_level,
    json_level,
    leads_with_level,
    level_span,
    maybe_error,
    record_level,
)
from shared.intake.shapes import Templates, shape_of, timestamp_field

Origin = Literal["log", "sent"]

# An attribute intake reads and drops: the event's repo came from the record, not from the
# producer's configuration (shared/groups/submit.py holds it to TRACEHOUND_SERVICE_REPOS).
REPO_CLAIMED = "_tracehound_repo_claimed"
STACK_FIELDS = ("stack", "stacktrace", "stack_trace", "exception", "exc_info", "traceback")
MESSAGE_FIELDS = ("message", "msg", "error", "log")
MAX_MESSAGE_CHARS = 8000
_TIMESTAMP = TypeAdapter(datetime)


@dataclass(frozen=True)
class Ignored:
    """Not an error: below ERROR without a stack (or, read from a log, without any level)."""

    reason: str


def trim(text: str, max_bytes: int) -> str:
    """Keep the head and, mostly, the tail (where the exception is) with a marker between."""
    raw = text.encode("utf-8", errors="replace")
    if len(raw) <= max_bytes:
        return text
    head_n, tail_n = max_bytes // 4, max_bytes - max_bytes // 4
    head = raw[:head_n].decode("utf-8", errors="ignore")
    tail = raw[-tail_n:].decode("utf-8", errors="ignore")
    return f"{head}\n…[{len(raw) - head_n - tail_n} bytes trimmed by tracehound]…\n{tail}"


def _clip(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "…"


def _service(configured: str | None, record: dict[str, Any]) -> str:
    service = one_line(configured or _text(record.get("service")), NAME_MAX_CHARS)
    if not service:
        raise PermanentError("event has no 'service': name one (--service, or ?service= on ingest)")
    return service


def _text(value: Any) -> str:
    if value in (None, "") or isinstance(value, dict | list | bool):
        return ""
    return value if isinstance(value, str) else str(value)


def _not_error(level: str | None) -> Ignored:
    return Ignored(f"level {level} is not an error" if level else "no error level and no stack")


def _is_error(level: str | None, stack: bool, origin: Origin) -> bool:
    return stack or is_error_level(level) or (level is None and origin == "sent")


# --- text ------------------------------------------------------------------------------------


def _line_message(header: str) -> str:
    """One log line's message: what follows its level token (a cut-short JSON line whole)."""
    if header.lstrip().startswith("{"):
        return header.strip()
    span = level_span(header)
    rest = header[span[1] :].lstrip(" :]>)-|\t") if span else ""
    rest = _LOGURU_PLACE.sub("", rest, count=1)  # loguru's "module:function:line - "
    return rest or header.strip()


_LOGURU_PLACE = re.compile(r"^[\w.<>]+:[\w<>]+:\d+ - ")


def _may_carry_level(lines: list[str]) -> bool:
    return any(maybe_error(ln) for ln in lines[:2])


def may_be_log_error(data: str) -> bool:
    """False only where ``from_input(data, origin="log")`` is ``Ignored`` for want of an error
    level and a stack, decided as cheaply as from_text decides it: the tailer asks before it
    builds an event for a record."""
    stripped = data.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        return True  # perhaps a JSON record: from_record decides
    text = data.replace("\r\n", "\n").strip("\n")
    lines = [ln for ln in text.split("\n") if ln.strip()]
    return bool(lines) and (has_stack(text) or _may_carry_level(lines))


def from_text(
    text: str,
    *,
    origin: Origin,
    service: str | None,
    repo: str | None,
    max_bytes: int = 64_000,
    level: str | None = None,
    fields: dict[str, Any] | None = None,
    event_id: str = "",
) -> ErrorEvent | Ignored:
    """A trace, a log record's lines, or free text. ``level`` is the record's when a JSON
    record carried the text (else it is read from the text); ``fields`` are that record's.
    ``event_id``: the event's id (else a new one)."""
    text = text.replace("\r\n", "\n").strip("\n")
    lines = [ln for ln in text.split("\n") if ln.strip()]
    if not lines:
        if origin == "sent":
            raise PermanentError("empty input: there is no error to analyze")
        return Ignored("empty")
    stack = has_stack(text)
    if level is None:
        if origin == "log" and not stack and not _may_carry_level(lines):
            return Ignored("no error level and no stack")  # most log lines: decided cheaply
        level = record_level(lines)
    if not _is_error(level, stack, origin):
        return _not_error(level)
    record = fields or {}
    if not service and not _text(record.get("service")):
        raise PermanentError("raw error text needs --service")
    found = reported(text)
    if found is not None:
        exc_type: str | None = found.type
        message = found.message
    elif len(lines) == 1 and not stack:
        exc_type, message = None, _line_message(lines[0])
    else:
        exc_type, message = None, text.strip()
    multi = len(lines) > 1
    return _event(
        record,
        service=service,
        repo=repo,
        exception_type=exc_type,
        message=message or exc_type or lines[0].strip(),
        stacktrace=trim(text, max_bytes) if stack or (found is not None and multi) else "",
        level=level,
        record_id=event_id,
    )


# --- JSON records ----------------------------------------------------------------------------


def _reshape(obj: dict[str, Any]) -> dict[str, Any]:
    """Common log shapes onto one: pino's ``err``, ECS ``error.*``, Serilog ``@x``/``@m``,
    structlog's ``event``, loguru's ``serialize=True`` record. The input is not modified."""
    rec = dict(obj)
    inner = rec.get("record")
    if isinstance(inner, dict) and isinstance(rec.get("text"), str):  # loguru serialize=True
        rec = _loguru(rec["text"], inner) | {k: v for k, v in rec.items() if k not in ("text",)}
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
    for key in ("@timestamp", "time", "ts", "@t", "asctime"):
        if "timestamp" not in rec and rec.get(key) not in (None, ""):
            rec["timestamp"] = rec[key]
    return rec


def _loguru(text: str, record: dict[str, Any]) -> dict[str, Any]:
    exc = record.get("exception") if isinstance(record.get("exception"), dict) else None
    level = record.get("level")
    time = record.get("time")
    out: dict[str, Any] = {
        "message": record.get("message"),
        "level": level.get("name") if isinstance(level, dict) else None,
        "timestamp": time.get("timestamp") if isinstance(time, dict) else None,
    }
    if exc:
        # The formatted record: its header line, then the traceback loguru printed.
        out["error"] = {"type": exc.get("type"), "stack": text}
    return out


def _forwarded_text(message: str, level: str | None) -> bool:
    if "\n" in message.strip():
        return True
    return level is None and leads_with_level(message)


def _first(record: dict[str, Any], names: tuple[str, ...]) -> str:
    return next((t for name in names if (t := _text(record.get(name)))), "")


def _stack_of(rec: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(the record's nested error, the stack of one of its stack fields) of a reshaped record."""
    nested: dict[str, Any] = rec["error"] if isinstance(rec.get("error"), dict) else {}
    return nested, _first(rec, STACK_FIELDS) or _first(nested, STACK_FIELDS)


def from_record(
    obj: dict[str, Any],
    *,
    origin: Origin,
    service: str | None,
    repo: str | None,
    max_bytes: int = 64_000,
    raw: str | None = None,
    event_id: str = "",
) -> ErrorEvent | Ignored:
    """A JSON log record (ours, a log library's, or a shipper's). ``raw`` is the line it was
    read from: an error-level record without message or stack keeps it as its message.
    ``event_id``: the event's id (else the record's own ``id`` when sent, else a new one).

    A record of a shape seen before (shared/intake/shapes.py: the same record but for its
    message, id and timestamp) is the shape's event with those three of its own."""
    if not isinstance(obj, dict):
        raise PermanentError(f"event must be a JSON object, got {type(obj).__name__}")
    message = obj.get("message")
    if not isinstance(message, str) or not message or "record" in obj:
        # No message of its own (it comes from another field, or from the stack), or a
        # loguru record (its message is inside): built alone.
        return _from_record(obj, origin, service, repo, max_bytes, raw, event_id)
    stamp_field = timestamp_field(obj)
    stamp = obj.get(stamp_field) if stamp_field else None
    try:
        when = _timestamp(stamp) if stamp not in (None, "") else None
    except (ValidationError, ValueError, OverflowError):  # kept as an attribute: built alone
        return _from_record(obj, origin, service, repo, max_bytes, raw, event_id)
    shape = shape_of(obj, stamp_field, [origin, service, repo, max_bytes])
    template = _TEMPLATES.get(shape) if shape is not None else None
    if template is None:
        found = _from_record(obj, origin, service, repo, max_bytes, raw, event_id)
        # With a stack field, the message changes nothing else: what the event is and its
        # type come from the stack and the other fields (without one, a message of several
        # lines is read as a trace).
        if shape is not None and isinstance(found, ErrorEvent) and _stack_of(_reshape(obj))[1]:
            _TEMPLATES.put(shape, found)
        return found
    record_id = _record_id(obj, origin, event_id)
    return template.model_copy(
        update={
            # as the event model's validators leave them (shared/core/domain.py)
            "message": encodable(_clip(message)),
            "id": encodable(record_id) if record_id else uuid.uuid4().hex,
            "timestamp": when or datetime.now(UTC),
        }
    )


_TEMPLATES: Templates[ErrorEvent] = Templates()


def _record_id(obj: dict[str, Any], origin: Origin, event_id: str) -> str:
    """The event's id: the caller's, else the record's own when it was sent ("": a new one)."""
    return event_id or (_text(obj.get("id")) if origin == "sent" else "")


def _from_record(
    obj: dict[str, Any],
    origin: Origin,
    service: str | None,
    repo: str | None,
    max_bytes: int,
    raw: str | None,
    event_id: str,
) -> ErrorEvent | Ignored:
    """``from_record``, every record built alone: the reference its templates are held to."""
    rec = _reshape(obj)
    nested, stack = _stack_of(rec)
    message = _first(rec, MESSAGE_FIELDS) or _first(nested, ("message", "msg"))
    level = json_level(rec)
    if not stack and _forwarded_text(message, level):
        # A shipper's record of raw log text: a multi-line record (a trace), or a log line whose
        # level is in its text. It is read as the tailer reads the same lines.
        return from_text(
            message,
            origin=origin,
            service=service,
            repo=repo,
            max_bytes=max_bytes,
            level=level,
            fields=rec,
            event_id=_record_id(obj, origin, event_id),
        )
    if not _is_error(level, bool(stack), origin):
        return _not_error(level)
    _service(service, rec)  # a clear error before anything else is said about the record
    if not message and not stack:
        if origin == "sent" or raw is None:
            raise PermanentError(
                "event has neither 'message' nor a stack ('stack', 'stack_trace', …)"
            )
        message = raw.strip()  # an error should not vanish because its fields are unusual
    exc_type = _text(rec.get("exception_type")) or _text(nested.get("type")) or None
    found = reported(stack) if stack else None
    if found is not None:
        exc_type = exc_type or found.type
        message = message or found.message
    return _event(
        rec,
        service=service,
        repo=repo,
        exception_type=exc_type,
        message=message,
        stacktrace=trim(stack, max_bytes) if stack else "",
        level=level,
        record_id=_record_id(obj, origin, event_id),
    )


def _event(
    rec: dict[str, Any],
    *,
    service: str | None,
    repo: str | None,
    exception_type: str | None,
    message: str,
    stacktrace: str,
    level: str | None,
    record_id: str = "",
) -> ErrorEvent:
    svc = _service(service, rec)
    attributes: dict[str, Any] = (
        rec["attributes"] if isinstance(rec.get("attributes"), dict) else {}
    )
    claimed = "" if repo else _text(rec.get("repo"))
    if claimed and claimed != svc:
        # The record names its repo itself: intake holds that to TRACEHOUND_SERVICE_REPOS.
        attributes = {**attributes, REPO_CLAIMED: True}
    fields: dict[str, Any] = {
        "service": svc,
        "repo": repo or claimed or svc,
        "message": _clip(message),
        "exception_type": exception_type,
        "stacktrace": stacktrace,
        "level": level or "ERROR",
        "attributes": _clipped(attributes),
    }
    stamp = rec.get("timestamp")
    if stamp not in (None, ""):
        try:
            fields["timestamp"] = _timestamp(stamp)
        except (ValidationError, ValueError, OverflowError):
            fields["attributes"]["timestamp"] = str(stamp)[:100]  # kept, not fatal
    if record_id:
        fields["id"] = record_id
    return ErrorEvent.model_validate(fields)


def _clipped(value: Any, depth: int = 0) -> Any:
    """Attribute values with every string at most 8,000 characters (what is redacted, embedded
    and shown stays bounded whatever a shipper sends)."""
    if isinstance(value, str):
        return _clip(value)
    if isinstance(value, dict):
        return {k: _clipped(v, depth + 1) for k, v in value.items()} if depth < 32 else {}
    if isinstance(value, list):
        return [_clipped(v, depth + 1) for v in value[:1000]] if depth < 32 else []
    return value


_COMMA_MILLIS = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d),(\d+)")


def _timestamp(value: Any) -> datetime:
    """ISO 8601 (also logging's "2026-11-30 10:00:00,123"), or epoch seconds/milliseconds."""
    if isinstance(value, str):
        value = _COMMA_MILLIS.sub(r"\1.\2", value.strip())
    stamp = _TIMESTAMP.validate_python(value)
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


# --- whichever it is ---------------------------------------------------------------------------


def from_input(
    data: str,
    *,
    origin: Origin,
    service: str | None,
    repo: str | None,
    max_bytes: int = 64_000,
) -> ErrorEvent | Ignored:
    """A JSON object on one line (or a whole JSON document when sent), else text."""
    stripped = data.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        try:
            obj = json.loads(stripped)
        except ValueError:
            obj = None  # a log line that starts with "{" but is not JSON: text
        if isinstance(obj, dict):
            return from_record(
                obj, origin=origin, service=service, repo=repo, max_bytes=max_bytes, raw=stripped
            )
    return from_text(data, origin=origin, service=service, repo=repo, max_bytes=max_bytes)


def _unprintable(text: str) -> float:
    """The share of characters that are neither printable nor whitespace (U+FFFD, the
    replacement of undecodable bytes, counts as unprintable)."""
    if not text:
        return 0.0
    bad = sum(1 for c in text if c == "\ufffd" or not (c.isprintable() or c.isspace()))
    return bad / len(text)


def parse_event(
    data: str, *, service: str | None, repo: str | None, max_bytes: int = 64_000
) -> ErrorEvent:
    """What ``tracehound analyze`` accepts (a JSON event, or trace or log text) as an event;
    input that is not an error, or is not text, is refused with the reason."""
    sample = data[:8192]
    if "\x00" in sample or _unprintable(sample) > 0.3:
        raise PermanentError("binary input (NUL bytes or mostly non-text): not an error report")
    found = from_input(data, origin="sent", service=service, repo=repo, max_bytes=max_bytes)
    if isinstance(found, Ignored):
        raise PermanentError(f"nothing to analyze: {found.reason}")
    return found
