"""Intake prepares an event once per shape (shared/groups/submit.py): a storm's events, which
differ in id, message and time only, must come out exactly as each prepared alone — redacted,
held to its repos, with its trace and fingerprint — whatever the grouping rules, repo map,
source maps and attributes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.core.domain import ErrorEvent
from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.groups.submit import Intake
from shared.intake.events import REPO_CLAIMED
from tests.unit.test_shapes import JAVA, NODE, PYTHON  # the same three traces

pytestmark = pytest.mark.integration

GROUPING = {
    "services": {"ruled": {"rules": [{"match_message": "disk full", "fingerprint": "disk"}]}},
    "default": {"rules": [{"type": "IllegalState", "fingerprint": "state"}]},
}


@pytest.fixture(scope="module")
def intake(private_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Intake]:
    path = tmp_path_factory.mktemp("grouping") / "grouping.json"
    path.write_text(json.dumps(GROUPING))
    s = Settings(
        redis_url=private_redis_url,
        grouping_config=path,
        service_repos={"shop-*": ["shop"], "mapped": ["web"], "locked": []},
        redact_extra=[r"sku \d+"],
    )
    app = sender_app(s)
    yield Intake(app, redis.Redis.from_url(private_redis_url), s)
    app.close()


_events = st.fixed_dictionaries(
    {
        "service": st.sampled_from(["shop-api", "ruled", "mapped", "free", "locked"]),
        "repo": st.sampled_from(["shop", "other", "web", "free", "ruled", "locked"]),
        "stacktrace": st.sampled_from(
            [
                PYTHON,
                NODE,
                JAVA,
                "",
                "password=hunter2 in config",
                PYTHON + "\napi_key=abc123def456",
            ]
        ),
        "exception_type": st.sampled_from([None, "KeyError", "token sk_live_abcdefghijklmnop"]),
        "level": st.sampled_from(["ERROR", "FATAL"]),
        "attributes": st.one_of(
            st.just({}),
            st.just({REPO_CLAIMED: True}),
            st.just({"password": "s3cret", "release": "1.2"}),
            st.just({"frames": [{"file": "/app/dist/main.js", "line": 1, "column": 200}]}),
            st.just({"x": float("nan")}),
            st.just({"x": None}),
            st.just({"a": 1, "b": 2}),
            st.just({"b": 2, "a": 1}),
        ),
    }
)
_storm = st.lists(
    st.tuples(
        st.sampled_from(["", "disk full on /var", "sku 1234 not found", "boom", "x" * 300]),
        st.integers(min_value=0, max_value=10**9),
    ),
    min_size=1,
    max_size=4,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(_events, _storm)
def test_a_storm_of_one_shape_is_prepared_as_each_event_alone(
    intake: Intake, fields: dict[str, Any], storm: list[tuple[str, int]]
) -> None:
    for i, (message, seconds) in enumerate(storm):
        event = ErrorEvent(
            id=f"e{i}",
            message=message,
            timestamp=datetime.fromtimestamp(seconds, UTC),
            **fields,
        )
        got, expected = intake._prepare(event), intake._prepare_alone(event)
        # repr: NaN equal to NaN, and attributes in the same order
        assert repr((got[0].model_dump(), got[1:])) == repr(
            (expected[0].model_dump(), expected[1:])
        )


def test_a_storm_is_prepared_once(intake: Intake, monkeypatch: pytest.MonkeyPatch) -> None:
    alone: list[str] = []
    prepare_alone = intake._prepare_alone

    def counted(event: ErrorEvent) -> Any:
        alone.append(event.id)
        return prepare_alone(event)

    monkeypatch.setattr(intake, "_prepare_alone", counted)
    trace = JAVA + "\n\tat com.shop.Once.only(Once.java:1)"  # a shape no other test made
    storm = [
        ErrorEvent(id=f"s{i}", service="free", repo="free", message=f"boom {i}", stacktrace=trace)
        for i in range(20)
    ]
    prepared = [intake._prepare(e) for e in storm]
    assert len(alone) == 1
    assert [(e.id, e.message) for e, _, _ in prepared] == [
        (f"s{i}", f"boom {i}") for i in range(20)
    ]
    assert len({fp for _, fp, _ in prepared}) == 1


def test_each_event_naming_a_repo_its_service_may_not_is_said(
    intake: Intake, caplog: pytest.LogCaptureFixture
) -> None:
    # Held to its repos, an event's claim is refused and said for each event: a storm's
    # later events are not the first one's copy, whose refusal was said once.
    storm = [
        ErrorEvent(
            id=f"r{i}",
            service="shop-api",
            repo="billing",
            message=f"boom {i}",
            stacktrace=JAVA,
            attributes={REPO_CLAIMED: True},
        )
        for i in range(3)
    ]
    # A service that may name no repo keeps its own name as its repo, and is said too.
    locked = [
        e.model_copy(update={"id": f"k{i}", "service": "locked", "repo": "locked"})
        for i, e in enumerate(storm)
    ]
    with caplog.at_level("WARNING", logger="shared.groups.submit"):
        prepared = [intake._prepare(e) for e in storm + locked]
    assert [e.repo for e, _, _ in prepared] == ["shop"] * 3 + ["locked"] * 3
    assert [r.getMessage() for r in caplog.records].count("intake.repo_refused") == 6
