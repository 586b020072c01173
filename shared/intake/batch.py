"""A batch of records as shippers send it: decoded (bounded), then each through the event model.

Used where a batch is taken: ``POST /v1/events`` with ``?wait=true`` (producers/ingest/events.py),
and the ``intake_batch`` task that takes what the endpoint queued (workers/tasks/intake.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

import orjson
from pydantic import BaseModel, ConfigDict

from shared.core import keys
from shared.core.domain import ErrorEvent
from shared.core.errors import PermanentError
from shared.intake.events import Ignored, from_record, from_text
from shared.intake.sentry import event_from_sentry

if TYPE_CHECKING:
    from shared.groups.submit import Intake

log = logging.getLogger(__name__)

MAX_DEPTH = 64  # JSON nesting a log record never needs; deeper is refused, not recursed into


class BodyError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Batch:
    accepted: list[ErrorEvent] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    ignored: list[dict[str, Any]] = field(default_factory=list)


def _depth_ok(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests at most ``limit`` levels (iteratively: no recursion to exhaust)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return True


def loads(text: str | bytes, where: str) -> Any:
    try:
        # orjson: 3.5 times the standard library's speed on a trace-sized record; its errors
        # are json.JSONDecodeError too. Its own nesting limit (1024) raises one of those.
        value = orjson.loads(text)
    except RecursionError as exc:
        raise BodyError(400, f"{where}: JSON nested deeper than {MAX_DEPTH} levels") from exc
    # Fewer brackets than the limit cannot nest deeper than it: the walk is for the rest.
    brackets = text.count("{") + text.count("[") if isinstance(text, str) else MAX_DEPTH + 1
    if brackets > MAX_DEPTH and not _depth_ok(value):
        raise BodyError(400, f"{where}: JSON nested deeper than {MAX_DEPTH} levels")
    return value


def _array_items(text: str, max_records: int) -> Iterator[Any]:
    """The elements of a JSON array, decoded one by one: a 10 MB array of tiny records is
    refused at record ``max_records + 1`` instead of being built whole in memory."""
    decoder = json.JSONDecoder()
    i, n, count = 1, len(text), 0
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i < n and text[i] == "]" and count == 0:
            return
        try:
            value, i = decoder.raw_decode(text, i)
        except RecursionError as exc:
            raise BodyError(400, f"record {count}: JSON nested too deeply") from exc
        except json.JSONDecodeError as exc:
            raise BodyError(400, f"malformed JSON array at character {exc.pos}: {exc.msg}") from exc
        count += 1
        if count > max_records:
            raise BodyError(413, f"more than {max_records} records in one request")
        if not _depth_ok(value):
            raise BodyError(400, f"record {count - 1}: JSON nested deeper than {MAX_DEPTH} levels")
        yield value
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i < n and text[i] == ",":
            i += 1
            continue
        if i < n and text[i] == "]" and not text[i + 1 :].strip():
            return
        raise BodyError(400, f"malformed JSON array at character {i}")


def decode_records(body: bytes, *, max_records: int = 10_000) -> list[Any]:
    """One object, an array, or NDJSON; a malformed NDJSON line is one bad record, not all.
    More than ``max_records`` records is a 413, decided before they are all decoded."""
    text = body.decode("utf-8", errors="replace").strip()
    if not text:
        raise BodyError(400, "empty body: send a JSON object, a JSON array or NDJSON")
    if text.startswith("["):
        return list(_array_items(text, max_records))
    if text.count("\n") >= max_records * 2:  # surely too many lines: say so before splitting
        raise BodyError(413, f"more than {max_records} records in one request")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) > max_records:
        raise BodyError(413, f"more than {max_records} records in one request")
    if len(lines) == 1:
        try:
            return [loads(text, "body")]
        except json.JSONDecodeError as whole:
            raise BodyError(
                400, f"malformed JSON: {whole.msg} at line {whole.lineno} column {whole.colno}"
            ) from whole
    try:
        return [loads(text, "body")]  # one object pretty-printed over several lines
    except json.JSONDecodeError:
        pass
    records: list[Any] = []
    for n, line in enumerate(lines, start=1):
        try:
            records.append(loads(line, f"line {n}"))
        except json.JSONDecodeError as exc:
            records.append(BodyError(400, f"malformed JSON on line {n}: {exc.msg}"))
        except BodyError as exc:
            records.append(exc)
    return records


def record_id(record: Any, batch_digest: str, index: int) -> str:
    """The id a shipper's retry repeats: the record's own ``id``, else a hash of the request
    body and the record's place in it. A retried batch is the same body (Vector and Fluent Bit
    resend the same request), so its events get the same ids; two identical records — the same
    error twice in one millisecond — are still two events."""
    if isinstance(record, dict) and record.get("id") not in (None, ""):
        return str(record["id"])[:200]
    return hashlib.sha1(f"{batch_digest}:{index}".encode()).hexdigest()[:32]


def parse_batch(
    records: list[Any],
    *,
    service: str | None,
    max_trace_bytes: int,
    default_service: str | None = None,
    batch_digest: str = "",
) -> Batch:
    """Each record through the one event model (shared/intake/events.py): a JSON object, or a
    JSON string holding a trace or log text; what is not an error is ignored with the reason.

    ``service`` (the request's ``?service=``) names every record's service; without it a
    record's own ``service`` field does, else the server's ``default_service``.
    """
    batch = Batch()
    for i, record in enumerate(records):
        if isinstance(record, BodyError):
            batch.rejected.append({"index": i, "error": str(record)})
            continue
        try:
            if isinstance(record, dict):
                own = record.get("service") not in (None, "")
                found = from_record(
                    record,
                    origin="sent",
                    service=service or (None if own else default_service),
                    repo=None,
                    max_bytes=max_trace_bytes,
                    event_id=record_id(record, batch_digest, i),
                )
            elif isinstance(record, str):
                found = from_text(
                    record,
                    origin="sent",
                    service=service or default_service,
                    repo=None,
                    max_bytes=max_trace_bytes,
                    event_id=record_id(record, batch_digest, i),
                )
            else:
                raise PermanentError(
                    f"event must be a JSON object or string, got {type(record).__name__}"
                )
        except PermanentError as exc:
            batch.rejected.append({"index": i, "error": str(exc)})
        except ValueError as exc:  # pydantic: a field of the wrong type
            batch.rejected.append({"index": i, "error": _first_line(str(exc))})
        else:
            if isinstance(found, Ignored):
                batch.ignored.append({"index": i, "reason": found.reason})
            else:
                batch.accepted.append(found)
    return batch


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " ".join(lines[1:3]) if len(lines) > 1 else text


# A queued batch's body waits in Redis at most this long for a worker (the queue itself is bounded
# by TRACEHOUND_INGEST_MAX_BACKLOG): a week of intake workers down, then it is dropped and said so.
BODY_TTL_S = 7 * 86_400
TAKEN_TTL_S = 86_400  # how long a taken batch is remembered: past the transport's redelivery
NOTHING = {"accepted": 0, "rejected": 0, "ignored": 0, "new": 0}  # what take_batch counts of none
# Events of a message's batches counted in one submit_many (a batch is never split): enough to
# pay a message of small batches' Redis round trips once, few enough that a worker killed in
# the middle of a message of large ones redoes little.
MERGED_EVENTS = 1_000


class QueuedBatch(BaseModel):
    """A request's batch as ``POST /v1/events`` queues it for the ``intake_batch`` task: the
    body in its own Redis key (``body_id``, keys.queued_body), the message small. Celery's
    consumer decodes every message it fetches (JSON and base64) and the prefork pool pickles it
    to a child: a 140 KB batch cost that twice over on the worker's busiest process. A
    message queued before bodies moved out carries its ``body`` inline and is still taken.

    The ``kind`` of body (producers/ingest/sdk_routes.py queues the last two), one per line:

    - None: a shipper's records, as ``POST /v1/events`` took them (JSON, a JSON array, NDJSON);
    - ``sentry``: the event items of a Sentry request, each a JSON object with its
      ``event_id`` (the event's id, which an SDK's retry repeats); ``project`` is the DSN's,
      ``service`` and ``repo`` are the project's, as ingest's ``TRACEHOUND_SENTRY_PROJECTS``
      named them when it took the request;
    - ``events``: ErrorEvents as ingest built them (from OTLP records: the reply had to say
      which records were refused), as JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    digest: str  # of the body and the query: the events' ids come from it, as a retry repeats it
    body_id: str | None = None  # the body's key: keys.queued_body(body_id)
    body: str | None = None  # the decompressed request body, inline (older messages)
    service: str | None = None  # the request's ?service=
    default_service: str | None = None  # the server's --service
    max_records: int = 10_000
    kind: Literal["sentry", "events"] | None = None  # None: a shipper's records
    project: str | None = None  # a Sentry request's (the DSN's project id)
    repo: str | None = None  # the Sentry project's repository


def queue_body(pipe: Any, batch_id: str, raw: bytes) -> None:
    """The body of a batch about to be queued, in the caller's MULTI with its message's LPUSH:
    both are in Redis, or neither."""
    pipe.set(keys.queued_body(batch_id), raw, ex=BODY_TTL_S)


class QueuedBatches(BaseModel):
    """Several requests' batches in one ``intake_batch`` message: what ingest queued in one
    MULTI while the one before it was on its way to Redis (producers/ingest/events.py,
    ``Spool``). The worker's consumer pays a fetch, a restore entry and an ack per message,
    three Redis round trips on its one event loop, whatever the message holds; one message per
    request of 100 events held a 2-core machine's worker near 200 messages a second."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batches: list[QueuedBatch]


def queued_batches(payload: dict[str, Any]) -> list[QueuedBatch]:
    """The batches of an ``intake_batch`` message: several, or one (a message of one request,
    or from an ingest that queued each request alone)."""
    if "batches" in payload:
        return QueuedBatches.model_validate(payload).batches
    return [QueuedBatch.model_validate(payload)]


def batches_message(batches: list[QueuedBatch]) -> dict[str, Any]:
    """The ``intake_batch`` payload of ``batches``: one alone as every worker reads it."""
    if len(batches) == 1:
        return batches[0].model_dump(exclude_none=True)
    return QueuedBatches(batches=batches).model_dump(exclude_none=True)


def take_batches(
    batches: list[QueuedBatch], intake: Intake, *, max_trace_bytes: int
) -> dict[str, int]:
    """A message's batches, in the order queued, each through the event model; their events
    counted together, ``MERGED_EVENTS`` or so at a time, and those batches then remembered as
    taken in one MULTI. The counts summed. The workers' pace (keys.INTAKE_TAKEN, what
    ingest's lag bound reads beside the queue's length) counts messages, as the length does.

    Counting the batches of a message together is what makes a message of sixteen Sentry
    requests (one event each) cost about one request's Redis round trips, not sixteen: alone,
    each paid its ``submit_many`` and its MULTI. A worker killed between the counting and the
    MULTI takes those batches again, and intake counts each event id once."""
    r = intake.groups.r
    counts: dict[str, int] = dict(NOTHING)
    held: list[tuple[QueuedBatch, Batch | None]] = []  # read, not counted yet
    for queued in batches:
        raw = _body(r, queued)
        if raw is None:
            # Not taken, and gone: waited past BODY_TTL_S, or Redis lost it (no AOF).
            if queued.body_id is not None and not r.exists(keys.queued_taken(queued.body_id)):
                log.error("intake.batch_lost", extra={"batch": queued.digest[:12]})
                counts["lost"] = counts.get("lost", 0) + 1
            continue
        try:
            held.append((queued, _parse(queued, raw, max_trace_bytes=max_trace_bytes)))
        except BodyError as exc:  # the endpoint checked it: only a changed limit can get here
            log.warning("intake.unreadable", extra={"batch": queued.digest[:12], "error": str(exc)})
            held.append((queued, None))
        if sum(len(b.accepted) for _, b in held if b is not None) >= MERGED_EVENTS:
            _count(held, intake, counts, last=False)
            held = []
    _count(held, intake, counts, last=True)
    return counts


def take_batch(queued: QueuedBatch, intake: Intake, *, max_trace_bytes: int) -> dict[str, int]:
    """A queued batch through the event model and intake, as ``?wait=true`` takes it at once.
    Redis errors propagate (the task retries); refused records are logged with the reason.

    The body's key is deleted once the batch is counted (and the batch remembered as taken):
    a worker killed before that takes it again, counting each event once (its id is the
    batch's digest and the record's place); one killed after finds it taken."""
    return take_batches([queued], intake, max_trace_bytes=max_trace_bytes)


def _body(r: Any, queued: QueuedBatch) -> bytes | None:
    """A queued batch's body; None when its key is gone (taken, or lost)."""
    if queued.body is not None:
        return queued.body.encode()
    if queued.body_id is None:
        raise PermanentError("a queued batch without a body or its key")
    return cast(bytes | None, r.get(keys.queued_body(queued.body_id)))  # no decode_responses


