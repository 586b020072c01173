"""Whether Redis keeps tracehound's state across a restart: queued errors, error groups, the
keyword index. ``tracehound status`` and the ingest server's ``/readyz`` say so when it does
not."""

from __future__ import annotations

import redis

NO_PERSISTENCE = (
    "Redis keeps nothing on disk (appendonly no, no save points): a restart loses queued "
    "errors, error groups and the keyword index (run `tracehound index` again after one)"
)
SNAPSHOTS_ONLY = (
    "Redis only snapshots to disk (save points, no appendonly): a restart loses what changed "
    "since the last snapshot; appendonly yes keeps every queued error"
)


def persistence_warning(r: redis.Redis) -> str | None:
    """None when Redis appends every write to disk; else what a restart would lose. A Redis
    that refuses CONFIG (some managed services) cannot be asked: None."""
    try:
        appendonly = r.config_get("appendonly").get("appendonly")
        save = r.config_get("save").get("save")
    except redis.ResponseError:
        return None
    if appendonly == "yes":
        return None
    return SNAPSHOTS_ONLY if save else NO_PERSISTENCE
