"""An outage end to end, on the session stack (incidents on): one Slack message for the incident,
every group analysed — the most frequent first, the rest from the backlog while the host is free
— each in the incident's thread, and the list on the message rewritten as groups join and counts
grow. A service over its cap of new analyses: a summary of what waits, posted at once, every
analysis in its thread."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from shared.core import keys
from shared.core.pipeline import sender_app
from shared.core.settings import Settings
from shared.devtools import outage
from shared.devtools.simulators.slack import SlackSimulator
from shared.groups.incidents import incident_of, load
from shared.groups.submit import intake_for
from shared.index.reindex import index_repository
from shared.intake.events import parse_event
from shared.intake.fingerprint import fingerprint
from shared.notify.message import INCIDENT_BLOCK_ID
from shared.stack.children import wait_until
from shared.stack.localstack import LocalStack
from tests.conftest import DATA, INCIDENTS_ON, SAMPLE_SERVICE

pytestmark = pytest.mark.integration

CAP = int(INCIDENTS_ON["TRACEHOUND_MAX_NEW_GROUPS"])  # new analyses per service and window


def _settings(stack: LocalStack) -> Settings:
    """The intake's settings as the stack's workers have them."""
    return Settings(
        redis_url=stack.env["TRACEHOUND_REDIS_URL"],
        incident_settle=float(stack.env["TRACEHOUND_INCIDENT_SETTLE"]),
        max_new_groups=int(stack.env["TRACEHOUND_MAX_NEW_GROUPS"]),
    )


@pytest.fixture
def indexed(stack: LocalStack) -> Iterator[tuple[Settings, Celery]]:
    """The intake's settings and a sender app, the sample service indexed."""
    settings = _settings(stack)
    app = sender_app(settings)
    index_repository(app, SAMPLE_SERVICE, "sample", max_bytes=1_000_000, timeout=120)
    yield settings, app
    app.close()


def _analyses(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Analysis messages (a header block), not trace replies or count notes."""
    return [m for m in messages if any(b.get("type") == "header" for b in m.get("blocks") or [])]


def test_an_outage_is_one_message_with_every_group_analysed_in_its_thread(
    indexed: tuple[Settings, Celery], slack: SlackSimulator
) -> None:
    """(``slack``: the session's Slack, emptied: an earlier test's OperationalError message
    must not read as this incident's.)"""
    settings, app = indexed
    storm = list(outage.events(2, 3, 50, repo="sample"))
    events, later = storm[:40], storm[40:]
    counts = Counter(fingerprint(e).value for e in events)
    intake = intake_for(settings, app)
    # One batch: every count is in before the incident's settle starts, however loaded the
    # machine (in batches, a slow test process let the settle end on partial counts).
    intake.submit_many(events)
    r = intake.groups.r
    incident = incident_of(r, fingerprint(events[0]).value)
    assert incident is not None

    def top_level() -> list[dict[str, Any]]:
        return [
            m
            for m in slack.messages
            if not m.get("thread_ts") and "OperationalError" in json.dumps(m.get("blocks"))
        ]

    def thread(ts: str) -> list[dict[str, Any]]:
        return [m for m in slack.messages if m.get("thread_ts") == ts]

    def done() -> bool:
        top = top_level()
        return len(top) == 1 and len(_analyses(thread(top[0]["ts"]))) == len(counts) - 1

    wait_until(done, 120, "the incident's message and every other group's analysis in its thread")
    time.sleep(2)  # nothing more comes: no second top-level message, no analysis twice
    [top] = top_level()
    assert len(_analyses(thread(top["ts"]))) == len(counts) - 1
    assert r.zcard(keys.DEFERRED) == 0

    # The list on the message names all six groups and their 40 events once they have joined.
    def listed() -> str:
        [message] = top_level()
        found = [b for b in message["blocks"] if b.get("block_id") == INCIDENT_BLOCK_ID]
        return found[0]["text"]["text"] if found else ""

    wait_until(lambda: "6 error groups, 2 services, 40 events" in listed(), 60, "the list")
    inc = load(r, incident)
    assert inc is not None and inc.msg_ts == top["ts"] and inc.events == 40
    # The incident's message is its most frequent group's analysis, not its first group's.
    assert inc.poster is not None and counts[inc.poster] == max(counts.values())

    # More of the same outage after the message is out: its list is rewritten, not reposted.
    intake.submit_many(later)
    wait_until(lambda: "6 error groups, 2 services, 50 events" in listed(), 60, "the new count")
    assert len(top_level()) == 1


def test_groups_over_the_cap_are_summed_up_at_once_and_analysed_in_its_thread(
    indexed: tuple[Settings, Celery], slack: SlackSimulator
) -> None:
    settings, app = indexed
    kinds = [  # five unrelated errors, each its own root cause, the later ones more frequent
        (DATA / "sample-error.txt").read_text().replace("ZeroDivisionError", f"Kind{n}Error")
        for n in range(CAP + 2)
    ]
    events = [
        parse_event(k, service="busy", repo="sample")
        for k in kinds
        for _ in kinds[: kinds.index(k) + 1]
    ]
    fps = [fingerprint(parse_event(k, service="busy", repo="sample")).value for k in kinds]
    intake = intake_for(settings, app)
    intake.submit_many(events)
    r = intake.groups.r
    batch = incident_of(r, fps[CAP])
    assert batch is not None and incident_of(r, fps[CAP + 1]) == batch  # the two over the cap

    def summary() -> dict[str, Any] | None:
        found = [
            m for m in slack.messages if not m.get("thread_ts") and "over the cap" in m["text"]
        ]
        return found[-1] if found else None

    # The summary is out before the two groups over the cap are analysed.
    wait_until(lambda: summary() is not None, 60, "the cap summary")
    first = summary()
    assert first is not None and "2 new error groups from `busy` over the cap of 3" in first["text"]
    versions = [*first["history"], first]
    assert "2 still wait for analysis" in json.dumps(versions[0]["blocks"])

    def thread() -> list[dict[str, Any]]:
        return _analyses([m for m in slack.messages if m.get("thread_ts") == first["ts"]])

    wait_until(lambda: len(thread()) == 2, 120, "both analyses in the summary's thread")
    wait_until(lambda: "All analysed" in json.dumps(summary()), 60, "the summary rewritten")
    assert len([m for m in slack.messages if "over the cap" in m.get("text", "")]) == 1
    top = _analyses(
        [m for m in slack.messages if not m.get("thread_ts") and "Kind" in json.dumps(m)]
    )
    assert len(top) == CAP  # the three under the cap have messages of their own
