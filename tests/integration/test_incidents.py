"""Incidents and the deferred backlog at intake: an outage that raises many different errors with
one root cause starts one analysis, keeps every other group counted and waiting, and starts
them later most frequent first; a service's cap of new analyses holds the rest back, never
drops them. (End to end, with workers and Slack: test_incident_delivery.py.)"""

from __future__ import annotations

import json
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
from shared.groups import deferred
from shared.groups.incidents import incident_of, load, posted
from shared.groups.submit import Intake
from shared.intake.events import ErrorEvent, parse_event
from shared.intake.fingerprint import fingerprint
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


# Long enough for the test to submit 150 events and look before the settle ends, on a machine
# running five test processes (0.5 s ran out there once): the checks before the sleep must see
# the incident still settling.
SETTLE_S = 3.0


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

    # Its other groups wait for the lead's message: started beside it, one could deliver
    # first and become the incident's message. A lead that never posts holds them back only
    # for a while.
    assert deferred.take_next(fresh_redis) is None
    assert deferred.take_next(fresh_redis, lead_wait_s=60) is None
    assert fresh_redis.llen("embed") == 2
    posted(fresh_redis, incident or "", "C0INCIDENT", "1700000000.000100", "C0INCIDENT")

    # Once it has posted, the most frequent waiting group starts next, then the next, each once.
    rest = []
    while (taken := deferred.take_next(fresh_redis)) is not None:
        rest.append(taken)
    assert {fp for fp, _ in rest} == waiting - {lead} and len(rest) == 11
    assert [n for _, n in rest] == [counts[fp] for fp, _ in rest]
    assert [n for _, n in rest] == sorted((n for _, n in rest), reverse=True)
    assert fresh_redis.llen("embed") == 2 + 11
    assert deferred.backlog(fresh_redis).waiting == 0


def test_an_incident_whose_lead_runs_at_once_holds_its_other_groups_until_it_posts(
    fresh_redis: redis.Redis, private_redis_url: str
) -> None:
    """Settle off: the lead starts at admission; its other groups wait for its message, and
    for no longer than the lead wait (a lead that never delivered)."""
    for intake in _intake(
        private_redis_url, fresh_redis, incident_window=300, incident_settle=0,
        max_new_groups=0,
    ):  # fmt: skip
        events = list(outage.events(1, 3, 9, repo="shop"))
        intake.submit_many(events)
        assert fresh_redis.llen("embed") == 1  # the lead, at once
        assert deferred.backlog(fresh_redis).waiting == 2
        assert deferred.take_next(fresh_redis) is None
        taken = deferred.take_next(fresh_redis, lead_wait_s=0)  # the lead's run died
        assert taken is not None and fresh_redis.llen("embed") == 2


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


def _fill_backlog(r: redis.Redis, n: int) -> None:
    """``n`` waiting groups, group i with i events in its window (a storm of distinct errors)."""
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        fp = f"storm-{i}"
        pipe.hset(keys.group(fp), "window_count", i)
        body = json.dumps({"headers": {"id": f"root-{i}"}, "body": "e30="}).encode()
        deferred.defer(pipe, fp, "embed", body, last_id=f"last-{i}", now_ms=1_800_000_000_000 + i,
                       reason="cap", count=i)  # fmt: skip
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()


def _key_lookups(r: redis.Redis) -> int:
    stats = r.info("stats")
    return int(stats["keyspace_hits"]) + int(stats["keyspace_misses"])


def test_a_drain_reads_the_top_of_the_backlog_not_all_of_it(fresh_redis: redis.Redis) -> None:
    """With 50,000 groups waiting, a drain looks up a few keys, not every waiting group: the
    backlog is ranked as it fills (a scan of 400k in one Lua call stalled every other Redis
    client for 1.5-1.9 s). Counted in key lookups (Redis's keyspace hits and misses), not
    time."""
    _fill_backlog(fresh_redis, 50_000)
    before = _key_lookups(fresh_redis)
    taken = deferred.take_next(fresh_redis)
    lookups = _key_lookups(fresh_redis) - before
    assert taken == ("storm-49999", 49_999)  # the most frequent
    assert lookups < 100, lookups
    assert fresh_redis.zcard(keys.DEFERRED) == fresh_redis.zcard(keys.DEFERRED_RANK) == 49_999


