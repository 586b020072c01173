"""OpenTelemetry logs and span exceptions (OTLP/HTTP, protobuf or JSON) as ErrorEvents.

An ``ExportLogsServiceRequest`` holds resources (``service.name``, ``service.version``…), each
with scopes of log records. A record is an error when its severity is ERROR or above, or when
it carries the semantic-convention ``exception.type`` / ``exception.message`` /
``exception.stacktrace`` attributes (the OTel logging handlers set them from ``exc_info``). Each
becomes a record for ``events.from_record``, so it is normalised like any other sent record.

Traces give only their exceptions: a span event named ``exception`` (``span.record_exception``)
is read as an ERROR log record on that span.

Protobuf requests are turned into the OTLP JSON shape (camelCase keys, enums as numbers) so one
reader serves both encodings; ids in protobuf are bytes, in JSON hex, and only the hex is kept.

A small body can hold millions of empty messages (9.7 kB of gzip expanded to 5 million empty
``ResourceLogs`` took 7.6 s and 790 MB to decode). So before a body is decoded, its messages
are counted against ``Bounds`` without building any: protobuf by walking the wire format along
the request's descriptor (lengths are skipped, nothing is allocated), JSON by counting its
objects and arrays; a body over a bound is refused (413) after reading at most that many.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared.core.domain import ErrorEvent
from shared.core.errors import PermanentError
from shared.intake.events import Ignored, from_record
from shared.intake.levels import number_level

EXCEPTION_KEYS = ("exception.type", "exception.message", "exception.stacktrace")
MAX_ATTRIBUTES = 50
MAX_VALUE_CHARS = 1000


class OtlpError(ValueError):
    """The body is not an OTLP logs request (a 400)."""


class OverBounds(OtlpError):
    """The body holds more messages than ``Bounds`` allow (a 413)."""


@dataclass(frozen=True)
class Bounds:
    """The most a request may hold: resources, scopes, items (log records or spans) and
    messages in all (attributes, values, events …)."""

    resources: int = 1000
    scopes: int = 10_000
    items: int = 10_000
    messages: int = 500_000

    @classmethod
    def for_records(cls, max_records: int) -> Bounds:
        return cls(items=max_records, messages=max(50_000, max_records * 50))


@dataclass
class LogBatch:
    accepted: list[ErrorEvent] = field(default_factory=list)
    ignored: int = 0  # records that are not errors (INFO and the like)
    rejected: list[str] = field(default_factory=list)  # why each unusable record was refused
    records: int = 0


def _get(obj: dict[str, Any], camel: str, snake: str) -> Any:
    """OTLP JSON names fields in lowerCamelCase; accept the proto names too."""
    return obj.get(camel, obj.get(snake))


@dataclass(frozen=True)
class Signal:
    """Where one OTLP signal keeps its items: ``resourceLogs → scopeLogs → logRecords``."""

    resources: tuple[str, str]
    scopes: tuple[str, str]
    items: tuple[str, str]
    what: str  # what the items are called in replies


LOGS = Signal(
    ("resourceLogs", "resource_logs"),
    ("scopeLogs", "scope_logs"),
    ("logRecords", "log_records"),
    "log records",
)
TRACES = Signal(
    ("resourceSpans", "resource_spans"),
    ("scopeSpans", "scope_spans"),
    ("spans", "spans"),
    "spans",
)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise OtlpError("malformed OTLP protobuf: a varint runs past the data")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


class _Counter:
    """Messages met so far, by the levels ``Bounds`` limits."""

    def __init__(self, bounds: Bounds, signal: Signal) -> None:
        self.bounds = bounds
        self.levels = {signal.resources[1]: "resources", signal.scopes[1]: "scopes",
                       signal.items[1]: "items"}  # fmt: skip
        self.seen = dict.fromkeys(("resources", "scopes", "items", "messages"), 0)

    def met(self, field_name: str) -> None:
        for level in (self.levels.get(field_name), "messages"):
            if level is None:
                continue
            self.seen[level] += 1
            if self.seen[level] > getattr(self.bounds, level):
                raise OverBounds(f"more than {getattr(self.bounds, level)} {level} in one request")


def _scan(buf: bytes, start: int, end: int, descriptor: Any, counter: _Counter, depth: int) -> None:
    """Walk one message's wire format along its descriptor, counting the messages in it; no
    message is built. Varints and fixed fields are stepped over, strings and bytes skipped by
    their length."""
    if depth > 64:
        raise OtlpError("malformed OTLP protobuf: messages nested too deep")
    pos = start
    while pos < end:
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > end:
                raise OtlpError("malformed OTLP protobuf: a field runs past its message")
            field = descriptor.fields_by_number.get(number)
            if field is not None and field.message_type is not None:
                counter.met(field.name)
                _scan(buf, pos, pos + length, field.message_type, counter, depth + 1)
            pos += length
        else:
            raise OtlpError(f"malformed OTLP protobuf: wire type {wire}")
    if pos != end:
        raise OtlpError("malformed OTLP protobuf: a field runs past its message")


def _check_json(body: bytes, bounds: Bounds) -> None:
    """JSON objects and arrays counted before they are built (an upper bound: braces in
    strings count too)."""
    containers = body.count(b"{") + body.count(b"[")
    if containers > bounds.messages:
        raise OverBounds(f"more than {bounds.messages} objects and arrays in one request")


def _check_levels(request: dict[str, Any], signal: Signal, bounds: Bounds) -> None:
    resources = _list(_get(request, *signal.resources))
    scopes = [s for r in resources for s in _list(_get(r, *signal.scopes))]
    items = sum(len(_list(_get(s, *signal.items))) for s in scopes)
    for level, count in (("resources", len(resources)), ("scopes", len(scopes)), ("items", items)):
        if count > getattr(bounds, level):
            raise OverBounds(f"more than {getattr(bounds, level)} {level} in one request")


def decode_request(
    body: bytes, protobuf: bool, signal: Signal = LOGS, bounds: Bounds | None = None
) -> dict[str, Any]:
    """The request in the OTLP JSON shape, from protobuf or JSON bytes, once its messages are
    counted within ``bounds`` (``OverBounds`` otherwise)."""
    bounds = bounds or Bounds()
    if not protobuf:
        _check_json(body, bounds)
        try:
            value = json.loads(body or b"{}")
        except (ValueError, RecursionError) as exc:
            raise OtlpError(f"malformed OTLP JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise OtlpError("an OTLP JSON request is an object with 'resourceLogs'")
        _check_levels(value, signal, bounds)
        return value
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError
    from google.protobuf.message import Message as ProtoMessage
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    message: ProtoMessage = (
        ExportLogsServiceRequest() if signal is LOGS else ExportTraceServiceRequest()
    )
    try:
        _scan(body, 0, len(body), message.DESCRIPTOR, _Counter(bounds, signal), 0)
    except IndexError as exc:
        raise OtlpError("malformed OTLP protobuf: the data ends inside a field") from exc
    try:
        message.ParseFromString(body)
    except (DecodeError, RecursionError) as exc:
        raise OtlpError(f"malformed OTLP protobuf: {exc}") from exc
    return MessageToDict(message, use_integers_for_enums=True)


def walk(
    request: dict[str, Any], signal: Signal
) -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(resource attributes, scope, item) for every log record or span of the request."""
    for resource_items in _list(_get(request, *signal.resources)):
        resource_obj = resource_items.get("resource")
        resource = attributes(resource_obj.get("attributes")) if resource_obj else {}
        for scope_items in _list(_get(resource_items, *signal.scopes)):
            scope = scope_items.get("scope")
            for item in _list(_get(scope_items, *signal.items)):
                yield resource, scope if isinstance(scope, dict) else {}, item


