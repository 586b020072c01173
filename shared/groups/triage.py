"""What the on-call said about a group in Slack: muted until, resolved at; intake and delivery
read it.

- Muted: the group is counted as always, but a new window starts no analysis (intake) and
  nothing is posted for it (delivery): no message, no "still happening" reply. The mute is a
  key that expires by itself.
- Resolved: the group's window is closed, so its next occurrence opens a new one and runs the
  chain; delivery then posts that message as "Regressed", linking the first message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import redis

from shared.core import keys


@dataclass(frozen=True)
class Muted:
    by: str  # Slack user id
    until_ms: int


@dataclass(frozen=True)
class Resolved:
    by: str  # Slack user id
    at_ms: int
    channel: str  # of the message that was resolved (the group's first message)
    ts: str
    link: str | None  # its permalink, when Slack gave one


def mute(r: redis.Redis, fp: str, by: str, *, now_ms: int, seconds: int) -> Muted:
    muted = Muted(by=by, until_ms=now_ms + seconds * 1000)
    r.set(keys.group_muted(fp), json.dumps(asdict(muted)), ex=seconds)
    return muted


def muted(r: redis.Redis, fp: str) -> Muted | None:
    raw = r.get(keys.group_muted(fp))
    return Muted(**json.loads(raw)) if raw else None


def muted_among(r: redis.Redis, fps: Sequence[str]) -> set[str]:
    """Which of these groups are muted, in one round trip."""
    if not fps:
        return set()
    values = r.mget([keys.group_muted(fp) for fp in fps])
    return {fp for fp, v in zip(fps, values, strict=True) if v}


def resolve(r: redis.Redis, fp: str, resolved: Resolved) -> None:
    """Mark the group resolved and close its window: the next occurrence is analysed and posted
    (as a regression) instead of only counted."""
    pipe = r.pipeline(transaction=True)
    pipe.set(keys.group_resolved(fp), json.dumps(asdict(resolved)), ex=30 * 24 * 3600)
    pipe.hdel(keys.group(fp), "window_start")
    pipe.delete(keys.group_muted(fp))
    pipe.execute()


def resolved(r: redis.Redis, fp: str) -> Resolved | None:
    raw = r.get(keys.group_resolved(fp))
    return Resolved(**json.loads(raw)) if raw else None


def regressed(r: redis.Redis, fp: str) -> None:
    """The regression was posted: the group is open again."""
    r.delete(keys.group_resolved(fp))


__all__ = ["Muted", "Resolved", "mute", "muted", "muted_among", "regressed", "resolve", "resolved"]
