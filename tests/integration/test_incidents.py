"""Incidents and the deferred backlog at intake: an outage that raises many different errors with
one root cause starts one analysis, keeps every other group counted and waiting, and starts
them later most frequent first; a service's cap of new analyses holds the rest back, never
drops them. (End to end, with workers and Slack: test_incident_delivery.py.)"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import redis

from shared.core import keys
from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.devtools import outage
from shared.intake import deferred
from shared.intake.events import parse_event
from shared.intake.fingerprint import fingerprint
from shared.intake.incidents import incident_of, load
from shared.intake.submit import Intake
from tests.conftest import DATA
from tests.integration.test_cli import run_cli

pytestmark = pytest.mark.integration

TRACE = (DATA / "sample-error.txt").read_text()


def _intake(url: str, r: redis.Redis, **settings: object) -> Iterator[Intake]:
    s = Settings(redis_url=url, **settings)  # type: ignore[arg-type]
    app = sender_app(s)
    yield Intake(app, r, s)
    app.close()


@pytest.fixture
def incident_intake(fresh_redis: redis.Redis, private_redis_url: str) -> Iterator[Intake]:
    yield from _intake(
        private_redis_url, fresh_redis, incident_window=300, incident_settle=SETTLE_S,
        max_new_groups=0,
    )  # fmt: skip


SETTLE_S = 0.5


@pytest.fixture
def capped_intake(fresh_redis: redis.Redis, private_redis_url: str) -> Iterator[Intake]:
    yield from _intake(private_redis_url, fresh_redis, incident_window=0, max_new_groups=3)


def test_an_outage_starts_its_most_frequent_group_first_and_keeps_every_other_counted(
    incident_intake: Intake, fresh_redis: redis.Redis
) -> None:
    events = list(outage.events(3, 4, 150, repo="shop"))
    counts = Counter(fingerprint(e).value for e in events)
    rarest = min(counts, key=lambda fp: counts[fp])  # the first group seen is a rare one
    at = next(i for i, e in enumerate(events) if fingerprint(e).value == rarest)
    events.insert(0, events.pop(at))
    fps = [fingerprint(e).value for e in events]
    for at in range(0, len(events), 50):  # as an ingest request each
        incident_intake.submit_many(events[at : at + 50])
    # Nothing starts while the incident settles: which group is most frequent is not known.
    assert fresh_redis.llen("embed") == 0
    assert deferred.take_settled(fresh_redis) == [] and deferred.take_next(fresh_redis) is None
    waiting = {m.decode() for m in fresh_redis.zrange(keys.DEFERRED, 0, -1)}
    assert waiting == set(fps) and len(waiting) == 12
    incident = incident_of(fresh_redis, fps[0])
    inc = load(fresh_redis, incident or "")
    assert inc is not None and len(inc.members) == 12 and inc.services == 3
    assert inc.events == 150 and inc.waiting == 12  # every event counted, none dropped
    assert inc.cause.startswith("psycopg2.OperationalError: could not connect to server")

    # An unrelated error is not part of it: it is an incident of its own.
    other = incident_intake.submit(parse_event(TRACE, service="svc-1", repo="shop"))
    assert other.new and incident_of(fresh_redis, other.fingerprint) not in (None, incident)

    # Once settled, each incident starts its most frequent group, the outage's not its first.
    time.sleep(SETTLE_S + 0.1)
    started = dict(deferred.take_settled(fresh_redis))
    assert started.pop(other.fingerprint) == 1
    [(lead, n)] = started.items()
    assert n == counts[lead] == max(counts.values()) and lead != fps[0]
    assert fresh_redis.llen("embed") == 2 and deferred.settling(fresh_redis) == 0

    # Later, the most frequent waiting group starts next, then the next, each once.
    rest = []
    while (taken := deferred.take_next(fresh_redis)) is not None:
        rest.append(taken)
    assert {fp for fp, _ in rest} == waiting - {lead} and len(rest) == 11
    assert [n for _, n in rest] == [counts[fp] for fp, _ in rest]
    assert [n for _, n in rest] == sorted((n for _, n in rest), reverse=True)
    assert fresh_redis.llen("embed") == 2 + 11
    assert deferred.backlog(fresh_redis).waiting == 0


def test_a_repeat_of_a_waiting_group_only_counts(
    incident_intake: Intake, fresh_redis: redis.Redis
) -> None:
    events = list(outage.events(1, 3, 3, repo="shop"))
    incident_intake.submit_many(events)
    again = incident_intake.submit_many(
        [e.model_copy(update={"id": e.id + "-again"}) for e in events]
    )
    assert not any(s.new for s in again)
    assert fresh_redis.llen("embed") == 0 and fresh_redis.zcard(keys.DEFERRED) == 3


def test_the_cap_holds_a_services_new_groups_back_and_drops_none(
    capped_intake: Intake, fresh_redis: redis.Redis, private_redis_url: str
) -> None:
    def group(service: str, n: int) -> list:  # type: ignore[type-arg]
        text = TRACE.replace("ZeroDivisionError", f"Kind{n}Error")
        return [parse_event(text, service=service, repo="shop") for _ in range(n + 1)]

    busy = [e for n in range(5) for e in group("busy", n)]
    calm = [e for n in range(2) for e in group("calm", n)]
    capped_intake.submit_many(busy + calm)
    assert fresh_redis.llen("embed") == 3 + 2  # busy: three of five; calm: both
    assert fresh_redis.zcard(keys.DEFERRED) == 2
    reasons = {json_reason(v) for v in fresh_redis.hvals(keys.DEFERRED_MESSAGES)}
    assert reasons == {"cap"}
    fps = {fingerprint(e).value for e in busy}
    assert sum(int(fresh_redis.hget(keys.group(fp), "total") or 0) for fp in fps) == len(busy)
    # The two over the cap are summed up in the service's cap batch, listed by count.
    held = [fingerprint(group("busy", n)[0]).value for n in (3, 4)]
    batch = {incident_of(fresh_redis, fp) for fp in held}
    assert len(batch) == 1 and None not in batch
    inc = load(fresh_redis, batch.pop() or "")
    assert inc is not None and (inc.kind, inc.cause, inc.cap) == ("cap", "busy", 3)
    assert [(m.fingerprint, m.count) for m in inc.members] == [(held[1], 5), (held[0], 4)]
    assert inc.waiting == 2
    assert incident_of(fresh_redis, fingerprint(busy[0]).value) is None  # under the cap

    env = dict(os.environ, TRACEHOUND_REDIS_URL=private_redis_url)
    shown = run_cli(["status"], env)
    assert shown.returncode == 0, shown.stderr
    assert "analysis backlog: 2 new group(s) waiting" in shown.stdout


def json_reason(raw: bytes) -> str:
    import json

    return str(json.loads(raw)["reason"])


def test_a_later_window_with_incidents_off_leaves_the_old_incident(
    fresh_redis: redis.Redis, private_redis_url: str
) -> None:
    first, second = list(outage.events(1, 2, 2, repo="shop"))
    for intake in _intake(
        private_redis_url, fresh_redis, incident_window=300, incident_settle=0, group_window=0.5
    ):
        intake.submit_many([first, second])
    fp = fingerprint(second).value
    assert incident_of(fresh_redis, fp) is not None
    assert fresh_redis.zcard(keys.DEFERRED) == 1  # the second group waits for the first
    time.sleep(0.6)  # the group window closes
    for intake in _intake(private_redis_url, fresh_redis, incident_window=0, group_window=0.5):
        [again] = intake.submit_many([second.model_copy(update={"id": "later"})])
    assert again.new and incident_of(fresh_redis, fp) is None
