"""Deploys: when a release of a service went out, which commits it brought, and which one a
new error group came after.

Recorded three ways: ``POST /v1/deploys`` (producers/ingest/deploy_routes.py), ``tracehound
deploy`` from a CI pipeline (which posts there, with the range's commits read from git), and
by intake when an error names a release that no deploy of its service named (an SDK's
``release``, OTel's ``service.version``): the release was *seen* then, its first event's time
stands in for the deploy's, and it has no commit list.

A new group's message names the deploy it came after (``note_for``): the deploy of the release
the error names, else the latest one of its service (and environment) before the group was
first seen, within ``TRACEHOUND_DEPLOY_WINDOW``; with the deploy's commit list it says which of
the suspect commits (the last change to a cited line the trace points at) came with it.

Keys (shared/core/keys.py): per service a hash id -> deploy JSON and a sorted set id -> time,
the newest ``KEEP_PER_SERVICE`` kept; a sorted set of the newest ``RECENT_MAX`` over every
service for ``tracehound status``. The same deploy announced again (a CI retry) keeps its
first record.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import cast

import redis
from pydantic import ValidationError

from shared.core import keys
from shared.core.domain import (
    NAME_MAX_CHARS,
    Deploy,
    DeployNote,
    ErrorEvent,
    Investigation,
    one_line,
)

log = logging.getLogger(__name__)

KEEP_PER_SERVICE = 200
RECENT_MAX = 200
CANDIDATES = 50  # deploys of a service read for one note, newest first
CLOCK_SKEW_S = 300.0  # a deploy announced this much after the error's first sighting still counts
SUSPECTS_MAX = 5
RELEASES_REMEMBERED = 4096  # (service, release) pairs intake knows are recorded

# HSETNX first: an id already recorded (a retried announcement) changes nothing.
_RECORD = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
local extra = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
if extra > 0 then
  local old = redis.call('ZRANGE', KEYS[2], 0, extra - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, extra - 1)
  redis.call('HDEL', KEYS[1], unpack(old))
end
redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -tonumber(ARGV[6]) - 1)
return 1
"""


def deploy_id(deploy: Deploy) -> str:
    """The same service, environment, version and range is the same deploy."""
    parts = (deploy.service, deploy.environment, deploy.version, deploy.commit_from,
             deploy.commit_to, deploy.source)  # fmt: skip
    return hashlib.sha1("\0".join(parts).encode("utf-8", "replace")).hexdigest()[:20]


def same_version(a: str, b: str) -> bool:
    """``shop@1.4.2``, ``v1.4.2`` and ``1.4.2`` name one release (Sentry's ``package@version``
    form, a tag's ``v``)."""

    def norm(v: str) -> str:
        return v.rsplit("@", 1)[-1].strip().lower().removeprefix("v")

    return bool(norm(a)) and norm(a) == norm(b)


def _same_environment(deploy: Deploy, environment: str) -> bool:
    """A deploy or an error that names no environment matches every one."""
    return not deploy.environment or not environment or deploy.environment == environment


