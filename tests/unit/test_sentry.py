"""Unit tests of the Sentry payload reader: envelopes, and exception chains rendered as the
trace text the rest of the pipeline parses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.core.domain import ErrorEvent
from shared.intake.batch import sentry_batch
from shared.intake.events import Ignored
from shared.intake.exceptions import reported
from shared.intake.sentry import (
    EnvelopeError,
    TooManyItems,
    auth_key,
    event_from_sentry,
    parse_envelope,
    project_target,
    render_trace,
)
from shared.intake.trace import read_trace
from shared.intake.traces import parse_frames


def frame(function: str, lineno: int, **kw: Any) -> dict[str, Any]:
    return {"function": function, "lineno": lineno, "in_app": True, **kw}


JAVA_CHAIN = [  # root cause first, as Sentry orders exception.values
    {
        "type": "NumberFormatException",
        "module": "java.lang",
        "value": 'For input string: "two"',
        "stacktrace": {
            "frames": [
                frame("place", 40, module="com.shop.OrderService", filename="OrderService.java"),
                frame("parse", 12, module="com.shop.Quantity", filename="Quantity.java"),
            ]
        },
    },
    {
        "type": "CheckoutException",
        "module": "com.shop",
        "value": "cannot place order",
        "stacktrace": {
            "frames": [
                frame("main", 5, module="com.shop.App", filename="App.java"),
                frame("place", 44, module="com.shop.OrderService", filename="OrderService.java"),
            ]
        },
    },
]


def test_a_java_chain_renders_as_java_prints_it_and_parses_back() -> None:
    text = render_trace(JAVA_CHAIN, "java")
    assert text.splitlines()[0] == "com.shop.CheckoutException: cannot place order"
    assert "\tat com.shop.OrderService.place(OrderService.java:44)" in text
    assert 'Caused by: java.lang.NumberFormatException: For input string: "two"' in text
    found = reported(text)
    assert found is not None and found.type == "com.shop.CheckoutException"
    assert read_trace(text).chain() == (
        "com.shop.CheckoutException",
        "java.lang.NumberFormatException",
    )
    parsed = [(f.module, f.function, f.line) for f in parse_frames(text)]
    assert ("com.shop.Quantity", "parse", 12) in parsed
    assert ("com.shop.OrderService", "place", 44) in parsed


def test_a_python_context_chain_says_during_handling() -> None:
    cause = {
        "type": "KeyError",
        "value": "'tax'",
        "mechanism": {"type": "chained", "source": "__context__"},
        "stacktrace": {"frames": [frame("total", 3, abs_path="/app/bill.py")]},
    }
    outer = {"type": "RuntimeError", "value": "billing failed", "stacktrace": {"frames": []}}
    text = render_trace([cause, outer], "python")
    assert "During handling of the above exception, another exception occurred:" in text
    assert text.endswith("RuntimeError: billing failed")


def test_a_message_without_exception_is_an_event_without_a_trace() -> None:
    found = event_from_sentry(
        {"level": "error", "logentry": {"message": "payment %s failed", "params": [7]}},
        service="shop-api",
        repo="shop",
        project="1",
        max_bytes=64_000,
        event_id="e" * 32,
    )
    assert isinstance(found, ErrorEvent)
    assert found.message == "payment 7 failed" and found.stacktrace == ""
    assert found.id == "e" * 32


def test_a_warning_without_a_stack_is_ignored() -> None:
    found = event_from_sentry(
        {"level": "warning", "message": "slow"},
        service="s",
        repo="s",
        project="1",
        max_bytes=64_000,
    )
    assert isinstance(found, Ignored) and "WARN" in found.reason


def test_envelope_items_with_length_may_hold_newlines() -> None:
    attachment = b"line one\nline two\n"
    body = (
        b'{"event_id":"abc"}\n'
        + b'{"type":"attachment","length":%d}\n' % len(attachment)
        + attachment
        + b'\n{"type":"event"}\n{"message":"x"}\n'
    )
    env = parse_envelope(body, max_items=10)
    assert env.event_id == "abc"
    assert [(i.type, i.payload) for i in env.items] == [
        ("attachment", attachment),
        ("event", b'{"message":"x"}'),
    ]


@pytest.mark.parametrize(
    "body",
    [b"[1]\n", b'{}\n{"length":3}\nabc', b'{}\n{"type":"event","length":-1}\n', b""],
    ids=["header-not-object", "item-without-type", "negative-length", "empty"],
)
def test_malformed_envelopes_are_refused(body: bytes) -> None:
    with pytest.raises(EnvelopeError):
        parse_envelope(body, max_items=10)


def test_more_items_than_the_limit_are_refused() -> None:
    body = b"{}\n" + b'{"type":"session"}\n{}\n' * 3
    with pytest.raises(TooManyItems):
        parse_envelope(body, max_items=2)


def test_auth_header_and_project_mapping() -> None:
    assert auth_key("Sentry sentry_version=7, sentry_client=x/1, sentry_key=abc") == "abc"
    assert auth_key("sentry_key=abc,sentry_secret=s") == "abc"
    assert auth_key("Sentry sentry_version=7") == ""
    assert project_target({"1": "shop-api:shop"}, "1") == ("shop-api", "shop")
    assert project_target({"1": "shop-api"}, "1") == ("shop-api", "shop-api")
    assert project_target({}, "42") == ("42", "42")


def test_a_queued_sentry_request_becomes_events_with_the_ids_the_sdk_gave() -> None:
    """What the intake worker makes of a Sentry request ingest queued: each event item with
    the id the SDK gave it (a retry repeats it), and a reason for each item it cannot use."""
    error = {
        "event_id": "a" * 32,
        "level": "error",
        "exception": {"values": [{"type": "KeyError", "value": "'tax'"}]},
    }
    warning = {"event_id": "b" * 32, "level": "warning", "message": "slow checkout"}
    lines = [
        json.dumps(error).encode(),
        b"[1, 2]",
        b"{not json",
        json.dumps(warning).encode(),
    ]
    batch = sentry_batch(
        lines, project="7", service="shop-api", repo="shop", max_trace_bytes=64_000
    )
    [event] = batch.accepted
    assert event.id == "a" * 32 and event.service == "shop-api" and event.repo == "shop"
    assert event.exception_type == "KeyError" and event.attributes["sentry"]["project"] == "7"
    assert [r["index"] for r in batch.rejected] == [1, 2]
    assert "JSON object" in batch.rejected[0]["error"]
    assert [i["index"] for i in batch.ignored] == [3]