def _list(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as a plain value."""
    if not isinstance(value, dict):
        return None
    for key in ("stringValue", "string_value"):
        if key in value:
            return value[key]
    for key in ("boolValue", "bool_value", "doubleValue", "double_value"):
        if key in value:
            return value[key]
    for key in ("intValue", "int_value"):
        if key in value:
            try:
                return int(value[key])  # int64 is a string in OTLP JSON
            except (TypeError, ValueError):
                return value[key]
    array = _get(value, "arrayValue", "array_value")
    if isinstance(array, dict):
        return [any_value(v) for v in _list(array.get("values"))[:MAX_ATTRIBUTES]]
    kvlist = _get(value, "kvlistValue", "kvlist_value")
    if isinstance(kvlist, dict):
        return attributes(kvlist.get("values"))
    raw = _get(value, "bytesValue", "bytes_value")
    return raw if isinstance(raw, str) else None


def attributes(values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in _list(values)[: MAX_ATTRIBUTES * 4]:
        key = kv.get("key")
        if isinstance(key, str) and key:
            out[key] = any_value(kv.get("value"))
    return out


def _hex_id(value: Any, protobuf: bool) -> str:
    if not isinstance(value, str) or not value:
        return ""
    if protobuf:  # MessageToDict writes bytes as base64
        try:
            return base64.b64decode(value).hex()
        except ValueError:
            return ""
    return value.lower()[:64]


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        return value[:MAX_VALUE_CHARS] + "…"
    return value


def _timestamp(record: dict[str, Any]) -> str | None:
    pairs = (
        ("timeUnixNano", "time_unix_nano"),
        ("observedTimeUnixNano", "observed_time_unix_nano"),
    )
    for camel, snake in pairs:
        raw = _get(record, camel, snake)
        try:
            nanos = int(raw)
        except (TypeError, ValueError):
            continue
        if nanos > 0:
            try:
                return datetime.fromtimestamp(nanos / 1e9, UTC).isoformat()
            except (ValueError, OverflowError, OSError):  # past year 9999: not a time
                continue
    return None


def _level(record: dict[str, Any]) -> str | None:
    number = _get(record, "severityNumber", "severity_number")
    if isinstance(number, int) and not isinstance(number, bool) and number > 0:
        return number_level(number, "severity_number")
    text = _get(record, "severityText", "severity_text")
    return text if isinstance(text, str) and text else None


def record_id(resource: dict[str, Any], scope: dict[str, Any], record: dict[str, Any]) -> str:
    """What an exporter's retry repeats: a hash of the record with its resource and scope (the
    timestamp in nanoseconds tells two occurrences of one error apart)."""
    blob = json.dumps([resource, scope, record], sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:32]


def _service(resource: dict[str, Any], default_service: str | None) -> str:
    name = resource.get("service.name")
    name = name if isinstance(name, str) else ""
    if default_service and (not name or name.startswith("unknown_service")):
        return default_service  # the SDK's placeholder when the app named no service
    return name or "unknown_service"


def _to_record(
    resource: dict[str, Any],
    scope: dict[str, Any],
    record: dict[str, Any],
    protobuf: bool,
    default_service: str | None,
) -> dict[str, Any]:
    attrs = attributes(record.get("attributes"))
    body = any_value(record.get("body"))
    service = _service(resource, default_service)
    own = {k: _short(v) for k, v in list(attrs.items())[:MAX_ATTRIBUTES] if k not in EXCEPTION_KEYS}
    extra: dict[str, Any] = {
        "otel": {
            k: v
            for k, v in {
                "scope": scope.get("name") if isinstance(scope.get("name"), str) else "",
                "trace_id": _hex_id(_get(record, "traceId", "trace_id"), protobuf),
                "span_id": _hex_id(_get(record, "spanId", "span_id"), protobuf),
                "severity_number": _get(record, "severityNumber", "severity_number"),
            }.items()
            if v not in (None, "")
        },
        "resource": {k: _short(v) for k, v in list(resource.items())[:MAX_ATTRIBUTES]},
    }
    if own:
        extra["log_attributes"] = own
    if isinstance(resource.get("service.version"), str):
        extra["release"] = resource["service.version"]
    for key in ("deployment.environment.name", "deployment.environment"):
        if isinstance(resource.get(key), str):
            extra["environment"] = resource[key]
            break
    if isinstance(resource.get("host.name"), str):
        extra["server_name"] = resource["host.name"]
    message = body if isinstance(body, str) else (json.dumps(body)[:8000] if body else "")
    out: dict[str, Any] = {
        "service": service,
        "message": message or _text(attrs.get("exception.message")),
        "attributes": extra,
        "id": record_id(resource, scope, record),
    }
    if level := _level(record):
        out["level"] = level
    error = {
        k: v
        for k, v in {
            "type": _text(attrs.get("exception.type")),
            "message": _text(attrs.get("exception.message")),
            "stack": _text(attrs.get("exception.stacktrace")),
        }.items()
        if v
    }
    if error:
        out["error"] = error
        out.setdefault("level", "ERROR")  # an exception with no severity is still an error
    if stamp := _timestamp(record):
        out["timestamp"] = stamp
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def read_logs(
    request: dict[str, Any],
    *,
    protobuf: bool,
    default_service: str | None,
    max_bytes: int,
) -> LogBatch:
    """The request's error records as ErrorEvents; the rest counted as ignored or rejected."""
    batch = LogBatch()
    for resource, scope, record in walk(request, LOGS):
        batch.records += 1
        _add(batch, _to_record(resource, scope, record, protobuf, default_service), max_bytes)
    return batch


