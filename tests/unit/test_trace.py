"""A trace is read once, at intake: every later stage reads the event's Trace, never the text."""

from __future__ import annotations

import json

import pytest

from shared.analyze.code import trace_lines
from shared.analyze.history import Recorded, frame_lines
from shared.core.domain import ErrorEvent, Frame, Investigation, Trace
from shared.core.memo import TextMemo
from shared.devtools.eval import MemoryIndex, SimulatorEmbedder, embed_chunks
from shared.groups.incidents import cause_of
from shared.index.chunking import chunk_file
from shared.intake import exceptions, trace, traces
from shared.intake.events import parse_event
from shared.intake.fingerprint import fingerprint
from shared.intake.trace import read_trace, with_trace
from shared.retrieve.hybrid import hybrid_retrieve
from shared.retrieve.query import compose_query

TRACE = """Traceback (most recent call last):
  File "/srv/app/shop/api.py", line 4, in handle
    return apply_discount(cart.total, cart.count)
  File "/srv/app/shop/pricing.py", line 2, in apply_discount
    return total / count
sqlalchemy.exc.OperationalError: could not connect to server

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/srv/app/shop/api.py", line 4, in handle
    return apply_discount(cart.total, cart.count)
shop.errors.CheckoutFailed: checkout failed for cart 42
"""
FILES = {
    "shop/pricing.py": "def apply_discount(total, count):\n    return total / count\n",
    "shop/api.py": (
        "from shop.pricing import apply_discount\n\n\n"
        "def handle(cart):\n    return apply_discount(cart.total, cart.count)\n"
    ),
    "shop/inventory.py": "def reserve(sku, stock):\n    return stock[sku] - 1\n",
}


def taken_in() -> ErrorEvent:
    """The event as intake hands it on: redacted (nothing to redact here), its trace read."""
    return with_trace(parse_event(TRACE, service="shop", repo="shop"))


def test_intake_reads_frames_and_exceptions_once() -> None:
    event = taken_in()
    assert event.trace is not None
    assert [(f.file, f.line) for f in event.trace.frames][:2] == [
        ("/srv/app/shop/api.py", 4),
        ("/srv/app/shop/pricing.py", 2),
    ]
    assert event.trace.chain() == ("shop.errors.CheckoutFailed", "sqlalchemy.exc.OperationalError")
    assert event.trace.root_cause().type == "sqlalchemy.exc.OperationalError"  # type: ignore[union-attr]


def test_the_trace_crosses_a_queue_as_json_and_comes_back_whole() -> None:
    event = taken_in()
    sent = json.dumps(Investigation(event=event).model_dump(mode="json"))
    back = Investigation.model_validate(json.loads(sent)).event
    assert back.trace == event.trace and isinstance(back.trace.frames[0], Frame)  # type: ignore[union-attr]


def test_later_stages_find_frames_and_causes_without_parsing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Intake reads the trace; then no grammar answers any more. A stage that parsed the text
    again would find no frame and no exception line, and these would fail."""
    event = taken_in()
    monkeypatch.setattr(traces, "GRAMMARS", ())
    monkeypatch.setattr(exceptions, "_printed", lambda text: ())
    monkeypatch.setattr(exceptions, "_PRINTED", TextMemo())
    monkeypatch.setattr(trace, "_TRACES", TextMemo())
    assert read_trace(TRACE + " ") == Trace()  # parsing now would find nothing

    query = compose_query(event)
    assert query.text.startswith("shop.errors.CheckoutFailed: checkout failed for cart 42")
    assert [(f.file, f.line) for f in query.frames][:2] == [
        ("/srv/app/shop/api.py", 4),
        ("/srv/app/shop/pricing.py", 2),
    ]
    assert 'File "/srv/app/shop/pricing.py", line 2' in query.text

    chunks = [c for path, text in FILES.items() for c in chunk_file("shop", path, text)]
    idx = MemoryIndex(chunks, embed_chunks(chunks, SimulatorEmbedder(), None))
    found = hybrid_retrieve(
        "shop", query.text, None, vectors=idx, keywords=idx, signals=["frames"],
        frames=query.frames,
    )  # fmt: skip
    assert {c.path for c in found.candidates} == {"shop/api.py", "shop/pricing.py"}
    assert found.own_frames >= 2

    assert trace_lines(event, idx.path_mapper("shop")) == {
        "shop/api.py": [4],
        "shop/pricing.py": [2],
    }
    recorded = Recorded(version=None, files={"shop/pricing.py": None})  # type: ignore[dict-item]
    assert frame_lines(event, recorded) == {"shop/pricing.py": [2]}
    assert cause_of(event) == "sqlalchemy.exc.OperationalError: could not connect to server"
    assert fingerprint(event).kind == "frames"
