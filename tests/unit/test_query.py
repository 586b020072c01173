"""Unit tests of building the retrieval query from an error's parts."""

from __future__ import annotations

import json
from pathlib import Path

from shared.core.domain import ErrorEvent
from shared.intake.events import from_text, parse_event
from shared.intake.trace import sdk_frames, with_trace
from shared.intake.traces import parse_frames
from shared.retrieve.query import QUERY_MAX_CHARS, build_query, compose_query, render_frames

TRACE = """2024-05-01 12:00:01 ERROR request failed id=42
Traceback (most recent call last):
  File "/usr/lib/python3.11/threading.py", line 1045, in _bootstrap_inner
    self.run()
  File "/srv/app/shop/api.py", line 10, in handle
    return checkout(cart)
  File "/srv/app/shop/services/pricing.py", line 42, in apply_discount
    return total / count
ZeroDivisionError: division by zero
"""


def event(text: str) -> ErrorEvent:
    """The event as intake hands it on: its trace read."""
    return with_trace(parse_event(text, service="shop", repo="shop"))


def test_exception_line_leads_then_the_symbols_nearest_the_raise() -> None:
    lines = build_query(event(TRACE)).splitlines()
    assert lines[0] == "ZeroDivisionError: division by zero"
    assert lines[1] == "in apply_discount (shop/services/pricing.py), handle (app/shop/api.py)"


def test_query_keeps_the_frames_retrieval_parses_again_and_drops_stdlib_ones() -> None:
    query = build_query(event(TRACE))
    frames = parse_frames(query)
    assert [(f.file, f.line, f.function) for f in frames] == [
        ("/srv/app/shop/services/pricing.py", 42, "apply_discount"),
        ("/srv/app/shop/api.py", 10, "handle"),
    ]
    assert "threading.py" not in query
    assert "return total / count" in query


def test_log_context_is_kept_without_banners() -> None:
    text = (
        "Unit equality comparison with None raises TypeError\n"
        "============================= test session starts =====\n"
        "platform linux -- Python 3.8.4, pytest-6.0.0rc1\n"
        "TypeError: None is not a valid Unit\n"
    )
    query = build_query(event(text))
    assert query.splitlines()[0] == "TypeError: None is not a valid Unit"
    assert "Unit equality comparison with None raises TypeError" in query
    assert "platform" not in query and "=====" not in query


def test_free_text_without_an_exception_still_makes_a_query() -> None:
    e = ErrorEvent(service="shop", repo="shop", message="checkout slow\nsee cart totals")
    assert build_query(e).splitlines() == ["checkout slow", "see cart totals"]
    assert build_query(ErrorEvent(service="shop", repo="shop")) == "shop"


def test_a_long_trace_is_cut_from_the_outermost_frames() -> None:
    frames = "".join(
        f'  File "/srv/app/shop/mod{i}.py", line {i}, in fn{i}\n    call_{i}()\n'
        for i in range(200)
    )
    query = build_query(event(f"Traceback (most recent call last):\n{frames}KeyError: 'sku'\n"))
    assert len(query) <= QUERY_MAX_CHARS
    kept = parse_frames(query)
    assert kept[0].function == "fn199"  # nearest the raise survives
    assert all(f.function != "fn0" for f in kept)


def test_rendered_frames_of_any_language_parse_back_the_same() -> None:
    java = "x\n\tat com.shop.Pricing.total(Pricing.java:40)\n\tat com.shop.Api.handle(Api.java:9)\n"
    frames = parse_frames(java)
    again = parse_frames("\n".join(render_frames(frames)))
    assert [(f.module, f.function, f.file, f.line) for f in again] == [
        (f.module, f.function, f.file, f.line) for f in frames
    ]


def test_named_symbols_are_the_code_like_names_in_order() -> None:
    from shared.retrieve.query import named_symbols

    text = (
        "units.quantity_input decorator fails for constructors -> None\n"
        "export_text crashes; LogisticRegressionCV too; see np.Foo and __init__ and the_value"
    )
    assert named_symbols(text) == [
        "quantity_input",
        "export_text",
        "LogisticRegressionCV",
        "the_value",
    ]
    assert named_symbols("The checkout fails for Some users. Error!") == []
    assert len(named_symbols(" ".join(f"name_{i}" for i in range(100)))) == 16


def test_an_sdks_frames_go_to_retrieval_as_they_are() -> None:
    frames = [
        {"file": "/srv/app/shop/pricing.py", "line": 42, "function": "apply", "in_app": True},
        {"file": "OrderService.java", "line": 7, "function": "place", "module": "com.shop.O"},
    ]
    python = ErrorEvent(
        service="s", repo="r", attributes={"frames": frames, "sentry": {"platform": "python"}}
    )
    [first, _] = sdk_frames(python)
    assert (first.file, first.line, first.function, first.language) == (
        "/srv/app/shop/pricing.py",
        42,
        "apply",
        "python",
    )
    java = python.model_copy(
        update={"attributes": {"frames": frames[1:], "sentry": {"platform": "java"}}}
    )
    [only] = sdk_frames(java)
    assert only.module == "com.shop.O" and only.language == "java"
    assert sdk_frames(ErrorEvent(service="s", repo="r", stacktrace=TRACE)) == ()


def test_the_query_names_exactly_the_frames_retrieval_follows() -> None:
    """Retrieval follows the frames intake read, not the text: they must be the frames the
    query's text shows (what the embedding and BM25 read), for every mined bug report."""
    cases = Path(__file__).parents[2] / "benchmarks" / "cases"
    checked = 0
    for path in sorted(cases.glob("cases-mined*.jsonl")):
        for line in path.read_text().splitlines():
            case = json.loads(line)
            found = from_text(case["query"], origin="sent", service="s", repo="r", level="ERROR")
            assert isinstance(found, ErrorEvent)
            query = compose_query(with_trace(found))
            assert list(query.frames) == parse_frames(query.text), case["id"]
            checked += bool(query.frames)
    assert checked >= 20  # most mined reports carry a trace
