"""The root cause an incident is keyed on, and the incident's list on its message."""

from __future__ import annotations

import json
import random

from shared.devtools.outage import Endpoint, trace
from shared.groups.incidents import Incident, Member, cause_of
from shared.intake.events import parse_event
from shared.notify.message import INCIDENT_BLOCK_ID, cap_summary, with_incident

JAVA = """\
org.springframework.dao.DataAccessResourceFailureException: Unable to acquire JDBC Connection
\tat com.acme.orders.OrderRepository.find(OrderRepository.java:41)
\tat com.acme.orders.OrderController.get(OrderController.java:22)
Caused by: org.hibernate.exception.JDBCConnectionException: Unable to acquire JDBC Connection
\tat org.hibernate.Session.connection(Session.java:10)
Caused by: java.net.ConnectException: Connection refused (Connection refused) to 10.0.3.7:5432
\tat java.net.PlainSocketImpl.connect(Native Method)
"""


def test_the_cause_is_the_innermost_exception_across_stacks_and_outer_types() -> None:
    rng = random.Random(1)
    a = parse_event(
        trace(Endpoint("billing", "billing/api/invoices", "get_1"), rng),
        service="billing",
        repo="r",
    )
    b = parse_event(
        trace(Endpoint("shop", "shop/api/carts", "delete_9"), rng), service="shop", repo="r"
    )
    assert a.exception_type != b.exception_type or a.stacktrace != b.stacktrace
    cause = "psycopg2.OperationalError: could not connect to server: Connection refused"
    assert cause_of(a) == cause_of(b) == cause


def test_a_java_chain_is_keyed_on_its_last_caused_by_with_volatile_parts_normalized() -> None:
    one = parse_event(JAVA, service="orders", repo="r")
    two = parse_event(JAVA.replace("10.0.3.7:5432", "10.0.9.200:6432"), service="orders", repo="r")
    assert cause_of(one) == cause_of(two)
    assert (
        cause_of(one)
        == "java.net.ConnectException: Connection refused (Connection refused) to <ip>"
    )


def test_a_cause_of_placeholders_only_joins_nothing() -> None:
    key_error = (
        "Traceback (most recent call last):\n  File \"/a.py\", line 1, in f\nKeyError: 'sku'\n"
    )
    assert cause_of(parse_event(key_error, service="shop", repo="r")) is None
    assert cause_of(parse_event("something bad happened", service="shop", repo="r")) is None


def _incident(*members: tuple[str, int]) -> Incident:
    return Incident(
        id="7",
        cause="psycopg2.OperationalError: could not connect to server",
        opened_at=0,
        poster="fp0",
        msg_channel="C1",
        msg_ts="1.0",
        members=tuple(Member(f"fp{i}", label, n) for i, (label, n) in enumerate(members)),
    )


HEADER = {"type": "header", "text": {"type": "plain_text", "text": "shop: OperationalError"}}
BODY = {"type": "section", "text": {"type": "mrkdwn", "text": "*Summary:* ..."}}


def test_the_list_goes_under_the_header_most_events_first_and_replaces_the_last_one() -> None:
    inc = _incident(("shop · OperationalError in api/orders:get", 900), ("billing · X", 40))
    blocks = with_incident([HEADER, BODY], inc)
    assert [b.get("block_id") for b in blocks] == [None, INCIDENT_BLOCK_ID, None]
    text = blocks[1]["text"]["text"]
    assert "2 error groups, 2 services, 940 events" in text
    assert text.index("900 times") < text.index("40 times")
    grown = _incident(("shop · OperationalError in api/orders:get", 950), ("billing · X", 41))
    again = with_incident(blocks, grown)
    assert len(again) == 3 and "991 events" in again[1]["text"]["text"]


def test_a_lone_group_keeps_its_message_and_a_long_list_is_summed_up() -> None:
    assert with_incident([HEADER, BODY], _incident(("shop · X", 3))) == [HEADER, BODY]
    many = _incident(*((f"svc-{i} · E", 100 - i) for i in range(25)))
    text = with_incident([HEADER, BODY], many)[1]["text"]["text"]
    assert text.count("\n• ") == 11  # ten groups by name, the rest in one line
    assert f"15 more groups, {sum(100 - i for i in range(10, 25))} events" in text


def test_labels_from_logs_cannot_mention_or_link() -> None:
    hostile = _incident(("<!channel> · <https://evil|click>", 5), ("svc · *bold* & <@U1>", 2))
    text = json.dumps(with_incident([HEADER, BODY], hostile))
    assert "<!channel>" not in text and "<@U1>" not in text and "<https://evil" not in text
    assert "&lt;!channel&gt;" in text


def _cap_batch(service: str, *members: tuple[int, bool]) -> Incident:
    return Incident(
        id="8", cause=service, opened_at=0, poster=None, msg_channel=None, msg_ts=None,
        members=tuple(
            Member(f"fp{i}", f"{service} · Kind{i}Error", n, waiting)
            for i, (n, waiting) in enumerate(members)
        ),
        kind="cap", cap=20, cap_window_s=600,
    )  # fmt: skip


def test_a_cap_summary_says_how_many_groups_wait_and_then_that_all_are_analysed() -> None:
    text, blocks = cap_summary(_cap_batch("checkout", (30, True), (7, False), (2, True)))
    assert text == (
        "3 new error groups from `checkout` over the cap of 20 new analyses per 10 min, 39 events"
    )
    listed = blocks[0]["text"]["text"]
    assert "2 still wait for analysis" in listed
    assert listed.index("30 times") < listed.index("7 times") < listed.index("2 times")
    _, done = cap_summary(_cap_batch("checkout", (30, False), (7, False)))
    assert "All analysed" in done[0]["text"]["text"]
    assert "Incident" not in listed  # not one root cause: unrelated groups over the cap


def test_a_cap_summary_escapes_the_service_name_from_logs() -> None:
    text, blocks = cap_summary(_cap_batch("<!here> svc", (1, True)))
    assert "<!here>" not in text + json.dumps(blocks) and "&lt;!here&gt;" in text
