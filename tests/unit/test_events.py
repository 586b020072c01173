"""Unit tests of the one event model: trace text, log lines and JSON records to an ErrorEvent."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.core.domain import ErrorEvent, _flattened, one_line
from shared.core.errors import PermanentError
from shared.intake.events import Ignored, from_input, from_record, parse_event

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
    event = parse_event(PY_TRACE, service="checkout", repo=None)
    assert event.exception_type == "ZeroDivisionError"
    assert event.message == "division by zero"
    assert "shop/pricing.py" in event.stacktrace
    assert (event.service, event.repo) == ("checkout", "checkout")


def test_java_trace_reports_the_thrown_exception_and_keeps_its_cause_in_the_trace() -> None:
    event = parse_event(JAVA_TRACE, service="orders", repo="shop")
    assert event.exception_type == "java.lang.RuntimeException"
    assert event.message == "order 17 failed"
    assert "Caused by: java.lang.IllegalStateException: inventory missing" in event.stacktrace
    assert event.repo == "shop"


def test_windows_line_endings_are_normalised() -> None:
    event = parse_event(PY_TRACE.replace("\n", "\r\n"), service="checkout", repo=None)
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
    event = parse_event(json.dumps(record), service=None, repo=None)
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
    event = parse_event(json.dumps(record), service=None, repo=None)
    assert (event.message, event.exception_type) == ("pricing failed", "PricingError")
    assert (event.repo, event.level, event.id) == ("shop", "WARNING", "evt-1")


def test_json_event_takes_the_service_from_the_command_line_when_it_has_none() -> None:
    event = parse_event('{"message": "boom"}', service="checkout", repo=None)
    assert (event.service, event.message) == ("checkout", "boom")


def test_json_event_with_neither_message_nor_stack_is_refused() -> None:
    with pytest.raises(PermanentError, match="neither 'message' nor a stack"):
        parse_event('{"service": "checkout", "level": "error"}', service=None, repo=None)


def test_json_event_without_any_service_is_refused() -> None:
    with pytest.raises(PermanentError, match="service"):
        parse_event('{"message": "boom"}', service=None, repo=None)


def test_raw_text_without_a_service_is_refused() -> None:
    with pytest.raises(PermanentError, match="--service"):
        parse_event(PY_TRACE, service=None, repo=None)


def test_text_that_is_not_a_trace_is_kept_as_the_message() -> None:
    event = parse_event("disk almost full on /var\n", service="batch", repo=None)
    assert event.message == "disk almost full on /var"
    assert event.exception_type is None
    assert event.stacktrace == ""


def test_empty_input_is_refused_with_a_clear_error() -> None:
    with pytest.raises(PermanentError, match="empty input"):
        parse_event("  \n", service="batch", repo=None)


def test_a_log_line_below_error_is_not_analyzed() -> None:
    with pytest.raises(PermanentError, match="level INFO is not an error"):
        parse_event("2026-11-30 10:00:00 INFO cache warmed", service="batch", repo=None)
    with pytest.raises(PermanentError, match="level INFO is not an error"):
        parse_event('{"level": 30, "msg": "listening"}', service="batch", repo=None)


def test_malformed_json_starting_with_a_brace_is_treated_as_text() -> None:
    line = '{"service": "checkout", "message": truncated'
    event = parse_event(line, service="checkout", repo=None)
    assert event.message == line


def test_five_megabyte_trace_is_trimmed_keeping_head_and_the_exception_line() -> None:
    head = "Traceback (most recent call last):"
    frames = '  File "/app/shop/deep.py", line 7, in recurse\n    return recurse(n - 1)\n' * 70_000
    tail = "RecursionError: maximum recursion depth exceeded"
    trace = f"{head}\n{frames}{tail}\n"
    assert len(trace.encode()) > 5_000_000
    event = parse_event(trace, service="checkout", repo=None, max_bytes=64_000)
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
    event = parse_event(json.dumps(record), service=None, repo=None, max_bytes=10_000)
    assert len(event.stacktrace.encode()) <= 10_100
    assert event.stacktrace.endswith("ValueError: last words")


def test_trimming_does_not_break_multibyte_characters() -> None:
    trace = "Traceback\n" + "사용자 " * 500_000 + "\nValueError: 잘못된 값"
    event = parse_event(trace, service="checkout", repo=None, max_bytes=10_001)
    event.stacktrace.encode("utf-8")  # no lone surrogates or broken sequences
    assert "\ufffd" not in event.stacktrace
    assert event.message == "잘못된 값"


# ------------------------------------------------------------------ levels and origins


@pytest.mark.parametrize(
    ("record", "level"),
    [
        ({"level": 50, "msg": "x"}, "ERROR"),  # pino / bunyan
        ({"level": 60, "msg": "x"}, "FATAL"),
        ({"level": "50", "msg": "x"}, "ERROR"),  # a shipper that turned it into a string
        ({"severity": 3, "msg": "x"}, "ERROR"),  # syslog err
        ({"severity": 2, "msg": "x"}, "CRITICAL"),
        ({"severity_number": 17, "body": "x", "msg": "x"}, "ERROR"),  # OpenTelemetry
        ({"severity_number": 21, "msg": "x"}, "FATAL"),
    ],
)
def test_numeric_levels_map_to_names(record: dict[str, object], level: str) -> None:
    event = from_record(record, origin="log", service="s", repo=None)
    assert isinstance(event, ErrorEvent) and event.level == level


@pytest.mark.parametrize(
    "record",
    [{"level": 30, "msg": "x"}, {"level": 40, "msg": "x"}, {"severity": 6, "msg": "x"}],
    ids=["pino-info", "pino-warn", "syslog-info"],
)
def test_numeric_levels_below_error_are_ignored_by_every_origin(record: dict[str, object]) -> None:
    for origin in ("log", "sent"):
        found = from_record(record, origin=origin, service="s", repo=None)  # type: ignore[arg-type]
        assert isinstance(found, Ignored) and "is not an error" in found.reason


def test_a_record_without_any_level_is_an_error_only_when_sent_on_purpose() -> None:
    record = {"message": "payment failed"}
    assert isinstance(from_record(record, origin="sent", service="s", repo=None), ErrorEvent)
    assert isinstance(from_record(record, origin="log", service="s", repo=None), Ignored)


def test_the_configured_service_wins_over_the_records_own() -> None:
    record = {"level": "error", "message": "x", "service": "payments", "repo": "pay"}
    configured = from_record(record, origin="sent", service="shop", repo=None)
    own = from_record(record, origin="sent", service=None, repo=None)
    assert isinstance(configured, ErrorEvent) and isinstance(own, ErrorEvent)
    assert (configured.service, own.service, own.repo) == ("shop", "payments", "pay")


def test_a_shippers_raw_log_line_is_read_as_the_tailer_reads_it() -> None:
    line = "2026-11-30 10:00:00,123 ERROR shop.payments payment failed for order 42"
    sent = from_record({"message": line, "id": "e-1"}, origin="sent", service="s", repo=None)
    tailed = from_input(line, origin="log", service="s", repo=None)
    assert isinstance(sent, ErrorEvent) and isinstance(tailed, ErrorEvent)
    assert sent.message == tailed.message == "shop.payments payment failed for order 42"
    assert sent.id == "e-1"
    info = from_record({"message": line.replace("ERROR", "INFO")}, origin="sent", service="s",
                       repo=None)  # fmt: skip
    assert isinstance(info, Ignored)


def test_a_sentence_with_an_upper_case_level_word_is_not_a_raw_log_line() -> None:
    event = from_record({"message": "retry failed: ERROR 7 from bank"}, origin="sent",
                        service="s", repo=None)  # fmt: skip
    assert isinstance(event, ErrorEvent) and event.message == "retry failed: ERROR 7 from bank"


def test_an_unreadable_timestamp_is_kept_as_an_attribute() -> None:
    record = {"level": "error", "message": "x", "timestamp": "yesterday-ish"}
    event = from_record(record, origin="sent", service="s", repo=None)
    assert isinstance(event, ErrorEvent)
    assert event.attributes["timestamp"] == "yesterday-ish"


def test_logging_asctime_and_epoch_milliseconds_are_read() -> None:
    a = from_record({"levelname": "ERROR", "message": "x", "asctime": "2026-11-30 10:00:00,250"},
                    origin="log", service="s", repo=None)  # fmt: skip
    b = from_record({"level": 50, "msg": "x", "time": 1796032800250}, origin="log", service="s",
                    repo=None)  # fmt: skip
    assert isinstance(a, ErrorEvent) and isinstance(b, ErrorEvent)
    assert a.timestamp.isoformat() == "2026-11-30T10:00:00.250000+00:00"
    assert b.timestamp.isoformat() == "2026-11-30T10:00:00.250000+00:00"


def test_loguru_serialized_records_give_their_level_type_and_traceback() -> None:
    text = "2026-11-30 10:00:00 | ERROR | app:f:3 - boom\n" + PY_TRACE
    record = {
        "text": text,
        "record": {
            "level": {"name": "ERROR", "no": 40},
            "message": "boom",
            "exception": {"type": "ZeroDivisionError", "value": "division by zero"},
            "time": {"timestamp": 1796032800.0},
        },
    }
    event = from_record(record, origin="log", service="s", repo=None)
    assert isinstance(event, ErrorEvent)
    assert (event.message, event.exception_type, event.level) == (
        "boom",
        "ZeroDivisionError",
        "ERROR",
    )
    assert "shop/pricing.py" in event.stacktrace


@pytest.mark.parametrize(
    ("text", "exc_type", "message"),
    [
        (
            "thread 'main' (4242) panicked at src/orders.rs:7:24:\nquantity must be a number\n"
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
            "panic",
            "quantity must be a number",
        ),
        (
            "[30-Nov-2026 10:00:05 UTC] PHP Fatal error:  Uncaught PDOException: refused in "
            "/app/Db.php:22\nStack trace:\n#0 {main}\n\nNext App\\Orders\\StorageException: "
            "could not load order 42 in /app/Repo.php:19\nStack trace:\n#0 {main}\n  thrown in "
            "/app/Repo.php on line 19",
            "App\\Orders\\StorageException",
            "could not load order 42",
        ),
        (
            "Unhandled exception. System.InvalidOperationException: Order 42 failed.\n"
            " ---> System.NullReferenceException: Object reference not set.\n"
            "   at Shop.Orders.Place() in /src/Orders.cs:line 17",
            "System.InvalidOperationException",
            "Order 42 failed.",
        ),
        (
            "Error: could not load order 42\n    at load (/app/o.js:15:11) {\n"
            "  [cause]: TypeError: Cannot read properties of undefined (reading 'id')\n"
            "      at customer (/app/o.js:7:25)\n}",
            "Error",
            "could not load order 42",
        ),
    ],
    ids=["rust", "php-next", "dotnet-inner", "node-cause"],
)
def test_each_language_names_the_thrown_exception(text: str, exc_type: str, message: str) -> None:
    event = parse_event(text, service="s", repo=None)
    assert (event.exception_type, event.message) == (exc_type, message)
    assert event.stacktrace


def test_a_lone_surrogate_from_a_json_escape_becomes_a_replacement_that_can_be_queued() -> None:
    # "\ud800" is valid JSON text; json.loads gives a str that UTF-8 cannot encode, and the
    # event could then be neither queued nor stored (found by benchmarks/fuzz_ingest.py).
    record = json.loads(
        '{"level": "error", "message": "bad \\ud800 byte", "service": "api\\udc00",'
        ' "attributes": {"k\\ud800": ["\\udfff"]}}'
    )
    event = from_record(record, origin="sent", service=None, repo=None)
    assert isinstance(event, ErrorEvent)
    queued = json.dumps(event.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")
    assert b"bad ? byte" in queued and b"api?" in queued and b'"k?": ["?"]' in queued


# Names from outside: spaces, line breaks, control and separator characters, long runs.
_NAME_CHARS = st.sampled_from(
    [*"ab Z9-_.:/", "  ", "\t", "\n", "\r", "\x00", "\x1f", "\x7f", "\x85", "\xa0",
     "\u2028", "\u2029", "\u3000", "\u200b", "\u00e9", "\ud800", "\U0001f600"]
)  # fmt: skip


@settings(max_examples=2000, deadline=None)
@given(st.lists(_NAME_CHARS, max_size=60).map("".join), st.integers(min_value=1, max_value=40))
def test_a_name_already_on_one_line_is_kept_as_the_general_path_would_make_it(
    value: str, limit: int
) -> None:
    """one_line's shortcut for names that need nothing gives what the general path gives."""
    assert one_line(value, limit) == _flattened(value, limit)
