"""Event ids remembered for dedup stay near TRACEHOUND_DEDUP_MAX_IDS in a storm (each costs
about 150 bytes of Redis), and a replay within the shortened window still counts once."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
import redis

from shared.core import keys
from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.groups.store import GroupStore
from shared.groups.submit import Intake
from shared.intake.events import parse_event
from tests.conftest import DATA

pytestmark = pytest.mark.integration

MAX_IDS = 10_000


def _remembered(r: redis.Redis) -> int:
    # SCAN leaves out keys whose time is up even before Redis has deleted them.
    return sum(1 for _ in r.scan_iter(match=f"{keys.PREFIX}seen:*", count=10_000))


def test_a_storm_keeps_the_ids_remembered_within_the_bound_and_counts_every_event(
    fresh_redis: redis.Redis,
) -> None:
    # The rate over 2 s, not the default 10: the same rule, a storm that need not last 10 s.
    store = GroupStore(
        fresh_redis,
        window_s=600,
        dedup_ttl_s=3600,
        dedup_min_ttl_s=2,
        dedup_max_ids=MAX_IDS,
        dedup_rate_s=2,
    )
    fp = f"v1:{uuid.uuid4().hex}"
    store.record(fp, "svc", "quiet")
    # One id in a quiet second is remembered for the whole TRACEHOUND_DEDUP_TTL.
    assert fresh_redis.ttl(keys.seen("svc", "quiet")) > 3500

    ids = [f"storm-{i}" for i in range(30_000)]  # 30,000 ids in well under a few seconds
    for at in range(0, len(ids), 1000):
        store.record_many([(fp, "svc", ids[at : at + 1000])])
    assert 1 <= fresh_redis.ttl(keys.seen("svc", ids[-1])) <= 2
    assert store.dedup_window_s == 2
    # Within the window a replay (a tailer's restart, a shipper's retry) still counts once.
    [replayed] = store.record_many([(fp, "svc", ids[-1000:])])
    assert all(o.duplicate for o in replayed)
    time.sleep(3)
    # Without the bound all 30,001 ids would be remembered for an hour (4.5 MB here; 10 GB
    # after an hour at 20,000 events/s). The storm's first ids, counted before its rate was
    # known, are kept longer: a few thousand here, at most the rate window's worth.
    assert _remembered(fresh_redis) <= MAX_IDS
    state = store.state(fp)
    assert state is not None and state.total == 30_001  # nothing lost, nothing counted twice


def test_a_burst_after_a_quiet_spell_is_not_taken_for_a_storm(fresh_redis: redis.Redis) -> None:
    # A tailer catching up after a restart: 5,000 new events at once, then nothing. Over one
    # second that is a rate of 5,000/s, which would keep them 2 s at this bound; over ten it
    # is 500/s, and they are kept 20 s, so a second replay within that counts nothing.
    store = GroupStore(
        fresh_redis, window_s=600, dedup_ttl_s=3600, dedup_min_ttl_s=1, dedup_max_ids=MAX_IDS
    )
    fp = f"v1:{uuid.uuid4().hex}"
    ids = [f"burst-{i}" for i in range(5_000)]
    store.record_many([(fp, "svc", ids)])
    assert 15 <= fresh_redis.ttl(keys.seen("svc", ids[-1])) <= 20
    time.sleep(2.5)
    [replayed] = store.record_many([(fp, "svc", ids)])
    assert all(o.duplicate for o in replayed)
    state = store.state(fp)
    assert state is not None and state.total == 5_000


def test_intake_says_when_a_storm_shortened_the_dedup_window(
    fresh_redis: redis.Redis, private_redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        redis_url=private_redis_url, dedup_ttl=3600, dedup_min_ttl=1, dedup_max_ids=100
    )
    app = sender_app(settings)
    intake = Intake(app, fresh_redis, settings)
    event = parse_event((DATA / "sample-error.txt").read_text(), service="shop-api", repo="shop")
    events = [event.model_copy(update={"id": f"e{i}"}) for i in range(500)]
    with caplog.at_level(logging.WARNING, logger="shared.groups.submit"):
        intake.submit_many(events)
        intake.submit_many([event.model_copy(update={"id": f"f{i}"}) for i in range(500)])
    app.close()
    said = [r for r in caplog.records if r.getMessage() == "intake.dedup_window_shortened"]
    assert len(said) == 1  # once a minute, not once per batch
    assert said[0].dedup_window_s < 3600 and said[0].dedup_ttl_s == 3600  # type: ignore[attr-defined]
