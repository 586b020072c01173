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

import math
import threading
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

import orjson

V = TypeVar("V")

# The record's own fields that a template leaves to each record (the timestamp's field too).
VARYING = frozenset({"message", "id"})
# A storm's record is a trace and a few fields: a larger one (up to the request's 10 MB) is
# built on its own rather than kept whole as a shape.
MAX_SHAPE_BYTES = 96 * 1024
# Where a record's time is read, in the order events._reshape reads them.
TIMESTAMP_FIELDS = ("timestamp", "@timestamp", "time", "ts", "@t", "asctime")


def timestamp_field(obj: dict[str, Any]) -> str | None:
    """The field the record's timestamp is read from: ``timestamp`` when the record has one
    (even empty), else the first of the others that is not empty."""
    if "timestamp" in obj:
        return "timestamp"
    return next((k for k in TIMESTAMP_FIELDS[1:] if obj.get(k) not in (None, "")), None)


def shape_of(
    obj: dict[str, Any], stamp_field: str | None, context: list[str | int | None]
) -> bytes | None:
    """The record's shape: ``context`` (how it is read: names and numbers, no floats), then
    every field but the varying ones, in one byte string (see ``encoded``)."""
    rest = encoded({k: v for k, v in obj.items() if k not in VARYING and k != stamp_field})
    return None if rest is None else orjson.dumps([context, stamp_field]) + rest


def encoded(value: Any) -> bytes | None:
    """``value`` as JSON bytes that tell it apart from any other value: keys in their order
    (two records whose fields come in another order are two shapes: the events keep it), and
    None — built on its own — for what JSON would blur or cannot say (NaN and the infinities
    are written as ``null``: Python's JSON reader takes them; an integer past 64 bits) and
    past ``MAX_SHAPE_BYTES``."""
    try:
        found = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        return None
    if len(found) > MAX_SHAPE_BYTES or (b"null" in found and _unsayable(value)):
        return None
    return found


def _unsayable(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


class Templates(Generic[V]):
    """The last ``size`` shapes' templates (oldest dropped first); safe to share between
    threads. A shape is at most ``MAX_SHAPE_BYTES`` of text and so is its template, about:
    128 of them hold a few tens of MB at most."""

    def __init__(self, size: int = 128) -> None:
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