def _add(batch: LogBatch, rec: dict[str, Any], max_bytes: int) -> None:
    try:
        found = from_record(
            rec, origin="sent", service=rec["service"], repo=None, max_bytes=max_bytes
        )
    except (PermanentError, ValueError) as exc:
        batch.rejected.append(str(exc).splitlines()[0][:300])
        return
    if isinstance(found, Ignored):
        batch.ignored += 1
    else:
        batch.accepted.append(found)


def read_spans(
    request: dict[str, Any],
    *,
    protobuf: bool,
    default_service: str | None,
    max_bytes: int,
) -> LogBatch:
    """Exceptions recorded on spans (``span.record_exception``: an event named ``exception``
    with the ``exception.*`` attributes) as ErrorEvents; spans without one are ignored."""
    batch = LogBatch()
    for resource, scope, span in walk(request, TRACES):
        batch.records += 1
        found = False
        for n, event in enumerate(_list(span.get("events"))):
            attrs = attributes(event.get("attributes"))
            if event.get("name") != "exception" and not any(k in attrs for k in EXCEPTION_KEYS):
                continue
            found = True
            # The span event as a log record at ERROR, on the span's trace and span ids.
            record = {
                "timeUnixNano": event.get("timeUnixNano", event.get("time_unix_nano")),
                "severityNumber": 17,
                "body": {
                    "stringValue": _text(attrs.get("exception.message"))
                    or _text(attrs.get("exception.type"))
                    or _text(span.get("name"))
                },
                "attributes": [
                    *_list(event.get("attributes")),
                    {"key": "span.name", "value": {"stringValue": _text(span.get("name"))}},
                ],
                "traceId": _get(span, "traceId", "trace_id"),
                "spanId": _get(span, "spanId", "span_id"),
            }
            rec = _to_record(resource, scope, record, protobuf, default_service)
            rec["id"] = record_id(
                resource, scope, {"span": span.get("spanId"), "event": n, **record}
            )
            _add(batch, rec, max_bytes)
        if not found:
            batch.ignored += 1
    return batch


def response_body(rejected: int, message: str, protobuf: bool, signal: Signal = LOGS) -> bytes:
    """An ``Export{Logs,Trace}ServiceResponse``; ``partial_success`` only when items were
    refused."""
    counted = "rejected_log_records" if signal is LOGS else "rejected_spans"
    if protobuf:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceResponse,
        )
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceResponse,
        )

        reply = ExportLogsServiceResponse() if signal is LOGS else ExportTraceServiceResponse()
        if rejected:
            setattr(reply.partial_success, counted, rejected)
            reply.partial_success.error_message = message
        return reply.SerializeToString()
    body: dict[str, Any] = {}
    if rejected:
        camel = "rejectedLogRecords" if signal is LOGS else "rejectedSpans"
        body["partialSuccess"] = {camel: str(rejected), "errorMessage": message}
    return json.dumps(body).encode()
