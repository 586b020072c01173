"""The one way producers hand over an error: redact, fingerprint, count, start the chain once.

ingest / tailer / CLI ─▶ Intake.submit(event) ─▶ redact ─▶ fingerprint ─▶ group count
    first of its group in the window ─▶ analysis chain      later ones ─▶ count only
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import redis
from celery import Celery
from celery.result import AsyncResult

from shared.core.domain import ErrorEvent, GroupRef
from shared.core.pipeline import enqueue_error, enqueue_update_group
from shared.core.settings import Settings
from shared.intake.fingerprint import GroupingConfig, fingerprint, load_grouping_config
from shared.intake.groups import GroupStore
from shared.intake.redact import Redactor


@dataclass(frozen=True)
class Submitted:
    event_id: str
    fingerprint: str
    new: bool  # this event started an analysis
    count: int  # occurrences of its group in the current window
    result: AsyncResult | None  # the notify stage's result when ``new``
    duplicate: bool = False  # the event id was counted before (a replay): nothing added


class Intake:
    def __init__(self, app: Celery, r: redis.Redis, settings: Settings) -> None:
        self.app, self.settings = app, settings
        self.groups = GroupStore(r, window_s=settings.group_window, dedup_ttl_s=settings.dedup_ttl)
        self.redactor = Redactor.from_settings(
            settings.redact, settings.redact_extra, settings.redact_disable
        )

    @cache  # noqa: B019 - one Intake per process; the config file is read once per service
    def _grouping(self, service: str) -> GroupingConfig:
        return load_grouping_config(self.settings.grouping_config, service)

    def submit(self, event: ErrorEvent) -> Submitted:
        event = self.redactor.redact_event(event)
        fp = fingerprint(event, self._grouping(event.service))
        occ = self.groups.record(fp.value, event.service, event.id)
        if occ.new:
            group = GroupRef(fingerprint=fp.value, window_start=occ.window_start)
            result = enqueue_error(self.app, event, group=group)
            # Only now: a crash before this line lets the replayed event start the chain.
            self.groups.mark_started(fp.value, occ.window_start)
            return Submitted(event.id, fp.value, True, occ.count, result, occ.duplicate)
        if occ.duplicate:
            return Submitted(event.id, fp.value, False, occ.count, None, duplicate=True)
        if self.groups.claim_update(fp.value, self.settings.group_update_interval):
            # One delayed update per interval carries every repeat in it to Slack.
            enqueue_update_group(self.app, fp.value, countdown=self.settings.group_update_interval)
        return Submitted(event.id, fp.value, False, occ.count, None)


def intake_for(settings: Settings, app: Celery) -> Intake:
    # Bounded waits: a producer that cannot reach Redis backs off and says so, never hangs.
    r = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=5, socket_timeout=10)
    return Intake(app, r, settings)