class DeployStore:
    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self._record = r.register_script(_RECORD)
        self._known: dict[tuple[str, str], None] = {}  # releases recorded, oldest first
        self._lock = threading.Lock()

    def record(self, deploy: Deploy) -> tuple[str, bool]:
        """The deploy's id, and whether it is new (an announcement repeated is not)."""
        ident = deploy_id(deploy)
        data, times = keys.deploys(deploy.service)
        added = self._record(
            keys=[data, times, keys.DEPLOYS_RECENT],
            args=[
                ident,
                deploy.model_dump_json(),
                deploy.time,
                f"{deploy.service}\0{ident}",
                KEEP_PER_SERVICE,
                RECENT_MAX,
            ],
        )
        return ident, bool(added)

    def of_service(self, service: str, *, since: float, until: float) -> list[Deploy]:
        """The service's deploys between ``since`` and ``until``, newest first."""
        data, times = keys.deploys(service)
        ids = cast(list[bytes], self.r.zrevrangebyscore(times, until, since, 0, CANDIDATES))
        return self._load(data, ids)

    def recent(self, limit: int = 20) -> list[Deploy]:
        """The newest deploys of every service, newest first."""
        members = cast(list[bytes], self.r.zrevrange(keys.DEPLOYS_RECENT, 0, max(0, limit - 1)))
        by_service: dict[str, list[bytes]] = {}
        for m in members:
            service, _, ident = m.decode("utf-8", "replace").partition("\0")
            by_service.setdefault(service, []).append(ident.encode())
        found = [d for s, ids in by_service.items() for d in self._load(keys.deploys(s)[0], ids)]
        return sorted(found, key=lambda d: d.time, reverse=True)[:limit]

    def _load(self, data: str, ids: Sequence[bytes]) -> list[Deploy]:
        if not ids:
            return []
        out = []
        for raw in self.r.hmget(data, list(ids)):
            if raw is None:
                continue  # trimmed between the two reads
            try:
                out.append(Deploy.model_validate_json(raw))
            except ValidationError:
                log.warning("deploys.unreadable", extra={"key": data})
        return out

    def note_releases(self, events: Iterable[ErrorEvent], now: float | None = None) -> None:
        """Record, as seen now, each release these events name that no deploy of their
        service named yet (once per process and release: a storm costs one call)."""
        fresh: dict[tuple[str, str], ErrorEvent] = {}
        for event in events:
            release = error_release(event)
            if release and (event.service, release) not in self._known:
                fresh.setdefault((event.service, release), event)
        if not fresh:
            return
        at = time.time() if now is None else now
        for (service, release), event in fresh.items():
            named = self.of_service(service, since=0, until=float("inf"))
            if not any(same_version(d.version, release) for d in named):
                seen = Deploy(
                    service=service,
                    environment=error_environment(event),
                    version=release,
                    time=at,
                    source="release",
                )
                self.record(seen)
                log.info("deploys.release_seen", extra={"service": service, "release": release})
            with self._lock:
                self._known[(service, release)] = None
                while len(self._known) > RELEASES_REMEMBERED:
                    self._known.pop(next(iter(self._known)))

    def first_seen(self, inv: Investigation) -> float:
        """When the investigation's group was first seen (seconds), else its event's time."""
        if inv.group is not None:
            ms = self.r.hget(keys.group(inv.group.fingerprint), "first_seen")
            if ms is not None:
                return int(ms) / 1000
        return inv.event.timestamp.timestamp()

    def note_for(self, inv: Investigation, window_s: float) -> DeployNote | None:
        """The deploy the investigation's group came after, if any (see the module doc)."""
        first = self.first_seen(inv)
        deploys = self.of_service(
            inv.event.service, since=first - window_s, until=first + CLOCK_SKEW_S
        )
        deploy = match(deploys, error_release(inv.event), error_environment(inv.event))
        if deploy is None:
            return None
        return note(deploy, first, suspect_commits(inv))


def with_deploy(inv: Investigation, store: DeployStore, window_s: float) -> Investigation:
    """The investigation with the deploy its group came after; unchanged when there is none
    or Redis fails (a deploy sharpens a message, it never holds one up)."""
    try:
        found = store.note_for(inv, window_s)
    except redis.RedisError as exc:
        log.warning("deploys.lookup_failed", extra={"event_id": inv.event.id, "error": str(exc)})
        return inv
    return inv if found is None else inv.model_copy(update={"deploy": found})


def match(deploys: Sequence[Deploy], release: str, environment: str) -> Deploy | None:
    """Of a service's deploys around the first sighting (newest first): the one of the
    release the error names (an announced one before a seen one); without a release, the
    newest of its environment. An error from a release none of them is gets none: naming
    the latest deploy would blame the wrong one."""
    fitting = [d for d in deploys if _same_environment(d, environment)]
    if release:
        named = [d for d in fitting if same_version(d.version, release)]
        return min(named, key=lambda d: (d.source != "announced", -d.time), default=None)
    return fitting[0] if fitting else None


def suspect_commits(inv: Investigation) -> list[str]:
    """The suspect commit of each cited range (the last change to a line the trace points at,
    else the latest change to the range: shared/analyze/history.py ``suspects``)."""
    shas = [cited.commits[0].sha.lower() for cited in inv.history if cited.commits]
    return list(dict.fromkeys(shas))[:SUSPECTS_MAX]


def _brought(deploy: Deploy, sha: str) -> bool | None:
    """Whether the deploy brought commit ``sha``; None when it cannot be told."""

    def same(a: str, b: str) -> bool:
        return len(a) >= 7 and len(b) >= 7 and (a.startswith(b) or b.startswith(a))

    if deploy.commits:
        return any(same(c, sha) for c in deploy.commits)
    if deploy.commit_to and same(deploy.commit_to, sha):
        return True
    return None


def note(deploy: Deploy, first_seen: float, suspects: Sequence[str]) -> DeployNote:
    told = [(s, _brought(deploy, s)) for s in suspects]
    return DeployNote(
        deploy=deploy,
        after_s=first_seen - deploy.time,
        suspects_in=tuple(s for s, b in told if b is True),
        suspects_out=tuple(s for s, b in told if b is False),
    )


def error_release(event: ErrorEvent) -> str:
    """The release the error says it came from (an SDK's ``release``, OTel's
    ``service.version``), or ""."""
    value = event.attributes.get("release")
    return one_line(value, NAME_MAX_CHARS) if isinstance(value, str) else ""


def error_environment(event: ErrorEvent) -> str:
    value = event.attributes.get("environment")
    return one_line(value, NAME_MAX_CHARS) if isinstance(value, str) else ""