def test_a_waiting_groups_rank_follows_its_count_and_ties_go_to_the_longest_waiting(
    capped_intake: Intake, fresh_redis: redis.Redis
) -> None:
    def kind(n: int) -> list:  # type: ignore[type-arg]
        return [parse_event(TRACE.replace("ZeroDivisionError", f"Kind{n}Error"),
                            service="busy", repo="shop")]  # fmt: skip

    for n in range(6):  # three start, three wait: kinds 3, 4, 5
        capped_intake.submit_many(kind(n))
        time.sleep(0.002)
    fp = {n: fingerprint(kind(n)[0]).value for n in range(6)}
    capped_intake.submit_many([e for _ in range(3) for e in kind(5)])  # 5 leads: 4 events
    # 3 and 4 have one event each: the one waiting longer (3) goes first.
    taken = [deferred.take_next(fresh_redis) for _ in range(3)]
    assert taken == [(fp[5], 4), (fp[3], 1), (fp[4], 1)]


def test_a_group_waiting_from_one_batch_is_ranked_by_all_its_events_in_it(
    capped_intake: Intake, fresh_redis: redis.Redis
) -> None:
    """An ingest request is one batch: a group whose first event comes early and whose other
    events come later in the same batch waits with all of them counted in its rank."""

    def kind(n: int) -> ErrorEvent:
        return parse_event(TRACE.replace("ZeroDivisionError", f"Kind{n}Error"),
                           service="busy", repo="shop")  # fmt: skip

    fp = {n: fingerprint(kind(n)).value for n in range(6)}
    # Three start, three wait: 3 (first of the waiting, one event), 4 (six events), 5 (two).
    batch = [kind(n) for n in range(6)] + [kind(4) for _ in range(5)] + [kind(5)]
    capped_intake.submit_many(batch)
    taken = [deferred.take_next(fresh_redis) for _ in range(3)]
    assert taken == [(fp[4], 6), (fp[5], 2), (fp[3], 1)]


def test_the_backlog_drops_what_waited_too_long_and_the_least_frequent_past_its_bound(
    fresh_redis: redis.Redis,
) -> None:
    _fill_backlog(fresh_redis, 100)
    # Deferred "at" 1.8e12 ms (2027): by Redis's clock now, none is too old yet.
    assert deferred.trim(fresh_redis, ttl_s=3600, max_waiting=1000) == []
    dropped = deferred.trim(fresh_redis, ttl_s=3600, max_waiting=60)
    assert sorted(dropped) == sorted(f"storm-{i}" for i in range(40))  # the least frequent
    assert fresh_redis.zcard(keys.DEFERRED) == fresh_redis.hlen(keys.DEFERRED_MESSAGES) == 60
    assert fresh_redis.hget(keys.group("storm-0"), "deferred_at") is None
    assert fresh_redis.hget(keys.group("storm-0"), "window_count") == b"0"  # still counted
    # Waited too long: the oldest deferral goes first, whatever its count.
    fresh_redis.zadd(keys.DEFERRED, {"storm-99": 1})  # deferred long ago
    assert deferred.trim(fresh_redis, ttl_s=3600, max_waiting=1000) == ["storm-99"]


def test_naming_new_services_does_not_buy_more_analyses(
    fresh_redis: redis.Redis, private_redis_url: str
) -> None:
    """30 records naming 30 services started 31 LLM calls at once: the per-service cap was
    dodged. A cap for every service together holds them to it."""
    for intake in _intake(private_redis_url, fresh_redis, incident_window=0, max_new_groups=20,
                          max_new_groups_total=5):  # fmt: skip
        intake.submit_many([parse_event(TRACE, service=f"svc-{i}", repo="shop") for i in range(30)])
    assert fresh_redis.llen("embed") == 5
    assert fresh_redis.zcard(keys.DEFERRED) == 25
