"""Unit tests of turning raw error text or a JSON event into an ErrorEvent."""

from __future__ import annotations

import json

import pytest

from shared.core.errors import PermanentError
from shared.intake.events import parse_error_input

PY_TRACE = """Traceback (most recent call last):
  File "/app/shop/orders.py", line 42, in place_order
    total = average_price(items)
  File "/app/shop/pricing.py", line 10, in average_price
    return sum(i.price for i in items) / len(items)
ZeroDivisionError: division by zero
"""

JAVA_TRACE = """Exception in thread "main" java.lang.RuntimeException: order 17 failed
\tat com.shop.OrderService.place(OrderService.java:42)
\tat com.shop.Main.main(Main.java:10)
Caused by: java.lang.IllegalStateException: inventory missing for sku 12
\tat com.shop.Inventory.reserve(Inventory.java:88)
\t... 2 more
"""


def test_python_traceback_gives_type_message_and_the_whole_trace() -> None:
    event = parse_error_input(PY_TRACE, service="checkout", repo=None)
    assert event.exception_type == "ZeroDivisionError"
    assert event.message == "division by zero"
    assert "shop/pricing.py" in event.stacktrace
    assert (event.service, event.repo) == ("checkout", "checkout")


def test_java_trace_reports_the_root_cause_and_keeps_the_outer_exception() -> None:
    event = parse_error_input(JAVA_TRACE, service="orders", repo="shop")
    assert event.exception_type == "java.lang.IllegalStateException"
    assert event.message == "inventory missing for sku 12"
    assert "java.lang.RuntimeException: order 17 failed" in event.stacktrace
    assert event.repo == "shop"


def test_windows_line_endings_are_normalised() -> None:
    event = parse_error_input(PY_TRACE.replace("\n", "\r\n"), service="checkout", repo=None)
    assert "\r" not in event.stacktrace
    assert event.exception_type == "ZeroDivisionError"


@pytest.mark.parametrize(
    "record",
    [
        {"service": "checkout", "stack": PY_TRACE},
        {"service": "checkout", "stack_trace": PY_TRACE},
        {"service": "checkout", "error": {"stack": PY_TRACE}},
    ],
    ids=["stack", "stack_trace", "error.stack"],
)
def test_json_event_stack_shapes_give_type_and_message(record: dict[str, object]) -> None:
    event = parse_error_input(json.dumps(record), service=None, repo=None)
    assert event.exception_type == "ZeroDivisionError"
    assert event.message == "division by zero"
    assert event.stacktrace.strip() == PY_TRACE.strip()
    assert event.service == "checkout"


def test_json_event_message_and_type_fields_win_over_the_parsed_trace() -> None:
    record = {
        "service": "checkout",
        "repo": "shop",
        "message": "pricing failed",
        "error": {"type": "PricingError", "stack": PY_TRACE},
        "level": "warning",
        "id": "evt-1",
    }
    event = parse_error_input(json.dumps(record), service=None, repo=None)
    assert (event.message, event.exception_type) == ("pricing failed", "PricingError")
    assert (event.repo, event.level, event.id) == ("shop", "WARNING", "evt-1")


def test_json_event_takes_the_service_from_the_command_line_when_it_has_none() -> None:
    event = parse_error_input('{"message": "boom"}', service="checkout", repo=None)
    assert (event.service, event.message) == ("checkout", "boom")


def test_json_event_with_neither_message_nor_stack_is_refused() -> None:
    with pytest.raises(PermanentError, match="neither 'message' nor a stack"):
        parse_error_input('{"service": "checkout", "level": "error"}', service=None, repo=None)


def test_json_event_without_any_service_is_refused() -> None:
    with pytest.raises(PermanentError, match="service"):
        parse_error_input('{"message": "boom"}', service=None, repo=None)


def test_raw_text_without_a_service_is_refused() -> None:
    with pytest.raises(PermanentError, match="--service"):
        parse_error_input(PY_TRACE, service=None, repo=None)


def test_text_that_is_not_a_trace_is_kept_as_the_message() -> None:
    event = parse_error_input("disk almost full on /var\n", service="batch", repo=None)
    assert event.message == "disk almost full on /var"
    assert event.exception_type is None
    assert event.stacktrace == ""


def test_empty_text_gives_an_empty_event() -> None:
    event = parse_error_input("", service="batch", repo=None)
    assert (event.message, event.stacktrace, event.exception_type) == ("", "", None)


def test_malformed_json_starting_with_a_brace_is_treated_as_text() -> None:
    line = '{"service": "checkout", "message": truncated'
    event = parse_error_input(line, service="checkout", repo=None)
    assert event.message == line


def test_five_megabyte_trace_is_trimmed_keeping_head_and_the_exception_line() -> None:
    head = "Traceback (most recent call last):"
    frames = '  File "/app/shop/deep.py", line 7, in recurse\n    return recurse(n - 1)\n' * 70_000
    tail = "RecursionError: maximum recursion depth exceeded"
    trace = f"{head}\n{frames}{tail}\n"
    assert len(trace.encode()) > 5_000_000
    event = parse_error_input(trace, service="checkout", repo=None, max_bytes=64_000)
    marker_room = 100
    assert len(event.stacktrace.encode()) <= 64_000 + marker_room
    assert "bytes trimmed by tracehound" in event.stacktrace
    assert event.stacktrace.startswith(head)
    assert event.stacktrace.rstrip().endswith(tail)
    assert event.exception_type == "RecursionError"
    assert event.message == "maximum recursion depth exceeded"


def test_huge_json_stack_is_trimmed_too() -> None:
    stack = "x" * 1_000_000 + "\nValueError: last words"
    record = {"service": "checkout", "stack": stack}
    event = parse_error_input(json.dumps(record), service=None, repo=None, max_bytes=10_000)
    assert len(event.stacktrace.encode()) <= 10_100
    assert event.stacktrace.endswith("ValueError: last words")


def test_trimming_does_not_break_multibyte_characters() -> None:
    trace = "Traceback\n" + "사용자 " * 500_000 + "\nValueError: 잘못된 값"
    event = parse_error_input(trace, service="checkout", repo=None, max_bytes=10_001)
    event.stacktrace.encode("utf-8")  # no lone surrogates or broken sequences
    assert "\ufffd" not in event.stacktrace
    assert event.message == "잘못된 값"
