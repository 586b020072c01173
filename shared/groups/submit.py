"""The one way producers hand over errors: redact, fingerprint, count, start the chain once.

ingest / tailer / CLI ─▶ Intake.submit_many(events) ─▶ redact ─▶ fingerprint ─▶ group count
    first of its group in the window ─▶ analysis chain      later ones ─▶ count only

A batch costs one round trip to count (every group's events in one pipelined script call per
group); when groups opened a window, one to read their mutes, one to admit them (incidents, the
cap: shared/groups/incidents.py) and one to start or defer their chains (their messages LPUSHed
with the ``started`` mark); and one to claim count updates for repeated groups: HTTP ingest
hands over a request's records and the tailer a read round's errors at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import redis
from celery import Celery
from celery.result import AsyncResult

from shared.core import inflight, keys
from shared.core.domain import ErrorEvent, GroupRef
from shared.core.logs import Throttle
from shared.core.pipeline import (
    analysis_message,
    enqueue_drain,
    enqueue_update_group,
    enqueue_update_incident,
)
from shared.core.settings import Settings
from shared.groups import deferred
from shared.groups.deploys import DeployStore
from shared.groups.incidents import (
    INCIDENT_UPDATE_S,
    SUMMARY_DUE_S,
    AdmissionPolicy,
    Admitter,
    NewGroup,
    cause_of,
    claim_update,
)
from shared.groups.store import GroupStore, Occurrence
from shared.groups.triage import muted_among
from shared.intake.events import REPO_CLAIMED
from shared.intake.fingerprint import GroupingConfig, fingerprint, load_grouping_config
from shared.intake.redact import Redactor
from shared.intake.shapes import MAX_SHAPE_BYTES, Templates, encoded
from shared.intake.symbolicate import MapCatalog, Symbolicator, may_map
from shared.intake.trace import with_trace

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Submitted:
    event_id: str
    fingerprint: str
    new: bool  # this event started an analysis
    count: int  # occurrences of its group in the current window
    result: AsyncResult | None  # the chain's result (the message sent) when ``new``
    duplicate: bool = False  # the event id was counted before (a replay): nothing added


class Intake:
    """``counted``: told of each event counted (not a replay): its service, and whether it
    opened its group's window (the process's metrics)."""

    def __init__(
        self,
        app: Celery,
        r: redis.Redis,
        settings: Settings,
        *,
        counted: Callable[[str, bool], None] | None = None,
    ) -> None:
        self.app, self.settings, self.counted = app, settings, counted
        self.groups = GroupStore(
            r,
            window_s=settings.group_window,
            dedup_ttl_s=settings.dedup_ttl,
            dedup_min_ttl_s=settings.dedup_min_ttl,
            dedup_max_ids=settings.dedup_max_ids,
        )
        self._throttle = Throttle()
        self._prepared: Templates[tuple[ErrorEvent, str]] = Templates()
        self.redactor = Redactor.from_settings(
            settings.redact, settings.redact_extra, settings.redact_disable
        )
        self.symbolicator = Symbolicator(MapCatalog(r))
        self.deploys = DeployStore(r)
        self.admitter = Admitter(
            r,
            AdmissionPolicy(
                incident_window_s=settings.incident_window,
                max_new_groups=settings.max_new_groups,
                max_new_groups_total=settings.max_new_groups_total,
                new_groups_window_s=settings.new_groups_window,
                settle_s=settings.incident_settle,
            ),
        )

    @cache  # noqa: B019 - one Intake per process; the config file is read once per service
    def _grouping(self, service: str) -> GroupingConfig:
        return load_grouping_config(self.settings.grouping_config, service)

    def submit(self, event: ErrorEvent) -> Submitted:
        [submitted] = self.submit_many([event])
        return submitted

    def submit_many(self, events: Sequence[ErrorEvent]) -> list[Submitted]:
        """Each event as ``submit`` would take it alone, in order; the batch in five Redis
        round trips at most (see the module doc). An exception (Redis out of reach) may leave
        part of the batch counted: a retry with the same event ids counts each id once."""
        readied = [self._prepare(event) for event in events]
        prepared = [(event, fp) for event, fp, _ in readied]
        positions: dict[str, list[int]] = {}
        for i, (_, fp) in enumerate(prepared):
            positions.setdefault(fp, []).append(i)
        batches = [
            (fp, prepared[at[0]][0].service, [prepared[i][0].id for i in at])
            for fp, at in positions.items()
        ]
        found: dict[int, Occurrence] = {}
        for at, counted in zip(positions.values(), self.groups.record_many(batches), strict=True):
            found.update(zip(at, counted, strict=True))
        occurrences = [found[i] for i in range(len(prepared))]
        self._say_dedup_window()
        # An event that opened its group's window goes on to analysis: its message redacted
        # now, if _prepare left it (the other events are only counted: their messages are read
        # by nothing).
        for i, ((event, fp), occ) in enumerate(zip(prepared, occurrences, strict=True)):
            if occ.new and readied[i][2]:
                prepared[i] = (self._message_redacted(event), fp)
        # A release no deploy named is recorded as seen now (once per process and release).
        self.deploys.note_releases(event for event, _ in prepared)
        results = self._start(prepared, occurrences)
        if self.counted is not None:
            for (event, _), occ in zip(prepared, occurrences, strict=True):
                if not occ.duplicate:
                    self.counted(event.service, occ.new)
        # Repeats (neither new nor a replay) get their group's count update scheduled.
        self._schedule_updates(
            list(
                dict.fromkeys(
                    fp
                    for (_, fp), occ in zip(prepared, occurrences, strict=True)
                    if not occ.new and not occ.duplicate
                )
            )
        )
        return [
            Submitted(event.id, fp, i in results, occ.count, results.get(i), occ.duplicate)
            for i, ((event, fp), occ) in enumerate(zip(prepared, occurrences, strict=True))
        ]

    def _say_dedup_window(self) -> None:
        """A storm shortened how long event ids are remembered: said once a minute."""
        window, ceiling = self.groups.dedup_window_s, self.settings.dedup_ttl
        if window < ceiling and (held := self._throttle.allow("dedup")) is not None:
            log.warning(
                "intake.dedup_window_shortened",
                extra={
                    "dedup_window_s": window,
                    "dedup_ttl_s": ceiling,
                    "max_ids": self.settings.dedup_max_ids,
                    "repeated": held,
                },
            )

    def _prepare(self, event: ErrorEvent) -> tuple[ErrorEvent, str, bool]:
        """``_prepare_alone``, once per shape: a storm's events differ in their id, message
        and timestamp only. When the message was left to redact, nothing else of the event
        was read (no rule reads messages, no source map was asked), so an event of the same
        shape is the one prepared before with its own id, message and time."""
        attributes = encoded(event.attributes)
        if attributes is None or len(event.stacktrace) > MAX_SHAPE_BYTES:
            return self._prepare_alone(event)
        # A storm's events share their template's stack (the same string: its hash is kept).
        kind = (event.service, event.repo, event.exception_type, event.level)
        shape = (kind, event.stacktrace, attributes)
        if (seen := self._prepared.get(shape)) is not None:
            done, fp = seen
            own = {"id": event.id, "message": event.message, "timestamp": event.timestamp}
            return done.model_copy(update=own), fp, True
        done, fp, later = self._prepare_alone(event)
        if later and not self._claim_refused(event) and not may_map(done.trace):
            self._prepared.put(shape, (done, fp))
        return done, fp, later

    def _prepare_alone(self, event: ErrorEvent) -> tuple[ErrorEvent, str, bool]:
        """(the event held to its repos, redacted, with its trace; its group's fingerprint;
        whether its message is still to be redacted).

        A storm repeats one trace with a different message each time (a request id), so the
        message's redaction was most of an event's cost, spent on events that are only
        counted. When the message cannot decide the group (the trace has frames and no
        grouping rule matches messages), it is left for ``_message_redacted``, which
        ``submit_many`` calls for the events that open a window: nothing else reads it."""
        config = self._grouping(event.service)
        later = bool(event.stacktrace) and not config.reads_message
        # Held to its repos and redacted in one copy of the event (a pydantic copy is about
        # 2 us); the trace is read from the redacted text, once: every later stage reads it.
        repo, attributes = self._held_to_its_repos(event)
        update = self.redactor.redacted_fields(event, attributes, message=not later)
        event = with_trace(event.model_copy(update={**update, "repo": repo}))
        # minified frames of a bundle the repo has a map for: read again as the original code
        # (the rewritten text redacted whole again: its names and paths came from the maps)
        if (mapped := self.symbolicator.symbolicate(event)) is not None:
            event, later = with_trace(self.redactor.redact_event(mapped)), False
        found = fingerprint(event, config)
        if later and found.kind == "message":  # no frames in the trace: the message decides
            event, later = self._message_redacted(event), False
            found = fingerprint(event, config)
        return event, found.value, later

    def _message_redacted(self, event: ErrorEvent) -> ErrorEvent:
        """``event`` with its message redacted (its trace was read from its stack trace)."""
        return event.model_copy(update={"message": self.redactor.redact(event.message)})

    def _held_to_its_repos(self, event: ErrorEvent) -> tuple[str, dict[str, Any]]:
        """The event's repo and attributes: a repo the record named itself stays only if its
        service may name it (TRACEHOUND_SERVICE_REPOS): a sender cannot have another repo's
        code cited in its service's channel. Without a map, any."""
        claimed = event.attributes.get(REPO_CLAIMED) is True
        attributes = {k: v for k, v in event.attributes.items() if k != REPO_CLAIMED}
        allowed = self.settings.repos_of(event.service)
        repo = event.repo
        if allowed is not None and (claimed or repo == event.service) and repo not in allowed:
            repo = allowed[0] if allowed else event.service
        if self._claim_refused(event):
            log.warning(
                "intake.repo_refused",
                extra={"service": event.service, "claimed": event.repo, "repo": repo},
            )
        return repo, attributes

    def _claim_refused(self, event: ErrorEvent) -> bool:
        """Whether the repo the record named itself is one its service may not name (said
        for each such event)."""
        if event.attributes.get(REPO_CLAIMED) is not True:
            return False
        allowed = self.settings.repos_of(event.service)
        return allowed is not None and event.repo not in allowed

    def _start(
        self, prepared: list[tuple[ErrorEvent, str]], occurrences: list[Occurrence]
    ) -> dict[int, AsyncResult]:
        """The analysis chains of the groups that opened a window, with their ``started``
        marks in the same pipeline: a crash before it lets the replayed event start them. A
        muted group's window is marked started without a chain: counted, not analysed. A
        group admission defers (a later member of an incident, or over its service's cap)
        has its chain's message kept in the backlog instead (shared/groups/deferred.py)."""
        results: dict[int, AsyncResult] = {}
        opened = [i for i, occ in enumerate(occurrences) if occ.new]
        if not opened:
            return results
        r = self.groups.r
        quiet = muted_among(r, [prepared[i][1] for i in opened])
        analysed = [i for i in opened if prepared[i][1] not in quiet]
        admitted = dict(
            zip(
                analysed,
                self.admitter.admit([self._new_group(*prepared[i]) for i in analysed]),
                strict=True,
            )
        )
        # Intake's Redis is the broker: both are TRACEHOUND_REDIS_URL (intake_for).
        pipe = r.pipeline(transaction=False)
        waiting = False
        drain_in = deferred.DRAIN_EVERY_S
        # A deferred group is ranked by its count after the whole batch: the batch was counted
        # before it started, so the counting script had no waiting group's rank to raise.
        counted = {fp: occ.count for (_, fp), occ in zip(prepared, occurrences, strict=True)}
        for i in opened:
            (event, fp), occ = prepared[i], occurrences[i]
            if i in admitted:
                group = GroupRef(fingerprint=fp, window_start=occ.window_start)
                queue, message, results[i] = analysis_message(self.app, event, group)
                admission = admitted[i]
                last_id = results[i].id
                if admission.run_now:
                    pipe.lpush(queue, message)
                    inflight.record(pipe, queue, message, last_id=last_id, now_ms=occ.last_seen)
                else:
                    reason = admission.reason or "cap"
                    settle = None
                    if reason == "settle" and admission.incident is not None:
                        until = occ.last_seen + int(self.settings.incident_settle * 1000)
                        settle = (admission.incident, until)
                        drain_in = max(drain_in, self.settings.incident_settle)
                    deferred.defer(
                        pipe, fp, queue, message, last_id=last_id, now_ms=occ.last_seen,
                        reason=reason, count=counted[fp], settle_until_ms=settle,
                    )  # fmt: skip
                    waiting = True
            pipe.hset(keys.group(fp), "started", occ.window_start)
        pipe.execute()
        if waiting and deferred.claim_drain(r):
            enqueue_drain(self.app, countdown=drain_in)
        for a in admitted.values():
            if a.opened_batch and a.incident:  # its summary goes out now, not in a while
                schedule_incident_update(self.app, r, a.incident, soon=True)
        for incident in {a.incident for a in admitted.values() if a.incident and not a.run_now}:
            schedule_incident_update(self.app, r, incident)  # a group joined its list
        return results

    def _new_group(self, event: ErrorEvent, fp: str) -> NewGroup:
        found = fingerprint(event, self._grouping(event.service))  # memoized: no second parse
        kind = (found.exception_types or (event.exception_type or "error",))[0]
        where = f" in {found.frames[0]}" if found.frames else ""
        return NewGroup(fp, event.service, cause_of(event), f"{event.service} · {kind}{where}")

    def _schedule_updates(self, fingerprints: list[str]) -> None:
        """One delayed update per group and interval carries every repeat in it to Slack."""
        interval = self.settings.group_update_interval
        for fp, claimed in zip(
            fingerprints, self.groups.claim_updates(fingerprints, interval), strict=True
        ):
            if claimed:
                enqueue_update_group(self.app, fp, countdown=interval)


def schedule_incident_update(
    app: Celery, r: redis.Redis, incident: str, *, soon: bool = False
) -> None:
    """One rewrite of the incident's list per ``INCIDENT_UPDATE_S`` carries every change in it;
    ``soon``: one in a second (a cap batch's summary, the only word of what waits)."""
    interval = SUMMARY_DUE_S if soon else INCIDENT_UPDATE_S
    if claim_update(r, incident, interval):
        enqueue_update_incident(app, incident, countdown=interval)


def intake_for(
    settings: Settings, app: Celery, *, counted: Callable[[str, bool], None] | None = None
) -> Intake:
    # Bounded waits: a producer that cannot reach Redis backs off and says so, never hangs.
    r = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=5, socket_timeout=10)
    return Intake(app, r, settings, counted=counted)