def _count(
    held: list[tuple[QueuedBatch, Batch | None]],
    intake: Intake,
    counts: dict[str, int],
    *,
    last: bool,
) -> None:
    """The held batches' events counted in one ``submit_many``, then the batches remembered as
    taken and their bodies deleted in one MULTI (with the message counted after its last)."""
    events = [e for _, b in held if b is not None for e in b.accepted]
    submitted = intake.submit_many(events) if events else []
    for queued, batch in held:
        if batch is None:
            counts["rejected"] += 1
            continue
        for refused in batch.rejected:
            log.warning("intake.rejected", extra={"batch": queued.digest[:12], **refused})
        counts["accepted"] += len(batch.accepted)
        counts["rejected"] += len(batch.rejected)
        counts["ignored"] += len(batch.ignored)
    counts["new"] += sum(s.new for s in submitted)
    _mark_taken(intake.groups.r, [q.body_id for q, _ in held if q.body_id is not None], last=last)


def _parse(queued: QueuedBatch, raw: bytes, *, max_trace_bytes: int) -> Batch:
    """A queued body's records through the event model (see ``QueuedBatch.kind``)."""
    if queued.kind == "sentry":
        project = queued.project or "sentry"
        return sentry_batch(
            raw.split(b"\n"),
            project=project,
            service=queued.service or project,
            repo=queued.repo or queued.service or project,
            max_trace_bytes=max_trace_bytes,
        )
    if queued.kind == "events":
        return built_events(raw.split(b"\n"))
    records = decode_records(raw, max_records=queued.max_records)
    return parse_batch(
        records,
        service=queued.service,
        max_trace_bytes=max_trace_bytes,
        default_service=queued.default_service,
        batch_digest=queued.digest,
    )


