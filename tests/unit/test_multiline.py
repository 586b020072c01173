"""Unit tests of grouping tailed log lines into records and turning error records into events."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest

from producers.multiline import Grouper, Record
from shared.core.domain import ErrorEvent
from shared.intake.events import from_input
from shared.intake.levels import json_level, text_level

TRACES = Path(__file__).parents[1] / "data" / "traces"


def feed_bytes(data: bytes, grouper: Grouper | None = None, step: float = 0.001) -> list[Record]:
    """Feed a file's lines as the tailer does (exact byte offsets, a clock that moves a little)."""
    grouper = grouper or Grouper()
    records: list[Record] = []
    pos, now = 0, 0.0
    for raw in data.splitlines(keepends=True):
        line = raw.rstrip(b"\n").decode("utf-8", errors="replace")
        records += grouper.feed(line, pos, pos + len(raw), now)
        pos += len(raw)
        now += step
    return records + grouper.flush(now, force=True)


def group_file(name: str) -> tuple[list[Record], bytes]:
    data = (TRACES / name).read_bytes()
    return feed_bytes(data), data


def feed_lines(
    grouper: Grouper, lines: list[str], *, pos: int = 0, now: float = 0.0
) -> list[Record]:
    out: list[Record] = []
    for line in lines:
        size = len(line.encode()) + 1
        out += grouper.feed(line, pos, pos + size, now)
        pos += size
    return out


def to_event(record: Record, *, service: str, repo: str) -> ErrorEvent | None:
    """What the tailer does with a record: the one event model, for a record read from a log."""
    found = from_input(record.text, origin="log", service=service, repo=repo)
    return found if isinstance(found, ErrorEvent) else None


def events(records: list[Record]) -> list[tuple[Record, ErrorEvent]]:
    pairs = [(r, to_event(r, service="shop-api", repo="shop")) for r in records]
    return [(r, e) for r, e in pairs if e is not None]


