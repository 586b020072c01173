"""A bounded memo keyed by the digest of a text: repeated inputs (a storm's one stack trace)
are worked on once, and memory holds digests and results, never the texts themselves — but for
the few most recent, kept as they are so that the next lookup of the same text costs a dict
lookup instead of a SHA-1 of it (a storm looks its one trace up several times per event)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")

RECENT = 16  # texts held whole: at most 16 traces of TRACEHOUND_MAX_TRACE_BYTES per memo


class TextMemo(Generic[V]):
    """``get(text, extra, compute)``: ``compute()`` once per (text, extra) among the last
    ``size`` distinct ones (oldest dropped first); safe to share between threads."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._items: dict[tuple[bytes, Hashable], V] = {}
        # (text, extra) -> value for the last RECENT texts looked up: Python keeps a string's
        # hash on the string, so a text seen again (the same object, or an equal one) is found
        # without hashing it again with SHA-1.
        self._recent: dict[tuple[str, Hashable], V] = {}
        self._lock = threading.Lock()

    def get(self, text: str, extra: Hashable, compute: Callable[[], V]) -> V:
        near = (text, extra)
        found = self._recent.get(near, _MISSING)
        if found is not _MISSING:
            return found  # type: ignore[return-value]
        key = _key(text, extra)
        with self._lock:
            if key in self._items:
                value = self._items[key]
                self._hold(near, value)
                return value
        value = compute()
        self._put(key, value)
        with self._lock:
            self._hold(near, value)
        return value

    def put(self, text: str, extra: Hashable, value: V) -> None:
        """Remember ``value`` for (text, extra), worked out on the way to something else."""
        self._put(_key(text, extra), value)
        with self._lock:
            self._recent.pop((text, extra), None)  # a recent answer would shadow this one

    def _put(self, key: tuple[bytes, Hashable], value: V) -> None:
        with self._lock:
            if key not in self._items and len(self._items) >= self.size:
                self._items.pop(next(iter(self._items)))
            self._items[key] = value

    def _hold(self, near: tuple[str, Hashable], value: V) -> None:
        # under self._lock
        if near not in self._recent and len(self._recent) >= RECENT:
            self._recent.pop(next(iter(self._recent)))
        self._recent[near] = value


_MISSING = object()


def _key(text: str, extra: Hashable) -> tuple[bytes, Hashable]:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest(), extra