def built_events(lines: list[bytes]) -> Batch:
    """ErrorEvents that ingest built and queued, one JSON a line; a line that is not one
    (nothing ingest writes) is rejected with the reason."""
    batch = Batch()
    for i, line in enumerate(lines):
        try:
            batch.accepted.append(ErrorEvent.model_validate_json(line))
        except ValueError as exc:
            batch.rejected.append({"index": i, "error": _first_line(str(exc))[:300]})
    return batch


def sentry_batch(
    lines: list[bytes], *, project: str, service: str, repo: str, max_trace_bytes: int
) -> Batch:
    """A Sentry request's event items (JSON objects, each with its ``event_id``) as events
    (shared/intake/sentry.py); an event that makes none is rejected or ignored with the
    reason, as ``parse_batch`` does with a record."""
    batch = Batch()
    for i, line in enumerate(lines):
        try:
            payload = loads(line, f"event {i}")
            if not isinstance(payload, dict):
                raise PermanentError("an event payload must be a JSON object")
            found = event_from_sentry(
                payload,
                service=service,
                repo=repo,
                project=project,
                max_bytes=max_trace_bytes,
                event_id=str(payload.get("event_id") or "")[:200],
            )
        except (PermanentError, BodyError) as exc:
            batch.rejected.append({"index": i, "error": str(exc)})
        except ValueError as exc:  # malformed JSON (the route checked it), a field's type
            batch.rejected.append({"index": i, "error": _first_line(str(exc))[:300]})
        else:
            if isinstance(found, Ignored):
                batch.ignored.append({"index": i, "reason": found.reason})
            else:
                batch.accepted.append(found)
    return batch


def _mark_taken(r: Any, body_ids: list[str], *, last: bool) -> None:
    """The batches remembered as taken and their bodies deleted; after a message's last batch,
    the workers' pace (keys.INTAKE_TAKEN, for ingest's bound on the lag) counts the message."""
    if not body_ids and not last:
        return
    pipe = r.pipeline(transaction=True)
    for body_id in body_ids:
        pipe.set(keys.queued_taken(body_id), 1, ex=TAKEN_TTL_S)
        pipe.delete(keys.queued_body(body_id))
    if last:
        pipe.incr(keys.INTAKE_TAKEN)
    pipe.execute()