# (records in the file, [(first line starts with, last line ends with, exception type, message)])
Expected = tuple[int, list[tuple[str, str, str | None, str]]]
EXPECTED: dict[str, Expected] = {
    "python.log": (
        10,
        [
            (
                "2026-11-30 10:39:52,235 ERROR [billing] Unhandled exception while pricing order",
                "ZeroDivisionError: division by zero",
                "ZeroDivisionError",
                "division by zero",
            ),
            (  # "The above exception was the direct cause…": the outer (propagated) exception
                "2026-11-30 10:39:52,238 ERROR [billing] could not start billing run",
                "RuntimeError: billing config missing: /etc/billing/rates.json",
                "RuntimeError",
                "billing config missing: /etc/billing/rates.json",
            ),
            (  # "During handling…": the last raised, whatever its class is called
                "2026-11-30 10:39:52,238 ERROR [billing] charge failed for order 4713",
                "PaymentDeclined: card brand 'amex' not accepted",
                "PaymentDeclined",
                "card brand 'amex' not accepted",
            ),
            (
                "2026-11-30 10:39:52,239 ERROR [billing] order validation crashed",
                "    +------------------------------------",
                "ExceptionGroup",
                "order 4711 failed validation (3 sub-exceptions)",
            ),
        ],
    ),
    "java.log": (
        8,
        [
            (  # the thrown (outermost) exception; its "Caused by:" chain stays in the trace
                "2026-11-30 10:41:03.274 ERROR [http-nio-8080-exec-6] c.s.orders.OrderController",
                "\t\t... 9 more",
                "java.lang.RuntimeException",
                "order 17 failed",
            ),
            (
                "2026-11-30 10:41:03.685 ERROR [http-nio-8080-exec-4] c.s.orders.PriceClient",
                "at jdk.compiler/com.sun.tools.javac.launcher.Main.main(Main.java:132)",
                "java.lang.NullPointerException",
                'Cannot invoke "Object.toString()" because "<local1>" is null',
            ),
            (
                'Exception in thread "scheduler-1" java.lang.IllegalStateException',
                "\tat java.base/java.lang.Thread.run(Thread.java:840)",
                "java.lang.IllegalStateException",
                "scheduler stopped: queue closed",
            ),
        ],
    ),
    "kotlin.log": (
        6,
        [
            (
                "2026-11-30T10:45:17.013Z ERROR 1 --- [atcher-worker-2] c.s.orders.OrderSyncJob",
                "\tat com.shop.orders.OrderSyncJob$sync$2.invokeSuspend(OrderSyncJob.kt:38)",
                "kotlinx.coroutines.TimeoutCancellationException",
                "Timed out waiting for 5000 ms",
            ),
            (
                'Exception in thread "DefaultDispatcher-worker-1" java.lang.IllegalStateException',
                "StandaloneCoroutine{Cancelling}@5b6f7412, Dispatchers.Default]",
                "java.lang.IllegalStateException",
                "Order 42 has no lines",
            ),
        ],
    ),
    "node.log": (
        5,
        [
            (  # console.error(err) with a cause: the thrown error; "[cause]:" stays in the stack
                "2026-11-30T10:43:03.512Z error: request failed",
                "}",
                "Error",
                "price lookup failed for sku 12",
            ),
            (  # uncaught: "file:line", source, caret, blank, error, frames, blank, "Node.js v…"
                "/app/src/server.js:24",
                "Node.js v20.20.2",
                "TypeError",
                "Cannot read properties of undefined (reading 'id')",
            ),
        ],
    ),
    "go.log": (
        9,
        [
            (
                "panic: runtime error: index out of range [5] with length 3",
                "exit status 2",
                "panic",
                "runtime error: index out of range [5] with length 3",
            ),
            (
                "E1130 10:44:10.412309       1 reflector.go:147] failed to list *v1.ConfigMap",
                'cannot list resource "configmaps"',
                None,
                'failed to list *v1.ConfigMap: configmaps is forbidden: User "system:serviceaccount'
                ':shop:inventory-sync" cannot list resource "configmaps"',
            ),
            (
                "panic: runtime error: invalid memory address or nil pointer dereference",
                "\t/usr/local/go/src/net/http/server.go:3290 +0x4b4",
                "panic",
                "runtime error: invalid memory address or nil pointer dereference",
            ),
        ],
    ),
    "json.log": (
        14,
        [
            ('{"asctime": "2026-11-30 10:46:01,004"', "}", "ZeroDivisionError", "Unhandled excep"),
            (
                '{"@timestamp": "2026-11-30T10:46:02.274',
                "}",
                "java.lang.IllegalStateException",
                "order placem",
            ),
            ('{"level": 50, "time": 1795950363512', "}", "TypeError", "request failed"),
            ('{"level": "error", "message": "database unreachable"', "}", "Error", "database unr"),
            ('{"event": "payment capture failed"', "}", "payments.gateway.GatewayTimeout", "payme"),
            (
                '{"@timestamp": "2026-11-30T10:46:06.010Z"',
                "}",
                "java.net.SocketTimeoutException",
                "sync",
            ),
            (  # malformed (cut short) JSON: a text line whose level is error
                '{"level":"error","msg":"shutting down: disk full"',
                '"time":"2026-11-30T10:46:09Z"',
                None,
                '{"level":"error","msg":"shutting down: disk full"',
            ),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_fixture_yields_exactly_the_expected_records_and_error_events(name: str) -> None:
    records, _ = group_file(name)
    count, expected = EXPECTED[name]
    assert len(records) == count
    found = events(records)
    assert len(found) == len(expected)
    for (record, event), (first, last, exc_type, message) in zip(found, expected, strict=True):
        lines = record.text.split("\n")
        assert lines[0].startswith(first)
        assert lines[-1].endswith(last)
        assert event.exception_type == exc_type
        assert event.message.startswith(message)
        assert (event.service, event.repo) == ("shop-api", "shop")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_record_offsets_are_exact_byte_ranges_of_the_file(name: str) -> None:
    records, data = group_file(name)
    previous_end = 0
    for record in records:
        assert record.start >= previous_end
        assert (
            data[record.start : record.end].decode("utf-8", errors="replace") == record.text + "\n"
        )
        previous_end = record.end
    assert records[-1].end == len(data)


def test_python_chained_traceback_is_one_record_with_both_tracebacks() -> None:
    records, _ = group_file("python.log")
    chained = next(r for r in records if "The above exception was the direct cause" in r.text)
    event = to_event(chained, service="billing", repo="shop")
    assert event is not None
    assert "FileNotFoundError: [Errno 2] No such file or directory" in event.stacktrace
    assert event.stacktrace.endswith(
        "RuntimeError: billing config missing: /etc/billing/rates.json"
    )
    assert "\n\nThe above exception was the direct cause of the following exception:\n\n" in (
        chained.text
    )


def test_python_traceback_keeps_caret_and_tilde_marker_lines() -> None:
    records, _ = group_file("python.log")
    first = next(r for r in records if "ZeroDivisionError" in r.text)
    assert "           ~~~~~~~~~~~~^~~~~~~~~~~~~" in first.text.split("\n")
    assert "                               ^^^^^^^^^^^^^^^^^^^^^^^" in first.text.split("\n")


def test_go_panic_with_several_goroutines_is_one_record_across_blank_lines() -> None:
    records, _ = group_file("go.log")
    panic = next(r for r in records if r.text.startswith("panic: runtime error: index"))
    assert panic.text.count("\n\ngoroutine ") == 3  # 34 (running), 1 and 18, each after a blank
    assert "goroutine 34 [running]:" in panic.text
    event = to_event(panic, service="inventory", repo="inventory")
    assert event is not None and "created by main.main in goroutine 1" in event.stacktrace


def test_info_lines_and_info_json_give_no_event() -> None:
    grouper = Grouper()
    lines = [
        "2026-11-30 10:00:00,001 INFO [app] retry count for ERROR queue is 0",
        "no error found in 12 files",
        '{"level": "info", "msg": "ok", "error": null}',
        "{}",
        '{"level": 30, "msg": "request completed"}',
        "2026-11-30 10:00:00,002 WARNING [app] disk 91% full",
    ]
    records = feed_lines(grouper, lines) + grouper.flush(0, force=True)
    assert len(records) == len(lines)
    assert [to_event(r, service="s", repo="r") for r in records] == [None] * len(lines)


@pytest.mark.parametrize(
    "line",
    [
        "2026-11-30 10:00:00,123 ERROR [app] payment failed",
        "2026-11-30 10:00:00 [error] 1234#0: *1 payment failed (111: Connection refused)",
        'time=2026-11-30T10:00:00Z level=error msg="payment failed" order=17',
        "11-30 10:00:00.123 E/PaymentService( 1234): payment failed",
        "11-30 10:00:00.123  1234  1290 E PaymentService: payment failed",
        "E1130 10:00:00.123456       1 controller.go:114] payment failed",
        "2026-11-30T10:00:00.000Z error: payment failed",
        "[Sat Nov 30 10:00:00.123 2026] [php:error] [pid 42] payment failed",
        "2026-11-30 10:00:00 CRITICAL payment failed",
        "2026-11-30 10:00:00 severity=Fatal payment failed",
        "<3>ERR payment failed",
        "2026-11-30 10:00:00 SEVERE payment failed",
        "2026-11-30 10:00:00 [panic] payment failed",
        "ALERT payment failed",
        "[2026-11-30 10:00:00] production.EMERG: payment failed",
    ],
)
def test_plain_text_error_levels_become_events(line: str) -> None:
    [record] = feed_lines(g := Grouper(), [line]) + g.flush(0, force=True)
    event = to_event(record, service="s", repo="r")
    assert event is not None
    assert "payment failed" in event.message
    assert event.level in {"ERROR", "CRITICAL", "FATAL", "SEVERE", "PANIC", "ALERT", "EMERG"}


def test_single_line_message_drops_the_timestamp_and_level_so_recurrences_match() -> None:
    record = Record(
        text="2026-11-30 10:00:00,123 ERROR [app] payment failed", start=0, end=52, truncated=False
    )
    event = to_event(record, service="s", repo="r")
    assert event is not None and event.message == "[app] payment failed"


@pytest.mark.parametrize(
    ("record", "level"),
    [
        ({"levelname": "ERROR", "message": "x"}, "ERROR"),
        ({"severity": "CRITICAL", "message": "x"}, "CRITICAL"),
        ({"log.level": "error", "message": "x"}, "ERROR"),
        ({"log": {"level": "fatal"}, "message": "x"}, "FATAL"),
        ({"level": 50, "msg": "x"}, "ERROR"),  # pino / bunyan
        ({"level": 60, "msg": "x"}, "FATAL"),
        ({"level": 3, "short_message": "x", "message": "x"}, "ERROR"),  # GELF / syslog
        ({"@l": "Error", "@mt": "Payment {Id} failed", "Id": 9}, "ERROR"),  # Serilog
        ({"level": "err", "msg": "x"}, "ERROR"),
    ],
)
def test_json_error_levels_become_events(record: dict[str, object], level: str) -> None:
    assert json_level(record) == level
    text = json.dumps(record)
    event = to_event(Record(text, 0, len(text) + 1, False), service="s", repo="r")
    assert event is not None and event.level == level and event.message


def test_json_stack_fields_make_an_event_even_without_an_error_level() -> None:
    trace = "Traceback (most recent call last):\n  File \"/a.py\", line 1, in f\nKeyError: 'sku'"
    text = json.dumps({"level": "warning", "message": "cache miss exploded", "exc_info": trace})
    event = to_event(Record(text, 0, len(text) + 1, False), service="s", repo="r")
    assert event is not None
    assert (event.exception_type, event.message) == ("KeyError", "cache miss exploded")
    assert event.level == "WARNING"


def test_json_service_and_id_fields_do_not_override_the_tailers_configuration() -> None:
    text = json.dumps({"level": "error", "msg": "boom", "service": {"name": "x"}, "id": "req-1"})
    event = to_event(Record(text, 0, 1, False), service="orders", repo="shop")
    assert event is not None
    assert (event.service, event.repo) == ("orders", "shop")
    assert event.id != "req-1"  # the tailer derives ids from the file and offset


def test_unreadable_json_timestamp_is_dropped_not_fatal() -> None:
    text = json.dumps({"level": "error", "msg": "boom", "timestamp": "yesterday-ish"})
    event = to_event(Record(text, 0, 1, False), service="s", repo="r")
    assert event is not None and event.message == "boom"


def test_error_json_with_neither_message_nor_stack_keeps_the_raw_line_as_message() -> None:
    # Decision: an error-level line never vanishes; its raw text is the best message there is.
    text = '{"level": "error"}'
    event = to_event(Record(text, 0, len(text) + 1, False), service="s", repo="r")
    assert event is not None
    assert (event.message, event.level, event.stacktrace) == (text, "ERROR", "")
    assert to_event(Record("{}", 0, 3, False), service="s", repo="r") is None


def test_malformed_json_lines_are_grouped_as_text() -> None:
    records, _ = group_file("json.log")
    cut = next(r for r in records if r.text.startswith('{"level": "info", "msg": "cache warmed"'))
    assert cut.text == '{"level": "info", "msg": "cache warmed", "keys": 5120, '
    assert to_event(cut, service="s", repo="r") is None


def test_json_line_closes_a_pending_text_record_at_once() -> None:
    grouper = Grouper()
    out = feed_lines(grouper, ["Traceback (most recent call last):", '  File "/a.py", line 1'])
    assert out == []
    out = grouper.feed('{"level": "info", "msg": "next"}', 100, 133, 0.0)
    assert [r.text.split("\n")[0] for r in out] == [
        "Traceback (most recent call last):",
        '{"level": "info", "msg": "next"}',
    ]
    assert grouper.safe_offset() is None


def test_log_header_followed_by_traceback_is_one_record_but_two_tracebacks_are_two() -> None:
    grouper = Grouper()
    lines = [
        "2026-11-30 10:00:00,123 ERROR [app] Unhandled exception",
        "Traceback (most recent call last):",
        '  File "/app/a.py", line 3, in <module>',
        "ValueError: first",
        "Traceback (most recent call last):",
        '  File "/app/b.py", line 9, in <module>',
        "KeyError: 'second'",
        "",
        "2026-11-30 10:00:01,000 INFO [app] next",
    ]
    records = feed_lines(grouper, lines) + grouper.flush(0, force=True)
    assert [r.text.split("\n")[-1] for r in records] == [
        "ValueError: first",
        "KeyError: 'second'",  # the blank line after it belongs to no record
        "2026-11-30 10:00:01,000 INFO [app] next",
    ]
    assert records[0].text.startswith("2026-11-30 10:00:00,123 ERROR")


def test_windows_line_endings_are_not_kept_in_the_text() -> None:
    data = (TRACES / "java.log").read_bytes().replace(b"\n", b"\r\n")
    records = feed_bytes(data)
    assert len(records) == EXPECTED["java.log"][0]
    assert all("\r" not in r.text for r in records)
    assert records[-1].end == len(data)


def test_hangul_and_replacement_characters_pass_through() -> None:
    records, _ = group_file("python.log")
    assert any("customer=김민수" in r.text for r in records)
    assert any("name=\ufffd\ufffd\ufffd.pdf" in r.text for r in records)
    line = "2026-11-30 10:00:00,123 ERROR [billing] 결제 실패 user=김민수 file=\ufffd.pdf"
    [record] = feed_lines(g := Grouper(), [line]) + g.flush(0, force=True)
    event = to_event(record, service="s", repo="r")
    assert event is not None and event.message == "[billing] 결제 실패 user=김민수 file=\ufffd.pdf"


def test_hundred_thousand_line_trace_is_capped_with_a_marker_in_bounded_memory() -> None:
    grouper = Grouper(max_lines=1000)
    header = "2026-11-30 10:00:00,123 ERROR [app] recursion blew up"
    lines = [header, "Traceback (most recent call last):"]
    assert feed_lines(grouper, lines) == []
    pos = sum(len(line) + 1 for line in lines)

    def frames(first: int, count: int) -> None:
        nonlocal pos
        for n in range(first, first + count):
            frame = f'  File "/srv/app/deep.py", line {n}, in recurse'  # a new str per line
            assert grouper.feed(frame, pos, pos + len(frame) + 1, 0.0) == []
            pos += len(frame) + 1

    frames(0, 80_000)
    tracemalloc.start()  # only over the steady state: tracing all 100k lines is slow
    try:
        before = tracemalloc.get_traced_memory()[0]
        frames(80_000, 20_000)  # ~2 MB of new lines
        growth = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert growth < 500_000  # the head is fixed and the tail a bounded window
    last = "RecursionError: maximum recursion depth exceeded"
    assert grouper.feed(last, pos, pos + len(last) + 1, 0.0) == []
    [record] = grouper.flush(0.0, force=True)
    lines = record.text.split("\n")
    assert record.truncated and len(lines) <= 1000
    assert lines[0] == header and lines[-1] == last
    assert f"… [{100_003 - 999} lines truncated by tracehound]" in lines
    assert (record.start, record.end) == (0, pos + len(last) + 1)
    event = to_event(record, service="s", repo="r")
    assert event is not None and event.exception_type == "RecursionError"


def test_byte_cap_keeps_head_and_tail_and_cuts_overlong_lines() -> None:
    grouper = Grouper(max_lines=1000, max_bytes=4_000)
    lines = ['Exception in thread "main" java.lang.StackOverflowError']
    lines += [f"\tat com.shop.Deep.recurse(Deep.java:{n})" for n in range(500)]
    lines += ["\tat com.shop.Main.main(Main.java:3 " + "x" * 5_000 + ")"]
    records = feed_lines(grouper, lines) + grouper.flush(0, force=True)
    [record] = records
    assert record.truncated
    assert len(record.text.encode()) <= 4_000
    assert record.text.startswith(lines[0])
    assert "bytes truncated by tracehound" in record.text.split("\n")[-1]
    assert "lines truncated by tracehound]" in record.text


def test_flush_returns_a_pending_record_only_after_the_quiet_period() -> None:
    grouper = Grouper(flush_after=1.5)
    assert grouper.feed("2026-11-30 10:00:00 ERROR boom", 0, 31, now=10.0) == []
    assert grouper.flush(11.0) == []
    [record] = grouper.flush(11.5)
    assert (record.text, record.start, record.end) == ("2026-11-30 10:00:00 ERROR boom", 0, 31)
    assert grouper.flush(20.0) == [] and grouper.safe_offset() is None


def test_flush_force_returns_the_pending_record_at_once() -> None:
    grouper = Grouper()
    feed_lines(grouper, ["panic: boom", "", "goroutine 1 [running]:"])
    [record] = grouper.flush(0.0, force=True)
    assert record.text == "panic: boom\n\ngoroutine 1 [running]:"


def test_a_continuation_arriving_after_the_quiet_period_starts_a_new_record() -> None:
    grouper = Grouper(flush_after=1.5)
    assert grouper.feed("java.lang.IllegalStateException: x", 0, 36, now=0.0) == []
    [late_closed] = grouper.feed("\tat com.shop.A.b(A.java:1)", 36, 63, now=5.0)
    assert late_closed.text == "java.lang.IllegalStateException: x"
    assert grouper.safe_offset() == 36


def test_safe_offset_never_passes_the_start_of_a_pending_record() -> None:
    data = (TRACES / "python.log").read_bytes()
    grouper = Grouper()
    returned_end = 0
    pos = 0
    for raw in data.splitlines(keepends=True):
        for record in grouper.feed(raw.rstrip(b"\n").decode(), pos, pos + len(raw), 0.0):
            returned_end = record.end
        pos += len(raw)
        safe = grouper.safe_offset()
        assert safe is not None  # python.log has no blank line outside a trace
        assert safe == returned_end  # every line before it is in a returned record, none after
    assert grouper.safe_offset() == returned_end
    [last] = grouper.flush(0.0, force=True)
    assert last.start == returned_end and grouper.safe_offset() is None


def test_safe_offset_stays_at_the_trace_start_while_a_chained_traceback_is_pending() -> None:
    grouper = Grouper()
    lines = [
        "Traceback (most recent call last):",
        '  File "/a.py", line 1, in f',
        "KeyError: 'x'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
    ]
    assert feed_lines(grouper, lines, pos=500) == []
    assert grouper.safe_offset() == 500


def test_blank_line_after_python_exception_without_chaining_ends_the_record() -> None:
    grouper = Grouper()
    lines = ["Traceback (most recent call last):", '  File "/a.py", line 1', "KeyError: 'x'", ""]
    assert feed_lines(grouper, lines) == []
    [record] = grouper.feed("2026-11-30 INFO next", 200, 221, 0.0)
    assert record.text.endswith("KeyError: 'x'")
    assert record.end == sum(len(line) + 1 for line in lines[:3])


def test_grouper_rejects_caps_too_small_to_hold_head_marker_and_tail() -> None:
    with pytest.raises(ValueError):
        Grouper(max_lines=2)


def test_text_level_takes_the_leftmost_token() -> None:
    assert text_level("2026-11-30 INFO [app] ERROR queue drained") == "INFO"
    assert text_level("nothing to see") is None


def test_long_pathological_lines_are_classified_quickly() -> None:
    grouper = Grouper()
    lines = ["1" * 60_000, "a1(:" * 15_000, "\tat " + "a(" * 30_000]
    started = time.thread_time()
    records = feed_lines(grouper, lines) + grouper.flush(0.0, force=True)
    for record in records:
        to_event(record, service="s", repo="r")
    assert time.thread_time() - started < 1.0  # no catastrophic regex backtracking
