"""OTLP bodies are counted before they are decoded: a few kilobytes that hold millions of
empty messages are refused without building them (shared/intake/otlp.py, Bounds)."""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from shared.intake.otlp import LOGS, TRACES, Bounds, OtlpError, OverBounds, decode_request

EMPTY_RESOURCE_LOGS = b"\x0a\x00"  # field 1 (resource_logs), length 0: an empty message


def _within(fn: object) -> tuple[float, int]:
    """CPU seconds of this thread and peak traced bytes of calling ``fn``."""
    tracemalloc.start()
    start = time.thread_time()
    try:
        fn()  # type: ignore[operator]
    finally:
        spent = time.thread_time() - start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return spent, peak


def test_millions_of_empty_resource_logs_are_refused_without_being_built() -> None:
    body = EMPTY_RESOURCE_LOGS * 5_000_000  # 10 MB; gzip makes it ~10 kB
    assert len(gzip.compress(body)) < 20_000

    def decode() -> None:
        with pytest.raises(OverBounds, match="resources"):
            decode_request(body, protobuf=True, bounds=Bounds())

    spent, peak = _within(decode)
    # It stops at the bound: a few thousand messages read, none built. (Decoding them all took
    # 7.6 s and 790 MB.) CPU time of this thread, generous: a guard, not a speed target.
    assert peak < 5_000_000 and spent < 2.0


@pytest.mark.parametrize(
    "make",
    [
        lambda: {"resourceLogs": [{"scopeLogs": [{} for _ in range(20_000)]}]},
        lambda: {"resourceLogs": [{"scopeLogs": [{"logRecords": [{}] * 20_000}]}]},
    ],
    ids=["scopes", "records"],
)
def test_nested_floods_are_refused_in_either_encoding(make: object) -> None:
    request = make()  # type: ignore[operator]
    as_json = json.dumps(request).encode()
    with pytest.raises(OverBounds):
        decode_request(as_json, protobuf=False, bounds=Bounds())
    message = ExportLogsServiceRequest()
    from google.protobuf.json_format import ParseDict

    ParseDict(request, message)
    with pytest.raises(OverBounds):
        decode_request(message.SerializeToString(), protobuf=True, bounds=Bounds())


def test_a_record_with_more_attribute_values_than_the_bound_is_refused() -> None:
    values = [{"stringValue": "x"}] * 100_000
    request = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"attributes": [
        {"key": "k", "value": {"arrayValue": {"values": values}}}]}]}]}]}  # fmt: skip
    message = ExportLogsServiceRequest()
    from google.protobuf.json_format import ParseDict

    ParseDict(request, message)
    with pytest.raises(OverBounds, match="messages"):
        decode_request(message.SerializeToString(), protobuf=True, bounds=Bounds(messages=50_000))


def test_a_request_within_bounds_decodes_as_before() -> None:
    request = {"resourceLogs": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "shop"}}]},
        "scopeLogs": [{"logRecords": [{"severityNumber": 17, "body": {"stringValue": "boom"}}
                                      for _ in range(100)]}]}]}  # fmt: skip
    message = ExportLogsServiceRequest()
    from google.protobuf.json_format import ParseDict

    ParseDict(request, message)
    decoded = decode_request(message.SerializeToString(), protobuf=True, bounds=Bounds())
    assert len(decoded["resourceLogs"][0]["scopeLogs"][0]["logRecords"]) == 100
    assert decode_request(json.dumps(request).encode(), protobuf=False) == request


@pytest.mark.parametrize(
    "body", [b"\x0a\x05\x01", b"\x0a", b"\x0f\x00", b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"]
)
def test_malformed_protobuf_is_a_clear_error(body: bytes) -> None:
    with pytest.raises(OtlpError):
        decode_request(body, protobuf=True, signal=TRACES)


def test_the_logs_signal_is_the_default() -> None:
    assert decode_request(b"", protobuf=True) == decode_request(b"", protobuf=True, signal=LOGS)


def test_a_time_past_year_9999_and_an_int_past_64_bits_make_an_event_that_can_be_queued() -> None:
    # both found by benchmarks/fuzz_ingest.py: the first raised in datetime, the second in
    # orjson when the event was queued
    import orjson

    from shared.intake.otlp import read_logs

    record = {
        "severityText": "ERROR",
        "timeUnixNano": str(10**30),
        "body": {"stringValue": "payment failed"},
        "attributes": [{"key": "order.id", "value": {"intValue": 2**70}}],
    }
    request = {"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]}
    batch = read_logs(request, protobuf=False, default_service="shop", max_bytes=64_000)
    assert len(batch.accepted) == 1
    queued = orjson.loads(orjson.dumps(batch.accepted[0].model_dump(mode="json")))
    assert queued["attributes"]["log_attributes"]["order.id"] == str(2**70)
