"""Prometheus metrics that more than one kind of process exports (errors in and new groups:
ingest and the intake worker both run intake), and the bound on label values that come from
senders.

prometheus_client is imported only when the counters are made: a worker sets its
multiprocess directory first (workers/metrics.py).
"""

from __future__ import annotations

import re
import threading
from typing import Any

OTHER = "other"  # every service name past the cap
LABEL_MAX_CHARS = 64
_UNSAFE = re.compile(r"[^a-z0-9_.-]+")


class LabelCap:
    """A label whose values come from senders (a service name): lower-cased, reduced to
    ``[a-z0-9_.-]`` and 64 characters, and at most ``limit`` distinct values per process;
    later ones are ``other``. A sender inventing a name per event cannot make a series per
    event (each series costs Prometheus memory for as long as it keeps it)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        label = _UNSAFE.sub("_", value.lower())[:LABEL_MAX_CHARS].strip("_") or "unknown"
        if label in self.seen:
            return label
        with self._lock:
            if len(self.seen) < self.limit:
                self.seen.add(label)
                return label
        return OTHER


class IntakeCounters:
    """Errors taken in and groups opened, by service. ``registry`` None: not registered (a
    worker's multiprocess files are read by its collector instead)."""

    def __init__(self, registry: Any, services: LabelCap) -> None:
        from prometheus_client import Counter

        self.services = services
        self.events = Counter(
            "tracehound_events_total",
            "Error events taken in (a retried event counted once).",
            ["service"],
            registry=registry,
        )
        self.groups = Counter(
            "tracehound_groups_new_total",
            "Error groups opened: the first event of a group in its window.",
            ["service"],
            registry=registry,
        )

    def count(self, service: str, *, opened: bool) -> None:
        label = self.services(service)
        self.events.labels(label).inc()
        if opened:
            self.groups.labels(label).inc()
