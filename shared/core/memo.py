"""A bounded memo keyed by the digest of a text: repeated inputs (a storm's one stack trace)
are worked on once, and memory holds digests and results, never the texts themselves."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class TextMemo(Generic[V]):
    """``get(text, extra, compute)``: ``compute()`` once per (text, extra) among the last
    ``size`` distinct ones (oldest dropped first); safe to share between threads."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._items: dict[tuple[bytes, Hashable], V] = {}
        self._lock = threading.Lock()

    def get(self, text: str, extra: Hashable, compute: Callable[[], V]) -> V:
        key = _key(text, extra)
        with self._lock:
            if key in self._items:
                return self._items[key]
        value = compute()
        self._put(key, value)
        return value

    def put(self, text: str, extra: Hashable, value: V) -> None:
        """Remember ``value`` for (text, extra), worked out on the way to something else."""
        self._put(_key(text, extra), value)

    def _put(self, key: tuple[bytes, Hashable], value: V) -> None:
        with self._lock:
            if key not in self._items and len(self._items) >= self.size:
                self._items.pop(next(iter(self._items)))
            self._items[key] = value


def _key(text: str, extra: Hashable) -> tuple[bytes, Hashable]:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest(), extra
