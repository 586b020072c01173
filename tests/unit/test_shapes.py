"""A record of a shape seen before is built from the shape's template (shared/intake/shapes.py):
the events must be exactly those of building every record alone, whatever the records hold."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.core.domain import ErrorEvent
from shared.core.errors import PermanentError
from shared.intake import events
from shared.intake.events import _from_record, _text, from_record
from tests.conftest import DATA

PYTHON = (DATA / "sample-error.txt").read_text()
NODE = (
    "Error: price lookup failed\n    at main (/app/src/server.js:13:21)\n"
    "    at run (/app/src/run.js:2:3)"
)
JAVA = (
    "java.lang.IllegalStateException: cart empty\n"
    "\tat com.shop.Cart.total(Cart.java:42)\n\tat com.shop.Api.checkout(Api.java:7)"
)

_chars = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=30)
_stacks = st.sampled_from([PYTHON, NODE, JAVA, "", "not a trace", "x\ny"])
_messages = st.one_of(
    _chars,
    st.sampled_from(["", "line one\nline two", PYTHON, "ERROR boom", "\ud800 lone surrogate"]),
    st.integers(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.text(min_size=8_001, max_size=8_010),  # clipped
)
_stamps = st.one_of(
    st.sampled_from(
        ["2026-11-30T10:00:00Z", "2026-11-30 10:00:00,123", "not a time", "", "1764496800"]
    ),
    st.integers(min_value=-(10**12), max_value=10**13),
    st.floats(allow_nan=True),
    st.none(),
    st.dictionaries(_chars, _chars, max_size=1),
)
_fields = {
    "stack": _stacks,
    "stack_trace": _stacks,
    "exception": _stacks,
    "err": st.fixed_dictionaries(
        {}, optional={"stack": _stacks, "type": _chars, "message": _chars}
    ),
    "error": st.one_of(_chars, st.fixed_dictionaries({}, optional={"stack": _stacks})),
    "error.stack_trace": _stacks,
    "level": st.sampled_from(["ERROR", "error", "INFO", "warn", 50, 30, 17, None, "", "FATAL"]),
    "service": st.sampled_from(["shop-api", "", None, "a\nb", 7]),
    "repo": st.sampled_from(["shop", "other", "", None]),
    "exception_type": st.sampled_from(["KeyError", "", None]),
    "msg": _chars,
    "event": _chars,
    "@m": _chars,
    "@x": _stacks,
    "attributes": st.dictionaries(
        st.sampled_from(["a", "b", "c"]),  # few keys: the same ones in another order
        st.one_of(_chars, st.integers(), st.floats(), st.none(), st.lists(st.floats())),
        max_size=3,
    ),
    "record": st.fixed_dictionaries({"message": _chars}),
    "text": _chars,
    "time": _stamps,
    "@timestamp": _stamps,
    "ts": _stamps,
    "host": _chars,
    "big": st.integers(min_value=2**64, max_value=2**70),  # no JSON shape: built alone
}
_records = st.fixed_dictionaries(
    {}, optional={"message": _messages, "id": _chars, "timestamp": _stamps, **_fields}
)
# What a storm changes from one record to the next: its message, id and time.
_changes = st.lists(
    st.fixed_dictionaries(
        {},
        optional={"message": _messages, "id": st.one_of(_chars, st.integers()), "stamp": _stamps},
    ),
    min_size=1,
    max_size=4,
)


def _outcome(build: Any, record: dict[str, Any], **context: Any) -> Any:
    try:
        return build(record, **context)
    except (PermanentError, ValueError) as exc:  # the same refusal, said the same way
        return (type(exc).__name__, str(exc))


def _same(a: Any, b: Any, record: dict[str, Any], context: dict[str, Any]) -> None:
    if not isinstance(a, ErrorEvent) or not isinstance(b, ErrorEvent):
        assert a == b
        return
    left, right = a.model_dump(), b.model_dump()
    if not (context["event_id"] or (context["origin"] == "sent" and _text(record.get("id")))):
        assert len(left.pop("id")) == len(right.pop("id")) == 32  # each a new one
    if left["timestamp"] != right["timestamp"]:  # both "now": microseconds apart
        assert abs((left.pop("timestamp") - right.pop("timestamp")).total_seconds()) < 5
    assert repr(left) == repr(right)  # NaN equal to NaN, and dicts in the same order


def _reference(record: dict[str, Any], **context: Any) -> Any:
    return _from_record(
        record,
        context["origin"],
        context["service"],
        context["repo"],
        context["max_bytes"],
        context["raw"],
        context["event_id"],
    )


@settings(max_examples=200, deadline=None)
@given(
    _records,
    _changes,
    st.sampled_from(["sent", "log"]),
    st.sampled_from([None, "svc"]),
    st.sampled_from([None, "repo"]),
    st.sampled_from(["", "given-id"]),
)
def test_a_storm_of_one_shape_is_built_as_each_record_alone(
    base: dict[str, Any],
    changes: list[dict[str, Any]],
    origin: str,
    service: str | None,
    repo: str | None,
    event_id: str,
) -> None:
    context = {
        "origin": origin,
        "service": service,
        "repo": repo,
        "max_bytes": 2_000,  # the Python sample is trimmed
        "raw": '{"raw": "line"}',
        "event_id": event_id,
    }
    stamp_field = next(
        (k for k in ("timestamp", "@timestamp", "time", "ts") if k in base), "timestamp"
    )
    for change in [{}, *changes]:
        record = dict(base)
        if "message" in change:
            record["message"] = change["message"]
        if "id" in change:
            record["id"] = change["id"]
        if "stamp" in change:
            record[stamp_field] = change["stamp"]
        expected = _outcome(_reference, record, **context)
        got = _outcome(from_record, record, **context)
        _same(got, expected, record, context)


def test_a_storm_of_one_shape_is_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # What makes a storm cheap: its records are built in full once per shape, the rest are
    # the template with their own message, id and time; a record of another shape is built.
    events._TEMPLATES.clear()
    built: list[dict[str, Any]] = []

    def counted(record: dict[str, Any], *args: Any) -> Any:
        built.append(record)
        return _from_record(record, *args)

    monkeypatch.setattr(events, "_from_record", counted)
    record = {"service": "shop-api", "level": "ERROR", "stack": PYTHON}
    storm = [
        from_record(
            {**record, "message": f"boom {i}", "timestamp": f"2026-11-30T10:00:{i:02}Z"},
            origin="sent",
            service=None,
            repo=None,
            event_id=f"e{i}",
        )
        for i in range(50)
    ]
    other = from_record(
        {**record, "message": "boom", "level": "FATAL"}, origin="sent", service=None, repo=None
    )
    assert len(built) == 2
    assert [(e.id, e.message, e.timestamp.second) for e in storm if isinstance(e, ErrorEvent)] == [
        (f"e{i}", f"boom {i}", i) for i in range(50)
    ]
    assert isinstance(other, ErrorEvent) and other.level == "FATAL"


@pytest.mark.parametrize(
    "record",
    [
        {"service": "s", "message": "line one\nline two"},  # no stack: the message is the trace
        {"service": "s", "level": "ERROR", "message": "ok", "time": "not a time"},
    ],
)
def test_records_whose_message_or_time_decide_more_are_not_templates(
    record: dict[str, Any],
) -> None:
    events._TEMPLATES.clear()
    from_record(record, origin="sent", service=None, repo=None)
    assert not events._TEMPLATES._items


def test_records_json_would_blur_are_not_taken_for_one_shape() -> None:
    # NaN and the infinities are written as null, and Python's JSON reader takes them (a JSON
    # array body, a tailed line); a shape keeps its fields' order; a huge record is built alone.
    events._TEMPLATES.clear()
    base = {"service": "s", "level": "ERROR", "stack": NODE, "message": "m"}

    def built(record: dict[str, Any]) -> ErrorEvent:
        found = from_record(record, origin="sent", service=None, repo=None, event_id="e")
        assert isinstance(found, ErrorEvent)
        return found

    assert math.isnan(built({**base, "attributes": {"x": math.nan}}).attributes["x"])
    assert built({**base, "attributes": {"x": None}}).attributes == {"x": None}
    built({**base, "attributes": {"a": 1, "b": 2}})
    assert list(built({**base, "attributes": {"b": 2, "a": 1}}).attributes) == ["b", "a"]
    events._TEMPLATES.clear()
    built({**base, "attributes": {f"k{i}": "v" * 7_000 for i in range(20)}})
    assert not events._TEMPLATES._items  # 140 KB: not kept whole
