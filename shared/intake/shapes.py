"""Records of one shape: a storm's JSON records differ only in their message, id and timestamp.

A service failing the same way a thousand times a second logs the same record a thousand
times (its stack, service, level and fields) with its own message (a request id in it), id and
time. ``from_record`` (shared/intake/events.py) builds the first record of a shape as every
record is built and keeps the event as the shape's template; a later record of the shape is
the template with its own message, id and timestamp. That is most of a storm's cost at intake
saved, and exact: the shape is everything the event is built from but those three fields, and
a template is only kept where they are all the record changes (tests/unit/test_shapes.py holds
the two ways to the same events).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

import orjson

V = TypeVar("V")

# The record's own fields that a template leaves to each record (the timestamp's field too).
VARYING = frozenset({"message", "id"})
# Where a record's time is read, in the order events._reshape reads them.
TIMESTAMP_FIELDS = ("timestamp", "@timestamp", "time", "ts", "@t", "asctime")


def timestamp_field(obj: dict[str, Any]) -> str | None:
    """The field the record's timestamp is read from: ``timestamp`` when the record has one
    (even empty), else the first of the others that is not empty."""
    if "timestamp" in obj:
        return "timestamp"
    return next((k for k in TIMESTAMP_FIELDS[1:] if obj.get(k) not in (None, "")), None)


def shape_of(obj: dict[str, Any], stamp_field: str | None, context: list[Any]) -> bytes | None:
    """The record's shape: ``context`` (how it is read), then every field but the varying
    ones, in one byte string; None for a record JSON cannot say again (an integer past 64
    bits): it is built on its own."""
    rest = {k: v for k, v in obj.items() if k not in VARYING and k != stamp_field}
    try:
        return orjson.dumps([context, stamp_field, rest], option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return None


class Templates(Generic[V]):
    """The last ``size`` shapes' templates (oldest dropped first); safe to share between
    threads. A template holds at most one record's worth of text (its trace is bounded by
    TRACEHOUND_MAX_TRACE_BYTES), and so does its shape."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._items: dict[Hashable, V] = {}
        self._lock = threading.Lock()

    def get(self, shape: Hashable) -> V | None:
        return self._items.get(shape)

    def put(self, shape: Hashable, template: V) -> None:
        with self._lock:
            if shape not in self._items and len(self._items) >= self.size:
                self._items.pop(next(iter(self._items)))
            self._items[shape] = template

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
